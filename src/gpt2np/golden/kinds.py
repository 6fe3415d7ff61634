"""Which kind of golden file a path holds: a forward pass's (an .npz of the trace), a
tokenizer's (JSON, :mod:`gpt2np.golden.tokens`) or a sampler's (an .npz whose manifest says
``gpt2np-sampler-golden``, :mod:`gpt2np.golden.sampler`). ``gpt2np compare`` dispatches on it."""

from __future__ import annotations

import os
import pathlib
from typing import Any

from ..errors import CheckpointError
from .reader import GoldenFile

__all__ = ["golden_kind"]

SAMPLER_FORMAT = "gpt2np-sampler-golden"


def golden_kind(x: Any) -> str:
    """ "tokenizer", "sampler" or "forward" (anything else, including what cannot be read:
    the forward comparison then says why)."""
    if not isinstance(x, (str, os.PathLike)):
        return "forward"
    path = pathlib.Path(x)
    try:
        if path.is_file() and path.stat().st_size > 0:
            with open(path, "rb") as f:
                first = f.read(64).lstrip()[:1]
            if first == b"{":
                return "tokenizer"
        with GoldenFile(path) as g:
            if (g.manifest or {}).get("format") == SAMPLER_FORMAT:
                return "sampler"
    except (OSError, CheckpointError):
        pass
    return "forward"
