"""HF transformers' ``generate`` as the reference for gpt2np's decoding: run one case with HF and
return what it produced, in arrays gpt2np's results can be compared with.

Used by ``scripts/make_generate_fixture.py`` (which commits HF's results to
tests/fixtures/generate_tiny.npz) and by the live ``oracle`` tests. Needs torch and
transformers, imported when a case is run.

A case is gpt2np's own keyword arguments (``max_new_tokens``, ``temperature`` (0: greedy),
``top_k``, ``top_p``, ``seed``, ``n``, the logit rules, ``num_beams``, ...; HF's own names such
as ``do_sample``, ``max_length``, ``eos_token_id``, ``min_p`` or ``sequence_bias`` are passed to
HF as they are), translated here into HF's, plus two that stand for objects: ``stop_on`` (ids:
an HF ``StoppingCriteria`` that ends a row whose last token is one of them; for gpt2np the same
rule as a per-row function, or with ``hf_objects`` that same HF object, as are the case's
``logits_processors``) and ``clock_ticks`` (with ``max_time``: both sides' clocks advance one
second per reading, so that max_time ends generation at a known step). ``config`` (in the
case's spec, not its kwargs) is a generation_config.json: HF's model and gpt2np's get it as
their defaults, and the call leaves those options out.

Sampling: torch's RNG cannot be reproduced in NumPy, so HF's one call of
``torch.multinomial(probs, 1)`` per step is replaced by the inverse-CDF draw gpt2np makes, with
the same uniform numbers (one per row per step from ``np.random.default_rng([seed, j])`` for
sample j). Everything that makes the distribution (HF's logits processors and warpers, its
softmax) stays HF's; the margins returned say how far each draw, and each warper's cut, was
from flipping.
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


def min_margin(case: dict[str, Any], config: dict[str, Any] | None = None) -> float:
    """The smallest decision margin a case of this kind may have (see the MIN_* constants)."""
    if {**(config or {}), **case}.get("num_beams", 1) > 1:
        return MIN_BEAM_MARGIN
    return MIN_SAMPLING_MARGIN if is_sampling(case, config) else MIN_GREEDY_MARGIN


#: HF's keyword arguments that gpt2np takes under the same name and meaning.
SAME_NAMES = ("repetition_penalty", "no_repeat_ngram_size", "min_new_tokens", "bad_words_ids",
              "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
              "suppress_tokens", "sequence_bias", "forced_eos_token_id",
              "exponential_decay_length_penalty", "max_time", "max_length", "pad_token_id",
              "eos_token_id", "num_return_sequences")  # fmt: skip


def ends_of(case: dict[str, Any], eos: Any) -> list[int]:
    """The ids that end a row: the case's eos_token_id, else ``eos``; as a list."""
    ends = case.get("eos_token_id", eos)
    return [] if ends is None else [ends] if isinstance(ends, int) else list(ends)


def is_sampling(case: dict[str, Any], config: dict[str, Any] | None = None) -> bool:
    """Whether the case samples (gpt2np's rule: do_sample, else temperature > 0)."""
    merged = {**(config or {}), **case}
    if merged.get("num_beams", 1) > 1:
        return False
    if "do_sample" in case or ("do_sample" in merged and "temperature" not in case):
        return bool(merged["do_sample"])
    return merged.get("temperature", 1.0) != 0


def hf_generate_kwargs(case: dict[str, Any], eos: int | None, config: Any = None) -> dict:
    """gpt2np's arguments -> HF ``generate``'s (every default that differs stated). With a
    ``config``, only what the case itself gives is passed: the rest comes from the config."""
    hf: dict[str, Any] = dict(
        eos_token_id=eos, pad_token_id=0, num_return_sequences=case.get("n", 1),
        return_dict_in_generate=True, output_scores=True, output_logits=True,
    )  # fmt: skip
    if "max_new_tokens" in case:
        hf["max_new_tokens"] = case["max_new_tokens"]
    if config is not None:
        hf.pop("eos_token_id")  # the config's
    elif case.get("num_beams", 1) > 1:
        hf.update(do_sample=False, num_beams=case["num_beams"],
                  length_penalty=case.get("length_penalty", 1.0),
                  early_stopping=case.get("early_stopping", False))  # fmt: skip
    elif not is_sampling(case):
        hf.update(do_sample=False)
    else:
        hf.update(do_sample=True, temperature=float(case.get("temperature", 1.0)),
                  top_k=case.get("top_k", 0),  # HF's default top_k is 50, gpt2np's 0 (off)
                  top_p=float(case.get("top_p", 1.0)))  # fmt: skip
    for name in SAME_NAMES:
        if name in case:
            hf[name] = case[name]
    for name in ("repetition_penalty", "max_time"):
        if name in hf:
            hf[name] = float(hf[name])
    if "stop_on" in case:
        hf["stopping_criteria"] = _hf_stop_on(case["stop_on"])
    if "logits_processors" in case:  # HF objects (hf_objects): the same for both sides
        from transformers.generation import LogitsProcessorList

        hf["logits_processor"] = LogitsProcessorList(case["logits_processors"])
    if "min_tokens_to_keep" in case:  # not an argument of HF's generate: of its warpers
        hf["logits_processor"] = _hf_warpers(hf, case["min_tokens_to_keep"])
    return hf


