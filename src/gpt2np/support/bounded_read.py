"""Reading small files (JSON configs, indexes, cache entries) with bounds on what they may cost.

A name in a model directory may be a symlink to ``/dev/zero`` (an endless file), a FIFO (a read
that never returns), a socket or a directory, and a JSON file may be 10**6 brackets deep (the
parser recurses once per level). :func:`open_regular` opens without blocking and refuses
anything but a regular file (the one opener of the files gpt2np reads: golden files and the
command line's FILE arguments use it too); :func:`read_small_file` reads at most ``max_bytes``
of one; :func:`read_json_file` also caps
the nesting depth before parsing. Both raise :class:`~gpt2np.CheckpointError` naming the file,
so callers in any layer can reuse them for the files they read.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Callable

import numpy as np

from ..errors import CheckpointError

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "check_stdin",
    "file_kind",
    "json_depth",
    "open_regular",
    "read_json_file",
    "read_small_file",
]

MAX_JSON_BYTES = 16 << 20  # a GPT-2 config is ~1 KB, a 1558M cache entry ~80 KB
MAX_JSON_DEPTH = 32  # the deepest file gpt2np reads is four levels deep
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def open_regular(
    path: str | os.PathLike[str],
    error: Callable[[str], Exception] = CheckpointError,
    *,
    missing: str = "{}: no such file",
    fifo_hint: str = "",
    append: bool = False,
) -> int:
    """A descriptor of the regular file at ``path``, open for reading.

    Opened with O_NONBLOCK, so a FIFO does not wait for a writer; then fstat on the open file
    (not the name, which could be swapped in between) must say "regular file". A missing file
    (``missing``, formatted with the name), another kind of file (``fifo_hint`` added for a
    FIFO) and an OS error are ``error(message)`` naming the file. ``append``: open it to read
    and append instead, created if missing, never through a symlink (score-corpus's OUTPUT).
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_BINARY", 0)
    if append:
        flags |= os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(name, flags, 0o666)
    except FileNotFoundError:
        raise error(missing.format(name)) from None
    except OSError as e:  # a socket (ENXIO), no permission, a loop of symlinks, ...
        try:
            mode = os.stat(name).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):  # say what it is, not the errno opening it gave
            raise error(f"{name} is {file_kind(mode)}, not a regular file") from None
        raise error(f"cannot {'write' if append else 'read'} {name}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        hint = fifo_hint if stat.S_ISFIFO(mode) else ""
        raise error(f"{name} is {file_kind(mode)}, not a regular file{hint}")
    return fd


def read_small_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path`` (:func:`open_regular`), which must hold at
    most ``max_bytes``. Missing files, other file types, a size over the cap and I/O errors are
    a CheckpointError naming the file.
    """
    name = os.fspath(path)
    fd = open_regular(name, missing="missing {}")
    try:
        st = os.fstat(fd)
        if st.st_size > max_bytes:
            raise CheckpointError(f"{name} has {st.st_size} bytes, more than the {max_bytes} "
                                  "such a file may have")  # fmt: skip
        data = bytearray()
        while True:  # to the end, but never past the cap (the file may grow meanwhile)
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
            if len(data) > max_bytes:
                raise CheckpointError(f"{name} grew past {max_bytes} bytes while it was read")
        return bytes(data)
    except OSError as e:
        raise CheckpointError(f"cannot read {name}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def check_stdin(fd: int, error: Callable[[str], Exception] = CheckpointError) -> None:
    """stdin (``fd``) may be a regular file, a pipe or FIFO, a socket, a terminal or /dev/null;
    any other device (``/dev/zero``, ``/dev/urandom``: endless) is ``error`` naming it."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return
    if stat.S_ISCHR(mode) and _is_devnull(fd):
        return
    try:  # Linux names what stdin is: "/dev/zero"
        where = f" ({os.readlink(f'/proc/self/fd/{fd}')})"
    except OSError:
        where = ""
    raise error(f"<stdin> is {file_kind(mode)}{where}, not a file or a pipe")


def _is_devnull(fd: int) -> bool:
    try:
        return os.fstat(fd).st_rdev == os.stat(os.devnull).st_rdev
    except (OSError, AttributeError):
        return False


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for an error: 'a FIFO', 'a directory', …."""
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return what
    return "not a regular file"


def json_depth(text: bytes) -> int:
    """How deeply the arrays and objects of the JSON ``text`` nest (brackets inside strings do
    not count). Linear in the size; cheap when there are few brackets at all."""
    if text.count(b"[") + text.count(b"{") == 0:
        return 0
    brackets = np.frombuffer(_STRING.sub(b"", text).translate(None, _NOT_BRACKETS), np.uint8)
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def read_json_file(
    path: str | os.PathLike[str],
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """The JSON value in the file at ``path``, read by :func:`read_small_file` with its nesting
    capped at ``max_depth``. Not UTF-8, not JSON, too big or too deep: a CheckpointError naming
    the file (a subclass of ValueError)."""
    name = os.fspath(path)
    data = read_small_file(name, max_bytes)
    if max_depth < len(data) // 2 and json_depth(data) > max_depth:  # (n bytes nest <= n/2)
        raise CheckpointError(
            f"cannot read {name}: JSON nested too deeply (over {max_depth} levels)"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(
            f"cannot read {name}: not UTF-8 ({e.reason} at byte {e.start})"
        ) from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise CheckpointError(f"cannot read {name}: {e}") from None
