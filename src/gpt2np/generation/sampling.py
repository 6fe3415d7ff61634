"""From the logits of the last position to the next token id: greedy, or a draw after the filters.

The filters are HF transformers' logits warpers, applied in HF's order, each on what the one
before left (float64; a removed token's logit is −∞, its probability exactly 0):

* temperature T:    z / T; T = 0 means greedy (argmax), no randomness and no filter.
* top_k k:          keep every z >= the k-th largest (ties with the k-th are kept, as in OpenAI's
                    ``top_k_logits`` and HF's ``TopKLogitsWarper``); k = 0 is off.
* top_p p:          nucleus. ``top_p_rule="hf"`` (the default, HF's ``TopPLogitsWarper``): sort
                    descending, p_sorted = softmax, keep the sorted entries whose *exclusive*
                    cumulative mass (the mass before them) is < p, then every z >= the smallest
                    kept one: the fewest tokens whose mass reaches p. ``top_p_rule="openai"``
                    (the ``top_p_logits`` of OpenAI's ``src/sample.py`` as published today):
                    keep the sorted entries whose *inclusive* cumulative mass is <= p (at least
                    one), then every z >= the smallest kept: the most tokens whose mass stays
                    within p. With probabilities [0.05, 0.5, 0.15, 0.3] and p = 0.51, "hf" keeps
                    {1, 3} and "openai" keeps {1}. p = 1.0 is off.
* min_p m:          keep the tokens with probability >= m · (the largest probability); 0 is off.
* typical_p τ:      locally typical sampling (Meister et al. 2022): order the tokens by
                    |−log p_j − H| (H the entropy) and keep the fewest, in that order, whose
                    mass reaches τ; 1.0 is off.
* epsilon_cutoff ε: keep the tokens with probability >= ε (Hewitt et al. 2022); 0 is off.
* eta_cutoff η:     keep the tokens with probability >= min(η, √η · e^(−H)); 0 is off.
* min_tokens_to_keep m: every filter but temperature keeps at least the m most likely tokens.

OpenAI's script (``sample_sequence``) applies temperature, top-k and then top-p, and nothing
else; its first top-p (commit 6c1f21d, August 2019) had the exclusive rule, which is HF's.

Sampling draws one uniform number u per row from a ``numpy.random.Generator`` and takes the
first id whose cumulative probability exceeds u (inverse-CDF), so a seeded generator gives the
same ids run to run and a row consumes exactly one draw per token.

:func:`log_probabilities` is the log of the distribution a token is drawn from (after the
filters; −∞ for the removed ids), or for greedy decoding the log-softmax of the logits it takes
the argmax of: what HF's ``compute_transition_scores(..., normalize_logits=True)`` reports.
:func:`log_softmax` of the logits alone is the model's own distribution, which OpenAI's API
reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from ..layers import softmax
from ..support.checks import check_int, check_real

__all__ = [
    "CHECKS",
    "TOP_P_RULES",
    "Sampling",
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

#: Values of ``top_p_rule``: HF's nucleus (exclusive cumulative mass < p) or OpenAI's
#: (inclusive cumulative mass <= p).
TOP_P_RULES = ("hf", "openai")


# -- the checks of the sampling options (gpt2np.generation.options names them) ---------------


def check_temperature(name: str, value: Any) -> float:
    x = check_real(name, value)
    if x < 0:
        raise ValueError(f"{name} must be >= 0 (0 is greedy), got {value}")
    return x


def check_top_k(name: str, value: Any) -> int:
    return check_int(name, value, minimum=0)


def check_top_p(name: str, value: Any) -> float:
    x = check_real(name, value)
    if not 0 < x <= 1:
        raise ValueError(f"{name} must be in (0, 1] (1.0 is off), got {value}")
    return x


def check_unit(name: str, value: Any) -> float:
    """A probability threshold in [0, 1]; its off value is 0 or 1 (see the module docstring)."""
    x = check_real(name, value)
    if not 0 <= x <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return x


def check_top_p_rule(name: str, value: Any) -> str:
    if value not in TOP_P_RULES:
        raise ValueError(f"{name} must be one of {TOP_P_RULES}, got {value!r}")
    return str(value)


def check_min_tokens_to_keep(name: str, value: Any) -> int:
    return check_int(name, value, minimum=1)


#: Each field of :class:`Sampling` and its check: (name, value) -> the value Sampling holds.
CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "temperature": check_temperature, "top_k": check_top_k, "top_p": check_top_p,
    "top_p_rule": check_top_p_rule, "min_p": check_unit, "typical_p": check_top_p,
    "epsilon_cutoff": check_unit, "eta_cutoff": check_unit,
    "min_tokens_to_keep": check_min_tokens_to_keep,
}  # fmt: skip


def check_sampling_args(temperature: Any, top_k: Any, top_p: Any, **filters: Any) -> None:
    """ValueError/TypeError naming the first bad argument; returns None when all are valid.
    ``filters``: the other fields of :class:`Sampling` (min_p, typical_p, ...)."""
    Sampling.checked(temperature=temperature, top_k=top_k, top_p=top_p, **filters)


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from a row's (processed) logits: greedy when temperature is
    0, else a draw after the filters of the module docstring (their defaults are off)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    top_p_rule: str = "hf"
    min_p: float = 0.0
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    min_tokens_to_keep: int = 1

    @classmethod
    def checked(cls, **fields: Any) -> Sampling:
        """A Sampling of ``fields``, each checked (ValueError/TypeError naming the bad one)."""
        unknown = set(fields) - set(CHECKS)
        if unknown:
            raise TypeError(f"unexpected sampling argument {min(unknown)!r}")
        return cls(**{name: CHECKS[name](name, value) for name, value in fields.items()})

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def filter(self, logits: np.ndarray) -> npt.NDArray[np.float64]:
        """Temperature, then every filter in HF's order, in float64.   [..., V] -> [..., V]
        (−∞ = removed). Needs temperature > 0 (0 is greedy and has no filters)."""
        x = np.asarray(logits, dtype=np.float64)
        # Subtract the row max first: a tiny temperature then sends the others to -inf (greedy in
        # the limit) instead of overflowing them all to +inf, whose softmax is NaN.
        with np.errstate(over="ignore"):
            z = (x - x.max(axis=-1, keepdims=True)) / self.temperature
        m = self.min_tokens_to_keep
        if self.top_k:
            z = top_k_logits(z, max(self.top_k, m))
        if self.top_p < 1.0:
            z = top_p_logits(z, self.top_p, self.top_p_rule, m)
        if self.min_p > 0:
            z = min_p_logits(z, self.min_p, m)
        if self.typical_p < 1.0:
            z = typical_logits(z, self.typical_p, m)
        if 0 < self.epsilon_cutoff < 1:
            z = epsilon_logits(z, self.epsilon_cutoff, m)
        if 0 < self.eta_cutoff < 1:
            z = eta_logits(z, self.eta_cutoff, m)
        filtered: npt.NDArray[np.float64] = z
        return filtered

    def probabilities(self, logits: np.ndarray) -> npt.NDArray[np.float64]:
        """The distribution the next token is drawn from.   [..., V] -> float64 [..., V];
        greedy puts all the mass on the first argmax."""
        if self.greedy:
            one_hot = np.zeros(np.shape(logits), dtype=np.float64)
            np.put_along_axis(one_hot, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
            return one_hot
        return _softmax64(self.filter(logits))

    def log_probabilities(self, logits: np.ndarray) -> npt.NDArray[np.float64]:
        """log of the distribution the next token is drawn from, −∞ for the ids the filters
        removed; for greedy decoding, log_softmax(logits).   [..., V] -> float64 [..., V]"""
        return log_softmax(logits if self.greedy else self.filter(logits))

    def sample(self, logits: np.ndarray, rngs: Sequence[Any]) -> npt.NDArray[np.int64]:
        """One id per row.   logits [B, V] (checked), rngs: a Generator per row -> int64 [B]"""
        if self.greedy:
            greedy: npt.NDArray[np.int64] = np.argmax(logits, axis=-1).astype(np.int64)
            return greedy
        if len(rngs) != len(logits):  # else rows without a generator kept np.empty's garbage
            raise ValueError(f"need one Generator per row: {len(logits)} rows, {len(rngs)} rngs")
        probs = self.probabilities(logits)  # [B, V]
        cdf = np.cumsum(probs, axis=-1)
        out = np.empty(len(probs), dtype=np.int64)
        for b, rng in enumerate(rngs):
            u = rng.random() * cdf[b, -1]
            # side="right": a removed id (probability 0) has the same cdf as its predecessor and
            # is never the first entry > u. Only when u rounds up to the total is no entry > u.
            i = int(np.searchsorted(cdf[b], u, side="right"))
            if i == cdf.shape[1]:
                i = int(np.flatnonzero(probs[b])[-1])  # the last id with probability > 0
            out[b] = i
        return out


# -- the filters, each [..., V] -> [..., V] in float64, −∞ for what it removes ------------------


def top_k_logits(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the logits >= the k-th largest of each row, -inf elsewhere.   [..., V] -> [..., V]"""
    V = logits.shape[-1]
    if k == 0 or k >= V:
        return logits
    kth = -np.partition(-logits, k - 1, axis=-1)[..., k - 1 : k]  # [..., 1], the k-th largest
    return np.where(logits < kth, -np.inf, logits)