def _hf_warpers(hf: dict[str, Any], keep: int) -> Any:
    """HF's warpers of ``hf``'s arguments built with ``min_tokens_to_keep=keep``, in HF's order;
    the arguments are set to their off values so that HF adds none of its own."""
    from transformers.generation import logits_process as lp

    made = {"temperature": lambda v: lp.TemperatureLogitsWarper(v),
            "top_k": lambda v: lp.TopKLogitsWarper(v, min_tokens_to_keep=keep),
            "top_p": lambda v: lp.TopPLogitsWarper(v, min_tokens_to_keep=keep),
            "min_p": lambda v: lp.MinPLogitsWarper(v, min_tokens_to_keep=keep),
            "typical_p": lambda v: lp.TypicalLogitsWarper(v, min_tokens_to_keep=keep),
            "epsilon_cutoff": lambda v: lp.EpsilonLogitsWarper(v, min_tokens_to_keep=keep),
            "eta_cutoff": lambda v: lp.EtaLogitsWarper(v, min_tokens_to_keep=keep)}  # fmt: skip
    off = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    warpers = []
    for name, make in made.items():
        value = hf.pop(name, None)
        if value is not None and value != off.get(name):
            warpers.append(make(value))
        if name in off:
            hf[name] = off[name]
    return lp.LogitsProcessorList(warpers)


def ours_kwargs(case: dict[str, Any]) -> dict[str, Any]:
    """The case as gpt2np's keyword arguments: ``stop_on`` as a per-row criterion, or with
    ``hf_objects`` as the HF StoppingCriteria that HF gets."""
    ours = {k: v for k, v in case.items() if k not in ("stop_on", "clock_ticks", "hf_objects")}
    if "stop_on" in case and case.get("hf_objects"):
        ours["stopping_criteria"] = _hf_stop_on(case["stop_on"])
    elif "stop_on" in case:
        ends = set(case["stop_on"])
        ours["stopping_criteria"] = lambda ids, logits: int(ids[-1]) in ends
    if "exponential_decay_length_penalty" in case:
        ours["exponential_decay_length_penalty"] = tuple(case["exponential_decay_length_penalty"])
    return ours


