"""The output head, logits = h · wteᵀ, cut into parts that gpt2np's threads share.

:func:`head_parts` is :func:`gpt2np.layers.head` (tested equal to it in tests/fast/test_kernels.py).
The head reads the whole embedding matrix (154 MB for 124M: a third of a decode step's bytes)
for a few rows, or makes [T, V] logits for many:

* for a few rows (a decode step), each part is a slice of the vocabulary. One row is a
  matrix-vector product, which runs at the memory's speed. For 2 … FEW_ROWS rows, a matrix
  product with so few rows runs far below it (OpenBLAS packs the whole slice of wte for a few
  multiply-adds per number); instead each block of HEAD_BLOCK words (768 KB at D = 768, which
  stays in the core's cache) is multiplied by each row in turn, one NumPy call per block
  (``wte[a:z] @ h[:, :, None]``: a matrix-vector product per row). Measured on one core for
  8 rows: 23 ms against 26 ms, for 2 rows 13 ms against 22 ms;
* for many rows, each part is a block of rows, h[r0:r1] · wteᵀ.

Each part is a single-threaded BLAS product (:mod:`gpt2np.fast.blas`: gpt2np's threads own the
cores).
"""

from __future__ import annotations

import numpy as np

from . import linear as _linear
from . import threads
from .blas import single_threaded
from .linear import THREADED_MACS, bounds

__all__ = ["FEW_ROWS", "HEAD_BLOCK", "head_parts"]

#: The head is cut by vocabulary for at most this many rows, by rows for more.
FEW_ROWS = 16

#: Words of wte per block when several rows are multiplied by it one by one.
HEAD_BLOCK = 256


def head_parts(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    """logits = h · wteᵀ like :func:`gpt2np.layers.head`.    [..., D] @ [D, V] -> [..., V]"""
    rows = h.reshape(-1, h.shape[-1])  # [N, D]
    (N, D), V = rows.shape, wte.shape[0]
    logits = np.empty((N, V), dtype=np.result_type(rows, wte))
    n = threads.threads() if N * D * V >= THREADED_MACS else 1
    per_thread = _linear.PARTS_PER_THREAD
    by_rows = N > FEW_ROWS
    columns = rows[:, :, None]  # [N, D, 1]: each row a vector

    def work(s: slice) -> None:
        if by_rows:  # h[s] · wteᵀ
            np.matmul(rows[s], wte.T, out=logits[s])
        elif N == 1:  # a matrix-vector product over the slice of the vocabulary
            np.matmul(rows, wte[s].T, out=logits[:, s])
        else:
            for a in range(s.start, s.stop, HEAD_BLOCK):
                z = min(a + HEAD_BLOCK, s.stop)  # [z-a, D] @ [N, D, 1] -> [N, z-a, 1]
                np.matmul(wte[a:z], columns, out=logits[:, a:z, None])

    if by_rows:
        parts = bounds(N, per_thread * n, 1)
    else:
        parts = bounds(V, per_thread * n, _linear.COLUMN_ALIGN)
    with single_threaded():
        threads.run(work, parts)
    return logits.reshape(*h.shape[:-1], V)
