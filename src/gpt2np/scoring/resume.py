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

Nothing is cut before all of that is checked: every line a record of its line number, what
follows the last the start of the next (a torn line), and each record against its input line.
A file that is not gpt2np's records of this input (notes, other text, records of another
input, a symlink) is refused and left as it was, the same file, byte for byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional, Union, cast

import numpy as np

from ..params import flatten
from ..support.atomic import check_target, write_bytes
from ..support.bounded_read import open_regular, read_json_file
from ..support.paths import fsync_dir
from .records import MAX_LINE_BYTES, Settings, dumps, retried

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["FINGERPRINT_SUFFIX", "SYNC_SECONDS", "Output", "fingerprint"]

FINGERPRINT_SUFFIX = ".fingerprint"
#: How often the appended records are synced to the disk (and when the run ends).
SYNC_SECONDS = 2.0
FORMAT = "gpt2np score-corpus records, version 1"
#: The longest record: the longest line's id, and the rest of the record.
MAX_RECORD_BYTES = MAX_LINE_BYTES + (1 << 16)


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

    Nothing in the file is changed until it is known to be gpt2np's records of this input:
    :meth:`records` reads and checks them (the caller checks each against its input line), and
    only then :meth:`resume` cuts a torn last line (or the records from the first one a rerun
    retries on). A symlink at ``path`` is refused, not followed.

    >>> with Output(path, fingerprint(model, settings)) as out:
    ...     for record in out.records(): ...      # those already there, checked
    ...     out.resume(n)                         # n records checked: cut what follows them
    ...     out.append({"line": 8, ...})
    """

    def __init__(self, path: Union[str, os.PathLike[str]], expected: dict[str, Any]) -> None:
        self.path = pathlib.Path(path)
        self.side = self.path.with_name(self.path.name + FINGERPRINT_SUFFIX)
        self._afresh = f"delete {self.path} (and {self.side.name}) or write to another file"
        self._foreign = (f"write to another file (or, if it is an old output of score-corpus "
                         f"you no longer want, delete it and {self.side.name})")  # fmt: skip
        self._fd = _open_output(self.path)
        try:
            _lock(self._fd, self.path)
            self.repaired = 0  #: bytes cut off by :meth:`resume`
            self._kept = 0  # bytes of the records :meth:`records` gave
            self._given = 0  # how many it gave
            self._checked = False
            if os.fstat(self._fd).st_size == 0:  # nothing to resume: this run's fingerprint
                self._check_side_is_ours()
                write_bytes(self.side, json.dumps(expected, indent=1) + "\n")
                fsync_dir(self.path.parent)
                self._checked = True
            else:
                self._check_fingerprint(expected)
        except BaseException:
            os.close(self._fd)
            raise
        self._synced = time.monotonic()

    def _check_side_is_ours(self) -> None:
        """An OUTPUT.fingerprint that is not score-corpus's is the user's: not replaced."""
        if not os.path.lexists(self.side):
            return
        try:
            recorded = read_json_file(self.side)
        except ValueError:
            recorded = None
        if not isinstance(recorded, dict) or recorded.get("format") != FORMAT:
            raise ValueError(
                f"{self.side} is not a fingerprint of score-corpus: not writing over it; "
                f"move it away or write to another file"
            )

    def _check_fingerprint(self, expected: dict[str, Any]) -> None:
        if not os.path.lexists(self.side):
            raise ValueError(
                f"{self.path} holds records but {self.side.name} is missing beside it, so it "
                f"cannot be resumed safely: {self._afresh}"
            )
        try:
            recorded = read_json_file(self.side)
        except ValueError as e:
            raise ValueError(f"not a fingerprint of score-corpus: {e}: {self._afresh}") from None
        if not isinstance(recorded, dict) or recorded.get("format") != FORMAT:
            raise ValueError(f"{self.side}: not a fingerprint of score-corpus: {self._afresh}")
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
                    f"{self._afresh}"
                )

    def records(self) -> Iterator[dict[str, Any]]:
        """The records the file holds, in order, each checked to be a record of line 1, 2, …
        (ValueError if not, or if what follows the last is not a torn record), up to the
        first that a rerun retries (:func:`~gpt2np.scoring.records.retried`): the records
        from there on are checked, not given, and :meth:`resume` cuts them off."""
        self._given, self._kept, retry = 0, 0, False
        with open(os.dup(self._fd), "rb") as f:
            number, offset = 0, 0
            while line := f.readline(MAX_RECORD_BYTES + 1):
                if not line.endswith(b"\n"):  # the last line, torn, or not a record at all
                    if f.read(1):  # a line longer than any record, and more after it
                        self._record(b"", number + 1)  # (refused)
                    self._check_torn(line, number + 1)
                    break
                number += 1
                record = self._record(line, number)
                offset += len(line)
                retry = retry or retried(record)
                if not retry:
                    self._given, self._kept = number, offset
                    yield record
        self._checked = True

    def _record(self, line: bytes, number: int) -> dict[str, Any]:
        try:
            record = json.loads(line) if line.startswith(b'{"line": ') else None
        except (ValueError, RecursionError):
            record = None
        if not _is_record(record, number):
            raise ValueError(
                f"{self.path}, line {number}: not the record of input line {number} that "
                f"score-corpus writes there; {self._foreign}"
            )
        return cast(dict[str, Any], record)

    def _check_torn(self, tail: bytes, number: int) -> None:
        """A torn last line is the start of record ``number`` (perhaps with zero bytes after
        it, as a crash of the machine may leave); anything else is not gpt2np's to cut."""
        head = b'{"line": %d' % number
        torn = tail.rstrip(b"\0")
        if head.startswith(torn) or (torn.startswith(head) and torn[len(head) :][:1] in b",}"):
            return
        raise ValueError(
            f"{self.path} ends with {len(tail)} bytes that are not part of a record of input "
            f"line {number}: not score-corpus's to cut off; {self._foreign}"
        )

    def resume(self, count: int) -> int:
        """After :meth:`records` gave ``count`` records, all checked: cut off what follows
        them (a torn last line, or the records from the first a rerun retries on). -> the
        bytes cut."""
        if not self._checked or count != self._given:
            raise ValueError(f"{self.path}: its records were not all checked; not resuming")
        size = os.fstat(self._fd).st_size
        if self._kept < size:
            os.ftruncate(self._fd, self._kept)
            os.fsync(self._fd)
        self.repaired = size - self._kept
        return self.repaired

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


def _open_output(path: pathlib.Path) -> int:
    """``path`` opened to read and append (created if missing): a regular file, not reached
    through a symlink (ValueError otherwise)."""
    if path.is_symlink():
        raise ValueError(f"{path} is a symlink: score-corpus writes its records to a file of "
                         "its own, not through a link")  # fmt: skip
    check_target(path)
    return open_regular(path, ValueError, append=True)


def _is_record(record: Any, number: int) -> bool:
    """Whether ``record`` is one score-corpus writes for line ``number``: ``line`` that int
    (not a bool), a string ``line_sha256``, and a string ``error`` or an int ``n_tokens``."""
    if not isinstance(record, dict):
        return False
    line, tokens = record.get("line"), record.get("n_tokens")
    if type(line) is not int or line != number or not isinstance(record.get("line_sha256"), str):
        return False
    if "error" in record:
        return isinstance(record["error"], str) and "n_tokens" not in record
    return type(tokens) is int and tokens >= 0


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