def _hf_stop_on(ids: list[int]) -> Any:
    """An HF StoppingCriteria: a row ends when its last token is one of ``ids``."""
    import torch
    from transformers.generation import StoppingCriteria, StoppingCriteriaList

    class LastTokenIn(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.isin(input_ids[:, -1], torch.tensor(ids))

    return StoppingCriteriaList([LastTokenIn()])


class TickingClock:
    """A clock that reads 0, 1, 2, ... seconds: max_time then ends a generation after a known
    number of readings, on both sides (no timing in the tests)."""

    def __init__(self) -> None:
        self.now = -1.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now

    time = __call__  # what HF's stopping_criteria module calls: time.time()


@contextlib.contextmanager
def ticking_clocks(case: dict[str, Any], hf: bool) -> Iterator[None]:
    """With ``clock_ticks`` in the case, HF's max_time (``hf``) or gpt2np's reads a
    TickingClock."""
    if not case.get("clock_ticks"):
        yield
        return
    if hf:
        from transformers.generation import stopping_criteria as module
    else:
        import gpt2np.generation.loop as module
    name = "time" if hf else "clock"
    saved = getattr(module, name)
    setattr(module, name, TickingClock())
    try:
        yield
    finally:
        setattr(module, name, saved)


def run_hf(
    model: Any, prompts: list[np.ndarray], case: dict[str, Any], eos: Any, config: Any = None
) -> dict:
    """HF's results for ``prompts`` (one, or a batch HF left-pads with an attention mask), with
    ``config`` (a dict of generation_config.json) as the model's generation defaults.

    -> ids [R, N] (new tokens, the end id included, -1 after the end), logprobs [R, N]
    (``compute_transition_scores``: normalized processed scores, or for beam search the scores
    as they are), raw_logprobs [R, N] (log_softmax of the raw logits), top_ids / top_logprobs
    [R, N, 5] (of the processed distribution), scores [R] (beam search's sequences_scores),
    margin (the smallest decision margin, see the MIN_* constants). R = prompts × n, prompt-major.
    """
    import torch
    from transformers import GenerationConfig

    T = max(len(p) for p in prompts)
    padded = np.zeros((len(prompts), T), dtype=np.int64)
    mask = np.zeros((len(prompts), T), dtype=np.int64)
    for b, p in enumerate(prompts):
        padded[b, T - len(p) :], mask[b, T - len(p) :] = p, 1
    kwargs = hf_generate_kwargs(case, eos, config)
    beams = {**(config or {}), **kwargs}.get("num_beams", 1) > 1
    saved = model.generation_config
    if config is not None:
        model.generation_config = GenerationConfig(**config)
    try:
        n = {**(config or {}), **case}.get("num_return_sequences", case.get("n", 1))
        patched = _margins(model, case, len(prompts), n, ends_of(case, eos))
        with patched as margins, ticking_clocks(case, hf=True), torch.no_grad():
            out = model.generate(
                torch.from_numpy(padded), attention_mask=torch.from_numpy(mask), **kwargs
            )
    finally:
        model.generation_config = saved
    ends = ends_of(case, (config or {}).get("eos_token_id", eos))
    result = _results(model, out, T, beams, ends + list(case.get("stop_on", [])))
    if not beams and not is_sampling(case, config):
        steps = torch.log_softmax(torch.stack(out.scores).double(), dim=-1)
        margins.extend(_greedy_margins(steps, result.pop("lengths")))
    result.pop("lengths", None)
    result["margin"] = np.array(min(margins, default=np.inf))
    return result


def _results(model: Any, out: Any, T: int, beams: bool, ends: list[int]) -> dict:
    """HF's output as the arrays run_hf returns (and each row's length)."""
    import torch

    beam_indices = out.beam_indices if beams else None
    processed = model.compute_transition_scores(
        out.sequences, out.scores, beam_indices, normalize_logits=not beams
    ).numpy()
    raw = model.compute_transition_scores(
        out.sequences, out.logits, beam_indices, normalize_logits=True
    ).numpy()
    new = out.sequences[:, T:].numpy()
    lengths = _lengths(new, beam_indices, ends)
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
    scores = out.sequences_scores.numpy() if beams else np.zeros(len(ids))
    return dict(ids=ids, logprobs=processed[:, : ids.shape[1]],
                raw_logprobs=raw[:, : ids.shape[1]], top_ids=top_ids, top_logprobs=top_lp,
                scores=scores, lengths=lengths)  # fmt: skip


def _lengths(new: np.ndarray, beam_indices: Any, ends: list[int]) -> list[int]:
    """Each row's number of new tokens (its end id included)."""
    if beam_indices is not None:
        return (beam_indices >= 0).sum(dim=1).tolist()
    lengths = []
    for row in new:
        at = np.flatnonzero(np.isin(row, ends))
        lengths.append(int(at[0]) + 1 if len(at) else len(row))
    return lengths


def _greedy_margins(logprobs: Any, lengths: list[int]) -> list[float]:
    """top-1 minus top-2 of each step's processed distribution along each row's path (an exact
    tie is no margin: both sides take the lower id)."""
    top2 = logprobs.topk(2, dim=-1).values  # [N, R, 2]
    gaps = (top2[..., 0] - top2[..., 1]).numpy()
    return [float(gaps[t, r]) for r, L in enumerate(lengths) for t in range(L) if gaps[t, r]]


def inverse_cdf_draws(probs: Any, rngs: list[np.random.Generator], margins: list[float]) -> Any:
    """What gpt2np's sampler draws, for HF's ``torch.multinomial(probs, 1)``: one inverse-CDF
    draw per row from that row's NumPy stream; appends each draw's margin (distance of u from
    the nearest cdf boundary, relative). -> int64 tensor [R, 1]"""
    import torch

    out = []
    for r, p in enumerate(probs.double().numpy()):
        cdf = np.cumsum(p)
        u = rngs[r].random() * cdf[-1]
        i = int(np.searchsorted(cdf, u, side="right"))
        i = i if i < len(cdf) else int(np.flatnonzero(p)[-1])
        margins.append(float(np.min(np.abs(cdf[p > 0] - u))) / cdf[-1])
        out.append(i)
    return torch.tensor(out)[:, None]


@contextlib.contextmanager
def _margins(
    model: Any, case: dict[str, Any], n_prompts: int, n: int, ends: list[int]
) -> Iterator[list[float]]:
    """Patch HF for the case (inverse-CDF draws from the case's seed streams, n per prompt;
    observers of the warpers' cuts and of beam candidates) and collect the margins."""
    import torch

    margins: list[float] = []
    rngs = [np.random.default_rng([case.get("seed", 0), j]) for _ in range(n_prompts)
            for j in range(n)]  # fmt: skip

    def multinomial(probs: Any, num_samples: int = 1, *args: Any, **kwargs: Any) -> Any:
        assert num_samples == 1 and probs.shape[0] == len(rngs), "HF's sampling loop changed"
        return inverse_cdf_draws(probs, rngs, margins)

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
            end = [last or f % (len(v) // K) in ends for f in flat]
            go_on = [i for i, e in enumerate(end) if not e][: K + 1]
            pairs = [(2 * K - 1, 2 * K)] + ([(K - 1, K)] if end[K - 1] or end[K] else [])
            pairs += [(go_on[K - 1], go_on[K])] if len(go_on) > K else []
            gaps = [v[i] - v[j] for i, j in pairs if j < len(v) and v[j] > -1e8]
            margins.extend(g for g in gaps if g > 0)  # an exact tie is no margin
        return top_k_continuations(**kwargs)

    saved = torch.multinomial
    torch.multinomial = multinomial
    model._get_top_k_continuations = candidates
    try:
        with _warper_margins(margins):
            yield margins
    finally:
        torch.multinomial = saved
        del model._get_top_k_continuations


@contextlib.contextmanager
def _warper_margins(margins: list[float]) -> Iterator[None]:
    """Observe HF's warpers that cut at a threshold: how far the nearest token (or cumulative
    mass) was from it, float32 rounding being what could move a token across."""
    import torch
    from transformers.generation import logits_process as lp

    def probs(scores: Any) -> Any:
        return scores.double().softmax(dim=-1)

    def entropy(scores: Any) -> Any:
        p = probs(scores)
        return -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1, keepdim=True)

    def typical(w: Any, scores: Any) -> float:
        lsm = torch.log_softmax(scores.double(), dim=-1)
        shifted = (-lsm - (-(lsm * lsm.exp()).nansum(-1, keepdim=True))).abs()
        order = torch.sort(shifted, descending=False, stable=True).indices
        mass = scores.double().gather(-1, order).softmax(dim=-1).cumsum(-1)
        return float((mass - w.mass).abs().min())

    def relative(p: Any, cut: Any) -> float:
        """The nearest token's distance to a probability cut, relative to the cut."""
        return float(((p - cut).abs() / cut).min())

    def eta(w: Any, s: Any) -> Any:
        e = w.epsilon.double()
        return torch.minimum(e, e.sqrt() * torch.exp(-entropy(s)))

    cuts = {
        lp.TopPLogitsWarper: lambda w, s: float(
            (torch.sort(s.double())[0].softmax(-1).cumsum(-1) - (1 - w.top_p)).abs().min()),
        lp.MinPLogitsWarper: lambda w, s: relative(
            probs(s), w.min_p * probs(s).amax(-1, keepdim=True)),
        lp.TypicalLogitsWarper: typical,
        lp.EpsilonLogitsWarper: lambda w, s: relative(probs(s), w.epsilon),
        lp.EtaLogitsWarper: lambda w, s: relative(probs(s), eta(w, s)),
    }  # fmt: skip
    calls = {cls: cls.__call__ for cls in cuts}

    def observed(cls: Any) -> Any:
        def call(self: Any, input_ids: Any, scores: Any) -> Any:
            margins.append(cuts[cls](self, scores))
            return calls[cls](self, input_ids, scores)

        return call

    for cls in cuts:
        cls.__call__ = observed(cls)
    try:
        yield
    finally:
        for cls, call in calls.items():
            cls.__call__ = call


# -- gpt2np's side of a case, and the comparison ----------------------------------------------


class EotOnly:
    """A tokenizer stand-in that only names the <|endoftext|> id (the fixture's vocabulary is
    not GPT-2's): gpt2np then ends rows and starts empty prompts with it, as HF with eos."""

    def __init__(self, eot_token: int | None) -> None:
        self.eot_token = eot_token


def run_ours(
    model: Any, prompts: list[np.ndarray], case: dict[str, Any], mode: str, config: Any = None
) -> list:
    """gpt2np's Completions for the case (logprobs=5 under ``mode``), flat, prompt-major like
    HF's rows, with ``config`` as the model's generation_config.json. ``prompts`` empty: an
    unconditional sample (empty ids)."""
    from gpt2np.generation.loop import generate

    prompt: Any = prompts[0] if len(prompts) == 1 else [list(p) for p in prompts]
    if not prompts:
        prompt = np.zeros(0, dtype=np.int64)
    model.generation_config = dict(config or {})
    with ticking_clocks(case, hf=False):
        out = generate(prompt, model, logprobs=5, logprobs_mode=mode, **ours_kwargs(case))
    out = out if len(prompts) > 1 else [out]
    n = {**(config or {}), **case}.get("num_return_sequences", case.get("n", 1))
    return [c for per_prompt in out for c in (per_prompt if n > 1 else [per_prompt])]


def assert_equal_to_hf(
    ours: list,
    hf: dict,
    ends: Any,
    mode: str,
    same: dict[int, int] | None = None,
    stop_on: Any = (),
) -> None:
    """Ids id for id (an end id ends a row and is not returned; a ``stop_on`` id ends it and
    is), finish reasons, per-token log-probs and the top alternatives to float32 precision,
    beam scores. ``ends``: the end id(s) or None. ``same`` maps ids that are interchangeable in
    the model (the tie model) to one of them before comparing."""
    ends = [] if ends is None else [ends] if isinstance(ends, int) else list(ends)
    canon = np.vectorize(lambda t: (same or {}).get(int(t), int(t)), otypes=[np.int64])
    expected_lp = hf["logprobs" if mode == "processed" else "raw_logprobs"]
    assert len(ours) == len(hf["ids"])
    for r, c in enumerate(ours):
        row = [int(t) for t in hf["ids"][r] if t >= 0]
        ended = bool(row) and row[-1] in ends
        stopped = bool(row) and not ended and row[-1] in stop_on
        new = row[:-1] if ended else row
        assert canon(np.array(c.ids, dtype=np.int64)).tolist() == canon(np.array(new)).tolist(), r
        assert c.finish_reason == ("eot" if ended else "stop" if stopped else "length"), r
        np.testing.assert_allclose(c.token_logprobs, expected_lp[r, : len(new)], atol=1e-5)
        if mode == "processed":
            _assert_tops_equal(c.top_logprobs, hf, r, canon)
        if c.score is not None:
            np.testing.assert_allclose(c.score, hf["scores"][r], atol=1e-5)


def _assert_tops_equal(tops: list, hf: dict, r: int, canon: Any) -> None:
    """Each step's alternatives: values to float32 precision; ids where the values are
    distinct (HF orders ties as torch.topk does)."""
    for t, top in enumerate(tops):
        pairs = zip(hf["top_ids"][r, t], hf["top_logprobs"][r, t])
        want = [(int(i), float(v)) for i, v in pairs if v > -np.inf]
        assert len(top) == len(want), (r, t)
        np.testing.assert_allclose([v for _, v in top], [v for _, v in want], atol=1e-5)
        gaps = np.diff([v for _, v in want], prepend=np.inf, append=-np.inf)
        distinct = (np.abs(gaps[:-1]) > 1e-4) & (np.abs(gaps[1:]) > 1e-4)
        ours = [canon(i) for (i, _), d in zip(top, distinct) if d]
        assert ours == [canon(i) for (i, _), d in zip(want, distinct) if d], (r, t)


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
