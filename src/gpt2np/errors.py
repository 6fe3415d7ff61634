"""The two exception types gpt2np raises for things outside the caller's arguments.

Arguments that are wrong raise the built-in ``ValueError`` / ``TypeError``. A file that is
missing, truncated or corrupt raises :class:`CheckpointError`; a network failure raises
:class:`DownloadError`. Both subclass the built-in a caller would already catch.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType
from typing import Optional

__all__ = ["CheckpointError", "DownloadError", "warn"]


class CheckpointError(ValueError):
    """A checkpoint, cache or vocabulary file is missing, truncated, corrupt or inconsistent.

    The message names the file and, where there is one, the tensor.
    """


class DownloadError(OSError):
    """Fetching a model failed; the message names the URL and the file."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside gpt2np (the user's line), however
    deep inside the package the warning arises."""
    level = 2  # stacklevel 2: the function that called warn()
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
