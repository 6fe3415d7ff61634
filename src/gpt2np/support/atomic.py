"""Writing a file whole or not at all: the one place gpt2np writes a file that others read.

A reader of ``path`` sees the old file or the new one, never half of either: the bytes go to a
temporary file beside it, which is flushed and synced, optionally verified, and only then
renamed over ``path`` (a rename within one directory is atomic on POSIX and on Windows), and
the directory is synced so that the rename survives a crash. On any failure, a full disk or an
interrupt included, the temporary file is removed and ``path`` is untouched.

The temporary file is named ``.NAME.gpt2np-PID-RANDOM.tmp``: hidden, marked as gpt2np's, and
carrying the writer's process id, so that a later run can tell what a dead gpt2np process left
behind (:func:`is_leftover`) from what a live one is still writing, and from files that are not
gpt2np's at all. It is created with the mode any new file gets (0666 less the umask), not
``mkstemp``'s 0600, which would stay with the file once renamed.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import secrets
import stat
from collections.abc import Iterator
from typing import IO, Any, Callable, Optional, Union

from .paths import fsync_dir

__all__ = ["TEMP_PATTERN", "atomic_write", "check_target", "is_leftover", "write_bytes"]

StrPath = Union[str, "os.PathLike[str]"]

#: The name of a temporary file of :func:`atomic_write`: (hidden name, writer's pid).
TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.gpt2np-(?P<pid>\d+)-[0-9a-f]{12}\.tmp$")


def check_target(path: StrPath) -> None:
    """Refuse to replace anything but a regular file (or nothing): a directory, a FIFO, a device
    or a socket at ``path`` is the user's, and renaming over it would destroy it. -> ValueError"""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise ValueError(f"cannot write {os.fspath(path)}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = (
            "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        )
        raise ValueError(f"refusing to replace {os.fspath(path)}: it is {kind}")


@contextlib.contextmanager
def atomic_write(
    path: StrPath,
    mode: str = "wb",
    *,
    encoding: Optional[str] = None,
    verify: Optional[Callable[[pathlib.Path], None]] = None,
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; when the ``with`` block ends without
    an exception, sync it, run ``verify(temporary_path)`` (which raises to refuse), and rename it
    to ``path``. ``mode`` is "wb", "w" (text, ``encoding``) or "w+b" (read back while writing).

    >>> with atomic_write("out/config.json", "w", encoding="utf-8") as f:
    ...     json.dump(config, f)
    """
    if mode not in ("wb", "w", "w+b"):
        raise ValueError(f"mode must be 'wb', 'w' or 'w+b', got {mode!r}")
    target = pathlib.Path(path)
    check_target(target)
    flags = os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    flags |= os.O_RDWR if "+" in mode else os.O_WRONLY
    tmp = target.parent / f".{target.name}.gpt2np-{os.getpid()}-{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, flags, 0o666)  # 0666 less the umask, as open() gives any new file
    try:
        with os.fdopen(fd, "r+b" if "+" in mode else mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if verify is not None:
            verify(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def write_bytes(path: StrPath, data: Union[bytes, str]) -> None:
    """``path`` holds ``data`` (a str is written as UTF-8), whole or not at all."""
    with atomic_write(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def is_leftover(path: pathlib.Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`atomic_write` whose writer has died (its
    pid names no running process), so that it can be removed. False for anything else."""
    match = TEMP_PATTERN.match(path.name)
    if match is None:
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # alive (another user's) or unknowable: leave it
    return False
