"""GELU computed in place, a few rows at a time, the rows shared out among threads.

:func:`gelu_inplace` is :func:`gpt2np.layers.gelu` (as x·σ(2u), with exp instead of tanh)
written into its argument a few rows at a time: the clear one-liner makes about eight
temporaries as large as the MLP's [B, T, 4D] hidden activations, and for a long prompt each is a
fresh allocation that the kernel has to fault in. :func:`gelu_rows` runs it on the threads'
shares of the rows; :func:`activation_rows` is the MLP's activation kernel of ``FAST``.
"""

from __future__ import annotations

import math

import numpy as np

from ..hparams import ACTIVATIONS
from ..layers import SQRT_2_OVER_PI, activation
from .threads import share_rows

__all__ = ["GELU_BLOCK", "activation_rows", "gelu_inplace", "gelu_rows"]

#: Numbers per block of :func:`gelu_inplace`: 256 KiB of float32, which stays in L2.
GELU_BLOCK = 1 << 16


def gelu_inplace(x: np.ndarray, block: int = GELU_BLOCK) -> np.ndarray:
    """gelu(x) = 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))), like
    :func:`gpt2np.layers.gelu` up to float rounding, computed in place.           [...] -> [...]

    ``x`` is overwritten (when its rows can be viewed without a copy, as for the contiguous
    arrays the MLP passes; otherwise a copy is) and the result returned, so the caller must own
    ``x``: the MLP passes it the fresh output of its first linear map. The same equation is
    written with the logistic function, since 0.5·(1 + tanh(u)) = 1 / (1 + exp(-2u)):

        gelu(x) = x / (1 + exp(x · (c + c·0.044715·x²))),   c = -2·√(2/π)

    NumPy's exp costs half its tanh, and this form has no 1 + tanh(u) to lose digits to where
    tanh(u) is near -1. The exponent is capped below exp's overflow (gelu is -0 there anyway).
    It runs on blocks of whole rows with one scratch block, so every pass stays in cache and
    nothing as large as ``x`` is allocated.
    """
    dtype = x.dtype.type
    c = dtype(-2.0 * SQRT_2_OVER_PI)
    c3 = dtype(-2.0 * SQRT_2_OVER_PI * 0.044715)
    cap = dtype(math.log(np.finfo(x.dtype).max) - 1.0)  # 87.7 in float32: exp stays finite
    one = dtype(1.0)
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)  # a view of contiguous x
    step = max(1, block // max(1, rows.shape[1]))
    scratch = np.empty((min(step, rows.shape[0]), rows.shape[1]), dtype=x.dtype)
    for i in range(0, rows.shape[0], step):
        r = rows[i : i + step]  # [n, C], a view
        t = scratch[: r.shape[0]]
        np.multiply(r, r, out=t)  # x²
        t *= c3
        t += c
        t *= r  # -2·√(2/π)·(x + 0.044715·x³)
        np.minimum(t, cap, out=t)
        np.exp(t, out=t)
        t += one
        r /= t  # x / (1 + exp(-2u)) = 0.5·x·(1 + tanh(u))
    return rows.reshape(x.shape)


def gelu_rows(x: np.ndarray) -> np.ndarray:
    """:func:`gelu_inplace` on x, its rows shared out among threads when there are many.

    ``x`` is overwritten when its rows can be viewed without a copy (the caller owns it) and
    the result returned.                                                          [...] -> [...]
    """
    if x.ndim < 2 or not x.flags.c_contiguous:
        return gelu_inplace(x)
    rows = x.reshape(-1, x.shape[-1])  # a view
    share_rows(lambda r: gelu_inplace(rows[r]), rows.shape[0], rows.size)
    return x


def activation_rows(x: np.ndarray, name: str) -> np.ndarray:
    """:func:`gpt2np.layers.activation` with GPT-2's tanh GELU computed by :func:`gelu_rows`
    (in place: ``x`` is the MLP's fresh hidden activations); the family's other activations are
    the clear ones.                                                                [...] -> [...]
    """
    return gelu_rows(x) if ACTIVATIONS[name] == "gelu_tanh" else activation(x, name)