def top_p_logits(logits: np.ndarray, p: float, rule: str = "hf", keep: int = 1) -> np.ndarray:
    """Nucleus filter (the module docstring's two rules), keeping at least the ``keep`` most
    likely tokens and every tie of the least likely kept one.   [..., V] -> [..., V]"""
    if p >= 1.0:
        return logits
    sorted_desc = -np.sort(-logits, axis=-1)  # [..., V]
    probs = _softmax64(sorted_desc)
    mass = np.cumsum(probs, axis=-1)  # inclusive
    rank = np.arange(logits.shape[-1])
    if rule == "openai":
        count = (mass <= p).sum(axis=-1, keepdims=True)  # [..., 1]
        last = np.maximum(np.maximum(count - 1, 0), keep - 1)  # the last sorted entry kept
        threshold = np.take_along_axis(sorted_desc, np.minimum(last, rank[-1]), axis=-1)
    else:
        kept = (mass - probs < p) | (rank < keep)  # exclusive mass before the entry < p
        threshold = np.where(kept, sorted_desc, np.inf).min(axis=-1, keepdims=True)
    return np.where(logits < threshold, -np.inf, logits)


def min_p_logits(logits: np.ndarray, min_p: float, keep: int = 1) -> np.ndarray:
    """HF's ``MinPLogitsWarper``: remove the tokens with p_j < min_p · max_j p_j, keeping the
    ``keep`` most likely.   [..., V] -> [..., V]"""
    probs = _softmax64(logits)
    remove = probs < min_p * probs.max(axis=-1, keepdims=True)
    return _remove_keeping(logits, remove, keep)


