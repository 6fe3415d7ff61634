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
  case/NAME/spec                JSON as uint8: {"model", "prompts", "eos", "kwargs", "config",
                                "ends"}: a decoding case, with gpt2np's own keyword arguments
                                (CASES below), the generation_config.json both sides get as the
                                model's defaults, and the ids that end a row
  case/NAME/ids, logprobs,      HF's results (tests/helpers/hf_reference.py: ids [R, N] with -1
  raw_logprobs, top_ids,        after the end, compute_transition_scores, the top 5 of each step's
  top_logprobs, scores, margin  processed distribution, beam scores, the smallest margin)
  chi2_prompt, chi2_probs       HF's filtered distribution of one step (temperature 1.3, top-k
                                40, top-p 0.9 after prompt 1), for the chi-square test

The decoding cases cover sampling with a seed stream (HF's torch.multinomial replaced by the
inverse-CDF draw gpt2np makes, from the same uniforms: see tests/helpers/hf_reference.py), greedy
decoding with HF's penalties, n-gram and bad-word rules, beam search (length penalties, the three
early_stopping modes, <|endoftext|> finishing beams early, batches), and a "tie" model whose
token TIE[0] has the embedding of TIE[1], so that their logits are exactly equal everywhere;
then HF's warpers min_p, typical_p, epsilon_cutoff, eta_cutoff and min_tokens_to_keep, its
processors suppress_tokens, sequence_bias, forced_eos_token_id and
exponential_decay_length_penalty, several end ids, a stopping criterion, max_time (on a clock
that ticks a second per reading), HF's own keyword names (do_sample, max_length,
num_return_sequences, pad_token_id) and a generation_config.json's defaults.
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import numpy as np
import torch
import transformers

