"""Logit processors: the rules that change a row's next-token logits before it is chosen.

Each rule sees one row: its token ids so far (the prompt, then what was generated; 1-D) and its
logits [V]; a token set to −∞ can no longer be chosen. :class:`Penalties` applies them in this
order (HF transformers' order for the rules it has), then your own processors, and only then
does sampling apply temperature, top-k, top-p and the other filters
(:mod:`gpt2np.generation.sampling`). n is the number of tokens generated so far, E the ids that
end a row (``eos_token_id``):

    sequence_bias          {ids: b}: add b to ids[-1] where the row ends with ids[:-1]
                           (always, for one id); biases of sequences ending alike add up
    repetition_penalty θ   CTRL's rule (Keskar et al. 2019), as HF: for each distinct id j in
                           the row, prompt included: z_j / θ if z_j > 0, else z_j · θ  (θ = 1: off)
    presence_penalty α_p,  OpenAI's rule: z_j − c_j · α_f − [c_j > 0] · α_p, where c_j counts j
    frequency_penalty α_f  among the generated tokens only (the prompt is not counted)    (0: off)
    no_repeat_ngram_size N a token that would complete an N-gram already in the row → −∞  (0: off)
    bad_words_ids          per sequence s: s[-1] → −∞ where the row ends with s[:-1]
                           (a one-token sequence bans that token everywhere)
    min_new_tokens m       every id of E → −∞ while n < m                                (0: off)
    forced_eos_token_id F  at the last step (n = max_new_tokens − 1) every id but F → −∞, F → 0
    exponential_decay_length_penalty (s, f)
                           for n > s, each id e of E: z_e + |z_e| · (f^(n − s) − 1)
    suppress_tokens        those ids → −∞ at every step
    logits_processors      your processors, in the order given

A processor of your own comes in one of two forms, told apart by this rule (no guessing from
what a function happens to accept):

* an object of a class whose bases include HF transformers' ``LogitsProcessor`` or
  ``LogitsWarper`` (say ``transformers.RepetitionPenaltyLogitsProcessor(1.2)``, or your own
  subclass) is HF's batched form: it is called as HF calls it, ``proc(input_ids, scores)`` with
  torch tensors int64 [B, T] and float64 [B, V], and returns scores [B, V];
* a function wrapped in :func:`batched` (``batched(fn)``) is the same batched form over NumPy:
  ``fn(ids, logits)`` with int64 [B, T] and float64 [B, V], returning [B, V];
* anything else callable is per row: ``fn(ids, logits)`` with int64 [T] and float64 [V].

In the batched forms the rows of different lengths (a ragged batch) are left-padded with
``pad_token_id`` (default 0), as HF's ``input_ids`` are. A per-row processor is a plain
function; it may change ``logits`` in place and return it::

    def no_digits(ids, logits):                 # ids: int64 [T], logits: float64 [V]
        logits[digit_ids] = -np.inf
        return logits

    model.generate("Count: one, two,", logits_processors=[no_digits])

Greedy decoding and sampling hand the processors the model's logits; beam search hands them
log-probabilities (``log_softmax`` of the logits), as HF's beam search does, and adds what they
return to the beam scores as it is (no renormalisation).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..support.checks import check_int, check_real, is_int

__all__ = [
    "CHECKS",
    "Batched",
    "Penalties",
    "Processor",
    "ban_sequences",
    "batched",
    "bias_sequences",
    "check_penalties",
    "exponential_decay",
    "forced_eos",
    "form_of",
    "min_new_tokens",
    "no_repeat_ngram",
    "presence_frequency_penalty",
    "repetition_penalty",
    "suppress",
]

#: ``fn(ids, logits) -> logits``: ids int64 [T] (prompt and continuation), logits float64 [V].
Processor = Callable[[np.ndarray, np.ndarray], np.ndarray]


class Batched:
    """A function of the whole batch, ``fn(ids [B, T], logits [B, V])``: see :func:`batched`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"batched() takes a function, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", repr(fn))

    def __call__(self, ids: np.ndarray, logits: np.ndarray) -> Any:
        return self.fn(ids, logits)

    def __repr__(self) -> str:
        return f"batched({self.__name__})"


