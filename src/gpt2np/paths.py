"""Where gpt2np keeps its files: ``$GPT2NP_HOME`` (default ``~/.cache/gpt2np``).

Downloads go into ``models/``, the checkpoint conversion cache into ``cache/``. Both the network
code and the file readers need this, so it lives here, below both.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["home_dir"]


def home_dir() -> pathlib.Path:
    """``$GPT2NP_HOME`` (default ``~/.cache/gpt2np``, ``~`` expanded either way): downloads go
    into its ``models/``, the checkpoint conversion cache into its ``cache/``."""
    return pathlib.Path(os.environ.get("GPT2NP_HOME") or "~/.cache/gpt2np").expanduser()
