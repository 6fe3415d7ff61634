"""Writing a file whole or not at all, and telling gpt2np's leftovers from everything else.

A reader of ``path`` sees the old file or the new one, never half of either: the bytes go to a
temporary file beside it, which is flushed and synced, optionally verified, and only then
renamed over ``path`` (a rename within one directory is atomic on POSIX and on Windows), and
the directory is synced so that the rename survives a crash. On any failure, a full disk or an
interrupt included, the temporary file is removed and ``path`` is untouched.

**The marker.** What gpt2np writes under a temporary name is named ``.NAME.gpt2np-PID-RANDOM.tmp``
(a file of :func:`atomic_write`, a directory of :class:`TempDir`): hidden, marked as gpt2np's,
and carrying the writer's process id; the writer also holds an ``flock`` on it (on the file, or
on the directory itself) until it is renamed into place. A process killed with SIGKILL cleans
nothing up, so a later run removes the temporaries whose writer is gone (:func:`is_leftover`:
its pid names no running process, and nobody holds its lock, which keeps a writer on another
machine sharing the directory, or in another pid namespace, from being taken for a dead one).
Nothing else is ever removed: a name without the marker is the user's, whatever it looks like.
(On Windows no leftover is taken for dead: asking about a pid there would end the process.)

A temporary file is created with the mode any new file gets (0666 less the umask), not
``mkstemp``'s 0600, which would stay with the file once renamed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import pathlib
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from typing import IO, Any, Callable, Optional, Union

from .paths import fsync_dir

try:
    import fcntl
except ImportError:  # Windows: no flock (and no safe way to ask about a pid: see writer_gone)
    fcntl = None  # type: ignore[assignment]  # the module's name, None where there is none

__all__ = [
    "TEMP_PATTERN",
    "TempDir",
    "atomic_write",
    "check_target",
    "exchange",
    "is_leftover",
    "marked_name",
    "sweep",
    "write_bytes",
    "writer_gone",
]

StrPath = Union[str, "os.PathLike[str]"]

#: The name of a temporary file or directory of gpt2np's: (hidden name, writer's pid).
TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.gpt2np-(?P<pid>\d+)-[0-9a-f]{12}\.tmp$")
#: The lock file inside a :class:`TempDir` that older versions' writers held (a writer now
#: locks the directory itself, which stays locked across its rename).
DIR_LOCK = ".gpt2np-writer.lock"


def marked_name(name: str, suffix: str = ".tmp", hidden: bool = True) -> str:
    """``.NAME.gpt2np-PID-RANDOM.tmp``: a new name for a file of this process (``suffix`` and
    ``hidden`` change the ends, e.g. ``NAME.gpt2np-PID-RANDOM.safetensors``)."""
    dot = "." if hidden else ""
    return f"{dot}{name}.gpt2np-{os.getpid()}-{secrets.token_hex(6)}{suffix}"


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
    Leftovers of earlier writers of ``path`` that died are removed first.

    >>> with atomic_write("out/config.json", "w", encoding="utf-8") as f:
    ...     json.dump(config, f)
    """
    if mode not in ("wb", "w", "w+b"):
        raise ValueError(f"mode must be 'wb', 'w' or 'w+b', got {mode!r}")
    target = pathlib.Path(path)
    check_target(target)
    sweep(target.parent, only=target.name)
    flags = os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    flags |= os.O_RDWR if "+" in mode else os.O_WRONLY
    tmp = target.parent / marked_name(target.name)
    fd = os.open(tmp, flags, 0o666)  # 0666 less the umask, as open() gives any new file
    lock = _hold(os.dup(fd))  # held until the rename, after the file object is closed
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
    finally:
        os.close(lock)
    fsync_dir(target.parent)


def write_bytes(path: StrPath, data: Union[bytes, str]) -> None:
    """``path`` holds ``data`` (a str is written as UTF-8), whole or not at all."""
    with atomic_write(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


class TempDir:
    """A new directory ``parent/.NAME.gpt2np-PID-RANDOM.tmp`` (mode 0777 less the umask, not
    mkdtemp's 0700, which a directory renamed into place would keep), locked while it lives:
    the lock is on the directory itself, so it holds until after the rename.

    Fill it, rename it into place, then call :meth:`release`; or :meth:`remove` to give up."""

    def __init__(self, parent: StrPath, name: str) -> None:
        while True:
            self.path = pathlib.Path(parent) / marked_name(name)
            try:
                os.mkdir(self.path)
                break
            except FileExistsError:
                continue
        self._lock: Optional[int] = None
        if fcntl is None:
            return  # no flock here (see writer_gone)
        try:
            self._lock = _hold(os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)))
        except BaseException:
            self.remove()
            raise

    def release(self) -> None:
        """Let go of the lock: after the directory was renamed into place (or removed)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def remove(self) -> None:
        """Remove the directory and everything in it."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


def exchange(a: StrPath, b: StrPath) -> None:
    """Swap the directory entries ``a`` and ``b`` in one step: each name then holds what the
    other held, and no moment shows neither or a mix (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``). OSError where the system cannot (errno ENOSYS, EINVAL: another
    system, an old kernel or C library, a file system without it)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        raise OSError(errno.ENOSYS, "renameat2 is not available", os.fspath(a)) from None
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))


def _hold(fd: int) -> int:
    """Take an exclusive flock on the open file ``fd`` (best effort: a file system without
    locks leaves the pid as the only sign of life); return ``fd``."""
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def writer_gone(pid: int, path: pathlib.Path) -> bool:
    """Whether the process ``pid`` that wrote ``path`` is gone: not this process, no running
    process of that id here, and no lock held on ``path`` (on its lock file, for a directory)."""
    if pid == os.getpid() or pid <= 0 or os.name == "nt":
        return False  # on Windows os.kill(pid, 0) would terminate the process: never ask
    try:
        os.kill(pid, 0)  # signal 0: is there such a process? (nothing is sent)
    except ProcessLookupError:
        pass
    except (PermissionError, OSError, OverflowError):
        return False  # alive (another user's) or unknowable: leave it
    else:
        return False
    if path.is_dir():  # the directory itself, or an older version's lock file in it
        return not (_locked(path) or _locked(path / DIR_LOCK))
    return not _locked(path)


def _locked(path: pathlib.Path) -> bool:
    """Whether another open file holds an flock on ``path`` (False where there are no locks)."""
    if fcntl is None:
        return False
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: treat as alive
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def is_leftover(path: pathlib.Path) -> bool:
    """Whether ``path`` is a temporary file or directory of gpt2np's (see the module docstring)
    whose writer is gone, so that it can be removed. False for anything else."""
    match = TEMP_PATTERN.match(path.name)
    if match is None:
        return False
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return False  # gpt2np makes no symlinks, FIFOs or devices under its names
    return writer_gone(int(match["pid"]), path)


def sweep(directory: StrPath, only: Optional[str] = None) -> None:
    """Remove the leftovers (:func:`is_leftover`) in ``directory``: those of every target, or
    only those of the target named ``only``. Best effort: what cannot be removed stays."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        match = TEMP_PATTERN.match(name)
        if match is None or (only is not None and match["name"] != only):
            continue
        path = pathlib.Path(directory) / name
        if is_leftover(path):
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink()