from make_golden_fixture import build_model, params_of  # beside this script

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from tests.helpers.hf_reference import ends_of, min_margin, run_hf  # shared with tests

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "generate_tiny.npz"
HPARAMS = {"n_vocab": 384, "n_ctx": 48, "n_embd": 32, "n_head": 4, "n_layer": 2}
PROMPT_LENGTHS = (5, 11, 8)
NEW_TOKENS = (20, 20, HPARAMS["n_ctx"] - 8)  # the last one fills the context exactly
BATCH_NEW = 16
SCORE_LEN, SCORE_STRIDE = 130, 20
MIN_MARGIN = 1e-3
EOS = 143  # an id this random model often ranks high: beams end at different steps
TIE = (50, 119)  # in the "tie" model wte[50] := wte[119]; 119 is on prompt 0's greedy path
#: name -> (model, prompt indices or "unconditional", <|endoftext|> id, gpt2np's arguments[,
#: generation_config.json])
CASES: dict[str, tuple] = {
    "sample_t08": ("main", [0], None, dict(max_new_tokens=20, temperature=0.8, seed=11)),
    "sample_k40_p09_n3": ("main", [1], None, dict(max_new_tokens=16, temperature=1.3, top_k=40,
                                                  top_p=0.9, seed=5, n=3)),
    "sample_p08_rep12_n2": ("main", [2], None, dict(max_new_tokens=16, top_p=0.8,
                                                    repetition_penalty=1.2, seed=3, n=2)),
    "sample_batch_eos_n2": ("main", [0, 1], EOS, dict(max_new_tokens=12, temperature=0.9,
                                                      top_k=50, seed=21, n=2)),
    "greedy_rep13": ("main", [0], None, dict(max_new_tokens=20, temperature=0,
                                             repetition_penalty=1.3)),
    "greedy_rep08": ("main", [1], None, dict(max_new_tokens=20, temperature=0,
                                             repetition_penalty=0.8)),
    "greedy_ngram2": ("main", [0], None, dict(max_new_tokens=30, temperature=0,
                                              no_repeat_ngram_size=2)),
    "greedy_ngram3_rep11": ("main", [1], None, dict(max_new_tokens=30, temperature=0,
                                                    no_repeat_ngram_size=3,
                                                    repetition_penalty=1.1)),
    "greedy_bad_words_min_new": ("main", [1], EOS, dict(max_new_tokens=20, temperature=0,
                                                        bad_words_ids=[[119], [127, 85]],
                                                        min_new_tokens=6)),
    "greedy_batch_eos": ("main", [0, 1, 2], EOS, dict(max_new_tokens=20, temperature=0)),
    "unconditional": ("main", "unconditional", 300, dict(max_new_tokens=12, temperature=0)),
    "unconditional_sample_n2": ("main", "unconditional", 300, dict(max_new_tokens=12, seed=8,
                                                                   n=2)),
    "beam4": ("main", [0], EOS, dict(max_new_tokens=14, num_beams=4, n=4)),
    "beam4_lp2_early": ("main", [1], EOS, dict(max_new_tokens=14, num_beams=4, n=2,
                                               length_penalty=2.0, early_stopping=True)),
    # prompt 1 with <|endoftext|> = 127: the three early_stopping modes give three results
    "beam3_eos127_false": ("main", [1], 127, dict(max_new_tokens=14, num_beams=3, n=3)),
    "beam3_eos127_never": ("main", [1], 127, dict(max_new_tokens=14, num_beams=3, n=3,
                                                  early_stopping="never")),
    "beam3_eos127_true": ("main", [1], 127, dict(max_new_tokens=14, num_beams=3, n=3,
                                                 early_stopping=True)),
    "beam3_never_lp05": ("main", [2], EOS, dict(max_new_tokens=14, num_beams=3, n=3,
                                                length_penalty=0.5, early_stopping="never")),
    "beam4_lp_neg1": ("main", [2], EOS, dict(max_new_tokens=14, num_beams=4, n=4,
                                             length_penalty=-1.0)),
    "beam4_no_eos": ("main", [0], None, dict(max_new_tokens=10, num_beams=4, n=4)),
    "beam4_rep13_ngram2": ("main", [1], EOS, dict(max_new_tokens=14, num_beams=4, n=2,
                                                  repetition_penalty=1.3,
                                                  no_repeat_ngram_size=2)),
    "beam4_batch": ("main", [0, 1, 2], EOS, dict(max_new_tokens=12, num_beams=4, n=2)),
    "tie_greedy": ("tie", [0], None, dict(max_new_tokens=20, temperature=0)),
    "tie_beam4": ("tie", [0], EOS, dict(max_new_tokens=14, num_beams=4, n=4)),
    "tie_sample_k1": ("tie", [0], None, dict(max_new_tokens=16, top_k=1, seed=4)),
    "greedy_eos_list": ("main", [0, 1], None, dict(max_new_tokens=20, temperature=0,
                                                   eos_token_id=[143, 127])),
    "sample_min_p": ("main", [1], None, dict(max_new_tokens=16, min_p=0.05, seed=6, n=2)),
    "sample_typical": ("main", [0], None, dict(max_new_tokens=16, typical_p=0.8, seed=2, n=2)),
    "sample_epsilon": ("main", [2], None, dict(max_new_tokens=16, epsilon_cutoff=0.01, seed=4)),
    "sample_eta": ("main", [1], None, dict(max_new_tokens=16, eta_cutoff=0.01, seed=9)),
    "sample_min_keep": ("main", [0], None, dict(max_new_tokens=16, temperature=0.7, top_p=0.2,
                                                min_p=0.3, min_tokens_to_keep=4, seed=3, n=2)),
    "greedy_suppress": ("main", [0], None, dict(max_new_tokens=20, temperature=0,
                                                suppress_tokens=[119, 143])),
    "greedy_sequence_bias": ("main", [1], None, dict(max_new_tokens=20, temperature=0,
                                                     sequence_bias=[[[127], -4.0],
                                                                    [[119, 119], -3.0],
                                                                    [[271], 0.8]])),
    "greedy_forced_eos": ("main", [0, 2], EOS, dict(max_new_tokens=9, temperature=0,
                                                    forced_eos_token_id=EOS)),
    "greedy_decay": ("main", [1], EOS, dict(max_new_tokens=20, temperature=0,
                                            exponential_decay_length_penalty=[4, 1.6])),
    "greedy_stop_on": ("main", [0, 1], None, dict(max_new_tokens=20, temperature=0,
                                                  stop_on=[143, 127])),
    "greedy_max_time": ("main", [0], None, dict(max_new_tokens=20, temperature=0, max_time=4.5,
                                                clock_ticks=True)),
    "hf_names": ("main", [1], None, dict(max_length=24, do_sample=True, top_k=30,
                                         num_return_sequences=2, pad_token_id=0, seed=12)),
    "config_sample": ("main", [0], None, dict(max_new_tokens=16, seed=7, n=2),
                      {"do_sample": True, "top_k": 3, "repetition_penalty": 1.3,
                       "eos_token_id": [143, 127]}),
    "config_greedy_max_length": ("main", [0, 1], None, dict(),
                                 {"max_length": 24, "do_sample": False,
                                  "no_repeat_ngram_size": 2}),
}  # fmt: skip


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


