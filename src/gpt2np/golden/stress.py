"""Stress weights: random GPT-2 parameters in which every parameter changes the output, for
golden files that catch what plain random weights hide.

Random weights of GPT-2's initial scale, as most ports test with, hide whole bug classes. With
the biases at 0 and the LayerNorm gains at 1 (PyTorch's and HF's initialisation), a port that
drops a bias or a LayerNorm's affine part computes exactly the golden's numbers; with small
attention scores (|score| < 1 at std 0.02), a softmax without the max subtracted never
overflows, not even in float16. :func:`stress_params` draws weights of the same shapes where
each of those shows:

- **every bias is non-zero** (``c_attn.b``, ``attn.c_proj.b``, ``mlp.c_fc.b``,
  ``mlp.c_proj.b``: N(0, 0.3²) plus, for q and k, the offset below), so a dropped attention or
  MLP bias moves its tensor by far more than any preset's tolerance;
- **LayerNorm gains ≠ 1 and biases ≠ 0** (g = exp(N(0, 0.3²)), b ~ N(0, 0.2²)), so a LayerNorm
  without its affine part, or with g and b swapped, shows;
- **attention scores far above float16's overflow point**: each head's query and key biases
  share a direction, ``b_q = b_k = a·u_h`` (u_h a random unit vector of the head's Dh
  channels, a = √(SCORE_OFFSET · √Dh)), which adds ``SCORE_OFFSET`` = 16 to every score of the
  head (b_q·b_k/√Dh = a²/√Dh), in every layer and at any width. A constant added to a row of
  scores leaves the softmax unchanged, so the float64 and float32 forward passes stay finite
  and the attention spread out (only b_q·k adds to it, which varies by key); but exp(16) = 8.9e6 is
  beyond float16's largest value (65504, exp(11.09)): a port that takes exp(score) in float16
  without subtracting the row's maximum gets inf / inf = NaN. Trained GPT-2 has such scores too;
- **small embeddings** (wte ~ N(0, 0.01²), wpe ~ N(0, 0.005²)): the first LayerNorm's input has
  a variance near 1.3e-4, where its ε (1e-5) moves the output by a few percent: an ε of 1e-6
  shows at float16, not only at float32;
- matrices ~ N(0, 0.25 / n_in), so every pre-activation has a standard deviation near 0.5
  whatever the width (a tiny test model and 124M behave alike); an untied ``lm_head`` like wte.

The weights are float32 by default (what a checkpoint holds); the forward pass of gpt2np on
them is finite in float32 and float64 (tests/golden/test_stress.py checks it). Write them as a
checkpoint with ``gpt2np stress-weights --like 124M --out DIR`` (HF's config.json +
model.safetensors), or from Python: ``gpt2np.save(gpt2np.GPT2(hp, stress_params(hp)), DIR)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..hparams import HParams
from ..params import Params, expected_shapes, unflatten

__all__ = ["SCORE_OFFSET", "stress_params"]

#: What the shared query/key bias direction adds to every attention score (before the mask).
#: float16 overflows at exp(11.09); 16 leaves a margin for the scores' spread.
SCORE_OFFSET = 16.0
_BIAS_STD = 0.3
_LN_GAIN_LOG_STD = 0.3
_LN_BIAS_STD = 0.2
_WTE_STD = 0.01
_WPE_STD = 0.005
_MATRIX_STD = 0.5  # times 1/√n_in


def stress_params(hparams: HParams, seed: int = 0, dtype: Any = np.float32) -> Params:
    """Parameters of ``hparams``' shapes in which every one matters (see the module docstring):
    non-zero biases, LayerNorm gains ≠ 1 and biases ≠ 0, and q/k biases that add
    :data:`SCORE_OFFSET` to every attention score, so that a softmax without max-subtraction
    overflows in float16 in every layer. Deterministic in ``seed``. Returns the nested tree
    :func:`gpt2np.params.unflatten` builds, as ``dtype`` (float32 by default)."""
    if not isinstance(hparams, HParams):
        raise TypeError(f"hparams must be an HParams, got {type(hparams).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        raise ValueError(f"dtype must be a float type such as float32, got {dtype}")
    rng = np.random.default_rng(int(seed))
    D, H = hparams.n_embd, hparams.n_head
    Dh = D // H
    a = math.sqrt(SCORE_OFFSET * math.sqrt(Dh))  # a²/√Dh = SCORE_OFFSET
    flat: dict[str, np.ndarray] = {}
    for name, shape in expected_shapes(hparams).items():
        if name in ("wte", "lm_head"):
            x = _WTE_STD * rng.standard_normal(shape)
        elif name == "wpe":
            x = _WPE_STD * rng.standard_normal(shape)
        elif name.endswith(".g"):
            x = np.exp(_LN_GAIN_LOG_STD * rng.standard_normal(shape))
        elif name.endswith((".ln_1.b", ".ln_2.b")) or name == "ln_f.b":
            x = _LN_BIAS_STD * rng.standard_normal(shape)
        elif name.endswith(".w"):
            x = _MATRIX_STD / math.sqrt(shape[0]) * rng.standard_normal(shape)
        else:  # a bias of c_attn, attn.c_proj, mlp.c_fc or mlp.c_proj
            x = _BIAS_STD * rng.standard_normal(shape)
            if name.endswith("attn.c_attn.b"):
                u = rng.standard_normal((H, Dh))
                u /= np.linalg.norm(u, axis=1, keepdims=True)
                x[: 2 * D] += np.tile(a * u.reshape(D), 2)  # b_q = b_k = a·u_h per head
        flat[name] = x.astype(dtype)
    return unflatten(flat, hparams)
