"""attend_tiled equals the clear attend and attention written out in float64, on every path it
has: one decode query, one block, many blocks with whole and partial tiles, keys left from a
past, padding, one thread and several (which must not change a single bit)."""

from __future__ import annotations

import numpy as np
import pytest

import gpt2np
from gpt2np.attention import attend, causal_mask
from gpt2np.fast import attention as fast_attention
from gpt2np.fast import threads as parallel
from gpt2np.fast.attention import attend_tiled


@pytest.fixture
def threaded(monkeypatch):
    """Every call shares its heads out among 3 threads, however small."""
    monkeypatch.setattr(fast_attention, "THREADED_SCORES", 0)
    parallel.set_threads(3)
    yield
    parallel.set_threads(None)


def attention64(q, k, v, mask, scale=None):
    """softmax(q·kᵀ · scale, hidden keys left out) · v written out in float64."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bhtd,bhsd->bhts", q64, k64) * scale
    scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):  # a query that sees no key: NaN, compared by no test
        e = np.exp(scores - scores.max(-1, keepdims=True))
        return np.einsum("bhts,bhsd->bhtd", e / e.sum(-1, keepdims=True), v64)


def qkv_from_cache(rng, B, H, T, T_past, Dh, dtype):
    """q as the strided view of a fused [B, T, 3D] projection, k and v as views of a cache
    buffer longer than S, as the cached forward pass hands them over."""
    S = T_past + T
    qkv = (rng.standard_normal((B, T, 3 * H * Dh)) * 2).astype(dtype)
    q = qkv[..., : H * Dh].reshape(B, T, H, Dh).transpose(0, 2, 1, 3)
    kv = np.zeros((B, 2, H, S + 7, Dh), dtype)
    kv[..., :S, :] = (rng.standard_normal((B, 2, H, S, Dh)) * 2).astype(dtype)
    return q, kv[:, 0, :, :S], kv[:, 1, :, :S]


CASES = [  # B, H, T, T_past, Dh
    (1, 3, 1, 0, 8),  # a decode step with nothing before it
    (2, 3, 1, 37, 8),  # a decode step
    (1, 2, 1, 5000, 64),  # a decode step over more keys than one product may take: tiles
    (1, 2, 3, 300, 64),  # a few queries: tiles of 1365 keys
    (2, 3, 5, 0, 8),  # one short block
    (1, 4, 130, 0, 64),  # three blocks, whole 64-key tiles and a partial block
    (2, 3, 257, 3, 16),  # tiles of 256 keys, a remainder in every block
    (1, 2, 64, 64, 64),  # a past of exactly one tile
    (1, 1, 100, 900, 8),  # a long past: tiles of 512 keys and remainders
    (1, 2, 70, 0, 200),  # wide heads: tiles of 20 keys
]


@pytest.mark.parametrize("B, H, T, T_past, Dh", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", ["one", "threaded"])
def test_attend_tiled_equals_attend(request, B, H, T, T_past, Dh, dtype, threads) -> None:
    if threads == "threaded":
        request.getfixturevalue("threaded")
    rng = np.random.default_rng(B * 1000 + T + T_past + Dh)
    q, k, v = qkv_from_cache(rng, B, H, T, T_past, Dh, dtype)
    mask = causal_mask(T, T_past)
    got = attend_tiled(q, k, v, mask)
    assert got.dtype == dtype and got.shape == (B, H, T, Dh)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, attend(q, k, v, mask), rtol=tol, atol=tol)
    np.testing.assert_allclose(got, attention64(q, k, v, mask), rtol=tol, atol=tol)


@pytest.mark.parametrize("B, H, T, T_past, Dh", CASES)
def test_threads_change_no_bit(B, H, T, T_past, Dh, monkeypatch) -> None:
    rng = np.random.default_rng(T)
    q, k, v = qkv_from_cache(rng, B, H, T, T_past, Dh, np.float32)
    mask = causal_mask(T, T_past)
    one = attend_tiled(q, k, v, mask)
    monkeypatch.setattr(fast_attention, "THREADED_SCORES", 0)
    try:
        for n in (2, 3, 5):
            parallel.set_threads(n)
            np.testing.assert_array_equal(attend_tiled(q, k, v, mask), one)
    finally:
        parallel.set_threads(None)


@pytest.mark.parametrize("T, T_past", [(1, 9), (6, 4), (150, 30)])
@pytest.mark.parametrize("threads", ["one", "threaded"])
def test_padding_and_a_head_axis(request, T, T_past, threads) -> None:
    """Left padding ([B, 1, T, S], as a ragged batch has) and a mask with a head axis that hides
    more than the causal part: every query that sees a key gets attention over those keys."""
    if threads == "threaded":
        request.getfixturevalue("threaded")
    rng = np.random.default_rng(T)
    B, H, Dh, S = 3, 2, 16, T_past + T
    q, k, v = qkv_from_cache(rng, B, H, T, T_past, Dh, np.float32)
    pad = np.array([0, 3, S])  # the last row is all padding: its queries see no key
    key_mask = np.arange(S) >= pad[:, None]  # [B, S]
    masks = [
        causal_mask(T, T_past) & key_mask[:, None, None, :],  # [B, 1, T, S]
        causal_mask(T, T_past) & (rng.random((1, H, T, S)) < 0.7),  # [1, H, T, S]
    ]
    assert not masks[0][2].any()
    for mask in masks:
        got = attend_tiled(q, k, v, mask)
        assert np.isfinite(got).all()
        sees = np.broadcast_to(mask.any(-1)[..., None], got.shape)  # queries that see a key
        expected = attention64(q, k, v, mask)
        np.testing.assert_allclose(got[sees], expected[sees], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(got[sees], attend(q, k, v, mask)[sees], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_scale(scale) -> None:
    rng = np.random.default_rng(1)
    q, k, v = qkv_from_cache(rng, 1, 2, 100, 10, 8, np.float64)
    mask = causal_mask(100, 10)
    np.testing.assert_allclose(
        attend_tiled(q, k, v, mask, scale=scale),
        attention64(q, k, v, mask, scale),
        rtol=1e-12,
        atol=1e-12,
    )


def test_tiles_fit_one_core() -> None:
    """Every product of a whole block is at most TILE_MACS multiply-adds, the size OpenBLAS runs
    in the calling thread (above it, the threads of one product hand work over)."""
    for Dh in (8, 64, 128):
        kt = fast_attention.TILE_MACS // (fast_attention.QUERIES * Dh)
        assert fast_attention.QUERIES * kt * Dh <= fast_attention.TILE_MACS


@pytest.mark.parametrize("threads", ["one", "threaded"])
def test_fast_model_equals_clear_model_over_many_blocks(request, threads) -> None:
    """A whole model with GPT-2's head width 64 and a prompt of several blocks and tiles, in one
    pass and in chunks through the cache."""
    if threads == "threaded":
        request.getfixturevalue("threaded")
    hp = gpt2np.HParams(n_vocab=101, n_ctx=300, n_embd=128, n_head=2, n_layer=2)
    params = gpt2np.init_params(hp, seed=4, std=0.2)
    fast, clear = gpt2np.GPT2(hp, params), gpt2np.GPT2(hp, params, fast=False)
    ids = np.random.default_rng(2).integers(0, hp.n_vocab, (2, 300))
    (lf, pf), (lc, pc) = fast.forward(ids), clear.forward(ids)
    np.testing.assert_allclose(lf, lc, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pf, pc, rtol=1e-4, atol=1e-4)  # float32, values up to ~6
    l64 = fast.astype(np.float64).forward(ids)[0]  # in float64 the two agree to 1e-10
    np.testing.assert_allclose(
        l64, clear.astype(np.float64).forward(ids)[0], rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(lf, l64, rtol=1e-4, atol=1e-4)
    cache = fast.new_cache(2)
    got = [fast.forward_cached(ids[:, a:z], cache) for a, z in ((0, 70), (70, 71), (71, 300))]
    np.testing.assert_allclose(np.concatenate(got, axis=1), lc, rtol=1e-4, atol=1e-4)
