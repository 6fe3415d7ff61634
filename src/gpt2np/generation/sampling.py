"""From the logits of the last position to the next token id: greedy, temperature, top-k, top-p.

The filters follow OpenAI's ``src/sample.py`` (``top_k_logits``, ``top_p_logits``):

* temperature:  logits / T before anything else; T = 0 means greedy (argmax), no randomness.
* top-k:        keep every logit >= the k-th largest (ties with the k-th are kept, as in
                ``tf.where(logits < min_values, -1e10, logits)``); k = 0 is off.
* top-p:        sort descending, p_sorted = softmax, c = exclusive cumulative sum; keep the
                sorted entries with c < p and then every logit >= the smallest kept one
                (so the most likely token is always kept, and ties at the cut are kept);
                p = 1.0 is off.

OpenAI's script applies either top-p or top-k; here both may be given and are applied in the
order temperature → top-k → top-p (top-p then sees the distribution top-k left, as HF does).
Removed tokens get probability exactly 0 (``-inf`` logits instead of OpenAI's -1e10).

Sampling draws one uniform number u per row from a ``numpy.random.Generator`` and takes the
first id whose cumulative probability exceeds u (inverse-CDF), so a seeded generator gives the
same ids run to run and a row consumes exactly one draw per token.

:func:`log_probabilities` is the log of the distribution a token is drawn from (after
temperature, top-k and top-p; −∞ for the removed ids), or for greedy decoding the log-softmax of
the logits it takes the argmax of: what HF's ``compute_transition_scores(...,
normalize_logits=True)`` reports. :func:`log_softmax` of the logits alone is the model's own
distribution, which OpenAI's API reports.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..layers import softmax

__all__ = [
    "check_sampling_args",
    "filter_logits",
    "log_probabilities",
    "log_softmax",
    "probabilities",
    "sample",
    "top_k_indices",
    "top_k_logits",
    "top_p_logits",
]


def check_sampling_args(temperature: float, top_k: int, top_p: float) -> None:
    """ValueError/TypeError naming the first bad argument; returns None when all are valid."""
    if not isinstance(temperature, numbers.Real) or isinstance(temperature, bool):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool):
        raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 is off), got {top_k}")
    if not isinstance(top_p, numbers.Real) or isinstance(top_p, bool):
        raise TypeError(f"top_p must be a number, got {type(top_p).__name__}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1.0 is off), got {top_p}")


def top_k_logits(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the logits >= the k-th largest of each row, -inf elsewhere.   [..., V] -> [..., V]"""
    V = logits.shape[-1]
    if k == 0 or k >= V:
        return logits
    kth = -np.partition(-logits, k - 1, axis=-1)[..., k - 1 : k]  # [..., 1], the k-th largest
    return np.where(logits < kth, -np.inf, logits)


def top_p_logits(logits: np.ndarray, p: float) -> np.ndarray:
    """Nucleus filter: keep the most likely tokens until their mass reaches p.  [..., V] -> [..., V]

    A sorted entry is kept when the mass of the entries before it is < p (an exclusive cumsum),
    then every logit >= the smallest kept one survives.
    """
    if p >= 1.0:
        return logits
    sorted_desc = -np.sort(-logits, axis=-1)  # [..., V]
    probs = _softmax64(sorted_desc)
    mass_before = np.cumsum(probs, axis=-1) - probs  # exclusive cumulative sum
    kept = np.where(mass_before < p, sorted_desc, np.inf)
    threshold = kept.min(axis=-1, keepdims=True)  # [..., 1]; entry 0 is always kept
    return np.where(logits < threshold, -np.inf, logits)


