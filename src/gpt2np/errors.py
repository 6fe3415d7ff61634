"""The two exception types gpt2np raises for things outside the caller's arguments.

Arguments that are wrong raise the built-in ``ValueError`` / ``TypeError``. A file that is
missing, truncated or corrupt raises :class:`CheckpointError`; a network failure raises
:class:`DownloadError`. Both subclass the built-in a caller would already catch.
"""

from __future__ import annotations

__all__ = ["CheckpointError", "DownloadError"]


class CheckpointError(ValueError):
    """A checkpoint, cache or vocabulary file is missing, truncated, corrupt or inconsistent.

    The message names the file and, where there is one, the tensor.
    """


class DownloadError(OSError):
    """Fetching a model failed; the message names the URL and the file."""