def batched(fn: Callable[..., Any]) -> Batched:
    """Mark ``fn`` as a function of the whole batch: a logits processor ``fn(ids [B, T],
    logits [B, V]) -> logits [B, V]`` or a stopping criterion ``fn(ids [B, T], logits [B, V])
    -> bool [B]``, over NumPy arrays (ragged rows left-padded with ``pad_token_id``)."""
    return Batched(fn)


def form_of(fn: Any, hf_bases: tuple[str, ...]) -> str:
    """ "hf" for an object whose class derives from one of transformers' ``hf_bases``, "batched"
    for a :func:`batched` function, else "row" (the module docstring's rule)."""
    if isinstance(fn, Batched):
        return "batched"
    for cls in type(fn).__mro__:
        if cls.__name__ in hf_bases and cls.__module__.split(".")[0] == "transformers":
            return "hf"
    return "row"


#: The classes an HF logits processor derives from.
HF_PROCESSOR_BASES = ("LogitsProcessor", "LogitsWarper")


# -- the rules, one row each: logits float64 [V] -> [V], changed in place ---------------------


def repetition_penalty(logits: np.ndarray, ids: np.ndarray, penalty: float) -> np.ndarray:
    """CTRL's repetition penalty on every distinct id of ``ids``: a positive logit is divided by
    ``penalty``, a negative one multiplied by it (both lower it for penalty > 1).  [V] -> [V]"""
    seen = np.unique(ids)
    z = logits[seen]
    logits[seen] = np.where(z > 0, z / penalty, z * penalty)
    return logits


def presence_frequency_penalty(
    logits: np.ndarray, new_ids: np.ndarray, presence: float, frequency: float
) -> np.ndarray:
    """OpenAI's penalties: z_j − c_j·frequency − [c_j > 0]·presence, with c_j the number of times
    j occurs in ``new_ids`` (the generated tokens).   [V] -> [V]"""
    seen, counts = np.unique(new_ids, return_counts=True)
    logits[seen] -= counts * frequency + presence
    return logits


