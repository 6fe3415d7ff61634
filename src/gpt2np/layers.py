"""The elementwise and linear building blocks of GPT-2, each a few lines with its equation.

These follow OpenAI's ``src/model.py`` (``norm``, ``gelu``, ``softmax``, ``conv1d``) exactly, so
that the numbers match the released graph. All functions are pure and broadcast over any
leading axes ``[...]``; the dtype of the input is kept (float32 in, float32 out).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["RECORD_NOTHING", "Recorder", "gelu", "layernorm", "linear", "softmax"]

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """Gaussian Error Linear Unit in the tanh form GPT-2 was trained with.

    gelu(x) = 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))        [...] -> [...]
    """
    # x * x * x rather than x**3: NumPy's general power is ~10x slower than two multiplies
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax(x)_i = exp(x_i - max x) / Σ_j exp(x_j - max x) along ``axis``.   [...] -> [...]

    Subtracting the maximum changes nothing mathematically and keeps exp from overflowing.
    """
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Layer normalisation over the last axis (Ba et al., 2016).

    μ = mean(x), σ² = mean((x - μ)²)  (the biased variance)
    y = g · (x - μ) / √(σ² + ε) + b,  ε = 1e-5                    [..., D] -> [..., D]
    """
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.mean(np.square(x - mean), axis=-1, keepdims=True)
    return g * (x - mean) / np.sqrt(variance + eps) + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The affine map GPT-2 calls conv1d: y = x · w + b.       [..., n_in] -> [..., n_out]

    ``w`` is stored ``[n_in, n_out]`` as in the checkpoint (no transpose needed).
    """
    # One [N, n_in] @ [n_in, n_out] product over all leading axes: on [B, T, n_in] NumPy's
    # matmul would run B separate products, reading w from memory B times.
    y = x.reshape(-1, x.shape[-1]) @ w
    y += b  # in place: no second [N, n_out] array
    return y.reshape(*x.shape[:-1], w.shape[-1])


class Recorder:
    """How the forward pass names its intermediates: ``record(name, x)`` returns ``x`` unchanged.

    Every function of the clear forward pass takes a ``record`` and hands it each intermediate
    under its name (``record("probs", probs)``), and ``record.scope("attn")`` prefixes the names
    of a sub-computation (``h3.attn.probs``). This one records nothing;
    :func:`gpt2np.trace.trace` passes one that keeps the arrays, so the names in the code, in a
    trace and in a golden file are the same names, and running and tracing are one composition.
    """

    def __call__(self, name: str, x: np.ndarray) -> np.ndarray:
        return x

    def scope(self, name: str) -> Recorder:
        """The recorder for the sub-computation ``name``: here, this same do-nothing one."""
        return self


#: The default ``record`` of every function of the forward pass.
RECORD_NOTHING = Recorder()
