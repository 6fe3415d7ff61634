"""The position-wise MLP and the pre-norm transformer block (GPT-2 paper, §2.3).

GPT-2 moved LayerNorm to the input of each sub-block (unlike the original Transformer):

    x = x + attn(ln_1(x))
    x = x + mlp(ln_2(x))
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .attention import Attend, Past, attend, attention
from .layers import gelu, layernorm, linear

__all__ = ["Activation", "block", "mlp"]


Activation = Callable[[np.ndarray], np.ndarray]


def mlp(
    x: np.ndarray,
    c_fc: dict[str, np.ndarray],
    c_proj: dict[str, np.ndarray],
    act: Activation = gelu,
) -> np.ndarray:
    """mlp(x) = gelu(x · W_fc + b_fc) · W_proj + b_proj, hidden width 4·D.

    x [B, T, D]; c_fc {"w" [D, 4D], "b" [4D]}; c_proj {"w" [4D, D], "b" [D]}  ->  [B, T, D]
    ``act`` computes the gelu; it gets an array of its own, which it may overwrite
    (:func:`gpt2np.fast.gelu_inplace` does).
    """
    a = act(linear(x, **c_fc))  # [B, T, D] -> [B, T, 4D]
    return linear(a, **c_proj)  # [B, T, 4D] -> [B, T, D]


def block(
    x: np.ndarray,
    ln_1: dict[str, np.ndarray],
    attn: dict[str, dict[str, np.ndarray]],
    ln_2: dict[str, np.ndarray],
    mlp: dict[str, dict[str, np.ndarray]],
    n_head: int,
    past: Past = None,
    attend: Attend = attend,
    act: Activation = gelu,
) -> tuple[np.ndarray, np.ndarray]:
    """One transformer block; its keyword names are the checkpoint's, so ``**params["blocks"][i]``
    passes straight in.

    x [B, T, D], past and attend as for :func:`attention`, act as for :func:`mlp`
    ->  (x [B, T, D], present [B, 2, H, T, Dh])
    """
    a, present = attention(layernorm(x, **ln_1), **attn, n_head=n_head, past=past, attend=attend)
    x = x + a  # [B, T, D]
    x = x + _mlp(layernorm(x, **ln_2), **mlp, act=act)  # [B, T, D]
    return x, present


_mlp = mlp  # the parameter named ``mlp`` (the checkpoint's name) shadows the function in block()
