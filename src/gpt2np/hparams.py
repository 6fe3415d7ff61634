"""GPT-2's hyperparameters and the four published sizes (Radford et al., 2019, Table 2)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from .support.bounded_read import read_json_file

__all__ = ["ACTIVATIONS", "HPARAMS", "MODEL_NAMES", "HParams"]


#: The MLP activations gpt2np runs, by HF's name (``activation_function``), each to the function
#: it means: GPT-2's tanh GELU (HF's ``gelu_new``; ``gelu_pytorch_tanh`` is the same equation in
#: PyTorch's C), the exact erf GELU, ReLU, and SiLU (``swish`` is HF's alias).
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu_erf",
               "relu": "relu", "silu": "silu", "swish": "silu"}  # fmt: skip

#: The five numbers of OpenAI's hparams.json, in order.
SHAPE_FIELDS = ("n_vocab", "n_ctx", "n_embd", "n_head", "n_layer")


@dataclasses.dataclass(frozen=True)
class HParams:
    """The five numbers that fix a GPT-2 model's shapes, named as in OpenAI's hparams.json, and
    the settings of the GPT-2 family beyond OpenAI's release, named as in HF's GPT2Config.

    n_vocab: tokens in the vocabulary (V); n_ctx: longest sequence (positions in wpe);
    n_embd: width of the residual stream (D); n_head: attention heads (H), D = H * d_head;
    n_layer: transformer blocks (L).

    The family's settings (pass them by keyword; the defaults are GPT-2's, so OpenAI's four
    sizes never mention them):
    layer_norm_epsilon: the ε of every LayerNorm (1e-5);
    n_inner: the MLP's hidden width, None for 4·D (see :attr:`d_ff`);
    activation_function: the MLP's activation, a key of :data:`ACTIVATIONS` ("gelu_new");
    scale_attn_weights: multiply the attention scores by 1/√d_head (True);
    scale_attn_by_inverse_layer_idx: also by 1/(i + 1) in block i, counted from 0 (False);
    reorder_and_upcast_attn: HF computes the scores and softmax in float32 even in half
        precision; in float32 and float64 that is the same maths (False);
    tie_word_embeddings: the head reuses wte (True); False: the head is its own
        ``lm_head`` [V, D].
    """

    n_vocab: int = 50257
    n_ctx: int = 1024
    n_embd: int = 768
    n_head: int = 12
    n_layer: int = 12
    layer_norm_epsilon: float = 1e-5
    n_inner: Optional[int] = None
    activation_function: str = "gelu_new"
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in SHAPE_FIELDS:
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        eps = self.layer_norm_epsilon
        try:  # an int past float's range (JSON allows 1e39 written out) overflows float()
            finite = not isinstance(eps, (bool, np.bool_)) and isinstance(eps, numbers.Real)
            finite = finite and 0 < float(eps) < math.inf
        except OverflowError:
            finite = False
        if not finite:
            raise ValueError(
                "HParams.layer_norm_epsilon must be a positive finite number, got "
                f"layer_norm_epsilon={eps!r}"
            )
        object.__setattr__(self, "layer_norm_epsilon", float(eps))
        if self.n_inner is not None:
            object.__setattr__(self, "n_inner", _positive_int("n_inner", self.n_inner))
        if not isinstance(self.activation_function, str) or (  # {} is unhashable
            self.activation_function not in ACTIVATIONS
        ):
            raise ValueError(
                f"HParams.activation_function={self.activation_function!r} is not one gpt2np "
                f"runs (it runs {', '.join(ACTIVATIONS)})"
            )
        for name in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                     "reorder_and_upcast_attn", "tie_word_embeddings"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"HParams.{name} must be True or False, got {name}={value!r}")
            object.__setattr__(self, name, bool(value))

    @property
    def d_head(self) -> int:
        """Width of one attention head, n_embd // n_head."""
        return self.n_embd // self.n_head

    @property
    def d_ff(self) -> int:
        """Hidden width of the MLP: n_inner, or 4 · n_embd when n_inner is None (GPT-2)."""
        return 4 * self.n_embd if self.n_inner is None else self.n_inner

    @property
    def n_params(self) -> int:
        """Number of parameters (a tied head counted once, an untied one as V · D more)."""
        D, F, L = self.n_embd, self.d_ff, self.n_layer
        per_block = (2 * D) + (D * 3 * D + 3 * D) + (D * D + D) + (2 * D)
        per_block += (D * F + F) + (F * D + D)
        head = 0 if self.tie_word_embeddings else self.n_vocab * D
        return self.n_vocab * D + self.n_ctx * D + L * per_block + 2 * D + head

    def extras(self) -> dict[str, Any]:
        """The family's settings that differ from GPT-2's: {} for OpenAI's four sizes."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in SHAPE_FIELDS and getattr(self, f.name) != f.default
        }

    def to_dict(self) -> dict[str, Any]:
        """The hparams.json form: {"n_vocab": ..., "n_ctx": ..., ...}, the five numbers, then
        any family setting that is not GPT-2's (under HF's name)."""
        return {**{name: getattr(self, name) for name in SHAPE_FIELDS}, **self.extras()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HParams:
        """Build from an hparams.json dict (or :meth:`to_dict`'s): the five numbers must be
        there, the family's settings may; other keys are ignored."""
        if not isinstance(d, Mapping):  # else `n not in d` is a substring test on a str
            raise TypeError(f"hparams must be a dict (a JSON object), got {type(d).__name__}")
        missing = [n for n in SHAPE_FIELDS if n not in d]
        if missing:
            raise ValueError(f"hparams missing {', '.join(missing)}")
        names = [f.name for f in dataclasses.fields(cls) if f.name in d]
        return cls(**{n: d[n] for n in names})

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> HParams:
        """Read OpenAI's hparams.json (a regular file of at most 1 MiB); a ValueError (a
        :class:`~gpt2np.CheckpointError` if the file cannot be read as JSON) or TypeError names
        the file."""
        data = read_json_file(path, max_bytes=1 << 20)
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as e:
            error = ValueError if isinstance(e, ValueError) else TypeError
            raise error(f"{os.fspath(path)}: {e}") from None

    def __repr__(self) -> str:
        fields = [f"{k}={v!r}" for k, v in self.to_dict().items()]
        return f"HParams({', '.join(fields)})"


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"HParams.{name} must be an int, got {name}={value!r}")
    n = int(value)  # a NumPy integer (read from an array, say) becomes a plain int
    if n <= 0:
        raise ValueError(f"HParams.{name} must be positive, got {name}={n}")
    return n


#: The four sizes OpenAI released, keyed by the name of their download directory.
HPARAMS: dict[str, HParams] = {
    "124M": HParams(n_embd=768, n_head=12, n_layer=12),
    "355M": HParams(n_embd=1024, n_head=16, n_layer=24),
    "774M": HParams(n_embd=1280, n_head=20, n_layer=36),
    "1558M": HParams(n_embd=1600, n_head=25, n_layer=48),
}

MODEL_NAMES = tuple(HPARAMS)
