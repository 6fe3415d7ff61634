"""Write tests/fixtures/generate_tiny.npz: greedy continuations and strided token log-probs of a
small random GPT-2, computed by HF transformers (PyTorch), independently of gpt2np.

    pip install torch==2.13.0 transformers     # the CPU build of torch
    python scripts/make_generate_fixture.py

The weights (HF's GPT2LMHeadModel with every tensor re-randomised, seed 2024) are stored under
gpt2np's flat names (``param/blocks.0.attn.c_attn.w``; HF's Conv1D weights are already
[in, out]). HF's ``generate`` runs with ``do_sample=False``, no end-of-text id (the vocabulary
is not GPT-2's, so gpt2np has no ``<|endoftext|>`` for it either) and
``min_new_tokens == max_new_tokens``, so both sides produce exactly the same number of tokens.

Contents:
  hparams                       JSON as uint8
  param/*                       the weights
  prompt_{i}, greedy_{i}        prompt ids alone and HF's greedy continuation (prompt 2 runs to
                                exactly n_ctx tokens)
  batch_new                     [3, N] HF's greedy continuation of prompts 0-2 as one left-padded
                                batch with an attention mask (HF derives positions from the mask)
  score_ids, score_logprobs,    a sequence longer than n_ctx and its per-token log-probs by the
  score_context, score_stride   strided sliding window of HF's perplexity guide (window n_ctx)
  min_margin                    the smallest top-1 minus top-2 logit along every greedy path,
                                checked to be large enough that float32 rounding cannot flip it
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
import transformers

from make_golden_fixture import build_model, params_of  # beside this script

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "generate_tiny.npz"
HPARAMS = {"n_vocab": 384, "n_ctx": 48, "n_embd": 32, "n_head": 4, "n_layer": 2}
PROMPT_LENGTHS = (5, 11, 8)
NEW_TOKENS = (20, 20, HPARAMS["n_ctx"] - 8)  # the last one fills the context exactly
BATCH_NEW = 16
SCORE_LEN, SCORE_STRIDE = 130, 20
MIN_MARGIN = 1e-3


def greedy(model, ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[np.ndarray, float]:
    """HF greedy generate -> (new ids [B, n], smallest top-1 minus top-2 logit on the path)."""
    out = model.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=n,
        min_new_tokens=n,
        eos_token_id=None,
        pad_token_id=0,
        output_scores=True,
        return_dict_in_generate=True,
    )
    top2 = torch.stack(out.scores).topk(2, dim=-1).values  # [n, B, 2]
    margin = float((top2[..., 0] - top2[..., 1]).min())
    return out.sequences[:, ids.shape[1] :].numpy(), margin


def strided_logprobs(model, ids: torch.Tensor, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """HF's perplexity guide: windows of n_ctx every `stride` tokens, each token scored once
    (the last trg_len tokens of each window) -> (log p of tokens 1..N-1, context of each)."""
    max_length, seq_len = HPARAMS["n_ctx"], ids.shape[1]
    logprobs, context = [], []
    prev_end = 0
    for begin in range(0, seq_len, stride):
        end = min(begin + max_length, seq_len)
        trg_len = end - prev_end
        with torch.no_grad():
            logits = model(ids[:, begin:end]).logits[0].double()  # [W, V]
        logp = torch.log_softmax(logits, dim=-1)
        for j in range(end - begin - trg_len, end - begin):  # window positions of the targets
            if j == 0:
                continue  # a window's first token has no context inside it
            logprobs.append(float(logp[j - 1, ids[0, begin + j]]))
            context.append(j)
        prev_end = end
        if end == seq_len:
            break
    return np.array(logprobs), np.array(context)


def main() -> None:
    model = build_model(HPARAMS, seed=2024, weight_std=0.15)
    arrays = params_of(model)

    rng = np.random.default_rng(7)
    prompts = [rng.integers(1, HPARAMS["n_vocab"], size=n) for n in PROMPT_LENGTHS]
    margins = []
    for i, (prompt, n) in enumerate(zip(prompts, NEW_TOKENS)):
        ids = torch.from_numpy(prompt)[None]
        new, margin = greedy(model, ids, torch.ones_like(ids), n)
        arrays[f"prompt_{i}"], arrays[f"greedy_{i}"] = prompt, new[0]
        margins.append(margin)

    T = max(PROMPT_LENGTHS)
    padded = np.zeros((len(prompts), T), dtype=np.int64)
    mask = np.zeros((len(prompts), T), dtype=np.int64)
    for b, p in enumerate(prompts):
        padded[b, T - len(p) :], mask[b, T - len(p) :] = p, 1
    batch_new, margin = greedy(model, torch.from_numpy(padded), torch.from_numpy(mask), BATCH_NEW)
    margins.append(margin)
    for b in range(len(prompts)):  # HF's own batch must agree with each prompt alone
        assert (batch_new[b] == arrays[f"greedy_{b}"][:BATCH_NEW]).all(), b
    arrays["batch_new"] = batch_new

    score_ids = rng.integers(0, HPARAMS["n_vocab"], size=SCORE_LEN)
    logprobs, context = strided_logprobs(model, torch.from_numpy(score_ids)[None], SCORE_STRIDE)
    assert len(logprobs) == SCORE_LEN - 1
    arrays.update(score_ids=score_ids, score_logprobs=logprobs, score_context=context)
    arrays["score_stride"] = np.array(SCORE_STRIDE)

    assert min(margins) > MIN_MARGIN, f"greedy path too close to a tie: {min(margins)}"
    arrays["min_margin"] = np.array(min(margins))
    arrays["hparams"] = np.frombuffer(json.dumps(HPARAMS).encode(), dtype=np.uint8)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) with transformers {transformers.__version__}")
    print("min margin", min(margins), "greedy_0", arrays["greedy_0"].tolist())


if __name__ == "__main__":
    main()
