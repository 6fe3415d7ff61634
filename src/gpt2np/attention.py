"""Multi-head causal self-attention with a key/value cache (Vaswani et al., 2017, §3.2).

    q, k, v = split(x · W_qkv + b_qkv)                    one fused matmul, named c_attn
    head_h  = softmax(q_h · k_hᵀ / √d_h + causal mask) · v_h
    out     = concat(head_1 … head_H) · W_o + b_o            named c_proj

Shapes use B batch, T new tokens, T_past cached tokens, S = T_past + T keys, D = n_embd,
H = n_head, Dh = D / H. The cache of one layer is ``[B, 2, H, T_past, Dh]``: keys at index 0,
values at index 1 (OpenAI's ``past_shape`` with the layer axis taken out).

Two ways to hold earlier keys and values share the same maths:

* ``past`` as an array, OpenAI's functional form: the new keys/values are concatenated to it and
  returned as ``present`` (the new tokens' K/V only), like ``results['present']``.
* ``past`` as a :class:`LayerCache`, a view into a preallocated buffer that generation writes in
  place, so a decode step costs no copy of the whole cache.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import numpy as np

from .layers import linear, softmax

__all__ = [
    "LayerCache",
    "append_past",
    "attend",
    "attention",
    "attention_scores",
    "causal_mask",
    "masked_score",
    "masked_softmax",
    "merge_heads",
    "split_heads",
]

#: What OpenAI's graph adds to masked-out scores (``w*b - 1e10*(1-b)``). A large finite number
#: rather than -inf keeps a row that masks every key finite (it becomes uniform, not NaN).
MASKED_SCORE = -1e10


def masked_score(dtype: np.dtype) -> np.ndarray:
    """MASKED_SCORE as a 0-d array of ``dtype``, or the dtype's lowest finite value when -1e10
    does not fit (float16): -inf there would make a fully masked row exp(-inf - -inf) = NaN."""
    return np.asarray(max(MASKED_SCORE, float(np.finfo(dtype).min)), dtype=dtype)


def causal_mask(T: int, T_past: int = 0) -> np.ndarray:
    """Which keys each query may see, counted from the lower-right corner.   -> bool [T, S]

    Query i of the T new tokens is at absolute position T_past + i and sees keys
    0 … T_past + i, so with a past every new query sees all earlier keys.
    """
    S = T_past + T
    return np.arange(S)[None, :] <= np.arange(T_past, S)[:, None]


def split_heads(x: np.ndarray, n_head: int) -> np.ndarray:
    """[B, T, D] -> [B, H, T, Dh]"""
    B, T, D = x.shape
    return x.reshape(B, T, n_head, D // n_head).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """[B, H, T, Dh] -> [B, T, D]"""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


def append_past(
    k: np.ndarray, v: np.ndarray, past: Optional[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The past's keys and values followed by the new tokens'.

    k, v [B, H, T, Dh]; past [B, 2, H, T_past, Dh] or None  ->  k, v [B, H, T_past + T, Dh]
    """
    if past is None:
        return k, v
    return np.concatenate([past[:, 0], k], axis=-2), np.concatenate([past[:, 1], v], axis=-2)


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q·kᵀ / √Dh.        q [B, H, T, Dh], k [B, H, S, Dh]  ->  [B, H, T, S]"""
    scale = 1.0 / math.sqrt(q.shape[-1])  # a Python float keeps float32 as float32
    return (q @ k.swapaxes(-1, -2)) * scale  # [B, H, T, Dh] @ [B, H, Dh, S] -> [B, H, T, S]


def masked_softmax(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """softmax over keys of the scores, masked-out keys set to :data:`MASKED_SCORE` first.

    scores [B, H, T, S], mask bool broadcastable to it (True where a query may see a key)
    ->  probs [B, H, T, S]
    """
    return softmax(np.where(mask, scores, masked_score(scores.dtype)))


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Scaled dot-product attention: softmax(q·kᵀ / √Dh, masked) · v.

    q [B, H, T, Dh], k and v [B, H, S, Dh], mask bool broadcastable to [B, H, T, S]
    (True where a query may see a key)  ->  [B, H, T, Dh]

    A query that may see no key at all (only left padding does) gets a finite, meaningless output.
    """
    probs = masked_softmax(attention_scores(q, k), mask)  # [B, H, T, S]
    return probs @ v  # [B, H, T, S] @ [B, H, S, Dh] -> [B, H, T, Dh]


class LayerCache:
    """One layer's slice of a preallocated key/value buffer, written in place.

    ``kv`` is ``[B, 2, H, S_max, Dh]``; positions ``0 … start-1`` already hold earlier tokens.
    :meth:`write` stores the new tokens' keys and values at ``start …`` and returns views of
    every key and value so far, without copying the cache. ``key_mask`` (bool ``[B, S_max]``,
    optional) marks keys a row may attend to at all, e.g. False for left padding.
    """

    def __init__(self, kv: np.ndarray, start: int, key_mask: Optional[np.ndarray] = None):
        self.kv = kv
        self.start = start
        self.key_mask = key_mask

    def write(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """k, v [B, H, T, Dh] -> views of all keys and values [B, H, start+T, Dh]"""
        end = self.start + k.shape[-2]
        self.kv[:, 0, :, self.start : end] = k
        self.kv[:, 1, :, self.start : end] = v
        return self.kv[:, 0, :, :end], self.kv[:, 1, :, :end]


Past = Union[np.ndarray, LayerCache, None]
#: The signature of :func:`attend`; :func:`gpt2np.fast.attend_blocked` is a faster equal.
Attend = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def attention(
    x: np.ndarray,
    c_attn: dict[str, np.ndarray],
    c_proj: dict[str, np.ndarray],
    n_head: int,
    past: Past = None,
    attend: Attend = attend,
) -> tuple[np.ndarray, np.ndarray]:
    """Causal multi-head self-attention of the new tokens over the past and themselves.

    x [B, T, D]; c_attn {"w" [D, 3D], "b" [3D]}; c_proj {"w" [D, D], "b" [D]};
    past None, an array [B, 2, H, T_past, Dh], or a :class:`LayerCache`.
    ``attend`` is the scaled dot-product kernel (:func:`attend`, or an equal faster one).
    Returns (out [B, T, D], present [B, 2, H, T, Dh]): present holds the new tokens' keys and
    values only, as OpenAI's graph returns them.
    """
    qkv = linear(x, **c_attn)  # [B, T, D] -> [B, T, 3D]
    q, k, v = (split_heads(a, n_head) for a in np.split(qkv, 3, axis=-1))  # 3 x [B, H, T, Dh]
    T = x.shape[1]

    key_mask = None
    if isinstance(past, LayerCache):
        T_past, key_mask = past.start, past.key_mask
        k, v = past.write(k, v)  # [B, H, T_past + T, Dh], views into the preallocated cache
        present = past.kv[:, :, :, T_past : T_past + T]  # [B, 2, H, T, Dh], what was written
    else:
        present = np.stack([k, v], axis=1)  # [B, 2, H, T, Dh]
        T_past = 0 if past is None else past.shape[-2]
        k, v = append_past(k, v, past)  # [B, H, T_past + T, Dh]

    mask = causal_mask(T, T_past)  # [T, S]
    if key_mask is not None:
        S = T_past + T
        mask = mask & key_mask[:, None, None, :S]  # [B, 1, T, S]

    a = merge_heads(attend(q, k, v, mask))  # [B, H, T, Dh] -> [B, T, D]
    return linear(a, **c_proj), present  # [B, T, D]
