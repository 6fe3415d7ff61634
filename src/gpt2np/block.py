"""The position-wise feed-forward network and the pre-norm transformer block (GPT-2, §2.3).

GPT-2 moved LayerNorm to the input of each sub-block (unlike the original Transformer):

    x = x + attn(ln_1(x))
    x = x + mlp(ln_2(x))

The checkpoint calls the feed-forward network ``mlp``; the function is :func:`ffn` (the name
of Vaswani et al. §3.3, and picoGPT's) so that ``block``'s parameter ``mlp`` — the checkpoint's
sub-dict, passed straight in with ``**params["blocks"][i]`` — does not hide it.
"""

from __future__ import annotations

import numpy as np

from .attention import Past, attention
from .kernels import CLEAR, Kernels
from .layers import RECORD_NOTHING, Recorder

__all__ = ["block", "ffn"]


def ffn(
    x: np.ndarray,
    c_fc: dict[str, np.ndarray],
    c_proj: dict[str, np.ndarray],
    record: Recorder = RECORD_NOTHING,
    act: str = "gelu_new",
    kernels: Kernels = CLEAR,
) -> np.ndarray:
    """ffn(x) = gelu(x · W_fc + b_fc) · W_proj + b_proj, hidden width 4·D.

    x [B, T, D]; c_fc {"w" [D, 4D], "b" [4D]}; c_proj {"w" [4D, D], "b" [D]}  ->  [B, T, D]

    ``act`` names the activation as HF does (:func:`gpt2np.layers.activation`, run as
    ``kernels.act``): GPT-2's tanh GELU by default; its output is recorded as ``gelu`` whichever
    it is. The hidden width is the weights' (HF's ``n_inner`` may make it other than 4·D). The
    two affine maps are :func:`gpt2np.layers.linear`, run as ``kernels.linear``.
    """
    h = record("c_fc", kernels.linear(x, **c_fc))  # [B, T, D] -> [B, T, 4D]
    h = record("gelu", kernels.act(h, act))  # [B, T, 4D]
    return record("c_proj", kernels.linear(h, **c_proj))  # [B, T, 4D] -> [B, T, D]


def block(
    x: np.ndarray,
    ln_1: dict[str, np.ndarray],
    attn: dict[str, dict[str, np.ndarray]],
    ln_2: dict[str, np.ndarray],
    mlp: dict[str, dict[str, np.ndarray]],
    n_head: int,
    past: Past = None,
    record: Recorder = RECORD_NOTHING,
    eps: float = 1e-5,
    act: str = "gelu_new",
    scale: float | None = None,
    kernels: Kernels = CLEAR,
) -> tuple[np.ndarray, np.ndarray]:
    """One transformer block; its keyword names are the checkpoint's, so ``**params["blocks"][i]``
    passes straight in.

    x [B, T, D], past [B, 2, H, T_past, Dh], a KVCache layer or None
    ->  (x [B, T, D], present [B, 2, H, T, Dh])

    eps, act, scale: the LayerNorms' ε, the MLP's activation and the attention scores' factor;
    the defaults (1e-5, the tanh GELU, 1/√Dh) are GPT-2's. ``kernels.norm`` is LayerNorm
    (:func:`gpt2np.layers.layernorm` unless faster kernels are plugged in).
    """
    a = record("ln_1", kernels.norm(x, **ln_1, eps=eps))  # [B, T, D]
    a, present = attention(a, **attn, n_head=n_head, past=past, record=record.scope("attn"),
                           scale=scale, attend=kernels.attend, linear=kernels.linear)  # fmt: skip
    x = record("resid_mid", x + a)  # [B, T, D]
    m = record("ln_2", kernels.norm(x, **ln_2, eps=eps))  # [B, T, D]
    m = ffn(m, **mlp, record=record.scope("mlp"), act=act, kernels=kernels)  # [B, T, D]
    return record("out", x + m), present  # [B, T, D]
