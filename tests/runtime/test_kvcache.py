"""The in-place cache plugged into the forward pass equals OpenAI's functional past, and the
cache behaves.

gpt2np.forward with an array as ``past`` concatenates it and returns the new keys and values;
with a KVCache (gpt2np.runtime.kvcache) as ``past`` it writes them into one preallocated buffer.
Every test here compares the two, or the cache's bookkeeping against what a row alone would give.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpt2np
from gpt2np.fast.kernels import CLEAR, FAST
from gpt2np.model import forward
from gpt2np.runtime.kvcache import KVCache

#: float32, logits of order 1: chunking a pass changes the products' shapes and so their
#: rounding (about 1e-6 here), even with the clear kernels.
TOL = 2e-5
HP = gpt2np.HParams(n_vocab=97, n_ctx=32, n_embd=24, n_head=3, n_layer=2)
PARAMS = gpt2np.init_params(HP, seed=1, std=0.2)


def forward_cached(params, hp, ids, cache, kernels=FAST, last_only=False) -> np.ndarray:
    """The logits of forward() with the cache as its past (what GPT2.forward_cached runs)."""
    logits, returned = forward(params, hp, ids, cache, kernels=kernels, last_only=last_only)
    assert returned is cache
    return logits


@pytest.fixture(scope="module")
def tiny():
    return HP, PARAMS


@pytest.mark.parametrize("kernels", [CLEAR, FAST], ids=["CLEAR", "FAST"])
@settings(max_examples=20, deadline=None)
@given(
    chunks=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    batch=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_chunked_cached_pass_equals_one_clear_pass(kernels, chunks, batch, seed) -> None:
    """Any split of a sequence into chunks fed through the cache gives the clear pass's logits,
    and the cache ends up holding the clear pass's keys and values."""
    hp, params = HP, PARAMS
    T = sum(chunks)
    ids = np.random.default_rng(seed).integers(0, hp.n_vocab, (batch, T))
    logits, present = forward(params, hp, ids)
    cache = KVCache(hp, batch, max_len=T + 2)
    buffer, start, got = cache.kv, 0, []
    for n in chunks:
        got.append(forward_cached(params, hp, ids[:, start : start + n], cache, kernels=kernels))
        start += n
    np.testing.assert_allclose(np.concatenate(got, axis=1), logits, rtol=TOL, atol=TOL)
    assert cache.kv is buffer and cache.length == T  # written in place, never reallocated
    np.testing.assert_allclose(cache.present(), present, rtol=TOL, atol=TOL)
    assert not cache.kv[..., T:, :].any()  # nothing written past the filled part


@pytest.mark.parametrize("T_past", [0, 5])
def test_fast_kernels_with_a_functional_past_equal_the_clear_ones(tiny, T_past) -> None:
    hp, params = tiny
    ids = np.random.default_rng(T_past).integers(0, hp.n_vocab, (2, 9))
    past = None
    if T_past:
        _, past = forward(params, hp, np.random.default_rng(7).integers(0, hp.n_vocab, (2, T_past)))
    expected = forward(params, hp, ids, past)
    got = forward(params, hp, ids, past, kernels=FAST)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=TOL, atol=TOL)


def test_a_one_pass_cache_gives_the_same_hidden_states_with_one_layers_memory(tiny) -> None:
    """Scoring's cache: every block writes into the same buffer (a block reads its keys and
    values only while it runs), and the pass equals one with a full cache."""
    hp, params = tiny
    ids = np.random.default_rng(4).integers(0, hp.n_vocab, (2, 8))
    one = KVCache(hp, 2, 8, pad=[0, 3], one_pass=True)
    full = KVCache(hp, 2, 8, pad=[0, 3])
    assert one.kv.shape[0] == 1 and full.kv.shape[0] == hp.n_layer
    h_one, _ = forward(params, hp, ids, one, logits=False)
    h_full, _ = forward(params, hp, ids, full, logits=False)
    np.testing.assert_array_equal(h_one, h_full)
    assert h_one.shape == (2, 8, hp.n_embd)
    with pytest.raises(ValueError, match="one_pass cache keeps no layer"):
        one.present()


def test_last_only_is_the_last_position_of_the_full_head(tiny) -> None:
    hp, params = tiny
    ids = np.random.default_rng(3).integers(0, hp.n_vocab, (2, 7))
    full = forward_cached(params, hp, ids, KVCache(hp, 2, 7))
    last = forward_cached(params, hp, ids, KVCache(hp, 2, 7), last_only=True)
    assert last.shape == (2, 1, hp.n_vocab)
    np.testing.assert_allclose(last[:, 0], full[:, -1], rtol=TOL, atol=TOL)


