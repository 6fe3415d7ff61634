"""The output head, logits = h · wteᵀ, cut into parts that gpt2np's threads share.

:func:`head_parts` is :func:`gpt2np.layers.head` (tested equal to it in tests/test_fast.py).
The head reads the whole embedding matrix (154 MB for 124M: a third of a decode step's bytes)
for a few rows, or makes [T, V] logits for many:

* for a few rows (a decode step), each part is a slice of the vocabulary, computed as
  wte[v0:v1] · hᵀ -> [v1-v0, N] into a [V, N] buffer that is transposed once at the end: with
  the slice of wte on the left, OpenBLAS streams its rows (about twice the speed of the
  [N, D] · [D, V] product for N = 2 … 16), and each thread reads its own slices;
* for many rows, each part is a block of rows, h[r0:r1] · wteᵀ.

Each part is a single-threaded BLAS product (:mod:`gpt2np.fast.blas`: gpt2np's threads own the
cores).
"""

from __future__ import annotations

import numpy as np

from . import linear as _linear
from . import threads as parallel
from .blas import single_threaded
from .linear import THREADED_MACS, _bounds

__all__ = ["FEW_ROWS", "head_parts"]

#: The head is cut by vocabulary for at most this many rows (measured crossover), by rows for
#: more.
FEW_ROWS = 16


def head_parts(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    """logits = h · wteᵀ like :func:`gpt2np.layers.head`.    [..., D] @ [D, V] -> [..., V]"""
    rows = h.reshape(-1, h.shape[-1])  # [N, D]
    (N, D), V = rows.shape, wte.shape[0]
    dtype = np.result_type(rows, wte)
    n = parallel.threads() if N * D * V >= THREADED_MACS else 1
    if N <= FEW_ROWS:
        by_word = np.empty((V, N), dtype=dtype)  # [V, N]
        parts = _bounds(V, _linear.PARTS_PER_THREAD * n, _linear.COLUMN_ALIGN)
        with single_threaded():
            parallel.run(lambda v: np.matmul(wte[v], rows.T, out=by_word[v]), parts)
        logits = np.ascontiguousarray(by_word.T)  # [N, V]
    else:
        logits = np.empty((N, V), dtype=dtype)
        with single_threaded():
            parallel.run(
                lambda r: np.matmul(rows[r], wte.T, out=logits[r]),
                _bounds(N, _linear.PARTS_PER_THREAD * n, 1),
            )
    return logits.reshape(*h.shape[:-1], V)
