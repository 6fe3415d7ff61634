"""HF transformers' ``generate`` as the reference for gpt2np's decoding: run one case with HF and
return what it produced, in arrays gpt2np's results can be compared with.

Used by ``scripts/make_generate_fixture.py`` (which commits HF's results to
tests/fixtures/generate_tiny.npz) and by the live ``oracle`` tests. Needs torch and
transformers, imported when a case is run.

A case is gpt2np's own keyword arguments (``max_new_tokens``, ``temperature`` (0: greedy),
``top_k``, ``top_p``, ``seed``, ``n``, ``repetition_penalty``, ``no_repeat_ngram_size``,
``min_new_tokens``, ``bad_words_ids``, ``num_beams``, ``length_penalty``, ``early_stopping``),
translated here into HF's. Sampling: torch's RNG cannot be reproduced in NumPy, so HF's one call
of ``torch.multinomial(probs, 1)`` per step is replaced by the inverse-CDF draw gpt2np makes,
with the same uniform numbers (one per row per step from ``np.random.default_rng([seed, j])``
for sample j). Everything that makes the distribution (HF's logits processors and warpers, its
softmax) stays HF's; the margins returned say how far each draw was from flipping.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

#: margins below these mean float32 rounding could change a decision: the case is unusable
MIN_SAMPLING_MARGIN = 1e-5  # |u - nearest cdf boundary| and |cumulative mass - top_p|
MIN_GREEDY_MARGIN = 1e-4  # top-1 minus top-2 processed score
MIN_BEAM_MARGIN = 1e-4  # between consecutive ranked candidates (exact ties excepted)


def min_margin(case: dict[str, Any]) -> float:
    """The smallest decision margin a case of this kind may have (see the MIN_* constants)."""
    if case.get("num_beams", 1) > 1:
        return MIN_BEAM_MARGIN
    return MIN_GREEDY_MARGIN if case.get("temperature", 1.0) == 0 else MIN_SAMPLING_MARGIN


def hf_generate_kwargs(case: dict[str, Any], eos: int | None) -> dict[str, Any]:
    """gpt2np's arguments -> HF ``generate``'s (every default that differs stated)."""
    hf: dict[str, Any] = dict(
        max_new_tokens=case["max_new_tokens"], eos_token_id=eos, pad_token_id=0,
        num_return_sequences=case.get("n", 1), return_dict_in_generate=True, output_scores=True,
        output_logits=True,
    )  # fmt: skip
    if case.get("num_beams", 1) > 1:
        hf.update(do_sample=False, num_beams=case["num_beams"],
                  length_penalty=case.get("length_penalty", 1.0),
                  early_stopping=case.get("early_stopping", False))  # fmt: skip
    elif case.get("temperature", 1.0) == 0:
        hf.update(do_sample=False)
    else:
        hf.update(do_sample=True, temperature=float(case.get("temperature", 1.0)),
                  top_k=case.get("top_k", 0),  # HF's default top_k is 50, gpt2np's 0 (off)
                  top_p=float(case.get("top_p", 1.0)))  # fmt: skip
    for name in ("repetition_penalty", "no_repeat_ngram_size", "min_new_tokens", "bad_words_ids"):
        if name in case:
            hf[name] = case[name]
    if "repetition_penalty" in hf:
        hf["repetition_penalty"] = float(hf["repetition_penalty"])
    return hf


def run_hf(model: Any, prompts: list[np.ndarray], case: dict[str, Any], eos: int | None) -> dict:
    """HF's results for ``prompts`` (one, or a batch HF left-pads with an attention mask).

    -> ids [R, N] (new tokens, <|endoftext|> included, -1 after the end), logprobs [R, N]
    (``compute_transition_scores``: normalized processed scores, or for beam search the scores
    as they are), raw_logprobs [R, N] (log_softmax of the raw logits), top_ids / top_logprobs
    [R, N, 5] (of the processed distribution), scores [R] (beam search's sequences_scores),
    margin (the smallest decision margin, see the MIN_* constants). R = prompts × n, prompt-major.
    """
    import torch

    T = max(len(p) for p in prompts)
    padded = np.zeros((len(prompts), T), dtype=np.int64)
    mask = np.zeros((len(prompts), T), dtype=np.int64)
    for b, p in enumerate(prompts):
        padded[b, T - len(p) :], mask[b, T - len(p) :] = p, 1
    kwargs = hf_generate_kwargs(case, eos)
    beams = kwargs.get("num_beams", 1) > 1
    with _margins(model, case, len(prompts), eos) as margins, torch.no_grad():
        out = model.generate(
            torch.from_numpy(padded), attention_mask=torch.from_numpy(mask), **kwargs
        )
    beam_indices = out.beam_indices if beams else None
    processed = model.compute_transition_scores(
        out.sequences, out.scores, beam_indices, normalize_logits=not beams
    ).numpy()
    raw = model.compute_transition_scores(
        out.sequences, out.logits, beam_indices, normalize_logits=True
    ).numpy()
    new = out.sequences[:, T:].numpy()
    lengths = _lengths(new, beam_indices, eos)
    ids = np.full(new.shape, -1)
    top_ids = np.full((*new.shape, 5), -1)
    top_lp = np.full((*new.shape, 5), np.nan)
    steps = torch.stack(out.scores).double()  # [N, R·(K), V]
    if not beams:
        steps = torch.log_softmax(steps, dim=-1)
    for r, L in enumerate(lengths):
        ids[r, :L] = new[r, :L]
        for t in range(L):
            row = r if beam_indices is None else int(beam_indices[r, t])
            top = torch.topk(steps[t, row], 5)
            top_ids[r, t], top_lp[r, t] = top.indices.numpy(), top.values.numpy()
        processed[r, L:] = raw[r, L:] = np.nan
    if not beams:
        margins.extend(_greedy_margins(steps, lengths) if not kwargs["do_sample"] else [])
    scores = out.sequences_scores.numpy() if beams else np.zeros(len(ids))
    return dict(ids=ids, logprobs=processed[:, : ids.shape[1]],
                raw_logprobs=raw[:, : ids.shape[1]], top_ids=top_ids, top_logprobs=top_lp,
                scores=scores, margin=np.array(min(margins, default=np.inf)))  # fmt: skip


def _lengths(new: np.ndarray, beam_indices: Any, eos: int | None) -> list[int]:
    """Each row's number of new tokens (its <|endoftext|> included)."""
    if beam_indices is not None:
        return (beam_indices >= 0).sum(dim=1).tolist()
    lengths = []
    for row in new:
        ends = np.flatnonzero(row == eos) if eos is not None else []
        lengths.append(int(ends[0]) + 1 if len(ends) else len(row))
    return lengths


def _greedy_margins(logprobs: Any, lengths: list[int]) -> list[float]:
    """top-1 minus top-2 of each step's processed distribution along each row's path (an exact
    tie is no margin: both sides take the lower id)."""
    top2 = logprobs.topk(2, dim=-1).values  # [N, R, 2]
    gaps = (top2[..., 0] - top2[..., 1]).numpy()
    return [float(gaps[t, r]) for r, L in enumerate(lengths) for t in range(L) if gaps[t, r]]


@contextlib.contextmanager
def _margins(
    model: Any, case: dict[str, Any], n_prompts: int, eos: int | None
) -> Iterator[list[float]]:
    """Patch HF for the case (inverse-CDF draws from the case's seed streams; observers of the
    top-p cut and of beam candidates) and collect the decision margins."""
    import torch
    from transformers.generation import logits_process

    margins: list[float] = []
    n = case.get("n", 1)
    rngs = [np.random.default_rng([case.get("seed", 0), j]) for _ in range(n_prompts)
            for j in range(n)]  # fmt: skip

    def multinomial(probs: Any, num_samples: int = 1, *args: Any, **kwargs: Any) -> Any:
        assert num_samples == 1 and probs.shape[0] == len(rngs), "HF's sampling loop changed"
        out = []
        for r, p in enumerate(probs.double().numpy()):
            cdf = np.cumsum(p)
            u = rngs[r].random() * cdf[-1]
            i = int(np.searchsorted(cdf, u, side="right"))
            i = i if i < len(cdf) else int(np.flatnonzero(p)[-1])
            margins.append(float(np.min(np.abs(cdf[p > 0] - u))) / cdf[-1])
            out.append(i)
        return torch.tensor(out)[:, None]

    top_p_call = logits_process.TopPLogitsWarper.__call__

    def top_p(self: Any, input_ids: Any, scores: Any) -> Any:
        mass = torch.sort(scores, descending=False)[0].softmax(dim=-1).cumsum(dim=-1)
        margins.append(float((mass - (1 - self.top_p)).abs().min()))
        return top_p_call(self, input_ids, scores)

    top_k_continuations = model._get_top_k_continuations

    def candidates(**kwargs: Any) -> Any:
        """The gaps that decide beam search: the 2K candidates against the rest, the K-th
        against the (K+1)-th when either ends (only the first K may finish), and the K-th
        candidate that goes on against the next one (the first K that go on keep running)."""
        acc = kwargs["accumulated_log_probs"].double()  # [B, K·V]
        K = kwargs["num_beams"]
        last = kwargs["cur_len"] + 1 >= kwargs["decoder_prompt_len"] + case["max_new_tokens"]
        values, order = torch.sort(acc, dim=-1, descending=True)
        for v, flat in zip(values.tolist(), order.tolist()):
            ends = [last or (eos is not None and f % (len(v) // K) == eos) for f in flat]
            go_on = [i for i, e in enumerate(ends) if not e][: K + 1]
            pairs = [(2 * K - 1, 2 * K)] + ([(K - 1, K)] if ends[K - 1] or ends[K] else [])
            pairs += [(go_on[K - 1], go_on[K])] if len(go_on) > K else []
            gaps = [v[i] - v[j] for i, j in pairs if j < len(v) and v[j] > -1e8]
            margins.extend(g for g in gaps if g > 0)  # an exact tie is no margin
        return top_k_continuations(**kwargs)

    saved = torch.multinomial
    torch.multinomial = multinomial
    logits_process.TopPLogitsWarper.__call__ = top_p
    model._get_top_k_continuations = candidates
    try:
        yield margins
    finally:
        torch.multinomial = saved
        logits_process.TopPLogitsWarper.__call__ = top_p_call
        del model._get_top_k_continuations


# -- gpt2np's side of a case, and the comparison ----------------------------------------------


class EotOnly:
    """A tokenizer stand-in that only names the <|endoftext|> id (the fixture's vocabulary is
    not GPT-2's): gpt2np then ends rows and starts empty prompts with it, as HF with eos."""

    def __init__(self, eot_token: int | None) -> None:
        self.eot_token = eot_token


def run_ours(model: Any, prompts: list[np.ndarray], case: dict[str, Any], mode: str) -> list:
    """gpt2np's Completions for the case (logprobs=5 under ``mode``), flat, prompt-major like
    HF's rows. ``prompts`` empty: an unconditional sample (empty ids)."""
    from gpt2np.generation.loop import generate

    prompt: Any = prompts[0] if len(prompts) == 1 else [list(p) for p in prompts]
    if not prompts:
        prompt = np.zeros(0, dtype=np.int64)
    out = generate(prompt, model, logprobs=5, logprobs_mode=mode, **case)
    out = out if len(prompts) > 1 else [out]
    return [c for per_prompt in out for c in (per_prompt if case.get("n", 1) > 1 else [per_prompt])]


def assert_equal_to_hf(
    ours: list, hf: dict, eos: int | None, mode: str, same: dict[int, int] | None = None
) -> None:
    """Ids id for id (<|endoftext|> ends a row and is not returned), finish reasons, per-token
    log-probs and the top alternatives to float32 precision, beam scores. ``same`` maps ids
    that are interchangeable in the model (the tie model) to one of them before comparing."""
    canon = np.vectorize(lambda t: (same or {}).get(int(t), int(t)), otypes=[np.int64])
    expected_lp = hf["logprobs" if mode == "processed" else "raw_logprobs"]
    assert len(ours) == len(hf["ids"])
    for r, c in enumerate(ours):
        row = [int(t) for t in hf["ids"][r] if t >= 0]
        ended = eos is not None and bool(row) and row[-1] == eos
        new = row[:-1] if ended else row
        assert canon(np.array(c.ids, dtype=np.int64)).tolist() == canon(np.array(new)).tolist(), r
        assert c.finish_reason == ("eot" if ended else "length"), r
        np.testing.assert_allclose(c.token_logprobs, expected_lp[r, : len(new)], atol=1e-5)
        if mode == "processed":
            for t, top in enumerate(c.top_logprobs):
                pairs = zip(hf["top_ids"][r, t], hf["top_logprobs"][r, t])
                want = [(int(i), float(v)) for i, v in pairs if v > -np.inf]
                assert len(top) == len(want), (r, t)
                np.testing.assert_allclose([v for _, v in top], [v for _, v in want], atol=1e-5)
                gaps = np.diff([v for _, v in want], prepend=np.inf, append=-np.inf)
                distinct = (np.abs(gaps[:-1]) > 1e-4) & (np.abs(gaps[1:]) > 1e-4)
                assert [canon(i) for (i, _), d in zip(top, distinct) if d] == [
                    canon(i)
                    for (i, _), d in zip(want, distinct)
                    if d  # HF orders ties as torch
                ], (r, t)
        if c.score is not None:
            np.testing.assert_allclose(c.score, hf["scores"][r], atol=1e-5)


def random_hf_model(hparams: Any, seed: int, std: float) -> Any:
    """HF's GPT2LMHeadModel with every tensor random (weights ~ N(0, std²), biases ~ N(0,
    0.05²), LayerNorm gains ~ 1 + N(0, 0.1²)), as the fixture scripts make theirs: logits far
    from uniform, so that decisions are far from ties."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=hparams.n_vocab, n_positions=hparams.n_ctx, n_embd=hparams.n_embd,
        n_layer=hparams.n_layer, n_head=hparams.n_head, activation_function="gelu_new",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif ".ln_" in name or "ln_f" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(std * torch.randn_like(p))
    return model


def gpt2np_params_of(hf_model: Any, hparams: Any) -> dict:
    """The HF model's weights as gpt2np's parameter tree (the loader's name mapping)."""
    from gpt2np.checkpoint.convert import flat_from_hf
    from gpt2np.params import unflatten

    state = {k: v.numpy() for k, v in hf_model.state_dict().items()}
    return unflatten(flat_from_hf(state, hparams, "the HF model"), hparams)