def filter_logits(
    logits: np.ndarray, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> np.ndarray:
    """Temperature, then top-k, then top-p, in float64.   [..., V] -> [..., V] (-inf = removed)

    ``temperature`` must be > 0 here (0 is greedy and handled by :func:`sample`).
    """
    x = np.asarray(logits, dtype=np.float64)
    # Subtract the row max first: a tiny temperature then sends the others to -inf (greedy in
    # the limit) instead of overflowing them all to +inf, whose softmax is NaN.
    with np.errstate(over="ignore"):
        scaled = (x - x.max(axis=-1, keepdims=True)) / temperature
    return top_p_logits(top_k_logits(scaled, top_k), top_p)


def probabilities(
    logits: np.ndarray, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> npt.NDArray[np.float64]:
    """The distribution the next token is drawn from.   [..., V] -> float64 [..., V], rows sum to 1

    temperature = 0 puts all the mass on the first argmax.
    """
    check_sampling_args(temperature, top_k, top_p)
    return _probabilities(_check_logits(logits), temperature, top_k, top_p)


def _probabilities(
    logits: np.ndarray, temperature: float, top_k: int, top_p: float
) -> npt.NDArray[np.float64]:
    """:func:`probabilities` of logits and arguments already checked."""
    if temperature == 0:
        one_hot = np.zeros(logits.shape, dtype=np.float64)
        np.put_along_axis(one_hot, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
        return one_hot
    return _softmax64(filter_logits(logits, temperature, top_k, top_p))


def log_probabilities(
    logits: np.ndarray, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> npt.NDArray[np.float64]:
    """log of the distribution the next token is drawn from.   [..., V] -> float64 [..., V]

    log_softmax(filter_logits(logits)) when sampling, −∞ for the ids the filters removed; for
    greedy decoding (temperature 0), log_softmax(logits), the distribution whose argmax it takes.
    """
    check_sampling_args(temperature, top_k, top_p)
    logits = _check_logits(logits)
    if temperature == 0:
        return log_softmax(logits)
    return log_softmax(filter_logits(logits, temperature, top_k, top_p))


def log_softmax(logits: np.ndarray) -> npt.NDArray[np.float64]:
    """log softmax along the last axis in float64: z - max z - log Σ exp(z - max z); −∞ stays
    −∞.   [..., V] -> float64 [..., V]"""
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    lp: npt.NDArray[np.float64] = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return lp


def sample(
    logits: np.ndarray,
    rngs: Sequence[np.random.Generator],
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> npt.NDArray[np.int64]:
    """Draw one id per row.   logits [B, V], rngs: one Generator per row  ->  int64 [B]

    Greedy (temperature 0) is the argmax and draws nothing from the generators.
    """
    check_sampling_args(temperature, top_k, top_p)
    logits = _check_logits(logits)
    if logits.ndim != 2:  # 1-D [V] used to fail with an IndexError on cdf[b, -1]
        raise ValueError(f"logits must be [B, V], got shape {logits.shape}")
    if temperature == 0:
        greedy: npt.NDArray[np.int64] = np.argmax(logits, axis=-1).astype(np.int64)
        return greedy
    if len(rngs) != len(logits):  # else rows without a generator kept np.empty's garbage
        raise ValueError(f"need one Generator per row: {len(logits)} rows, {len(rngs)} rngs")
    probs = _probabilities(logits, temperature, top_k, top_p)  # [B, V]
    cdf = np.cumsum(probs, axis=-1)
    out = np.empty(len(probs), dtype=np.int64)
    for b, rng in enumerate(rngs):
        u = rng.random() * cdf[b, -1]
        # side="right": a removed id (probability 0) has the same cdf as its predecessor and is
        # never the first entry > u. Only when u rounds up to the total is no entry > u.
        i = int(np.searchsorted(cdf[b], u, side="right"))
        if i == cdf.shape[1]:
            i = int(np.flatnonzero(probs[b])[-1])  # the last id with probability > 0
        out[b] = i
    return out


def top_k_indices(x: np.ndarray, k: int) -> npt.NDArray[np.int64]:
    """Indices of the k largest entries of a 1-D array, largest first; equal entries in the
    order of their indices (what a stable sort gives).   [N] -> int64 [min(k, N)]"""
    k = min(k, len(x))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(x, len(x) - k)[len(x) - k]  # the k-th largest value
    candidates = np.flatnonzero(x >= kth)  # all of the top k, and any ties with the k-th
    order = np.lexsort((candidates, -x[candidates]))  # by value descending, then index
    return candidates[order[:k]].astype(np.int64)


def _check_logits(logits: np.ndarray) -> np.ndarray:
    """``logits`` as an array, or ValueError if a row holds NaN or +inf or is all -inf: it
    has no distribution to draw from, and argmax/cumsum would silently pick some id."""
    logits = np.asarray(logits)
    if np.isnan(logits).any() or not np.isfinite(np.max(logits, axis=-1)).all():
        raise ValueError("logits contain NaN, +inf, or a row that is all -inf; cannot sample")
    return logits


def _softmax64(x: np.ndarray) -> npt.NDArray[np.float64]:
    """softmax along the last axis in float64; -inf entries get probability 0."""
    return softmax(np.asarray(x, dtype=np.float64))
