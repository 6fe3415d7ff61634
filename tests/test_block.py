"""The MLP and the pre-norm block, against their equations written out in the test."""

from __future__ import annotations

import math

import numpy as np

from gpt2np.attention import attention
from gpt2np.block import block, ffn


def _params(D: int, rng: np.random.Generator) -> dict:
    def dense(n_in: int, n_out: int) -> dict:
        return {
            "w": rng.standard_normal((n_in, n_out)) * 0.2,
            "b": rng.standard_normal(n_out) * 0.1,
        }

    def ln() -> dict:
        return {"g": 1 + 0.1 * rng.standard_normal(D), "b": 0.1 * rng.standard_normal(D)}

    return {
        "ln_1": ln(),
        "attn": {"c_attn": dense(D, 3 * D), "c_proj": dense(D, D)},
        "ln_2": ln(),
        "mlp": {"c_fc": dense(D, 4 * D), "c_proj": dense(4 * D, D)},
    }


def _ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    return g * (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) + b


def test_ffn_is_gelu_between_two_projections() -> None:
    rng = np.random.default_rng(0)
    p = _params(8, rng)["mlp"]
    x = rng.standard_normal((2, 3, 8))
    y = ffn(x, **p)
    assert y.shape == (2, 3, 8)
    h = x @ p["c_fc"]["w"] + p["c_fc"]["b"]
    assert h.shape == (2, 3, 32)  # width 4·D
    h = np.vectorize(
        lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    )(h)
    np.testing.assert_allclose(y, h @ p["c_proj"]["w"] + p["c_proj"]["b"], rtol=1e-10)


def test_block_is_two_pre_norm_residuals() -> None:
    rng = np.random.default_rng(1)
    p = _params(8, rng)
    x = rng.standard_normal((2, 4, 8))
    y, present = block(x, **p, n_head=2)
    assert y.shape == x.shape and present.shape == (2, 2, 2, 4, 4)
    a, _ = attention(_ln(x, **p["ln_1"]), **p["attn"], n_head=2)
    mid = x + a
    expected = mid + ffn(_ln(mid, **p["ln_2"]), **p["mlp"])
    np.testing.assert_allclose(y, expected, rtol=1e-10)
