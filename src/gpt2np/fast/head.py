"""The output head, logits = h · wteᵀ, for a few rows on OpenBLAS's threads or one thread, for
many cut into parts that gpt2np's threads share.

:func:`head_parts` is :func:`gpt2np.layers.head` (tested equal to it in tests/fast/test_kernels.py).
The head reads the whole embedding matrix (154 MB for 124M: a third of a decode step's bytes)
for a few rows, or makes [T, V] logits for many:

* one row (a decode step of one sequence) is one matrix-vector product, which runs at the
  memory's speed;
* for 2 … FEW_ROWS rows, a matrix product with so few rows runs far below it (OpenBLAS packs
  the whole of wte for a few multiply-adds per number). Instead each block of HEAD_BLOCK words
  (3 MB at D = 768) is multiplied by the rows, ``wte[a:z] · hᵀ`` into a [V, N] buffer that is
  transposed once at the end; the block is read from memory once for all rows;
* either way the product runs on OpenBLAS's threads or on one thread, as
  :mod:`gpt2np.fast.owner` chooses from measured times, and ends the pass it judges (a forward
  pass's few-row products end with its head);
* for many rows, each part is a block of rows, h[r0:r1] · wteᵀ, taken by gpt2np's threads
  (OpenBLAS at one thread meanwhile).
"""

from __future__ import annotations

import numpy as np

from . import linear as _linear
from . import threads
from .blas import single_threaded
from .linear import THREADED_MACS, bounds
from .owner import end_pass, few_rows

__all__ = ["FEW_ROWS", "HEAD_BLOCK", "head_parts"]

#: The head is one product (or blocks of the vocabulary) for at most this many rows.
FEW_ROWS = 16

#: Words of wte per block when several rows are multiplied by it.
HEAD_BLOCK = 1024


def head_parts(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    """logits = h · wteᵀ like :func:`gpt2np.layers.head`.    [..., D] @ [D, V] -> [..., V]"""
    rows = h.reshape(-1, h.shape[-1])  # [N, D]
    (N, D), V = rows.shape, wte.shape[0]
    dtype = np.result_type(rows, wte)
    if N <= FEW_ROWS:
        by_word = np.empty((V, N), dtype=dtype)  # [V, N]
        block = HEAD_BLOCK if N > 1 else V  # one row: one matrix-vector product

        def whole() -> None:
            for a in range(0, V, block):  # wte[a:z] · hᵀ: [z-a, D] @ [D, N] -> [z-a, N]
                np.matmul(wte[a : a + block], rows.T, out=by_word[a : a + block])

        few_rows(("head", N, D, V, dtype.char), whole, N * D * V >= THREADED_MACS, last=True)
        return np.ascontiguousarray(by_word.T).reshape(*h.shape[:-1], V)
    end_pass()  # the head ends a forward pass of few-row products (owner.py)
    logits = np.empty((N, V), dtype=dtype)
    n = threads.threads() if N * D * V >= THREADED_MACS else 1

    def work(s: slice) -> None:  # h[s] · wteᵀ
        np.matmul(rows[s], wte.T, out=logits[s])

    with single_threaded():
        threads.run(work, bounds(N, _linear.PARTS_PER_THREAD * n, 1))
    return logits.reshape(*h.shape[:-1], V)
