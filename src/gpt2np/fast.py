"""Faster kernels that compute what the clear ones compute, kept apart so the clear ones stay
readable. Each is tested equal to its clear twin (tests/test_fast.py).

:func:`attend_blocked` is :func:`gpt2np.attention.attend` for a causal mask, done one block of
queries at a time: a block of queries ``i0 … i1-1`` only needs keys ``0 … T_past + i1 - 1``, so
about half of the score matrix of a long prompt is never computed, and each block's scores are
small enough to stay in cache while the softmax runs over them in place.
"""

from __future__ import annotations

import math

import numpy as np

from .attention import MASKED_SCORE

__all__ = ["attend_blocked"]

#: Queries per block: [B, H, 128, S] float32 scores are 6 MB at S = 1024 for one sequence.
BLOCK = 128


def attend_blocked(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, block: int = BLOCK
) -> np.ndarray:
    """softmax(q·kᵀ / √Dh, masked) · v for a causal ``mask`` (query i sees no key after
    T_past + i, where T_past = S - T), like :func:`gpt2np.attention.attend`.

    q [B, H, T, Dh], k and v [B, H, S, Dh], mask bool broadcastable to [B, H, T, S]
    ->  [B, H, T, Dh]
    """
    T, S = q.shape[-2], k.shape[-2]
    T_past = S - T
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = np.empty(q.shape, dtype=np.result_type(q, k, v))
    mask = np.broadcast_to(mask, (*mask.shape[:-2], T, S))
    for i0 in range(0, T, block):
        i1 = min(i0 + block, T)
        s = T_past + i1  # keys this block can see
        scores = q[..., i0:i1, :] @ k[..., :s, :].swapaxes(-1, -2)  # [B, H, i1-i0, s]
        scores *= scale
        np.copyto(scores, MASKED_SCORE, where=~mask[..., i0:i1, :s])
        scores -= scores.max(axis=-1, keepdims=True)  # softmax, in place
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        np.matmul(scores, v[..., :s, :], out=out[..., i0:i1, :])  # [B, H, i1-i0, Dh]
    return out
