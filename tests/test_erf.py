"""gpt2np.erf against math.erf / math.erfc (float64), and the activations built on it."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from gpt2np.erf import erf, erfc
from gpt2np.layers import activation, gelu, gelu_erf, relu, silu

GRID = np.concatenate(
    [
        np.linspace(-28.0, 28.0, 200_001),
        np.geomspace(1e-300, 28.0, 20_001),
        -np.geomspace(1e-300, 28.0, 20_001),
        # the interval ends, where Cody's approximations change
        np.nextafter(0.46875, [-1.0, 2.0]),
        np.nextafter(4.0, [0.0, 8.0]),
        [0.0, -0.0, 0.46875, -0.46875, 4.0, -4.0, 5e-324, 27.3, 40.0, -40.0],
    ]
)


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    normal = np.abs(want) >= np.finfo(np.float64).tiny
    assert np.all(np.abs(got[~normal] - want[~normal]) <= 1e-322)  # subnormal results
    return float(np.max(np.abs(got[normal] - want[normal]) / np.abs(want[normal])))


def test_erf_and_erfc_have_the_documented_float64_error() -> None:
    want_erf = np.array([math.erf(x) for x in GRID])
    want_erfc = np.array([math.erfc(x) for x in GRID])
    assert relative_error(erf(GRID), want_erf) < 5e-16
    assert relative_error(erfc(GRID), want_erfc) < 1e-15


def test_erf_special_values() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
    np.testing.assert_array_equal(erf(x), [np.nan, 1.0, -1.0, 0.0, -0.0])
    np.testing.assert_array_equal(erfc(x), [np.nan, 0.0, 2.0, 1.0, 1.0])
    assert np.signbit(erf(np.array([-0.0])))[0]
    assert erf(np.float32(0.5)).dtype == np.float64  # computed in float64, whatever comes in


def test_exact_gelu_is_correctly_rounded_in_float32() -> None:
    x = np.linspace(-40, 40, 100_001, dtype=np.float32)
    want = np.array([float(v) * 0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x])
    got = gelu_erf(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want.astype(np.float32))
    got64 = gelu_erf(x.astype(np.float64))
    normal = np.abs(want) > 1e-300
    assert np.max(np.abs(got64[normal] - want[normal]) / np.abs(want[normal])) < 2e-15


def test_exact_and_tanh_gelu_differ_by_the_documented_amount() -> None:
    x = np.linspace(-10, 10, 100_001)
    assert 1e-4 < np.max(np.abs(gelu_erf(x) - gelu(x))) < 1e-3


def test_silu_and_relu() -> None:
    x = np.array([-1e4, -50.0, -1.0, -0.0, 0.0, 1.0, 50.0, 1e4], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in exp, even at -1e4
        got = silu(x)
    want = [v / (1 + math.exp(-v)) if v > -700 else 0.0 for v in x.astype(np.float64)]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    np.testing.assert_array_equal(relu(x), np.maximum(x, 0))


@pytest.mark.parametrize(
    "name, function",
    [("gelu_new", gelu), ("gelu_pytorch_tanh", gelu), ("gelu", gelu_erf), ("relu", relu),
     ("silu", silu), ("swish", silu)],
)  # fmt: skip
def test_activation_by_hf_name(name, function) -> None:
    x = np.linspace(-6, 6, 101, dtype=np.float32)
    np.testing.assert_array_equal(activation(x, name), function(x))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu", "swish"])
def test_activations_equal_transformers(name: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    activations = pytest.importorskip("transformers.activations")
    x = np.linspace(-12, 12, 200_001).astype(dtype)
    want = activations.ACT2FN[name](torch.from_numpy(x)).numpy()
    tol = 1e-6 if dtype == "float32" else 1e-14
    got = activation(x, name)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(x).max() if name == "gelu"
                               else tol)  # fmt: skip
    if name == "gelu" and dtype == "float32":
        # PyTorch computes 0.5·x·(1 + erf(x/√2)) in float32: near x = -3 the sum cancels, and
        # its erf's few ulps of 1 become an absolute error of ~k·ε·|x|/2 in a value of ~1e-3
        # (which ulps, the CPU's vector unit decides). gpt2np's is correctly rounded (float64
        # inside), so against an exact float64 reference the bound is one rounding:
        exact = (
            0.5
            * x.astype(np.float64)
            * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
        )
        np.testing.assert_allclose(got, exact, rtol=np.finfo(np.float32).eps, atol=1e-37)
