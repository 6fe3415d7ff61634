"""The linear maps (c_attn, c_proj, c_fc, mlp.c_proj) cut into parts that gpt2np's threads share,
each part a single-threaded BLAS product.

:func:`linear_parts` computes what :func:`gpt2np.layers.linear` computes, y = x · w + b, and is
tested equal to it (tests/fast/test_kernels.py). Why parts rather than one product that OpenBLAS
threads itself: see :mod:`gpt2np.fast.blas` (one owner of the cores). How the product is cut:

* few rows (a decode step: B rows): not cut. The whole ``x · w`` runs on OpenBLAS's own
  threads while they are fast, on one thread while another process holds a core
  (:mod:`gpt2np.fast.owner` chooses, from measured times): a Python hand-over to gpt2np's
  sleeping workers costs more than such a product's share takes;
* many rows (a prompt): by rows of x, ``x[r0:r1] · w`` into ``y[r0:r1]``, each a product large
  enough for BLAS to run at full speed on one core, taken by gpt2np's threads (OpenBLAS at one
  thread meanwhile).

The bias is added by the thread that wrote the part, while it is in cache. There are about two
parts per thread, so that a thread slowed by another process leaves its second part to the
others.
"""

from __future__ import annotations

import functools

import numpy as np

from . import threads
from .blas import single_threaded
from .owner import few_rows

__all__ = ["COLUMN_ALIGN", "FEW_ROWS", "THREADED_MACS", "bounds", "linear_parts"]

#: At most this many rows are one product on OpenBLAS's threads or one thread (owner.py); more
#: are cut by rows of x among gpt2np's threads.
FEW_ROWS = 64

#: Below this many multiply-adds one thread computes the whole product: a hand-over to
#: another thread costs tens of microseconds.
THREADED_MACS = 1 << 18

#: Column parts start on a multiple of this many columns (a 64-byte cache line of float32 × 4).
COLUMN_ALIGN = 64

#: Parts per thread: more let a thread that another process slows leave its share to the
#: others; fewer make larger products, which BLAS runs faster.
PARTS_PER_THREAD = 2


def linear_parts(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """y = x · w + b like :func:`gpt2np.layers.linear`, in parts shared among threads.

    x [..., n_in], w [n_in, n_out], b [n_out]  ->  [..., n_out]
    """
    rows = x.reshape(-1, x.shape[-1])  # [N, n_in]
    N, (n_in, n_out) = rows.shape[0], w.shape
    y = np.empty((N, n_out), dtype=np.result_type(rows, w, b))
    if N <= FEW_ROWS:  # x · w -> y, then + b, on the pool or one thread

        def whole() -> None:
            np.matmul(rows, w, out=y)
            np.add(y, b, out=y)

        threaded = N * n_in * n_out >= THREADED_MACS
        few_rows(("linear", N, n_in, n_out, y.dtype.char), whole, threaded)
        return y.reshape(*x.shape[:-1], n_out)
    n = threads.threads() if N * n_in * n_out >= THREADED_MACS else 1

    def part(s: slice) -> None:  # x[s] · w -> y[s]
        np.matmul(rows[s], w, out=y[s])
        y[s] += b

    with single_threaded():
        threads.run(part, bounds(N, PARTS_PER_THREAD * n, 1))
    return y.reshape(*x.shape[:-1], n_out)


@functools.lru_cache(maxsize=256)
def bounds(size: int, parts: int, align: int) -> list[slice]:
    """``parts`` consecutive slices (fewer if ``size`` is small) that cover 0 … size-1, each
    starting on a multiple of ``align`` (remembered: a decode step asks the same ~10 again)."""
    if parts <= 1:
        return [slice(0, size)]
    cuts = sorted({int(c) // align * align for c in np.linspace(0, size, parts + 1)[1:-1]})
    edges = [0, *(c for c in cuts if 0 < c < size), size]
    return [slice(a, z) for a, z in zip(edges[:-1], edges[1:])]