def decoding_cases(model, prompts: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Every case of CASES run by HF, its margins checked, batches checked against each prompt
    alone (HF's own consistency, which gpt2np's batches also promise; not with max_length,
    which counts a batch's longest prompt)."""
    tie = copy.deepcopy(model)
    with torch.no_grad():
        tie.transformer.wte.weight[TIE[0]] = tie.transformer.wte.weight[TIE[1]]
    models = {"main": model, "tie": tie}
    arrays: dict[str, np.ndarray] = {}
    for name, (which, chosen, eos, kwargs, *rest) in CASES.items():
        config = rest[0] if rest else None
        rows = [np.array([eos])] if chosen == "unconditional" else [prompts[i] for i in chosen]
        got = run_hf(models[which], rows, kwargs, eos, config)
        margin = min_margin(kwargs, config)
        assert got["margin"] > margin, f"{name}: a decision {got['margin']} from a tie"
        if len(rows) > 1 and "max_length" not in {**(config or {}), **kwargs}:
            check_alone(models[which], rows, kwargs, eos, config, got, name)
        ends = ends_of(kwargs, (config or {}).get("eos_token_id", eos))
        spec = dict(model=which, prompts=chosen, eos=eos, kwargs=kwargs, config=config, ends=ends)
        arrays[f"case/{name}/spec"] = np.frombuffer(json.dumps(spec).encode(), dtype=np.uint8)
        for key, value in got.items():
            arrays[f"case/{name}/{key}"] = value
        print(f"{name:28s} margin {float(got['margin']):.2e}  ids {got['ids'][0].tolist()}")
    tie_ids = [arrays[f"case/{name}/ids"] for name in CASES if name.startswith("tie")]
    assert all((ids == TIE[0]).any() for ids in tie_ids), "the tie model's cases must meet a tie"
    return arrays


def check_alone(model, rows, kwargs, eos, config, got, name) -> None:
    """HF's batch gives what each prompt gives alone."""
    n = {**(config or {}), **kwargs}.get("num_return_sequences", kwargs.get("n", 1))
    for b, row in enumerate(rows):
        alone = run_hf(model, [row], kwargs, eos, config)
        mine = got["ids"][b * n : (b + 1) * n]
        width = max(alone["ids"].shape[1], mine.shape[1])
        assert (pad_to(mine, width) == pad_to(alone["ids"], width)).all(), (name, b)


def pad_to(ids: np.ndarray, width: int) -> np.ndarray:
    return np.pad(ids, ((0, 0), (0, width - ids.shape[1])), constant_values=-1)


def chi2_case(model, prompt: np.ndarray) -> dict[str, np.ndarray]:
    """HF's own warpers on one step's logits: the distribution a draw must follow."""
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    ids = torch.from_numpy(prompt)[None]
    with torch.no_grad():
        scores = model(ids).logits[:, -1]
        for warper in (TemperatureLogitsWarper(1.3), TopKLogitsWarper(40), TopPLogitsWarper(0.9)):
            scores = warper(ids, scores)
    return dict(chi2_prompt=prompt, chi2_probs=torch.softmax(scores.double(), -1)[0].numpy())


def main() -> None:
    model = build_model(HPARAMS, seed=2024, weight_std=0.15)
    arrays = params_of(model, HPARAMS)

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

    arrays.update(decoding_cases(model, prompts))
    arrays.update(chi2_case(model, prompts[1]))

    assert min(margins) > MIN_MARGIN, f"greedy path too close to a tie: {min(margins)}"
    arrays["min_margin"] = np.array(min(margins))
    arrays["hparams"] = np.frombuffer(json.dumps(HPARAMS).encode(), dtype=np.uint8)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) with transformers {transformers.__version__}")
    print("min margin", min(margins), "greedy_0", arrays["greedy_0"].tolist())


if __name__ == "__main__":
    main()