def no_repeat_ngram(logits: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Ban every token that would make the last n tokens an n-gram already in ``ids``: for each
    earlier position i whose n−1 tokens equal the row's last n−1, ``ids[i + n − 1]`` → −∞.
    [V] -> [V]"""
    T = len(ids)
    if T < n:
        return logits
    if n == 1:
        logits[ids] = -np.inf
        return logits
    windows = np.lib.stride_tricks.sliding_window_view(ids, n)  # [T - n + 1, n], every n-gram
    tail = ids[T - n + 1 :]  # [n - 1], the prefix the next token would complete
    logits[windows[(windows[:, :-1] == tail).all(axis=1), -1]] = -np.inf
    return logits


def ban_sequences(
    logits: np.ndarray, ids: np.ndarray, sequences: Sequence[Sequence[int]]
) -> np.ndarray:
    """HF's ``bad_words_ids``: for each sequence s, s[-1] → −∞ where ``ids`` ends with s[:-1]
    (always, for a one-token s).   [V] -> [V]"""
    for s in sequences:
        if _ends_with(ids, s[:-1]):
            logits[s[-1]] = -np.inf
    return logits


def bias_sequences(
    logits: np.ndarray, ids: np.ndarray, biases: Sequence[tuple[Sequence[int], float]]
) -> np.ndarray:
    """HF's ``sequence_bias``: for each (s, b), add b to s[-1]'s logit where ``ids`` ends with
    s[:-1] (always, for a one-token s); the biases are summed first.   [V] -> [V]"""
    bias = np.zeros_like(logits)
    for s, b in biases:
        if _ends_with(ids, s[:-1]):
            bias[s[-1]] += b
    logits += bias
    return logits


def min_new_tokens(logits: np.ndarray, n_new: int, minimum: int, ends: Sequence[int]) -> np.ndarray:
    """Every id of ``ends`` → −∞ while fewer than ``minimum`` tokens have been generated.
    [V] -> [V]"""
    if n_new < minimum:
        logits[list(ends)] = -np.inf
    return logits


def forced_eos(logits: np.ndarray, forced: Sequence[int]) -> np.ndarray:
    """HF's ``forced_eos_token_id`` at the last step: every id but ``forced`` → −∞, those → 0.
    [V] -> [V]"""
    logits[:] = -np.inf
    logits[list(forced)] = 0.0
    return logits


def exponential_decay(
    logits: np.ndarray, n_new: int, start: int, factor: float, ends: Sequence[int]
) -> np.ndarray:
    """HF's ``exponential_decay_length_penalty``: after ``start`` new tokens, each end id's
    logit grows by |z_e| · (factor^(n_new − start) − 1) (a −∞ stays −∞).   [V] -> [V]"""
    k = n_new - start
    if k > 0 and len(ends):
        e = list(ends)
        z = logits[e]
        logits[e] = z + np.where(np.isfinite(z), np.abs(z) * (factor**k - 1), 0.0)
    return logits


def suppress(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """HF's ``suppress_tokens``: those ids → −∞.   [V] -> [V]"""
    logits[list(ids)] = -np.inf
    return logits


def _ends_with(ids: np.ndarray, prefix: Sequence[int]) -> bool:
    """Whether ``ids`` ends with ``prefix`` (always, for an empty prefix)."""
    k = len(prefix)
    return k == 0 or (k <= len(ids) and list(ids[len(ids) - k :]) == list(prefix))


@dataclass(frozen=True)
class Penalties:
    """Every logit rule of a generation, checked (:func:`check_penalties`); the defaults are
    off. :meth:`apply` runs them on the rows of a step in the order of the module docstring."""

    sequence_bias: tuple[tuple[tuple[int, ...], float], ...] = ()
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    no_repeat_ngram_size: int = 0
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    min_new_tokens: int = 0
    forced_eos_token_id: tuple[int, ...] = ()
    exponential_decay_length_penalty: Optional[tuple[int, float]] = None
    suppress_tokens: tuple[int, ...] = ()
    logits_processors: tuple[Any, ...] = ()

    @property
    def active(self) -> bool:
        """Whether any rule can change a logit (else :meth:`apply` may be skipped)."""
        return self != Penalties()

    def check_vocab(self, n_vocab: int) -> None:
        """ValueError if an id a rule names is outside [0, n_vocab)."""
        named = [("bad_words_ids", t) for s in self.bad_words_ids for t in s]
        named += [("sequence_bias", t) for s, _ in self.sequence_bias for t in s]
        named += [("suppress_tokens", t) for t in self.suppress_tokens]
        named += [("forced_eos_token_id", t) for t in self.forced_eos_token_id]
        for name, t in named:
            if t >= n_vocab:
                raise ValueError(f"{name}: token id {t} is outside [0, {n_vocab})")

    def apply_row(
        self,
        logits: np.ndarray,
        ids: np.ndarray,
        n_prompt: int,
        ends: Sequence[int] = (),
        max_new_tokens: Optional[int] = None,
    ) -> np.ndarray:
        """The built-in rules on one row, in place.  logits float64 [V]; ids int64 [T], of which
        the first ``n_prompt`` are the prompt; ``ends``: the ids that end a row; ``max_new_tokens``
        (for ``forced_eos_token_id``): the last step is n = max_new_tokens − 1.  -> logits [V]"""
        n_new = len(ids) - n_prompt
        if self.sequence_bias:
            logits = bias_sequences(logits, ids, self.sequence_bias)
        if self.repetition_penalty != 1.0:
            logits = repetition_penalty(logits, ids, self.repetition_penalty)
        if self.presence_penalty or self.frequency_penalty:
            logits = presence_frequency_penalty(
                logits, ids[n_prompt:], self.presence_penalty, self.frequency_penalty
            )
        if self.no_repeat_ngram_size:
            logits = no_repeat_ngram(logits, ids, self.no_repeat_ngram_size)
        if self.bad_words_ids:
            logits = ban_sequences(logits, ids, self.bad_words_ids)
        if self.min_new_tokens:
            logits = min_new_tokens(logits, n_new, self.min_new_tokens, ends)
        if self.forced_eos_token_id and n_new == (max_new_tokens or 0) - 1:
            logits = forced_eos(logits, self.forced_eos_token_id)
        if self.exponential_decay_length_penalty is not None:
            start, factor = self.exponential_decay_length_penalty
            logits = exponential_decay(logits, n_new, start, factor, ends)
        if self.suppress_tokens:
            logits = suppress(logits, self.suppress_tokens)
        return logits

    def apply(
        self,
        logits: np.ndarray,
        rows: Sequence[np.ndarray],
        n_prompts: Sequence[int],
        ends: Sequence[int] = (),
        max_new_tokens: Optional[int] = None,
        pad_token_id: int = 0,
    ) -> np.ndarray:
        """Every rule on the rows of a step: the built-in ones row by row (:meth:`apply_row`),
        then your processors in order, each in its form (the module docstring).
        logits float64 [R, V], changed in place; rows: each row's ids int64 [T_r].  -> [R, V]"""
        for r, ids in enumerate(rows):
            logits[r] = self.apply_row(logits[r], ids, n_prompts[r], ends, max_new_tokens)
        for fn in self.logits_processors:
            form = form_of(fn, HF_PROCESSOR_BASES)
            if form == "row":
                for r, ids in enumerate(rows):
                    logits[r] = _checked(fn, fn(ids.copy(), logits[r]), logits.shape[1:])
            else:
                out = call_batched(fn, form, rows, logits, pad_token_id)
                logits = _checked(fn, out, logits.shape)
        return logits


def call_batched(
    fn: Any, form: str, rows: Sequence[np.ndarray], logits: np.ndarray, pad_token_id: int
) -> Any:
    """``fn(ids [R, T], logits [R, V])`` with the rows left-padded: NumPy arrays for a
    :func:`batched` function, torch tensors for an HF object (torch is then already imported:
    it made the object). Returns what ``fn`` returns, as NumPy when it is a tensor."""
    T = max(len(ids) for ids in rows)
    padded = np.full((len(rows), T), pad_token_id, dtype=np.int64)
    for r, ids in enumerate(rows):
        padded[r, T - len(ids) :] = ids
    if form == "batched":
        return fn(padded, logits)
    torch = sys.modules.get("torch")
    if torch is None:
        raise TypeError(f"{fn!r} is an HF transformers object, but torch is not imported")
    out = fn(torch.from_numpy(padded), torch.from_numpy(np.ascontiguousarray(logits)))
    return out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else out


# -- the checks: each argument as the type Penalties holds, or ValueError/TypeError ---------


def check_penalties(**arguments: Any) -> Penalties:
    """The arguments (the fields of :class:`Penalties`, as ``generate`` takes them) as a
    :class:`Penalties`, or ValueError/TypeError naming the bad one; None is a rule's default."""
    unknown = set(arguments) - set(CHECKS)
    if unknown:
        raise TypeError(f"unexpected logit rule {min(unknown)!r}")
    return Penalties(**{
        name: CHECKS[name](name, value) for name, value in arguments.items() if value is not None
    })  # fmt: skip


def check_repetition_penalty(name: str, value: Any) -> float:
    penalty = check_real(name, value)
    if not penalty > 0:
        raise ValueError(f"{name} must be > 0 (1.0 is off), got {penalty}")
    return penalty


def check_count(name: str, value: Any) -> int:
    """A count of tokens, >= 0 (0 is off)."""
    return check_int(name, value, minimum=0)


def check_id(name: str, value: Any) -> int:
    return check_int(name, value, minimum=0)


def check_ids(name: str, value: Any) -> tuple[int, ...]:
    """One id or a list of ids (>= 0) as a tuple."""
    if is_int(value):
        return (check_id(name, value),)
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise TypeError(f"{name} must be a token id or a list of them, got {value!r}")
    return tuple(check_id(name, t) for t in value)


def check_bad_words(name: str, value: Any) -> tuple[tuple[int, ...], ...]:
    """Id sequences (``[[1, 2], [3]]``, HF's form), or plain ids (``[3, 4]``), each banned
    everywhere."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of id lists, got {type(value).__name__}")
    sequences = []
    for s in value:
        s = [s] if is_int(s) else s
        if not isinstance(s, (list, tuple, np.ndarray)) or not all(is_int(t) for t in s):
            raise TypeError(f"{name} must hold token ids or lists of them, got {s!r}")
        if len(s) == 0 or any(t < 0 for t in s):
            raise ValueError(f"{name}: each entry must be non-empty ids >= 0, got {s!r}")
        sequences.append(tuple(int(t) for t in s))
    return tuple(sequences)


def check_sequence_bias(name: str, value: Any) -> tuple[tuple[tuple[int, ...], float], ...]:
    """HF's two forms: ``{(id, ...): bias}``, or ``[[[id, ...], bias], ...]`` (what
    generation_config.json holds)."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 for p in value
    ):
        pairs = [tuple(p) for p in value]
    else:
        raise TypeError(f"{name} must be {{(ids...): bias}} or [[ids, bias], ...], got {value!r}")
    checked = []
    for ids, bias in pairs:
        ids = check_ids(name, ids)
        if not ids:
            raise ValueError(f"{name}: a sequence must hold at least one id")
        checked.append((ids, check_real(f"{name}'s bias", bias)))
    return tuple(checked)