def test_left_padding_gives_each_row_what_it_gives_alone(tiny) -> None:
    hp, params = tiny
    rows = [[5, 17, 3, 80, 2, 9], [44, 1]]
    ids = np.array([rows[0], [0, 0, 0, 0, *rows[1]]])
    cache = KVCache(hp, 2, max_len=8, pad=[0, 4])
    first = forward_cached(params, hp, ids, cache, kernels=CLEAR)
    step = forward_cached(params, hp, np.array([[7], [7]]), cache, kernels=CLEAR)
    for b, row in enumerate(rows):
        alone, _ = forward(params, hp, np.array([[*row, 7]]))
        np.testing.assert_allclose(first[b, -len(row) :], alone[0, :-1], rtol=TOL, atol=TOL)
        np.testing.assert_allclose(step[b, 0], alone[0, -1], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("rows", [[1, 0], [0, 0, 1], [1], [1, 1, 0, 0]])
def test_reorder_makes_each_row_continue_the_row_it_copies(tiny, rows) -> None:
    """After reorder(rows), new row i continues old row rows[i]: the next step's logits are
    those of that row's sequence run alone, padding and all (beam search, n samples)."""
    hp, params = tiny
    seqs = [[3, 1, 4, 1, 5], [9, 2]]
    ids = np.array([seqs[0], [0, 0, 0, *seqs[1]]])
    cache = KVCache(hp, 2, max_len=10, pad=[0, 3])
    forward_cached(params, hp, ids, cache)
    cache.reorder(rows)
    assert cache.batch == len(rows) and cache.length == 5
    nxt = np.arange(len(rows))[:, None] + 10  # a different next token per new row
    got = forward_cached(params, hp, nxt, cache)[:, 0]
    for i, old in enumerate(rows):
        alone, _ = forward(params, hp, np.array([[*seqs[old], int(nxt[i, 0])]]))
        np.testing.assert_allclose(got[i], alone[0, -1], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("rows", [[2, 0, 1], [1, 1, 0], [0, 2, 2], [2, 1, 0]])
def test_reorder_in_place_when_rows_are_sources_and_destinations(tiny, rows) -> None:
    """Same batch: the buffer is reused and only the rows that change are written, yet a row
    that is overwritten still serves as the source of another (a cycle, a swap, a copy)."""
    hp, params = tiny
    seqs = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8]]
    ids = np.array([seqs[0], [0, 0, *seqs[1]], [0, *seqs[2]]])
    cache = KVCache(hp, 3, max_len=8, pad=[0, 2, 1])
    forward_cached(params, hp, ids, cache)
    before, buffer = cache.kv.copy(), cache.kv
    cache.reorder(rows)
    assert cache.kv is buffer and cache.pad.tolist() == [[0, 2, 1][r] for r in rows]
    np.testing.assert_array_equal(cache.kv, before[:, rows])
    got = forward_cached(params, hp, np.array([[11], [12], [13]]), cache)[:, 0]
    for i, old in enumerate(rows):
        alone, _ = forward(params, hp, np.array([[*seqs[old], 11 + i]]))
        np.testing.assert_allclose(got[i], alone[0, -1], rtol=TOL, atol=TOL)


def test_reorder_by_the_identity_writes_nothing(tiny) -> None:
    hp, params = tiny
    cache = KVCache(hp, 3, max_len=6)
    forward_cached(params, hp, np.array([[1, 2], [3, 4], [5, 6]]), cache)
    cache.kv.flags.writeable = False  # any write into the buffer would raise
    cache.reorder([0, 1, 2])
    with pytest.raises(ValueError, match="read-only"):
        cache.reorder([0, 0, 2])  # the check above can fail: a changed row is written


def test_reorder_of_unpadded_rows_drops_the_mask_and_repr_says_what_the_cache_holds(tiny) -> None:
    hp, _ = tiny
    cache = KVCache(hp, 2, max_len=6, pad=[0, 2])
    assert "pad=[0, 2]" in repr(cache)
    cache.reorder([0, 0, 0])
    assert cache.key_mask is None and cache.pad.tolist() == [0, 0, 0]
    assert repr(cache) == (
        "KVCache(batch=3, length=0, max_len=6, n_layer=2, n_head=3, d_head=8, dtype=float32)"
    )
