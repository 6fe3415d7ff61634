"""layernorm, gelu, softmax, linear against first-principles scalar arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpt2np.layers import gelu, layernorm, linear, softmax


def test_gelu_matches_scalar_tanh_formula() -> None:
    x = np.linspace(-6, 6, 101)
    expected = [
        0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in x
    ]
    np.testing.assert_allclose(gelu(x), expected, rtol=1e-12, atol=1e-15)


def test_gelu_is_the_tanh_approximation_of_the_erf_form() -> None:
    x = np.linspace(-5, 5, 201)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    assert np.abs(gelu(x) - exact).max() < 1e-3  # close to, but not, the erf form
    assert np.abs(gelu(x) - exact).max() > 1e-5


def test_gelu_keeps_float32() -> None:
    assert gelu(np.ones((2, 3), np.float32)).dtype == np.float32


def test_softmax_sums_to_one_and_survives_large_inputs() -> None:
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4]], dtype=np.float32)
    p = softmax(x)
    assert p.dtype == np.float32
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
    e = [math.exp(0), math.exp(1), math.exp(2)]
    np.testing.assert_allclose(p[0], [v / sum(e) for v in e], rtol=1e-6)


def test_softmax_axis() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_allclose(softmax(x, axis=0).sum(0), 1.0)


def test_layernorm_uses_biased_variance_and_eps() -> None:
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    g = np.array([1.0, 2.0, 0.5, 1.0])
    b = np.array([0.0, 1.0, -1.0, 0.5])
    mu = sum(x[0]) / 4
    var = sum((v - mu) ** 2 for v in x[0]) / 4  # divide by n, not n - 1
    expected = [gi * (v - mu) / math.sqrt(var + 1e-5) + bi for v, gi, bi in zip(x[0], g, b)]
    np.testing.assert_allclose(layernorm(x, g, b), [expected], rtol=1e-12)


def test_layernorm_of_a_constant_row_is_the_bias() -> None:
    x = np.full((2, 5), 3.0, np.float32)
    b = np.arange(5, dtype=np.float32)
    out = layernorm(x, np.ones(5, np.float32), b)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.broadcast_to(b, (2, 5)))


@pytest.mark.parametrize("shape", [(5,), (2, 5), (2, 3, 5)])
def test_layernorm_normalises_last_axis(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).standard_normal(shape) * 4 + 2
    y = layernorm(x, np.ones(5), np.zeros(5))
    assert y.shape == shape
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1, rtol=1e-4)


def test_linear_is_x_w_plus_b() -> None:
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 6)), rng.standard_normal(6)
    y = linear(x, w, b)
    assert y.shape == (2, 3, 6)
    expected = [[[sum(x[i, t, k] * w[k, j] for k in range(4)) + b[j] for j in range(6)]
                 for t in range(3)] for i in range(2)]  # fmt: skip
    np.testing.assert_allclose(y, expected, rtol=1e-12)
