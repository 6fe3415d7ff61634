"""Where gpt2np keeps its files: ``$GPT2NP_HOME`` (default ``~/.cache/gpt2np``).

Downloads go into ``models/``, the checkpoint conversion cache into ``cache/``. Both the network
code and the file readers need this, so it lives here, below both.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["expand_user", "fsync_dir", "home_dir"]


def home_dir() -> pathlib.Path:
    """``$GPT2NP_HOME`` (default ``~/.cache/gpt2np``, ``~`` expanded either way): downloads go
    into its ``models/``, the checkpoint conversion cache into its ``cache/``."""
    home = os.environ.get("GPT2NP_HOME") or "~/.cache/gpt2np"
    return pathlib.Path(expand_user(home, "GPT2NP_HOME"))


def expand_user(path: str, what: str) -> str:
    """``path`` with a leading ``~`` or ``~user`` expanded; a ValueError naming ``what`` when it
    cannot be (no such user, no home directory), rather than a directory literally named ``~x``
    or pathlib's RuntimeError."""
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        user = path[1:].split("/", 1)[0].split(os.sep, 1)[0]
        who = f"user {user!r}" if user else "the current user"
        raise ValueError(f"{what} {path!r} starts with ~, but {who} has no home directory here")
    return expanded


def fsync_dir(directory: os.PathLike[str] | str) -> None:
    """Make a rename in ``directory`` durable: a file renamed into place survives a crash only
    once its directory is synced too (POSIX; best effort, and a no-op where a directory cannot
    be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
