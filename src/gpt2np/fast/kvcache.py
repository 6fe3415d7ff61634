"""Generation's key/value cache: one preallocated buffer that each step writes in place.

:func:`gpt2np.model.forward` takes the past as an array and returns the new keys and values,
which the caller concatenates: clear, and what OpenAI's graph does, but a decode step then
copies the whole cache. Here the cache is one buffer ``[L, B, 2, H, max_len, Dh]``; a forward
pass writes its new tokens' keys and values into it at ``length …`` and attends over the views
``[..., :length + T, :]``. The maths is :func:`gpt2np.model.forward`'s, step for step, and
tested equal to it (tests/test_kvcache.py); the heavy kernels are chosen by a
:class:`gpt2np.fast.kernels.Kernels` (FAST by default, CLEAR for the clear functions).

Two more things live only here, because only generation needs them: a ragged batch left-padded
to one length (``pad``: those keys are masked out and each row's positions start at 0 after its
padding), and :meth:`KVCache.reorder`, which lets rows be repeated or permuted (n samples of
one prompt, beam search) without running the prompt again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..attention import causal_mask, merge_heads, split_heads
from ..hparams import ACTIVATIONS, HParams
from ..layers import activation, linear
from ..model import attention_scale, embed, head_weight, positions_for
from .kernels import FAST, Kernels

__all__ = ["KVCache", "forward_cached", "forward_via_cache"]


class KVCache:
    """Keys and values of every layer in one preallocated buffer.

    ``kv`` is [L, B, 2, H, max_len, Dh] (``kv[l]`` is layer l's [B, 2, H, max_len, Dh], keys at
    index 0 and values at 1); positions ``0 … length-1`` are filled. ``pad`` [B] counts each
    row's left padding, ``key_mask`` [B, max_len] is False on it (None when no row is padded).

    Arguments are not checked here; :meth:`gpt2np.GPT2.new_cache` checks them and makes one.
    """

    def __init__(
        self,
        hparams: HParams,
        batch: int,
        max_len: int | None = None,
        dtype: Any = np.float32,
        pad: Any = None,
    ) -> None:
        max_len = hparams.n_ctx if max_len is None else max_len
        shape = (hparams.n_layer, batch, 2, hparams.n_head, max_len, hparams.d_head)
        self.kv = np.zeros(shape, dtype=dtype)
        self.length = 0
        self.pad = np.zeros(batch, np.int64) if pad is None else np.asarray(pad, np.int64)
        # [B, max_len]: False for a row's left padding, which no query may attend to.
        self.key_mask = None if not self.pad.any() else np.arange(max_len) >= self.pad[:, None]

    @property
    def batch(self) -> int:
        B: int = self.kv.shape[1]
        return B

    @property
    def max_len(self) -> int:
        max_len: int = self.kv.shape[4]
        return max_len

    def positions(self, T: int) -> np.ndarray:
        """Positions of the next T tokens of each row: [B, T] (or [T] without padding)."""
        t = positions_for(self.length, T)
        if self.key_mask is None:
            return t
        return np.maximum(t[None, :] - self.pad[:, None], 0)

    def present(self) -> np.ndarray:
        """What is stored so far, in the functional layout [B, L, 2, H, length, Dh] (a copy)."""
        return self.kv[..., : self.length, :].transpose(1, 0, 2, 3, 4, 5).copy()

    def reorder(self, rows: Any) -> None:
        """Make new row i a copy of old row ``rows[i]``: rows may repeat, be dropped or permuted.

        Beam search keeps the best continuations after each step, n samples start from one
        prompt's prefill. Only the filled part ``[..., :length, :]`` is copied. When the number
        of rows stays the same the buffer is reused and only the rows that change are written
        (beam search mostly keeps a beam where it is: the identity copies nothing).
        """
        rows = np.asarray(rows, dtype=np.intp)  # [B_new]
        if len(rows) == self.batch:
            changed = np.flatnonzero(rows != np.arange(len(rows)))
            # the right side is gathered first (fancy indexing copies): a row that is both a
            # source and a destination is read before it is overwritten
            if changed.size:
                n = self.length
                self.kv[:, changed, ..., :n, :] = self.kv[:, rows[changed], ..., :n, :]
        else:
            filled = self.kv[:, rows, ..., : self.length, :]  # [L, B_new, 2, H, length, Dh]
            shape = (self.kv.shape[0], len(rows), *self.kv.shape[2:])
            self.kv = np.zeros(shape, dtype=self.kv.dtype)
            self.kv[..., : self.length, :] = filled
        self.pad = self.pad[rows]
        if self.key_mask is not None:
            self.key_mask = self.key_mask[rows]
            if not self.pad.any():
                self.key_mask = None

    def __repr__(self) -> str:
        L, B, _, H, max_len, Dh = self.kv.shape
        padded = f", pad={self.pad.tolist()}" if self.key_mask is not None else ""
        return (
            f"KVCache(batch={B}, length={self.length}, max_len={max_len}, n_layer={L}, "
            f"n_head={H}, d_head={Dh}, dtype={self.kv.dtype}{padded})"
        )


def attention_cached(
    x: np.ndarray,
    c_attn: dict[str, np.ndarray],
    c_proj: dict[str, np.ndarray],
    n_head: int,
    kv: np.ndarray,
    start: int,
    key_mask: np.ndarray | None,
    kernels: Kernels,
    scale: float | None = None,
) -> np.ndarray:
    """:func:`gpt2np.attention.attention` with the keys and values kept in ``kv``.

    x [B, T, D]; kv [B, 2, H, max_len, Dh] with positions ``0 … start-1`` filled; the new keys
    and values are written at ``start … start+T-1``; scale as for attention. -> out [B, T, D]
    """
    qkv = linear(x, **c_attn)  # [B, T, D] -> [B, T, 3D]
    D = x.shape[-1]  # slices rather than np.split, whose Python costs a decode step 12 × 20 µs
    q, k, v = (split_heads(qkv[..., i * D : (i + 1) * D], n_head) for i in range(3))
    T = x.shape[1]
    end = start + T
    kv[:, 0, :, start:end] = k
    kv[:, 1, :, start:end] = v
    mask = causal_mask(T, start)  # [T, S]
    if key_mask is not None:
        mask = mask & key_mask[:, None, None, :end]  # [B, 1, T, S]: no query sees padding
    heads = kernels.attend(q, kv[:, 0, :, :end], kv[:, 1, :, :end], mask, scale=scale)
    return linear(merge_heads(heads), **c_proj)  # [B, T, D]


def forward_cached(
    params: dict[str, Any],
    hparams: HParams,
    ids: np.ndarray,
    cache: KVCache,
    last_only: bool = False,
    kernels: Kernels = FAST,
) -> np.ndarray:
    """:func:`gpt2np.model.forward` with the keys and values kept in ``cache`` (written in place,
    ``cache.length`` advanced by T).

    ids [B, T]  ->  logits [B, T, V], or [B, 1, V] for the last position only when
    ``last_only`` (what sampling needs; skips the head for every other position).
    """
    T = ids.shape[1]
    x = embed(params["wte"], params["wpe"], ids, cache.positions(T))  # [B, T, D]
    start, key_mask, eps = cache.length, cache.key_mask, hparams.layer_norm_epsilon
    # kernels.act is GPT-2's tanh GELU (FAST's works in place): other activations, the clear one
    tanh_gelu = ACTIVATIONS[hparams.activation_function] == "gelu_tanh"
    for i, (p, kv) in enumerate(zip(params["blocks"], cache.kv)):  # kv: [B, 2, H, max_len, Dh]
        a = kernels.norm(x, **p["ln_1"], eps=eps)
        x = x + attention_cached(a, **p["attn"], n_head=hparams.n_head, kv=kv, start=start,
                                 key_mask=key_mask, kernels=kernels,
                                 scale=attention_scale(hparams, i))  # fmt: skip
        m = linear(kernels.norm(x, **p["ln_2"], eps=eps), **p["mlp"]["c_fc"])  # [B, T, 4D]
        m = kernels.act(m) if tanh_gelu else activation(m, hparams.activation_function)
        x = x + linear(m, **p["mlp"]["c_proj"])  # [B, T, D]
    cache.length += T
    if last_only:
        x = x[:, -1:]  # [B, 1, D]: ln_f works row by row, so only the last row is needed
    h = kernels.norm(x, **params["ln_f"], eps=eps)  # [B, T, D]
    return kernels.head(h, head_weight(params, hparams))


def forward_via_cache(
    params: dict[str, Any],
    hparams: HParams,
    ids: np.ndarray,
    past: np.ndarray | None = None,
    kernels: Kernels = FAST,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gpt2np.model.forward`'s result, computed through a :class:`KVCache` of exactly
    T_past + T positions: the past is copied in once and every layer writes its new keys and
    values in place, so ``present`` needs no stacking and the past no concatenation per layer.

    ids [B, T]; past [B, L, 2, H, T_past, Dh] or None
    ->  (logits [B, T, V], present [B, L, 2, H, T, Dh])
    """
    B, T = ids.shape
    T_past = 0 if past is None else past.shape[-2]
    cache = KVCache(hparams, B, T_past + T, params["wte"].dtype)
    if past is not None:
        cache.kv[..., :T_past, :] = past.transpose(1, 0, 2, 3, 4, 5)
        cache.length = T_past
    logits = forward_cached(params, hparams, ids, cache, kernels=kernels)
    present = cache.kv[..., T_past:, :].transpose(1, 0, 2, 3, 4, 5)  # [B, L, 2, H, T, Dh]
    # with a past, a view would keep the cache's copy of the whole past alive with present
    return logits, (present if past is None else present.copy())
