"""The building blocks of GPT-2, each a few lines with its equation: the activations, softmax,
LayerNorm, the linear map and the output head.

These follow OpenAI's ``src/model.py`` (``norm``, ``gelu``, ``softmax``, ``conv1d``, the core of
``attn``) exactly, so that the numbers match the released graph. All functions are pure and
broadcast over any leading axes ``[...]``; the dtype of the input is kept (float32 in, float32
out).

Four of them (:func:`activation`, :func:`layernorm`, :func:`head`, :func:`linear`), with
:func:`gpt2np.attention.attend`, do the heavy work of a forward pass and are called through a
:class:`gpt2np.kernels.Kernels` bundle: :data:`gpt2np.kernels.CLEAR` holds these clear ones,
``gpt2np.fast.FAST`` faster twins, so that one composition (:func:`gpt2np.model.forward`) runs
either.
"""

from __future__ import annotations

import math

import numpy as np

from .erf import erfc
from .hparams import ACTIVATIONS

__all__ = ["RECORD_NOTHING", "Recorder", "activation", "gelu", "gelu_erf", "head",
    "layernorm", "linear", "relu", "silu", "softmax"]  # fmt: skip

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """Gaussian Error Linear Unit in the tanh form GPT-2 was trained with.

    gelu(x) = 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))        [...] -> [...]
    """
    # x * x * x rather than x**3: NumPy's general power is ~10x slower than two multiplies
    y: np.ndarray = 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))
    return y


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """The exact GELU (HF's ``gelu``), x times the standard normal CDF Φ(x).

    gelu_erf(x) = x · Φ(x) = 0.5 · x · erfc(-x / √2)                    [...] -> [...]

    erfc rather than 1 + erf keeps Φ accurate where it is tiny (x ≪ 0). Computed in float64
    (:mod:`gpt2np.erf`) and rounded to x's dtype. It differs from the tanh form by up to ~5e-4.
    """
    x64 = x.astype(np.float64)  # -x/√2 rounded to float32 would cost Φ(-5) a dozen ulps
    return (x64 * (0.5 * erfc(-x64 / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def relu(x: np.ndarray) -> np.ndarray:
    """relu(x) = max(x, 0).                                              [...] -> [...]"""
    y: np.ndarray = np.maximum(x, 0)
    return y


def silu(x: np.ndarray) -> np.ndarray:
    """The sigmoid-weighted linear unit (HF's ``silu`` and ``swish``).

    silu(x) = x · σ(x) = x / (1 + exp(-x))                              [...] -> [...]

    σ is written with e = exp(-|x|), which never overflows: σ(x) = 1 / (1 + e) for x ≥ 0 and
    e / (1 + e) for x < 0.
    """
    e = np.exp(-np.abs(x))
    y: np.ndarray = x * np.where(x >= 0, 1, e) / (1 + e)
    return y


def activation(x: np.ndarray, name: str) -> np.ndarray:
    """The MLP's activation, by HF's name (``hparams.activation_function``).  [...] -> [...]

    GPT-2's is the tanh GELU ("gelu_new", and "gelu_pytorch_tanh", the same equation); the
    family also has the exact GELU ("gelu"), ReLU and SiLU ("silu", "swish").
    """
    kind = ACTIVATIONS[name]
    if kind == "gelu_tanh":
        return gelu(x)
    if kind == "gelu_erf":
        return gelu_erf(x)
    if kind == "relu":
        return relu(x)
    return silu(x)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax(x)_i = exp(x_i - max x) / Σ_j exp(x_j - max x) along ``axis``.   [...] -> [...]

    Subtracting the maximum changes nothing mathematically and keeps exp from overflowing.
    """
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    p: np.ndarray = e / np.sum(e, axis=axis, keepdims=True)
    return p


def layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Layer normalisation over the last axis (Ba et al., 2016).

    μ = mean(x), σ² = mean((x - μ)²)  (the biased variance)
    y = g · (x - μ) / √(σ² + ε) + b,  ε = 1e-5 in GPT-2          [..., D] -> [..., D]

    (HF's ``layer_norm_epsilon`` may set another ε.)
    """
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.mean(np.square(x - mean), axis=-1, keepdims=True)
    y: np.ndarray = g * (x - mean) / np.sqrt(variance + eps) + b
    return y


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The affine map GPT-2 calls conv1d: y = x · w + b.       [..., n_in] -> [..., n_out]

    ``w`` is stored ``[n_in, n_out]`` as in the checkpoint (no transpose needed).
    """
    # One [N, n_in] @ [n_in, n_out] product over all leading axes: on [B, T, n_in] NumPy's
    # matmul would run B separate products, reading w from memory B times.
    y: np.ndarray = x.reshape(-1, x.shape[-1]) @ w
    y += b  # in place: no second [N, n_out] array
    return y.reshape(*x.shape[:-1], w.shape[-1])


class Recorder:
    """How the forward pass names its intermediates: ``record(name, x)`` returns ``x`` unchanged.

    Every function of the clear forward pass takes a ``record`` and hands it each intermediate
    under its name (``record("probs", probs)``), and ``record.scope("attn")`` prefixes the names
    of a sub-computation (``h3.attn.probs``). This one records nothing;
    :func:`gpt2np.golden.trace.trace` passes one that keeps the arrays, so the names in the code,
    in a
    trace and in a golden file are the same names, and running and tracing are one composition.
    """

    def __call__(self, name: str, x: np.ndarray) -> np.ndarray:
        return x

    def scope(self, name: str) -> Recorder:
        """The recorder for the sub-computation ``name``: here, this same do-nothing one."""
        return self


#: The default ``record`` of every function of the forward pass.
RECORD_NOTHING = Recorder()


def head(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    """The output head: logits = h · wteᵀ.        [B, T, D] @ [D, V] -> [B, T, V]

    GPT-2 ties it to the token embedding; an untied model passes its ``lm_head`` [V, D] here.
    ``wte.T`` is a view, so no transposed copy of the embedding matrix is made; the leading axes
    are flattened so that wte is read once, not once per batch row.
    """
    logits: np.ndarray = h.reshape(-1, h.shape[-1]) @ wte.T  # [B*T, D] @ [D, V] -> [B*T, V]
    return logits.reshape(*h.shape[:-1], wte.shape[0])
