"""Generation's key/value cache: one preallocated buffer that each step writes in place.

:func:`gpt2np.model.forward` takes the past as an array and returns the new keys and values,
which the caller concatenates: clear, and what OpenAI's graph does, but a decode step then
copies the whole cache. Here the cache is one buffer ``[L, B, 2, H, max_len, Dh]``; a forward
pass writes its new tokens' keys and values into it at ``length …`` and attends over the views
``[..., :length + T, :]``. The maths is :func:`gpt2np.model.forward`'s, step for step, and
tested equal to it (tests/runtime/test_kvcache.py); the heavy kernels are chosen by a
:class:`gpt2np.kernels.Kernels` (FAST by default, CLEAR for the clear functions).

Two more things live only here, because only generation needs them: a ragged batch left-padded
to one length (``pad``: those keys are masked out and each row's positions start at 0 after its
padding), and :meth:`KVCache.reorder`, which lets rows be repeated or permuted (n samples of
one prompt, beam search) without running the prompt again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..attention import causal_mask
from ..hparams import HParams
from ..model import positions_for

__all__ = ["CacheLayer", "KVCache"]


class KVCache:
    """Keys and values of every layer in one preallocated buffer.

    ``kv`` is [L, B, 2, H, max_len, Dh] (``kv[l]`` is layer l's [B, 2, H, max_len, Dh], keys at
    index 0 and values at 1); positions ``0 … length-1`` are filled. ``pad`` [B] counts each
    row's left padding, ``key_mask`` [B, max_len] is False on it (None when no row is padded).
    Pass it as ``past`` to :func:`gpt2np.model.forward`, which calls :meth:`positions` and
    :meth:`layers`; a pass that fails midway (an interrupt) leaves ``length`` past positions it
    did not fill, so start a new cache after one.

    ``one_pass=True`` makes a cache for a single pass from position 0 that nothing continues
    (scoring's): every layer writes into the same [B, 2, H, max_len, Dh] buffer, since a block
    reads its keys and values only while it runs. One layer's memory instead of L's (the 48
    layers of 1558M would be 630 MB per window of 1024 tokens); :meth:`present` and
    :meth:`reorder` refuse such a cache.

    Arguments are not checked here; :meth:`gpt2np.runtime.Runtime.new_cache` checks them and
    makes one.
    """

    def __init__(
        self,
        hparams: HParams,
        batch: int,
        max_len: int | None = None,
        dtype: Any = np.float32,
        pad: Any = None,
        one_pass: bool = False,
    ) -> None:
        max_len = hparams.n_ctx if max_len is None else max_len
        self.n_layer, self.one_pass = hparams.n_layer, one_pass
        n_buffers = 1 if one_pass else hparams.n_layer
        shape = (n_buffers, batch, 2, hparams.n_head, max_len, hparams.d_head)
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

    def layers(self, T: int) -> list[CacheLayer]:
        """One slot per block for the next T tokens, which each block's attention fills at
        positions ``length … length+T-1`` (:meth:`CacheLayer.update`); ``length`` advances by T.
        """
        start, self.length = self.length, self.length + T
        return [CacheLayer(self.kv[0 if self.one_pass else i], start, T, self.key_mask)
                for i in range(self.n_layer)]  # fmt: skip

    def present(self) -> np.ndarray:
        """What is stored so far, in the functional layout [B, L, 2, H, length, Dh] (a copy)."""
        self._keeps("present")
        return self.kv[..., : self.length, :].transpose(1, 0, 2, 3, 4, 5).copy()

    def reorder(self, rows: Any) -> None:
        """Make new row i a copy of old row ``rows[i]``: rows may repeat, be dropped or permuted.

        Beam search keeps the best continuations after each step, n samples start from one
        prompt's prefill. Only the filled part ``[..., :length, :]`` is copied. When the number
        of rows stays the same the buffer is reused and only the rows that change are written
        (beam search mostly keeps a beam where it is: the identity copies nothing).
        """
        self._keeps("reorder")
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

    def _keeps(self, what: str) -> None:
        if self.one_pass:
            raise ValueError(f"{what}(): a one_pass cache keeps no layer's keys and values")

    def __repr__(self) -> str:
        _, B, _, H, max_len, Dh = self.kv.shape
        L = self.n_layer
        padded = f", pad={self.pad.tolist()}" if self.key_mask is not None else ""
        return (
            f"KVCache(batch={B}, length={self.length}, max_len={max_len}, n_layer={L}, "
            f"n_head={H}, d_head={Dh}, dtype={self.kv.dtype}{padded})"
        )


class CacheLayer:
    """Block ``i``'s part of a :class:`KVCache` for one forward pass of T new tokens: what
    :func:`gpt2np.attention.attention` is given as ``past`` in place of OpenAI's array.

    kv [B, 2, H, max_len, Dh] (a view of the cache's buffer); the earlier tokens' keys and
    values fill positions ``0 … start-1``; key_mask [B, max_len] or None (left padding).
    """

    def __init__(self, kv: np.ndarray, start: int, T: int, key_mask: np.ndarray | None) -> None:
        self.kv, self.start, self.end, self.key_mask = kv, start, start + T, key_mask

    def update(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Store the new tokens' keys and values after the earlier ones and return what the new
        queries attend over: keys and values [B, H, S, Dh] (views, S = start + T) and the mask,
        causal and blind to each row's left padding ([T, S], or [B, 1, T, S] with padding).
        """
        self.kv[:, 0, :, self.start : self.end] = k  # k, v [B, H, T, Dh]
        self.kv[:, 1, :, self.start : self.end] = v
        mask = causal_mask(self.end - self.start, self.start)  # [T, S]
        if self.key_mask is not None:  # no query sees a row's padding
            mask = mask & self.key_mask[:, None, None, : self.end]  # [B, 1, T, S]
        return self.kv[:, 0, :, : self.end], self.kv[:, 1, :, : self.end], mask
