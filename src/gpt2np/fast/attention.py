"""Attention over long prompts: the products cut into tiles that one core runs well, the heads
shared out among threads.

:func:`attend_tiled` computes what :func:`gpt2np.attention.attend` computes for a causal mask,
softmax(q·kᵀ · scale, masked) · v, and is tested equal to it (tests/fast/test_attention.py).

Why tiles. A head's products q·kᵀ and p·v contract over only 64 numbers (d_head) or produce only
64 columns, and OpenBLAS spreads each product over its threads once it exceeds TILE_MACS
multiply-adds: for these shapes the hand-over costs about what the second core gains (such
products, untiled, ran at 60–90 GFLOP/s on two cores, the linear maps at 190–200), and on a busy
machine its spinning threads cost far more. Cut into tiles of at most TILE_MACS (64 queries × 64
keys × d_head 64), every product runs in the thread that calls it, one NumPy call per block does
all of a block's tiles (no Python loop over tiles), and the threads of :mod:`gpt2np.fast.threads`
take a group of heads each, softmax included: both cores work on the products and on the exp,
which was a single-threaded pass.

For each block of QUERIES queries i0 … i1-1, which may see keys 0 … T_past + i1 - 1:

    scores = q · kᵀ                  [G, n, s], written tile by tile through a strided view
    scores[hidden] = -1e10           from the first column that some query of the block may not
                                     see: the diagonal tile only, for a plain causal mask
    p = exp(scores - max)            in place;  den = Σ p
    out = Σ_tiles p_tile · v_tile / den     the division on [.., d_head] numbers, not [.., s]

The scale is applied to q before the product (exact when it is a power of two, as GPT-2's
1/√64 = 1/8 is). A query that may see no key at all (only left padding does) gets a finite,
meaningless output, as in the clear function.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..attention import attend, masked_score
from ..layers import RECORD_NOTHING, Recorder
from . import threads
from .blas import single_threaded

__all__ = ["QUERIES", "TILE_MACS", "attend_tiled"]

#: OpenBLAS runs a product of at most this many multiply-adds in the calling thread (its
#: GEMM_MULTITHREAD_THRESHOLD, 4 × 65536): the size of every tile's product.
TILE_MACS = 1 << 18


#: Queries per block: the block's scores for one head and 1024 keys are 256 KiB of float32.
QUERIES = 64

#: Below this many scores (B · H · T · S) one thread does everything: handing work to another
#: thread costs tens of microseconds.
THREADED_SCORES = 1 << 17

ALL = slice(None)


def attend_tiled(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    record: Recorder = RECORD_NOTHING,
    scale: Optional[float] = None,
) -> np.ndarray:
    """softmax(q·kᵀ · scale, masked) · v for a causal ``mask`` (query i sees no key after
    T_past + i, where T_past = S - T), like :func:`gpt2np.attention.attend`; ``scale`` is 1/√Dh
    when None.

    q [B, H, T, Dh], k and v [B, H, S, Dh], mask bool broadcastable to [B, H, T, S]
    ->  [B, H, T, Dh]

    The tiles never hold the whole [B, H, T, S] scores, so a ``record`` that keeps the scores
    and probabilities (a trace) gets the clear function, which has them.
    """
    if record is not RECORD_NOTHING:
        return attend(q, k, v, mask, record, scale)
    B, H, T, Dh = q.shape
    S = k.shape[-2]
    dtype = np.result_type(q, k, v)
    q = q * dtype.type(1.0 / math.sqrt(Dh) if scale is None else scale)  # [B, H, T, Dh]
    hidden = ~np.asarray(mask, dtype=bool)
    hidden = hidden.reshape((1,) * (4 - hidden.ndim) + hidden.shape)  # [1|B, 1|H, T|1, S|1]
    out = np.empty((B, H, T, Dh), dtype=dtype)
    if T == 1 and S * Dh <= TILE_MACS:  # a decode step: one product per head, no tiles
        _attend_one_block(q, k, v, hidden, out)
        return out
    hidden = np.broadcast_to(hidden, (*hidden.shape[:2], T, S))
    kt = max(1, TILE_MACS // (min(T, QUERIES) * Dh))  # keys per tile
    blocks = [(i0, min(i0 + QUERIES, T)) for i0 in range(0, T, QUERIES)]
    first = [_first_hidden_column(hidden[..., i0:i1, : S - T + i1]) for i0, i1 in blocks]

    def heads(part: tuple[slice, slice]) -> None:
        b, h = part
        hb = hidden[b if hidden.shape[0] > 1 else ALL, h if hidden.shape[1] > 1 else ALL]
        _attend_heads(q[b, h], k[b, h], v[b, h], hb, out[b, h], blocks, first, kt)

    n = threads.threads() if B * H * T * S >= THREADED_SCORES else 1
    with single_threaded():  # gpt2np's threads own the cores (gpt2np.fast.blas)
        threads.run(heads, _parts(B, H, n))
    return out


def _parts(B: int, H: int, n: int) -> list[tuple[slice, slice]]:
    """(batch rows, heads) of each thread's share: about two shares per thread, so that one
    that is slowed (another process on its core) leaves the rest to the others."""
    if n == 1:
        return [(slice(None), slice(None))]
    if B >= 2 * n:
        return [(slice(b, b + 1), slice(None)) for b in range(B)]
    groups = min(H, -(-2 * n // B))  # ceil(2n / B) head groups per row
    bounds = np.linspace(0, H, groups + 1).round().astype(int)
    return [
        (slice(b, b + 1), slice(int(h0), int(h1)))
        for b in range(B)
        for h0, h1 in zip(bounds[:-1], bounds[1:])
    ]


def _first_hidden_column(hidden: np.ndarray) -> int:
    """The first key column that some query of the block may not see (its width if none)."""
    columns = hidden.any(axis=(0, 1, 2))  # [s]
    return int(columns.argmax()) if columns.any() else hidden.shape[-1]


def _attend_one_block(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, hidden: np.ndarray, out: np.ndarray
) -> None:
    """All queries at once (few of them): q (scaled) [B, H, T, Dh] -> out [B, H, T, Dh]."""
    scores = q @ k.swapaxes(-1, -2)  # [B, H, T, S]
    if hidden.any():
        np.copyto(scores, masked_score(scores.dtype), where=hidden)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    denominator = scores.sum(axis=-1, keepdims=True)  # [B, H, T, 1]
    np.matmul(scores, v, out=out)
    out /= denominator


def _attend_heads(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    hidden: np.ndarray,
    out: np.ndarray,
    blocks: list[tuple[int, int]],
    first: list[int],
    kt: int,
) -> None:
    """One thread's share, block by block: q (scaled) [b, G, T, Dh], k and v [b, G, S, Dh],
    hidden [1|b, 1|G, T, S]  ->  out [b, G, T, Dh] (written in place)."""
    b, G, T, Dh = q.shape
    S = k.shape[-2]
    T_past = S - T
    masked = masked_score(out.dtype)
    buffer = np.empty((b, G, QUERIES, S), dtype=out.dtype)  # one block's scores
    partial = np.empty((b, G, S // kt, QUERIES, Dh), dtype=out.dtype)  # p_tile · v_tile
    for (i0, i1), c0 in zip(blocks, first):
        n, s = i1 - i0, T_past + i1  # queries of the block, keys they may see
        nt = s // kt  # whole tiles; the last r keys make a narrower one
        full, r = nt * kt, s % kt
        scores = buffer[:, :, :n, :s]  # [b, G, n, s]
        qb = q[:, :, i0:i1]  # [b, G, n, Dh]
        if nt:  # [b, G, 1, n, Dh] @ [b, G, nt, Dh, kt] -> [b, G, nt, n, kt], a view of scores
            tiles_k = k[:, :, :full].reshape(b, G, nt, kt, Dh).swapaxes(-1, -2)
            np.matmul(qb[:, :, None], tiles_k, out=_tiles(scores, full, kt))
        if r:
            np.matmul(qb, k[:, :, full:s].swapaxes(-1, -2), out=scores[..., full:])
        if c0 < s:
            np.copyto(scores[..., c0:], masked, where=hidden[..., i0:i1, c0:s])
        scores -= scores.max(axis=-1, keepdims=True)  # the softmax's numerator, in place
        np.exp(scores, out=scores)
        denominator = scores.sum(axis=-1, keepdims=True)  # [b, G, n, 1]
        o = out[:, :, i0:i1]  # [b, G, n, Dh]
        if nt:  # [b, G, nt, n, kt] @ [b, G, nt, kt, Dh] -> [b, G, nt, n, Dh], summed over nt
            tiles_v = v[:, :, :full].reshape(b, G, nt, kt, Dh)
            p = partial[:, :, :nt, :n]
            np.matmul(_tiles(scores, full, kt), tiles_v, out=p)
            np.sum(p, axis=2, out=o)
            if r:
                o += scores[..., full:] @ v[:, :, full:s]
        else:
            np.matmul(scores, v[:, :, :s], out=o)
        o /= denominator


def _tiles(scores: np.ndarray, full: int, kt: int) -> np.ndarray:
    """The first ``full`` columns of scores [b, G, n, s] as tiles [b, G, nt, n, kt]: a view, so
    that a product written into it lands in scores."""
    b, G, n, _ = scores.shape
    tiles = scores[..., :full].reshape(b, G, n, full // kt, kt).swapaxes(2, 3)
    assert np.may_share_memory(tiles, scores)  # splitting the unit-stride axis never copies
    return tiles
