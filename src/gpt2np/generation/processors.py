"""Logit processors: the rules that change a row's next-token logits before it is chosen.

Each rule sees one row: its token ids so far (the prompt, then what was generated; 1-D) and its
logits [V]; a token set to −∞ can no longer be chosen. :class:`Penalties` applies them in this
order (HF transformers' order for the rules it has), then your own functions, and only then
does sampling apply temperature, top-k and top-p (:mod:`gpt2np.generation.sampling`):

    repetition_penalty θ   CTRL's rule (Keskar et al. 2019), as HF: for each distinct id j in
                           the row, prompt included: z_j / θ if z_j > 0, else z_j · θ  (θ = 1: off)
    presence_penalty α_p,  OpenAI's rule: z_j − c_j · α_f − [c_j > 0] · α_p, where c_j counts j
    frequency_penalty α_f  among the generated tokens only (the prompt is not counted)    (0: off)
    no_repeat_ngram_size n a token that would complete an n-gram already in the row → −∞  (0: off)
    bad_words_ids          per sequence s: s[-1] → −∞ where the row ends with s[:-1]
                           (a one-token sequence bans that token everywhere)
    min_new_tokens m       <|endoftext|> → −∞ while fewer than m tokens are generated    (0: off)
    logits_processors      your functions ``fn(ids, logits) -> logits``, in the order given

A processor of your own is a plain function. It may change ``logits`` in place and return it::

    def no_digits(ids, logits):                 # ids: int64 [T], logits: float64 [V]
        logits[digit_ids] = -np.inf
        return logits

    model.generate("Count: one, two,", logits_processors=[no_digits])

Greedy decoding and sampling hand the processors the model's logits; beam search hands them
log-probabilities (``log_softmax`` of the logits), as HF's beam search does, and adds what they
return to the beam scores as it is (no renormalisation).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

__all__ = [
    "Penalties",
    "Processor",
    "ban_sequences",
    "check_penalties",
    "check_real",
    "min_new_tokens",
    "no_repeat_ngram",
    "presence_frequency_penalty",
    "repetition_penalty",
]

#: ``fn(ids, logits) -> logits``: ids int64 [T] (prompt and continuation), logits float64 [V].
Processor = Callable[[np.ndarray, np.ndarray], np.ndarray]


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
    T = len(ids)
    for s in sequences:
        k = len(s) - 1
        if k == 0 or (k <= T and list(ids[T - k :]) == list(s[:k])):
            logits[s[-1]] = -np.inf
    return logits


def min_new_tokens(logits: np.ndarray, n_new: int, minimum: int, eot: Optional[int]) -> np.ndarray:
    """``eot`` → −∞ while fewer than ``minimum`` tokens have been generated.   [V] -> [V]"""
    if eot is not None and n_new < minimum:
        logits[eot] = -np.inf
    return logits


@dataclass(frozen=True)
class Penalties:
    """Every logit rule of a generation, checked (:func:`check_penalties`); the defaults are
    off. :meth:`apply` runs them on one row in the order of the module docstring."""

    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    logits_processors: tuple[Processor, ...] = ()

    @property
    def active(self) -> bool:
        """Whether any rule can change a logit (else :meth:`apply` may be skipped)."""
        return self != Penalties()

    def check_vocab(self, n_vocab: int) -> None:
        """ValueError if an id of ``bad_words_ids`` is outside [0, n_vocab)."""
        for s in self.bad_words_ids:
            bad = [t for t in s if t >= n_vocab]
            if bad:
                raise ValueError(f"bad_words_ids: token id {bad[0]} is outside [0, {n_vocab})")

    def apply(
        self, logits: np.ndarray, ids: np.ndarray, n_prompt: int, eot: Optional[int]
    ) -> np.ndarray:
        """The rules on one row, in place.  logits float64 [V]; ids int64 [T], of which the first
        ``n_prompt`` are the prompt.  -> logits [V]"""
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
            logits = min_new_tokens(logits, len(ids) - n_prompt, self.min_new_tokens, eot)
        for fn in self.logits_processors:
            logits = _checked_output(fn, fn(ids.copy(), logits), logits.shape)
        return logits


def check_penalties(
    *,
    repetition_penalty: Any = 1.0,
    presence_penalty: Any = 0.0,
    frequency_penalty: Any = 0.0,
    no_repeat_ngram_size: Any = 0,
    min_new_tokens: Any = 0,
    bad_words_ids: Any = None,
    logits_processors: Any = None,
) -> Penalties:
    """The arguments as a :class:`Penalties`, or ValueError/TypeError naming the bad one.

    bad_words_ids: id sequences (``[[1, 2], [3]]``, HF's form), or plain ids (``[3, 4]``), each
    banned everywhere. logits_processors: a function or a list of functions.
    """
    penalty = check_real("repetition_penalty", repetition_penalty)
    if not penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0 (1.0 is off), got {penalty}")
    for name, value in (("presence_penalty", presence_penalty),
                        ("frequency_penalty", frequency_penalty)):  # fmt: skip
        check_real(name, value)
    for name, value in (("no_repeat_ngram_size", no_repeat_ngram_size),
                        ("min_new_tokens", min_new_tokens)):  # fmt: skip
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0 (0 is off), got {value}")
    return Penalties(
        repetition_penalty=float(penalty),
        presence_penalty=float(presence_penalty),
        frequency_penalty=float(frequency_penalty),
        no_repeat_ngram_size=int(no_repeat_ngram_size),
        min_new_tokens=int(min_new_tokens),
        bad_words_ids=_bad_words(bad_words_ids),
        logits_processors=_processors(logits_processors),
    )


def check_real(name: str, value: Any) -> float:
    """``value`` as a float: TypeError unless it is a real number, ValueError unless finite.

    Any ``numbers.Real`` (a Fraction too, which ``np.isfinite`` refuses) is converted first."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond float's range
        x = math.inf
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value}")
    return x


def _bad_words(value: Any) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"bad_words_ids must be a list of id lists, got {type(value).__name__}")
    sequences = []
    for s in value:
        s = [s] if _is_id(s) else s
        if not isinstance(s, (list, tuple, np.ndarray)) or not all(_is_id(t) for t in s):
            raise TypeError(f"bad_words_ids must hold token ids or lists of them, got {s!r}")
        if len(s) == 0 or any(t < 0 for t in s):
            raise ValueError(f"bad_words_ids: each entry must be non-empty ids >= 0, got {s!r}")
        sequences.append(tuple(int(t) for t in s))
    return tuple(sequences)


def _processors(value: Any) -> tuple[Processor, ...]:
    if value is None:
        return ()
    fns = (value,) if callable(value) else value
    if not isinstance(fns, (list, tuple)) or not all(callable(f) for f in fns):
        raise TypeError(
            f"logits_processors must be a function fn(ids, logits) -> logits or a list of them, "
            f"got {value!r}"
        )
    return tuple(fns)


def _checked_output(fn: Processor, out: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A processor's result as float64 [V], or a ValueError/TypeError naming the processor."""
    name = getattr(fn, "__name__", repr(fn))
    try:
        if not isinstance(out, (np.ndarray, list, tuple)):
            raise TypeError
        arr = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"logits processor {name} returned {type(out).__name__}, not logits [V]"
        ) from None
    if arr.shape != shape:
        raise ValueError(f"logits processor {name} returned shape {arr.shape}, expected {shape}")
    if np.isnan(arr).any() or (arr == np.inf).any():
        raise ValueError(f"logits processor {name} returned NaN or +inf")
    return arr


def _is_id(t: Any) -> bool:
    return isinstance(t, numbers.Integral) and not isinstance(t, bool)
