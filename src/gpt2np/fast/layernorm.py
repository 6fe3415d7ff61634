"""Row-wise kernels whose rows are shared out among threads: LayerNorm, and the helper that
:func:`gpt2np.fast.gelu.gelu_rows` uses too.

:func:`layernorm_rows` computes :func:`gpt2np.layers.layernorm` with the same operations in the
same order (so the same numbers, bit for bit), but into one output array with no temporaries
beyond one [rows, D] scratch: the clear one-liner allocates five arrays as large as its input,
and ``np.mean`` costs ten microseconds of Python per call, which a decode step pays 25 times.
For a long prompt the rows are split among the threads of :mod:`gpt2np.fast.threads` (NumPy's loops
run without Python's lock), so passes that BLAS does not thread use every core. Tested equal to
its clear twin in tests/fast/test_kernels.py.
"""

from __future__ import annotations

import numpy as np

from .threads import share_rows

__all__ = ["layernorm_rows"]


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
