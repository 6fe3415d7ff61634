"""The kernels: the five functions that do a forward pass's heavy work, as one bundle.

:func:`gpt2np.model.forward` and :func:`gpt2np.block.block` call :func:`gpt2np.attention.attend`,
:func:`gpt2np.layers.activation`, :func:`gpt2np.layers.layernorm`, :func:`gpt2np.layers.head`
and :func:`gpt2np.layers.linear` through a :class:`Kernels` bundle, so that one composition runs
either the clear functions (:data:`CLEAR`) or their faster twins (``gpt2np.fast.FAST``). The
Protocols say what each kernel takes and returns; the teaching files hold the maths only.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Protocol

import numpy as np

from .attention import attend
from .layers import RECORD_NOTHING, Recorder, activation, head, layernorm, linear

__all__ = ["CLEAR", "Act", "Attend", "Head", "Kernels", "Linear", "Norm"]


class Attend(Protocol):
    """attend(q, k, v, mask, record, scale): a kernel of scaled dot-product attention."""

    def __call__(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, /,
        record: Recorder = RECORD_NOTHING, scale: Optional[float] = None,
    ) -> np.ndarray: ...  # fmt: skip


class Act(Protocol):
    """act(x, name): the MLP's activation named as in ``hparams.activation_function``."""

    def __call__(self, x: np.ndarray, name: str, /) -> np.ndarray: ...


class Norm(Protocol):
    """norm(x, g, b, eps=1e-5): a LayerNorm kernel (g and b by name, as ``**params["ln_1"]``
    passes them)."""

    def __call__(
        self, x: np.ndarray, /, g: np.ndarray, b: np.ndarray, eps: float = 1e-5
    ) -> np.ndarray: ...


class Head(Protocol):
    """head(h, w): the output head's product h · wᵀ."""

    def __call__(self, h: np.ndarray, w: np.ndarray, /) -> np.ndarray: ...


class Linear(Protocol):
    """linear(x, w, b): the affine map x · w + b (w and b by name, as ``**params["c_fc"]``
    passes them)."""

    def __call__(self, x: np.ndarray, /, w: np.ndarray, b: np.ndarray) -> np.ndarray: ...


class Kernels(NamedTuple):
    """The five functions that do a forward pass's heavy work, plugged into the one composition
    (:func:`gpt2np.model.forward`, :func:`gpt2np.block.block`, :func:`gpt2np.attention.attention`).

    :data:`CLEAR` holds the clear functions; ``gpt2np.fast.FAST`` holds faster twins that
    compute the same numbers up to float rounding (tests/fast/test_kernels.py). A fast kernel may
    overwrite its input where the composition hands it a fresh array it owns (the MLP's hidden
    activations).
    """

    attend: Attend  # softmax(q·kᵀ·scale + mask)·v             [B, H, T, Dh]
    act: Act  # the MLP's activation                             [B, T, 4D]
    norm: Norm  # LayerNorm                                        [B, T, D]
    head: Head  # logits = h · wᵀ                                  [B, T, V]
    linear: Linear  # x · w + b: c_attn, c_proj, c_fc, mlp.c_proj     [B, T, n_out]


#: The clear kernels: the forward pass as the equations write it.
CLEAR = Kernels(attend, activation, layernorm, head, linear)
