"""What a golden file is a trace of: rows of token ids, a prefix, left padding, loss targets.

A dump traces ``T`` tokens per row after a prefix of ``T_past`` (0 for a plain forward pass).
Rows of different lengths are left-padded to one length, as generation pads a ragged batch: row
b's first ``pad[b]`` positions are padding, its real tokens take positions 0, 1, … after it, and
no real token attends to padding. The padding may cover part of the prefix, all of it, or (with
no prefix, or a short row) the first step positions too.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["Batch", "batch_of"]


@dataclasses.dataclass
class Batch:
    """rows: each row's real tokens (prefix then step); T_past: prefix columns of the padded
    layout; pad [B]; targets [B, Tl] (Tl = T - 1 for "next", T when given) or None."""

    rows: list[list[int]]
    T_past: int
    pad: np.ndarray
    targets: Optional[np.ndarray]
    targets_kind: Optional[str]
    texts: Any = None
    prefix_text: Union[str, list[str], None] = None  # one prefix's text, or each row's

    @property
    def B(self) -> int:
        return len(self.rows)

    @property
    def N(self) -> int:
        """T_past + T: the padded length of every row."""
        return max(len(r) for r in self.rows)

    @property
    def T(self) -> int:
        return self.N - self.T_past

    @property
    def padded(self) -> bool:
        return bool(self.pad.any())

    def layout(self) -> np.ndarray:
        """The rows left-padded (with id 0) to [B, N]."""
        out = np.zeros((self.B, self.N), np.int64)
        for b, row in enumerate(self.rows):
            out[b, self.pad[b] :] = row
        return out

    def split(self, b: int) -> tuple[list[int], list[int]]:
        """Row b's real prefix tokens and real step tokens."""
        n_prefix = max(0, self.T_past - int(self.pad[b]))
        return self.rows[b][:n_prefix], self.rows[b][n_prefix:]

    def real_queries(self) -> np.ndarray:
        """[B, T] bool: the step positions that hold a real token (not padding)."""
        return self.T_past + np.arange(self.T)[None, :] >= self.pad[:, None]


def batch_of(model: Runtime, ids_or_text: Any, prefix: Any = None, targets: Any = None) -> Batch:
    """Normalise dump's inputs. ids_or_text: a str, a list of str, ids [T] or [B, T], or a list
    of rows of different lengths. prefix: None; an int (that many leading columns of the padded
    rows are the prefix); or a str, list of str or ids whose rows come before the step's rows
    (the step rows must then all have one length). targets: None for the next token of each
    position (the last position has none), or ids [B, T] (ignored at padded positions)."""
    rows, texts = _rows(model, ids_or_text, "ids")
    prefix_text = None
    if prefix is None:
        T_past = 0
    elif isinstance(prefix, (int, np.integer)) and not isinstance(prefix, bool):
        T_past = operator.index(prefix)
        N = max(len(r) for r in rows)
        if not 0 <= T_past < N:
            raise ValueError(f"prefix length {T_past} must be in [0, {N}): the step needs a token")
    else:
        prefix_rows, prefix_texts = _rows(model, prefix, "prefix")
        prefix_text = prefix_texts[0] if prefix_texts and len(prefix_texts) == 1 else prefix_texts
        if len(prefix_rows) == 1 and len(rows) > 1:
            prefix_rows = prefix_rows * len(rows)
        if len(prefix_rows) != len(rows):
            raise ValueError(f"{len(prefix_rows)} prefix rows for {len(rows)} rows of ids")
        if len({len(r) for r in rows}) != 1:
            raise ValueError(
                "with a prefix, every row's step must have the same number of tokens, got "
                f"{sorted({len(r) for r in rows})}"
            )
        T_past = max(len(p) for p in prefix_rows)
        rows = [p + r for p, r in zip(prefix_rows, rows)]
    N = max(len(r) for r in rows)
    if N > model.hparams.n_ctx:
        raise ValueError(f"{N} tokens (prefix and step) exceed n_ctx={model.hparams.n_ctx}")
    pad = np.array([N - len(r) for r in rows], np.int64)
    batch = Batch(rows, T_past, pad, None, None, texts, prefix_text)
    if targets is None:
        if batch.T > 1:
            batch.targets = batch.layout()[:, T_past + 1 :]  # [B, T - 1]
            batch.targets_kind = "next"
    else:
        given, _ = _rows(model, targets, "targets")
        if {len(r) for r in given} != {batch.T} or len(given) != batch.B:
            raise ValueError(f"targets must be [B, T] = [{batch.B}, {batch.T}] token ids")
        batch.targets, batch.targets_kind = np.array(given, np.int64), "given"
    return batch


def _rows(model: Runtime, x: Any, what: str) -> tuple[list[list[int]], Optional[list[str]]]:
    """Rows of token ids (checked against the vocabulary), and the texts they came from."""
    if isinstance(x, str) or (isinstance(x, (list, tuple)) and x and isinstance(x[0], str)):
        texts = [x] if isinstance(x, str) else list(x)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError(f"{what}: a list of texts must hold only str")
        rows = [model.tokenizer.encode(t, allowed_special="all") for t in texts]
        if not all(rows):
            raise ValueError(f"{what}: a prompt is empty: it encodes to no tokens")
        return rows, texts
    if isinstance(x, np.ndarray) or (isinstance(x, (list, tuple)) and x and np.ndim(x[0]) == 0):
        return [r.tolist() for r in model.check_ids(x)], None
    if not isinstance(x, (list, tuple)) or not x:
        raise TypeError(f"{what} must be a str, texts, or token ids [T] / [B, T], got {x!r}")
    rows = []
    for row in x:  # rows may differ in length
        checked = model.check_ids(row)
        if np.ndim(row) != 1:
            raise ValueError(f"{what}: each row must be a flat list of token ids")
        rows.append(checked.reshape(-1).tolist())
    return rows, None
