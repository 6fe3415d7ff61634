"""One tensor's comparison, a chunk at a time: the running maxima, the count of failing elements,
and every NaN and infinity the port holds, also where nothing is compared.

An element passes when ``|port - golden| <= atol · scale + rtol · |golden|``. ``scale`` is 1,
except for a probability row (``attn.probs``, whose last axis is the keys): there it is the
row's largest golden probability, so that the absolute part of the tolerance shrinks with the
row. A softmax over 248 keys has probabilities near 1/256, far below bfloat16's absolute
tolerance of 0.15: without the scale a token that cannot see itself, or sees the step's future
keys, would pass. A masked probability (golden 0) must then be at most ``atol`` times the row's
largest one: in effect zero.

NaN and ±inf count as what they are: ``max_abs`` is NaN when a compared port value is NaN where
the golden's is not (and inf for an infinite difference), and ``n_nan`` / ``n_inf`` count them.
In positions that are not compared (the padding) a non-finite port value is counted too, as
``hidden_nan`` / ``hidden_inf``: it is harmless there, until it leaks into a real row one layer
down (a padded query row masked with −inf has nothing to attend to, and its softmax is 0/0).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .report import TensorDiff

__all__ = ["Stats", "is_probs", "row_scale"]


def is_probs(name: str, axes: Optional[list[str]]) -> bool:
    """A softmax over keys: its rows (the last axis, S) sum to 1."""
    return (
        (name == "attn.probs" or name.endswith(".attn.probs"))
        and bool(axes)
        and (axes is not None and axes[-1] == "S")
    )


def row_scale(golden: np.ndarray, last: int) -> np.ndarray:
    """Each element's row maximum of |golden| (rows along the last axis of length ``last``);
    ``golden`` holds whole rows."""
    rows = np.abs(golden.astype(np.float64)).reshape(-1, last)
    return np.repeat(rows.max(axis=1), last)


class Stats:
    """Running maxima over the chunks of one tensor."""

    def __init__(self, rtol: float, atol: float) -> None:
        self.rtol, self.atol = rtol, atol
        self.max_abs = self.max_rel = self.worst_ratio = 0.0
        self.n_bad = self.n_compared = self.n_nan = self.n_inf = 0
        self.hidden_nan = self.hidden_inf = 0
        self.first_nonfinite = -1  # flat index of the first non-finite port value, compared or not
        self.worst = -1
        self.values = (math.nan, math.nan)

    def add(
        self,
        g: np.ndarray,
        p: np.ndarray,
        at: int,
        mask: Optional[np.ndarray],
        padding: Optional[np.ndarray] = None,
        scale: Optional[np.ndarray] = None,
        only_nan: bool = False,
    ) -> None:
        """One chunk: golden ``g`` and port ``p`` (flat, elements at..at+n), ``mask`` the
        compared elements (None: all), ``padding`` the elements that are padding (checked for
        non-finite values: only NaN with ``only_nan``), ``scale`` each element's atol factor."""
        g64, p64 = g.astype(np.float64), p.astype(np.float64)
        if padding is not None and padding.any():
            self._hidden(p64, np.flatnonzero(padding), at, only_nan)
        index = None
        if mask is not None:
            index = np.flatnonzero(mask)
            g64, p64 = g64[index], p64[index]
            scale = None if scale is None else scale[index]
        if g64.size:
            self._compare(g64, p64, at, index, scale)

    def _hidden(self, p64: np.ndarray, where: np.ndarray, at: int, only_nan: bool) -> None:
        values = p64[where]
        nan = np.isnan(values)
        inf = np.zeros_like(nan) if only_nan else np.isinf(values)
        self.hidden_nan += int(nan.sum())
        self.hidden_inf += int(inf.sum())
        self._first(where, nan | inf, at)

    def _first(self, where: Optional[np.ndarray], bad: np.ndarray, at: int) -> None:
        if bad.any():
            i = int(np.argmax(bad))
            i = at + (i if where is None else int(where[i]))
            if self.first_nonfinite < 0 or i < self.first_nonfinite:
                self.first_nonfinite = i

    def _compare(
        self,
        g64: np.ndarray,
        p64: np.ndarray,
        at: int,
        index: Optional[np.ndarray],
        scale: Optional[np.ndarray],
    ) -> None:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # atol = rtol = 0
            diff = np.subtract(p64, g64)
            np.abs(diff, out=diff)
            magnitude = np.abs(g64)
            ratio = magnitude * self.rtol
            ratio += self.atol if scale is None else self.atol * scale
            np.divide(diff, ratio, out=ratio)  # |port - golden| / tolerance
            finite = bool(np.isfinite(ratio).all())
            if not finite:  # NaN or inf somewhere, or 0 / 0 at a zero tolerance
                self._nonfinite(g64, p64, diff, ratio, at, index)
            rel = np.divide(diff, magnitude, out=magnitude, where=g64 != 0)  # 0 where golden 0
        if finite:
            self.max_abs = max(self.max_abs, float(diff.max()))
            self.max_rel = max(self.max_rel, float(rel.max()))
        else:
            self.max_abs = _worse(self.max_abs, diff)
            self.max_rel = _worse(self.max_rel, rel)
        self.n_bad += int(np.count_nonzero(ratio > 1.0))
        self.n_compared += g64.size
        i = int(np.argmax(ratio))
        if self.worst < 0 or ratio[i] > self.worst_ratio:
            self.worst_ratio = float(ratio[i])
            self.worst = at + (i if index is None else int(index[i]))
            self.values = (float(g64[i]), float(p64[i]))

    def _nonfinite(
        self,
        g64: np.ndarray,
        p64: np.ndarray,
        diff: np.ndarray,
        ratio: np.ndarray,
        at: int,
        index: Optional[np.ndarray],
    ) -> None:
        """Equal infinities and shared NaN pass; any other NaN or inf in the port counts (and
        fails: its ratio is inf), and so does a 0 / 0 at a zero tolerance with unequal values."""
        same = (g64 == p64) | (np.isnan(g64) & np.isnan(p64))
        diff[same] = 0.0
        ratio[same] = 0.0
        ratio[np.isnan(ratio)] = np.inf
        nan = np.isnan(p64) & ~same
        inf = np.isinf(p64) & ~same
        self.n_nan += int(nan.sum())
        self.n_inf += int(inf.sum())
        self._first(index, nan | inf, at)

    def fill(self, row: TensorDiff, shape: tuple[int, ...]) -> None:
        row.status = "diverged" if self.n_bad else "ok"
        row.n_bad, row.n_compared = self.n_bad, self.n_compared
        row.n_nan, row.n_inf = self.n_nan, self.n_inf
        row.hidden_nan, row.hidden_inf = self.hidden_nan, self.hidden_inf
        if self.first_nonfinite >= 0:
            row.first_nonfinite = _index(self.first_nonfinite, shape)
        if self.n_compared:
            row.max_abs, row.max_rel, row.tol_ratio = self.max_abs, self.max_rel, self.worst_ratio
            row.worst = _index(self.worst, shape)
            row.golden_value, row.port_value = self.values
        else:
            row.max_abs = row.max_rel = row.tol_ratio = 0.0


def _worse(current: float, values: np.ndarray) -> float:
    """The running maximum, where NaN beats everything (a max that skips NaN hides it)."""
    if math.isnan(current) or np.isnan(values).any():
        return math.nan
    return max(current, float(values.max()))


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))
