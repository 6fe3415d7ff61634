"""Multi-head causal self-attention (Vaswani et al., 2017, §3.2.2), as OpenAI's ``attn()``.

    q, k, v = split(x · W_qkv + b_qkv)                    one fused matmul, named c_attn
    head_h  = softmax(q_h · k_hᵀ / √d_h + causal mask) · v_h     :func:`attend`
    out     = concat(head_1 … head_H) · W_o + b_o            named c_proj

The scale 1/√d_h is GPT-2's; models of the GPT-2 family may use another (``scale``: 1 when HF's
``scale_attn_weights`` is false, and a further 1/(i + 1) in block i with
``scale_attn_by_inverse_layer_idx``; :func:`gpt2np.model.attention_scale`).

Shapes use B batch, T new tokens, T_past cached tokens, S = T_past + T keys, D = n_embd,
H = n_head, Dh = D / H. The keys and values of earlier tokens come in as ``past``: OpenAI's
``[B, 2, H, T_past, Dh]`` (keys at index 0, values at index 1: ``past_shape`` with the layer
axis taken out), concatenated before the new ones; or one layer of generation's in-place
:class:`gpt2np.KVCache`, which writes the new keys and values into its buffer and hands back
views of everything it holds. Either way the new tokens' own come out as ``present``
``[B, 2, H, T, Dh]``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Union

import numpy as np

from .layers import RECORD_NOTHING, Recorder, linear, softmax

__all__ = ["MASKED_SCORE", "Past", "attend", "attention", "causal_mask",
    "masked_score", "merge_heads", "split_heads"]  # fmt: skip

#: What a block's ``past`` may be: None, OpenAI's array, or one layer of a KVCache; and what
#: :func:`gpt2np.model.forward` takes: None, OpenAI's array, or a whole KVCache.
Past = Union[None, np.ndarray, Any]


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


#: What OpenAI's graph adds to masked-out scores (``w*b - 1e10*(1-b)``). A large finite number
#: rather than -inf keeps a row that masks every key finite (it becomes uniform, not NaN).
MASKED_SCORE = -1e10


def masked_score(dtype: np.dtype) -> np.ndarray:
    """MASKED_SCORE as a 0-d array of ``dtype``, or the dtype's lowest finite value when -1e10
    does not fit (float16): -inf there would make a fully masked row exp(-inf - -inf) = NaN."""
    return np.asarray(max(MASKED_SCORE, float(np.finfo(dtype).min)), dtype=dtype)


def attend(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    record: Recorder = RECORD_NOTHING,
    scale: Optional[float] = None,
) -> np.ndarray:
    """Scaled dot-product attention (Vaswani et al., 2017, §3.2.1), with a mask:

        softmax(q·kᵀ · scale, masked keys set to -1e10) · v

    q [B, H, T, Dh], k and v [B, H, S, Dh], mask bool broadcastable to [B, H, T, S]
    (True where a query may see a key)  ->  [B, H, T, Dh]

    ``scale`` multiplies the scores: 1/√Dh (GPT-2's) when None.
    A query that may see no key at all (only left padding does) gets a finite, meaningless output.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = record("scores", q @ k.swapaxes(-1, -2) * scale)  # [B, H, T, S]
    probs = record("probs", softmax(np.where(mask, scores, masked_score(scores.dtype))))
    out: np.ndarray = probs @ v  # [B, H, T, S] @ [B, H, S, Dh] -> [B, H, T, Dh]
    return out


def attention(
    x: np.ndarray,
    c_attn: dict[str, np.ndarray],
    c_proj: dict[str, np.ndarray],
    n_head: int,
    past: Past = None,
    record: Recorder = RECORD_NOTHING,
    scale: float | None = None,
    attend: Callable[..., np.ndarray] = attend,
    linear: Callable[..., np.ndarray] = linear,
) -> tuple[np.ndarray, np.ndarray]:
    """Causal multi-head self-attention of the new tokens over the past and themselves.

    x [B, T, D]; c_attn {"w" [D, 3D], "b" [3D]}; c_proj {"w" [D, D], "b" [D]};
    past: OpenAI's [B, 2, H, T_past, Dh], a layer of a KVCache, or None; scale: what the scores
    are multiplied by (1/√Dh if None); ``attend`` does softmax(q·kᵀ·scale + mask)·v and
    ``linear`` the affine maps x · w + b (the clear functions, or a kernel bundle's twins).
    Returns (out [B, T, D], present [B, 2, H, T, Dh]): present holds the new tokens' keys and
    values only, as OpenAI's graph returns them.
    """
    qkv = record("qkv", linear(x, **c_attn))  # [B, T, D] -> [B, T, 3D]
    q, k, v = (split_heads(a, n_head) for a in np.split(qkv, 3, axis=-1))  # 3 x [B, H, T, Dh]
    q, k, v = record("q", q), record("k", k), record("v", v)
    present = np.stack([k, v], axis=1)  # [B, 2, H, T, Dh]
    T = q.shape[-2]
    if past is None:
        mask = causal_mask(T)  # [T, T]
    elif isinstance(past, np.ndarray):  # the earlier tokens' keys and values come first
        k = np.concatenate([past[:, 0], k], axis=-2)  # [B, H, T_past + T, Dh]
        v = np.concatenate([past[:, 1], v], axis=-2)
        mask = causal_mask(T, past.shape[-2])  # [T, T_past + T]
    else:  # a KVCache layer stores k and v after what it holds: views [B, H, T_past + T, Dh]
        k, v, mask = past.update(k, v)  # and the causal mask, blind to each row's left padding
    heads = attend(q, k, v, mask, record, scale)  # [B, H, T, Dh]
    merged = record("merged", merge_heads(heads))  # [B, H, T, Dh] -> [B, T, D]
    return record("c_proj", linear(merged, **c_proj)), present  # [B, T, D]