def typical_logits(logits: np.ndarray, mass: float, keep: int = 1) -> np.ndarray:
    """HF's ``TypicalLogitsWarper``: sort by |−log p_j − H| ascending, keep the entries up to
    and including the first whose cumulative probability reaches ``mass`` (and every later
    entry of the same distance), and the first ``keep`` of that order.   [..., V] -> [..., V]"""
    lp = log_softmax(logits)
    with np.errstate(invalid="ignore"):  # −∞ · 0 for removed tokens: no entropy, as HF's nansum
        entropy = -np.nansum(lp * np.exp(lp), axis=-1, keepdims=True)
    distance = np.abs(-lp - entropy)  # removed tokens: +∞, last in the order
    order = np.argsort(distance, axis=-1, kind="stable")
    sorted_distance = np.take_along_axis(distance, order, axis=-1)
    cumulative = np.cumsum(_softmax64(np.take_along_axis(logits, order, axis=-1)), axis=-1)
    last = np.minimum((cumulative < mass).sum(axis=-1, keepdims=True), logits.shape[-1] - 1)
    sorted_remove = sorted_distance > np.take_along_axis(sorted_distance, last, axis=-1)
    sorted_remove[..., :keep] = False
    remove = np.empty_like(sorted_remove)
    np.put_along_axis(remove, order, sorted_remove, axis=-1)
    return np.where(remove, -np.inf, logits)


