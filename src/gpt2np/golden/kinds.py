"""Which kind of golden file a path holds: a forward pass's (an .npz of the trace), a
tokenizer's (JSON, :mod:`gpt2np.golden.tokens`), a sampler's (an .npz whose manifest says
``gpt2np-sampler-golden``, :mod:`gpt2np.golden.sampler`) or a sampler suite (a directory with a
``suite.json``). ``gpt2np compare`` dispatches on it."""

from __future__ import annotations

import os
import pathlib
from typing import Any

from ..errors import CheckpointError
from .reader import GoldenFile

__all__ = ["golden_kind"]

SAMPLER_FORMAT = "gpt2np-sampler-golden"
#: The first bytes of a tokenizer golden's binary form (gpt2np.golden.tokens.BINARY_MAGIC).
TOKENIZER_BINARY_MAGIC = b"GPT2NPTK"
#: A sampler suite's index file (gpt2np.golden.sampler.SUITE_INDEX).
SUITE_INDEX = "suite.json"


def golden_kind(x: Any) -> str:
    """ "tokenizer", "tokenizer binary", "sampler", "sampler suite" or "forward" (anything
    else, including what cannot be read: the forward comparison then says why)."""
    if not isinstance(x, (str, os.PathLike)):
        return "forward"
    path = pathlib.Path(x)
    if path.is_dir() and (path / SUITE_INDEX).is_file():
        return "sampler suite"  # (its comparison checks the index)
    try:
        if path.is_file() and path.stat().st_size > 0:
            with open(path, "rb") as f:
                head = f.read(64)
            if head.lstrip()[:1] == b"{":
                return "tokenizer"
            if head[:8] == TOKENIZER_BINARY_MAGIC:
                return "tokenizer binary"
        with GoldenFile(path) as g:
            if (g.manifest or {}).get("format") == SAMPLER_FORMAT:
                return "sampler"
    except (OSError, CheckpointError):
        pass
    return "forward"
