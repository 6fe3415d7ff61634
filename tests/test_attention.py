"""Causal multi-head attention: mask, head reshapes, and the whole layer against a loop."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from gpt2np.attention import attend, attention, causal_mask, merge_heads, split_heads


def test_causal_mask_counts_from_the_lower_right_corner() -> None:
    assert causal_mask(3).tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    # two new tokens after three cached ones: each sees every earlier key
    assert causal_mask(2, 3).tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert causal_mask(1, 5).shape == (1, 6) and causal_mask(1, 5).all()


def test_split_and_merge_heads() -> None:
    x = np.arange(2 * 3 * 12).reshape(2, 3, 12)
    h = split_heads(x, 4)
    assert h.shape == (2, 4, 3, 3)
    np.testing.assert_array_equal(h[1, 2, 0], x[1, 0, 6:9])  # head 2 = features 6..8
    np.testing.assert_array_equal(merge_heads(h), x)


def naive_attention(x, c_attn, c_proj, n_head, T_past_kv=None):
    """One query, one head at a time with Python loops; an independent reading of the paper."""
    B, T, D = x.shape
    Dh = D // n_head
    qkv = np.einsum("btd,de->bte", x, c_attn["w"]) + c_attn["b"]
    q, k, v = qkv[..., :D], qkv[..., D : 2 * D], qkv[..., 2 * D :]
    if T_past_kv is not None:
        k = np.concatenate([T_past_kv[0], k], axis=1)
        v = np.concatenate([T_past_kv[1], v], axis=1)
    T_past = k.shape[1] - T
    out = np.zeros((B, T, D))
    for b in range(B):
        for h in range(n_head):
            cols = slice(h * Dh, (h + 1) * Dh)
            for i in range(T):
                visible = T_past + i + 1
                s = [float(q[b, i, cols] @ k[b, j, cols]) / math.sqrt(Dh) for j in range(visible)]
                m = max(s)
                e = [math.exp(v_ - m) for v_ in s]
                p = [v_ / sum(e) for v_ in e]
                out[b, i, cols] = sum(p[j] * v[b, j, cols] for j in range(visible))
    return out @ c_proj["w"] + c_proj["b"], k, v


@pytest.fixture
def layer():
    rng = np.random.default_rng(3)
    D, H = 12, 3
    c_attn = {"w": rng.standard_normal((D, 3 * D)) * 0.3, "b": rng.standard_normal(3 * D) * 0.1}
    c_proj = {"w": rng.standard_normal((D, D)) * 0.3, "b": rng.standard_normal(D) * 0.1}
    return c_attn, c_proj, H


def test_attention_matches_naive_loops(layer) -> None:
    c_attn, c_proj, H = layer
    x = np.random.default_rng(4).standard_normal((2, 5, 12))
    out, present = attention(x, c_attn, c_proj, H)
    expected, k, v = naive_attention(x, c_attn, c_proj, H)
    assert out.shape == (2, 5, 12)
    assert present.shape == (2, 2, H, 5, 4)  # [B, 2, H, T, Dh]
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(merge_heads(present[:, 0]), k, rtol=1e-12)
    np.testing.assert_allclose(merge_heads(present[:, 1]), v, rtol=1e-12)


def test_attention_with_past_matches_naive_loops(layer) -> None:
    c_attn, c_proj, H = layer
    x = np.random.default_rng(5).standard_normal((2, 7, 12))
    _, past = attention(x[:, :4], c_attn, c_proj, H)
    out, present = attention(x[:, 4:], c_attn, c_proj, H, past=past)
    kv_past = (merge_heads(past[:, 0]), merge_heads(past[:, 1]))
    expected, _, _ = naive_attention(x[:, 4:], c_attn, c_proj, H, kv_past)
    assert present.shape == (2, 2, H, 3, 4)  # the new tokens only
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


def test_attend_fully_masked_row_is_finite() -> None:
    q = k = v = np.ones((1, 1, 2, 4), np.float32)
    out = attend(q, k, v, np.zeros((2, 2), bool))
    assert np.all(np.isfinite(out)) and out.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_fully_masked_row_is_finite_in_every_float_dtype(dtype) -> None:
    """-1e10 overflows float16 to -inf, and a row of -inf gives exp(-inf - -inf) = NaN."""
    from gpt2np.fast.attention import attend_tiled

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 3, 4)).astype(dtype) for _ in range(3))
    key_mask = np.arange(3) >= np.array([[0], [2]])  # row 1: two padding keys
    mask = causal_mask(3) & key_mask[:, None, None, :]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "overflow encountered in cast"
        outs = [attend(q, k, v, mask), attend_tiled(q, k, v, mask)]
    sees = np.broadcast_to(mask.any(-1)[..., None], outs[0].shape)
    # float64 softmax over the visible keys only (masked ones dropped with -inf, not -1e10)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    scores = np.where(mask, np.einsum("bhtd,bhsd->bhts", q64, k64) / 2.0, -np.inf)  # √Dh = 2
    with np.errstate(invalid="ignore"):  # rows with no visible key: NaN, not compared
        e = np.exp(scores - scores.max(-1, keepdims=True))
        expected = np.einsum("bhts,bhsd->bhtd", e / e.sum(-1, keepdims=True), v64)
    for out in outs:
        assert out.dtype == dtype and np.isfinite(out).all()
        np.testing.assert_allclose(out[sees], expected[sees], rtol=0, atol=5e-3)
