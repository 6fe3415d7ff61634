"""The one file lock: an exclusive lock on a path, across processes and threads.

``fcntl.flock`` on POSIX (released by the OS if the process dies); elsewhere an ``O_EXCL`` lock
file whose mtime the holder refreshes, taken over when older than :data:`STALE_LOCK_SECONDS`.
The holder removes the lock file when it is done (a waiter that then holds the lock of a removed
file tries again), so a finished or failed holder leaves no lock behind. Downloads from
OpenAI's bucket and from the Hugging Face Hub take it (``gpt2np.sources``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import threading
import time
from typing import Optional

from ..errors import DownloadError

try:
    import fcntl
except ImportError:  # Windows: fall back to an O_EXCL lock file
    fcntl = None  # type: ignore[assignment]  # the module's name, None where there is none

__all__ = ["LOCK_POLL_SECONDS", "STALE_LOCK_SECONDS", "FileLock"]

STALE_LOCK_SECONDS = 120.0  # O_EXCL fallback only: the holder refreshes the mtime 4x as often
LOCK_POLL_SECONDS = 0.5  # O_EXCL fallback only


class FileLock:
    """Exclusive lock on ``path`` across processes (and threads: each one opens the file anew).

    ``with FileLock(path, notify=True):`` waits for the holder (saying so on stderr when
    ``notify``), and removes the lock file when done."""

    def __init__(
        self, path: pathlib.Path, use_fcntl: Optional[bool] = None, notify: bool = False
    ) -> None:
        self.path, self.notify = path, notify
        self.use_fcntl = fcntl is not None if use_fcntl is None else use_fcntl
        self._fd: Optional[int] = None
        self._stop = threading.Event()

    def __enter__(self) -> FileLock:
        try:
            if self.use_fcntl:
                self._fd = self._acquire_flock()
            else:
                self._acquire_excl()
        except OSError as e:  # a read-only models dir, say
            raise DownloadError(f"could not take the download lock {self.path}: {e}") from e
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:  # fcntl's lock: remove the file while holding it, then release
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self._fd)
            self._fd = None
        else:
            self._stop.set()
            self.path.unlink(missing_ok=True)

    def _acquire_flock(self) -> int:
        """An open file of ``path`` holding its flock. The holder before us removes the file
        when done: a lock on a file no longer at ``path`` is worth nothing, so try again."""
        told = False
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if not told:
                        self._waiting()
                        told = True
                    fcntl.flock(fd, fcntl.LOCK_EX)
                held, now = os.fstat(fd), os.stat(self.path)
                if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                    return fd
            except FileNotFoundError:
                pass
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def _waiting(self) -> None:
        if self.notify:
            print(f"waiting for another download ({self.path}) ...", file=sys.stderr)

    def _acquire_excl(self) -> None:
        told = False
        while True:
            try:
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                break
            except FileExistsError:
                try:
                    age = time.time() - self.path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if age > STALE_LOCK_SECONDS:  # holder died without cleaning up
                    self.path.unlink(missing_ok=True)
                    continue
                if not told:
                    self._waiting()
                    told = True
                time.sleep(LOCK_POLL_SECONDS)
        threading.Thread(target=self._heartbeat, daemon=True).start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(STALE_LOCK_SECONDS / 4):
            try:
                os.utime(self.path)
            except OSError:
                return