def check_decay(name: str, value: Any) -> tuple[int, float]:
    """HF's (start, factor): start >= 0 new tokens, factor > 0."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (start, factor), got {value!r}")
    start = check_int(f"{name}'s start", value[0], minimum=0)
    factor = check_real(f"{name}'s factor", value[1])
    if not factor > 0:
        raise ValueError(f"{name}'s factor must be > 0, got {factor}")
    return start, factor


def check_processors(name: str, value: Any) -> tuple[Any, ...]:
    """A processor or a list of them (an HF ``LogitsProcessorList`` is a list)."""
    fns = value if isinstance(value, (list, tuple)) else (value,)
    if not all(callable(f) for f in fns):
        raise TypeError(
            f"{name} must be a function fn(ids, logits) -> logits or a list of them, got {value!r}"
        )
    return tuple(fns)


#: Each field of :class:`Penalties` and its check: (name, value) -> the value Penalties holds.
CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "sequence_bias": check_sequence_bias, "repetition_penalty": check_repetition_penalty,
    "presence_penalty": check_real, "frequency_penalty": check_real,
    "no_repeat_ngram_size": check_count, "bad_words_ids": check_bad_words,
    "min_new_tokens": check_count, "forced_eos_token_id": check_ids,
    "exponential_decay_length_penalty": check_decay, "suppress_tokens": check_ids,
    "logits_processors": check_processors,
}  # fmt: skip


def _checked(fn: Any, out: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A processor's result as float64 of ``shape``, or a ValueError/TypeError naming it."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    try:
        if not isinstance(out, (np.ndarray, list, tuple)):
            raise TypeError
        arr = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"logits processor {name} returned {type(out).__name__}, not logits {list(shape)}"
        ) from None
    if arr.shape != shape:
        raise ValueError(f"logits processor {name} returned shape {arr.shape}, expected {shape}")
    if np.isnan(arr).any() or (arr == np.inf).any():
        raise ValueError(f"logits processor {name} returned NaN or +inf")
    return arr
