"""Faster kernels that compute what the clear ones compute, kept apart so the clear ones stay
readable. Each is tested equal to its clear twin (tests/test_fast.py). :class:`Kernels` bundles
them: ``FAST`` holds the fast ones, ``CLEAR`` their clear twins; the cached path
(:func:`gpt2np.fast.kvcache.forward_cached`) runs either. FAST's attention is
:func:`gpt2np.fast.attention.attend_tiled` and its LayerNorm
:func:`gpt2np.fast.layernorm.layernorm_rows`, in modules of their own; both, and :func:`gelu_rows`,
share long inputs out among threads (:mod:`gpt2np.fast.threads`).

:func:`gelu_inplace` is :func:`gpt2np.layers.gelu` (as x·σ(2u), with exp instead of tanh)
written into its argument a few rows at a time: the clear one-liner makes about eight
temporaries as large as the MLP's [B, T, 4D] hidden activations, and for a long prompt each is a
fresh allocation that the kernel has to fault in. :func:`gelu_rows` runs it on the threads'
shares of the rows.

:func:`head_few_rows` is :func:`gpt2np.model.head` for a decode step of a small batch: it takes
the product a slice of the vocabulary at a time with the slice of wte on the left, which OpenBLAS
runs at about twice the speed of the single [N, D] · [D, V] product when N is 2 to 16.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Protocol

import numpy as np

from ..attention import attend
from ..layers import SQRT_2_OVER_PI, gelu, layernorm
from ..model import head
from .attention import attend_tiled
from .layernorm import layernorm_rows, share_rows

__all__ = [
    "CLEAR",
    "FAST",
    "Attend",
    "Kernels",
    "Norm",
    "gelu_inplace",
    "gelu_rows",
    "head_few_rows",
]

#: Numbers per block of :func:`gelu_inplace`: 256 KiB of float32, which stays in L2.
GELU_BLOCK = 1 << 16

#: :func:`head_few_rows` slices the vocabulary for at most this many rows (measured crossover),
#: VOCAB_SLICE words of wte (3 MB of float32 at D = 768) at a time.
FEW_ROWS, VOCAB_SLICE = 16, 1024


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


def head_few_rows(h: np.ndarray, wte: np.ndarray, vocab_slice: int = VOCAB_SLICE) -> np.ndarray:
    """logits = h · wteᵀ like :func:`gpt2np.model.head`.     [..., D] @ [D, V] -> [..., V]

    For at most FEW_ROWS rows of h, each slice of the vocabulary is computed as
    wte[v0:v1] · hᵀ -> [v1-v0, N] into a [V, N] buffer, then transposed once; more rows take
    the clear single product (which is then the faster one).
    """
    rows = h.reshape(-1, h.shape[-1])  # [N, D]
    V = wte.shape[0]
    if rows.shape[0] > FEW_ROWS:
        logits: np.ndarray = rows @ wte.T  # the clear head's product: [N, D] @ [D, V]
    else:
        dtype = np.result_type(rows, wte)
        by_word = np.empty((V, rows.shape[0]), dtype=dtype)  # [V, N]
        for v0 in range(0, V, vocab_slice):
            np.matmul(wte[v0 : v0 + vocab_slice], rows.T, out=by_word[v0 : v0 + vocab_slice])
        logits = np.ascontiguousarray(by_word.T)  # [N, V]
    return logits.reshape(*h.shape[:-1], V)


class Attend(Protocol):
    """attend(q, k, v, mask, scale=None): the call :class:`Kernels` makes of its attention."""

    def __call__(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, /,
        *, scale: Optional[float] = None,
    ) -> np.ndarray: ...  # fmt: skip


class Norm(Protocol):
    """norm(x, g, b, eps=1e-5): the call :class:`Kernels` makes of its LayerNorm (g and b by
    name, as ``**params["ln_1"]`` passes them)."""

    def __call__(
        self, x: np.ndarray, /, g: np.ndarray, b: np.ndarray, eps: float = 1e-5
    ) -> np.ndarray: ...


class Kernels(NamedTuple):
    """The functions a cached forward pass does its heavy work with (attention's core, the
    MLP's activation, the head, LayerNorm), so that one composition runs the clear ones or the
    fast ones.

    attend(q, k, v, mask, scale=None) -> [B, H, T, Dh]; act(u) -> gelu(u), GPT-2's tanh GELU
    (may overwrite u, which the caller owns; a model with another activation runs the clear
    :func:`gpt2np.layers.activation` instead); head(h, w) -> logits, for w = wte or lm_head;
    norm(x, g, b, eps=1e-5) -> layernorm(x, g, b, eps).
    """

    attend: Attend
    act: Callable[[np.ndarray], np.ndarray]
    head: Callable[[np.ndarray, np.ndarray], np.ndarray]
    norm: Norm


CLEAR = Kernels(attend, gelu, head, layernorm)
FAST = Kernels(attend_tiled, gelu_rows, head_few_rows, layernorm_rows)
