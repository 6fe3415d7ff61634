"""The output file of :func:`gpt2np.scoring.score_corpus`: appended a record at a time, and
resumed after a crash.

Every record is one ``write`` of one whole line (:func:`~gpt2np.scoring.records.dumps`), to a
file opened for appending; the file is synced every :data:`SYNC_SECONDS` and at the end. A
process killed at any point (``kill -9`` included) leaves whole records, perhaps followed by
part of one: the next run cuts that part off (the torn last line) and goes on after the last
whole record. (This file grows by appending, not by :mod:`gpt2np.support.atomic`'s
replace-whole, which would rewrite it for every record.)

Beside ``OUTPUT`` lies ``OUTPUT.fingerprint`` (JSON, written whole): the model's identity (its
hyperparameters, dtype and the SHA-256 of its weights) and the settings the records depend on.
A run onto an ``OUTPUT`` that holds records resumes only when the fingerprint is its own, and
only after checking, line by line, that the input's first lines are those the records came
from (each record holds its line's ``line_sha256``); anything else is refused with a
ValueError that says what differs. The input may have grown since: lines past the records are
scored. An advisory lock (POSIX ``flock``) keeps two runs from appending to one file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ..params import flatten
from ..support.atomic import check_target, write_bytes
from ..support.paths import fsync_dir
from .records import Settings, dumps

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["FINGERPRINT_SUFFIX", "SYNC_SECONDS", "Output", "fingerprint"]

FINGERPRINT_SUFFIX = ".fingerprint"
#: How often the appended records are synced to the disk (and when the run ends).
SYNC_SECONDS = 2.0
FORMAT = "gpt2np score-corpus records, version 1"
#: Bytes read at a time when looking back for the end of the last whole line.
_TAIL = 1 << 16


def model_identity(model: Runtime) -> dict[str, Any]:
    """The hyperparameters, the dtype and the SHA-256 of every weight (names, shapes and
    bytes, in forward order) of ``model``. Hashing 124M's 500 MB takes a fraction of a
    second; the pages it reads are the ones scoring reads next."""
    digest = hashlib.sha256()
    for name, array in flatten(model.params).items():
        digest.update(f"{name}{array.shape}{array.dtype.str};".encode())
        digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return {
        "hparams": dataclasses.asdict(model.hparams),
        "dtype": str(model.dtype),
        "weights_sha256": digest.hexdigest(),
    }


def fingerprint(model: Runtime, settings: Settings) -> dict[str, Any]:
    """What ``OUTPUT.fingerprint`` holds for records of ``model`` with ``settings``."""
    return {"format": FORMAT, "model": model_identity(model), "settings": settings.identity()}


class Output:
    """``OUTPUT``, opened to append records after those it holds (see the module docstring).

    >>> with Output(path, fingerprint(model, settings)) as out:
    ...     for record in out.records(): ...      # those already there, checked
    ...     out.append({"line": 8, ...})
    """

    def __init__(self, path: Union[str, os.PathLike[str]], expected: dict[str, Any]) -> None:
        self.path = pathlib.Path(path)
        self.side = self.path.with_name(self.path.name + FINGERPRINT_SUFFIX)
        check_target(self.path)
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            _lock(self._fd, self.path)
            if not existed:
                fsync_dir(self.path.parent)
            self.repaired = 0  #: bytes of a torn last line cut off
            if os.fstat(self._fd).st_size == 0:  # nothing to resume: this run's fingerprint
                write_bytes(self.side, json.dumps(expected, indent=1) + "\n")
            else:
                self._check_fingerprint(expected)
                self.repaired = self._cut_torn_line()
        except BaseException:
            os.close(self._fd)
            raise
        self._synced = time.monotonic()

    def _check_fingerprint(self, expected: dict[str, Any]) -> None:
        start_afresh = f"delete {self.path} (and {self.side.name}) or write to another file"
        if not self.side.is_file():
            raise ValueError(
                f"{self.path} holds records but {self.side.name} is missing beside it, so it "
                f"cannot be resumed safely: {start_afresh}"
            )
        try:
            recorded = json.loads(self.side.read_bytes())
        except ValueError as e:
            raise ValueError(f"{self.side}: not a fingerprint ({e}): {start_afresh}") from None
        if not isinstance(recorded, dict) or recorded.get("format") != FORMAT:
            raise ValueError(f"{self.side}: not a fingerprint of score-corpus: {start_afresh}")
        for part in ("model", "settings"):
            ours, theirs = expected[part], recorded.get(part)
            if ours != theirs:
                keys = sorted({*ours, *(theirs if isinstance(theirs, dict) else {})})
                what = ", ".join(
                    f"{k} {_get(theirs, k)!r} there, {ours.get(k)!r} now"
                    for k in keys
                    if ours.get(k) != _get(theirs, k)
                )
                other = "another model" if part == "model" else "other settings"
                raise ValueError(
                    f"{self.path} was scored with {other} ({what}); not resuming onto it: "
                    f"{start_afresh}"
                )

    def _cut_torn_line(self) -> int:
        """Truncate the file after its last "\\n"; -> the bytes cut."""
        size = os.fstat(self._fd).st_size
        end = size
        with open(self.path, "rb") as f:
            while end > 0:
                start = max(0, end - _TAIL)
                f.seek(start)
                newline = f.read(end - start).rfind(b"\n")
                if newline >= 0:
                    end = start + newline + 1
                    break
                end = start
        if end < size:
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        return size - end

    def records(self) -> Iterator[dict[str, Any]]:
        """The records the file holds, in order, each checked to be the record of line 1, 2, …
        (ValueError if not)."""
        with open(self.path, "rb") as f:
            for number, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict) or record.get("line") != number:
                    raise ValueError(
                        f"{self.path}, line {number}: not the record of input line {number} "
                        f"that score-corpus writes there; delete {self.path} (and "
                        f"{self.side.name}) or write to another file"
                    )
                yield record

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line, in one write; sync every SYNC_SECONDS."""
        data = memoryview(dumps(record))
        while data:  # a regular file takes it whole unless the disk is full
            data = data[os.write(self._fd, data) :]
        if time.monotonic() - self._synced >= SYNC_SECONDS:
            os.fsync(self._fd)
            self._synced = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)  # releases the lock
                self._fd = -1

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _get(mapping: Optional[dict[str, Any]], key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, dict) else None


def _lock(fd: int, path: pathlib.Path) -> None:
    """An exclusive advisory lock on the open file, or ValueError if another process has it."""
    if os.name != "posix":  # no flock: two runs onto one file are the user's to avoid
        return
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(
            f"{path} is being written by another process (it holds its lock)"
        ) from None