def epsilon_logits(logits: np.ndarray, epsilon: float, keep: int = 1) -> np.ndarray:
    """HF's ``EpsilonLogitsWarper``: remove the tokens with p_j < ε, keeping the ``keep`` most
    likely.   [..., V] -> [..., V]"""
    return _remove_keeping(logits, _softmax64(logits) < epsilon, keep)


def eta_logits(logits: np.ndarray, eta: float, keep: int = 1) -> np.ndarray:
    """HF's ``EtaLogitsWarper``: remove the tokens with p_j < min(η, √η · e^(−H)), H the
    entropy of the row, keeping the ``keep`` most likely.   [..., V] -> [..., V]"""
    probs = _softmax64(logits)
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 · log 0 is 0 here
        plogp = np.where(probs > 0, probs * np.log(probs), 0.0)
    entropy = -plogp.sum(axis=-1, keepdims=True)
    cutoff = np.minimum(eta, np.sqrt(eta) * np.exp(-entropy))
    return _remove_keeping(logits, probs < cutoff, keep)


def _remove_keeping(logits: np.ndarray, remove: np.ndarray, keep: int) -> np.ndarray:
    """−∞ where ``remove``, except the logits >= the ``keep``-th largest of their row."""
    k = min(keep, logits.shape[-1])
    kth = -np.partition(-logits, k - 1, axis=-1)[..., k - 1 : k]  # [..., 1]
    return np.where(remove & (logits < kth), -np.inf, logits)


# -- the functions of a few arguments, for a notebook ----------------------------------------


def filter_logits(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    **filters: Any,
) -> np.ndarray:
    """Temperature, then the filters, in float64.   [..., V] -> [..., V] (-inf = removed)

    ``temperature`` must be > 0 here (0 is greedy and handled by :func:`sample`); ``filters``:
    the other fields of :class:`Sampling` (top_p_rule, min_p, typical_p, ...).
    """
    return Sampling.checked(temperature=temperature, top_k=top_k, top_p=top_p, **filters).filter(
        logits
    )


def probabilities(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    **filters: Any,
) -> npt.NDArray[np.float64]:
    """The distribution the next token is drawn from.   [..., V] -> float64 [..., V], rows sum to 1

    temperature = 0 puts all the mass on the first argmax. ``filters``: as :func:`filter_logits`.
    """
    s = Sampling.checked(temperature=temperature, top_k=top_k, top_p=top_p, **filters)
    return s.probabilities(check_logits(logits))


def log_probabilities(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    **filters: Any,
) -> npt.NDArray[np.float64]:
    """log of the distribution the next token is drawn from.   [..., V] -> float64 [..., V]

    log_softmax(filter_logits(logits)) when sampling, −∞ for the ids the filters removed; for
    greedy decoding (temperature 0), log_softmax(logits), the distribution whose argmax it takes.
    """
    s = Sampling.checked(temperature=temperature, top_k=top_k, top_p=top_p, **filters)
    return s.log_probabilities(check_logits(logits))


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
    **filters: Any,
) -> npt.NDArray[np.int64]:
    """Draw one id per row.   logits [B, V], rngs: one Generator per row  ->  int64 [B]

    Greedy (temperature 0) is the argmax and draws nothing from the generators. ``filters``:
    as :func:`filter_logits`.
    """
    s = Sampling.checked(temperature=temperature, top_k=top_k, top_p=top_p, **filters)
    logits = check_logits(logits)
    if logits.ndim != 2:  # 1-D [V] used to fail with an IndexError on cdf[b, -1]
        raise ValueError(f"logits must be [B, V], got shape {logits.shape}")
    return s.sample(logits, rngs)


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


def check_logits(logits: Any) -> np.ndarray:
    """``logits`` as an array, or ValueError if a row holds NaN or +inf or is all -inf: it
    has no distribution to draw from, and argmax/cumsum would silently pick some id."""
    z: np.ndarray = np.asarray(logits)
    if np.isnan(z).any() or not np.isfinite(np.max(z, axis=-1)).all():
        raise ValueError("logits contain NaN, +inf, or a row that is all -inf; cannot sample")
    return z


def _softmax64(x: np.ndarray) -> npt.NDArray[np.float64]:
    """softmax along the last axis in float64; -inf entries get probability 0."""
    return softmax(np.asarray(x, dtype=np.float64))
