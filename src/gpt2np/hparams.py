"""GPT-2's hyperparameters and the four published sizes (Radford et al., 2019, Table 2)."""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping
from typing import Any

from .smallfiles import read_json_file

__all__ = ["HPARAMS", "MODEL_NAMES", "HParams"]


@dataclasses.dataclass(frozen=True)
class HParams:
    """The five numbers that fix a GPT-2 model's shapes, named as in OpenAI's hparams.json.

    n_vocab: tokens in the vocabulary (V); n_ctx: longest sequence (positions in wpe);
    n_embd: width of the residual stream (D); n_head: attention heads (H), D = H * d_head;
    n_layer: transformer blocks (L).
    """

    n_vocab: int = 50257
    n_ctx: int = 1024
    n_embd: int = 768
    n_head: int = 12
    n_layer: int = 12

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"HParams.{field.name} must be an int, got {value!r}")
            value = int(value)  # a NumPy integer (read from an array, say) becomes a plain int
            object.__setattr__(self, field.name, value)  # the dataclass is frozen
            if value <= 0:
                raise ValueError(f"HParams.{field.name} must be positive, got {value}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    @property
    def d_head(self) -> int:
        """Width of one attention head, n_embd // n_head."""
        return self.n_embd // self.n_head

    @property
    def n_params(self) -> int:
        """Number of parameters (the tied head counted once)."""
        D, L = self.n_embd, self.n_layer
        per_block = (2 * D) + (D * 3 * D + 3 * D) + (D * D + D) + (2 * D)
        per_block += (D * 4 * D + 4 * D) + (4 * D * D + D)
        return self.n_vocab * D + self.n_ctx * D + L * per_block + 2 * D

    def to_dict(self) -> dict[str, int]:
        """The hparams.json form: {"n_vocab": ..., "n_ctx": ..., ...}."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HParams:
        """Build from an hparams.json dict; unknown keys are ignored, missing keys are an error."""
        if not isinstance(d, Mapping):  # else `n not in d` is a substring test on a str
            raise TypeError(f"hparams must be a dict (a JSON object), got {type(d).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in d]
        if missing:
            raise ValueError(f"hparams missing {', '.join(missing)}")
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


#: The four sizes OpenAI released, keyed by the name of their download directory.
HPARAMS: dict[str, HParams] = {
    "124M": HParams(n_embd=768, n_head=12, n_layer=12),
    "355M": HParams(n_embd=1024, n_head=16, n_layer=24),
    "774M": HParams(n_embd=1280, n_head=20, n_layer=36),
    "1558M": HParams(n_embd=1600, n_head=25, n_layer=48),
}

MODEL_NAMES = tuple(HPARAMS)
