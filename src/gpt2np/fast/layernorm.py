"""Row-wise kernels whose rows are shared out among threads: LayerNorm, and the helper that
:func:`gpt2np.fast.kernels.gelu_rows` uses too.

:func:`layernorm_rows` computes :func:`gpt2np.layers.layernorm` with the same operations in the
same order (so the same numbers, bit for bit), but into one output array with no temporaries
beyond one [rows, D] scratch: the clear one-liner allocates five arrays as large as its input,
and ``np.mean`` costs ten microseconds of Python per call, which a decode step pays 25 times.
For a long prompt the rows are split among the threads of :mod:`gpt2np.fast.threads` (NumPy's loops
run without Python's lock), so passes that BLAS does not thread use every core. Tested equal to
its clear twin in tests/test_fast.py.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import threads as parallel

__all__ = ["layernorm_rows", "share_rows"]

#: Numbers below which one thread does the whole array (a hand-over costs tens of µs).
THREADED_NUMBERS = 1 << 17


def layernorm_rows(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """y = g · (x - μ) / √(σ² + ε) + b over the last axis, like :func:`gpt2np.layers.layernorm`
    (μ the mean, σ² the biased variance).                               [..., D] -> [..., D]"""
    D = x.shape[-1]
    rows = x.reshape(-1, D)  # [N, D]
    out = np.empty(rows.shape, dtype=np.result_type(x, g, b))
    share_rows(lambda r: _layernorm(rows[r], g, b, eps, out[r]), rows.shape[0], rows.size)
    return out.reshape(x.shape)


def _layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float, out: np.ndarray) -> None:
    """The clear layernorm's operations on rows x [n, D], into out [n, D]."""
    D = x.shape[-1]
    mean = np.add.reduce(x, axis=-1, keepdims=True)  # what np.mean does: the sum, then / D
    mean /= D
    d = np.subtract(x, mean, out=out)  # x - μ
    variance = np.add.reduce(d * d, axis=-1, keepdims=True)
    variance /= D
    variance += eps
    np.sqrt(variance, out=variance)
    np.multiply(g, d, out=d)  # g · (x - μ), then / √(σ² + ε), then + b, as the clear one does
    d /= variance
    d += b


def share_rows(work: Callable[[slice], object], n_rows: int, size: int) -> None:
    """work(rows) for slices of rows that together cover 0 … n_rows-1: one slice when ``size``
    (the numbers involved) is small, else about two per thread, run by :func:`parallel.run`."""
    n = parallel.threads() if size >= THREADED_NUMBERS else 1
    if n == 1 or n_rows < 2:
        work(slice(0, n_rows))
        return
    parts = min(n_rows, 2 * n)
    bounds = np.linspace(0, n_rows, parts + 1).round().astype(int)
    parallel.run(work, [slice(int(a), int(z)) for a, z in zip(bounds[:-1], bounds[1:])])
