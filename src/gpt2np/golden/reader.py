"""Reading golden files (and ports' files) one tensor, and one chunk of a tensor, at a time.

A source of named tensors is an ``.npz`` (any ZIP of ``NAME.npy`` members, stored or deflated),
a directory of ``NAME.npy`` files, or an in-memory mapping (name -> array, or a
:class:`gpt2np.Trace`). Nothing is read up front: a tensor's ``.npy`` header is checked against
the bytes that are really there before any data is read, its data comes in chunks of bounded
size, and a ZIP member's CRC-32 is checked as its last chunk is read. Only regular files are
opened (a FIFO or a device would hang or never end). Anything unreadable is a
:class:`gpt2np.CheckpointError` naming the file and the tensor.
"""

from __future__ import annotations

import os
import pathlib
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import IO, Any, BinaryIO, Optional, TypeVar, Union

import numpy as np

from ..errors import CheckpointError
from ..support.bounded_read import open_regular
from .manifest import MANIFEST_KEY, MAX_MANIFEST_BYTES, parse_manifest
from .npy import NpyHeader, read_header
from .trace import Trace

__all__ = ["GoldenFile", "MappingSource", "Source", "open_file", "open_source"]

PathLike = Union[str, "os.PathLike[str]"]
#: What the zipfile module and the decompressors raise for a damaged archive.
_READ_ERRORS = (
    OSError, EOFError, ValueError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError,
    RuntimeError, zlib.error, struct.error,
)  # fmt: skip
CHUNK = 1 << 20  # elements per chunk when a caller does not say
_S = TypeVar("_S", bound="Source")


class Source:
    """Named tensors in a known order. ``manifest`` is the parsed manifest or None; ``names``
    lists the tensors (the manifest's order first); ``T_past`` is the length of the past the
    tensors continue, when known (from the manifest or a Trace), else None."""

    label: str = "<tensors>"
    manifest: Optional[dict[str, Any]] = None
    names: list[str]
    T_past: Optional[int] = None

    def header(self, name: str) -> NpyHeader:
        """dtype and shape of ``name``, read without its data."""
        raise NotImplementedError

    def chunks(self, name: str, n: int = CHUNK) -> Iterator[np.ndarray]:
        """The tensor's elements in C order, as 1-D arrays of at most ``n`` elements."""
        raise NotImplementedError

    def read(self, name: str) -> np.ndarray:
        """The whole tensor."""
        h = self.header(name)
        out = np.empty(h.size, dtype=h.dtype)
        at = 0
        for chunk in self.chunks(name):
            out[at : at + chunk.size] = chunk
            at += chunk.size
        return out.reshape(h.shape)

    def axes(self, name: str) -> Optional[str]:
        """The tensor's axes as the manifest records them (``"B H T S"``), or None."""
        for t in (self.manifest or {}).get("tensors", ()):
            if t["name"] == name:
                axes: Optional[str] = t.get("axes")  # a str or None: parse_manifest checked
                return axes
        return None

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise KeyError(f"{self.label} holds no tensor {name!r}")
        return self.read(name)

    def close(self) -> None:
        pass

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GoldenFile(Source):
    """A golden file (or a port's file): an ``.npz``, or a directory of ``NAME.npy`` files.

    ``.manifest`` is the parsed manifest or None; ``.names`` lists the tensors in the manifest's
    order, then the file's (sorted, for a directory); ``f[name]`` reads one tensor. Members that
    are not ``.npy`` are listed in ``.ignored``.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = pathlib.Path(path)
        self.label = str(path)
        self._zip: Optional[zipfile.ZipFile] = None
        self._members: dict[str, Union[zipfile.ZipInfo, pathlib.Path]] = {}  # .npz or dir
        self._headers: dict[str, NpyHeader] = {}
        self.ignored: list[str] = []
        self.names = []
        try:
            if self.path.is_dir():
                self._list_directory()
            else:
                self._open_zip()
            files = [n for n in self._members if n != MANIFEST_KEY]
            if MANIFEST_KEY in self._members:
                self.manifest = self.read_manifest()
                listed = [t["name"] for t in self.manifest["tensors"]]
                lost = [n for n in listed if n not in self._members]
                if lost:
                    raise CheckpointError(f"{path}: the manifest lists tensor {lost[0]}, absent")
                self.names = list(dict.fromkeys(listed)) + [f for f in files if f not in listed]
                self.T_past = self.manifest.get("T_past", 0)
            else:
                self.names = files
        except BaseException:  # the caller gets no object to close: close the zip here
            self.close()
            raise

    def _list_directory(self) -> None:
        for p in sorted(self.path.iterdir()):
            if p.name.endswith(".npy"):
                self._members[p.name[: -len(".npy")]] = p
        if not self._members:
            raise CheckpointError(f"{self.path}: directory holds no NAME.npy tensor files")

    def _open_zip(self) -> None:
        f = open_file(self.path)
        try:
            head = f.read(6)
            if head.startswith(b"\x93NUMPY"):
                raise CheckpointError(
                    f"{self.path}: a single .npy array, not an .npz of named tensors"
                )
            if not head:
                raise CheckpointError(f"{self.path}: not a readable .npz file: it is empty")
            if head.lstrip()[:1] == b"{":
                raise CheckpointError(
                    f"{self.path}: JSON, not an .npz: a tokenizer golden file is compared with "
                    "'gpt2np compare' or gpt2np.golden.compare_tokenizer"
                )
            f.seek(0)
            self._zip = zipfile.ZipFile(f)  # reads the central directory only
        except CheckpointError:
            f.close()
            raise
        except _READ_ERRORS as e:
            f.close()
            raise CheckpointError(f"{self.path}: not a readable .npz file: {e}") from None
        for info in self._zip.infolist():
            if info.is_dir():
                continue
            if not info.filename.endswith(".npy"):
                self.ignored.append(info.filename)
                continue
            name = info.filename[: -len(".npy")]
            if name in self._members:
                raise CheckpointError(f"{self.path}: two members are named {info.filename}")
            self._members[name] = info

    def _open(self, name: str) -> tuple[IO[bytes], int]:
        """A stream of member ``name`` (its .npy header first) and its length in bytes."""
        member = self._members[name]
        if isinstance(member, pathlib.Path):  # a directory's NAME.npy
            f = open_file(member)
            return f, os.fstat(f.fileno()).st_size
        if self._zip is None:
            raise ValueError(f"{self.label} is closed")
        return self._zip.open(member), member.file_size

    def header(self, name: str) -> NpyHeader:
        if name not in self._headers:
            with self._reading(name):
                stream, size = self._open(name)
                with stream:
                    h = read_header(stream.read)
                held = size - h.header_len
                if h.nbytes != held:
                    raise ValueError(
                        f"its header declares {h.dtype} {list(h.shape)}, {h.nbytes:,} bytes of "
                        f"data, but the {'member' if self._zip else 'file'} holds {held:,}"
                    )
                self._headers[name] = h
        return self._headers[name]

    def chunks(self, name: str, n: int = CHUNK) -> Iterator[np.ndarray]:
        h = self.header(name)
        with self._reading(name):
            stream, _ = self._open(name)
            with stream:
                _read_exactly(stream, h.header_len)  # parsed and checked by header()
                if h.fortran_order:  # rare (np.save of a transposed array): read it whole
                    data = np.frombuffer(_read_exactly(stream, h.nbytes), h.dtype)
                    flat = np.ascontiguousarray(data.reshape(h.shape[::-1]).T).reshape(-1)
                    for at in range(0, h.size, n):
                        yield flat[at : at + n]
                else:
                    for at in range(0, h.size, n):
                        count = min(n, h.size - at)
                        yield np.frombuffer(
                            _read_exactly(stream, count * h.dtype.itemsize), h.dtype
                        )
                if stream.read(1):  # for a ZIP member, this read also checks the CRC-32
                    raise ValueError("data continues past the declared shape")

    def _reading(self, name: str) -> _Reading:
        return _Reading(self.path, name)

    def read_manifest(self) -> dict[str, Any]:
        h = self.header(MANIFEST_KEY)
        if h.dtype != np.uint8 or len(h.shape) != 1:
            raise CheckpointError(
                f"{self.path}: bad {MANIFEST_KEY}: stored as {h.dtype} {list(h.shape)}, "
                "expected uint8 [n]"
            )
        if h.nbytes > MAX_MANIFEST_BYTES:
            raise CheckpointError(
                f"{self.path}: bad {MANIFEST_KEY}: {h.nbytes:,} bytes (at most "
                f"{MAX_MANIFEST_BYTES:,} accepted)"
            )
        return parse_manifest(self.read(MANIFEST_KEY).tobytes(), str(self.path))

    def data_offset(self, name: str) -> Optional[int]:
        """Where the tensor's data starts in the file, for a stored (uncompressed) member of an
        .npz; None otherwise. Golden files written by gpt2np put it at a multiple of 64."""
        info = self._members[name]  # a KeyError for a name it lacks, as header() gives
        fp = self._zip.fp if self._zip is not None else None
        if fp is None or not isinstance(info, zipfile.ZipInfo):
            return None
        if info.compress_type != zipfile.ZIP_STORED:
            return None
        fp.seek(info.header_offset + 26)
        n_name, n_extra = struct.unpack("<HH", fp.read(4))
        at: int = info.header_offset + 30 + n_name + n_extra + self.header(name).header_len
        return at

    def close(self) -> None:
        if self._zip is not None:
            fp = self._zip.fp
            self._zip.close()
            if fp is not None:
                fp.close()
            self._zip = None


class _Reading:
    """Turns what reading a member raises into a CheckpointError naming file and tensor."""

    def __init__(self, path: pathlib.Path, name: str) -> None:
        self.path, self.name = path, name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, e: Any, tb: Any) -> None:
        if kind is None or issubclass(kind, CheckpointError):
            return
        if issubclass(kind, _READ_ERRORS):
            what = str(e) or kind.__name__
            raise CheckpointError(f"{self.path}: cannot read tensor {self.name}: {what}") from None


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"the data ends after {len(data):,} of {n:,} bytes")
    return data


def open_file(path: PathLike) -> BinaryIO:
    """``path`` open for reading if it is a regular file
    (:func:`gpt2np.support.bounded_read.open_regular`); a FIFO, device or socket (which would
    hang, or never end) is a CheckpointError."""
    return os.fdopen(open_regular(path), "rb")


class MappingSource(Source):
    """Tensors held in memory: a mapping name -> array (e.g. a port running in the same
    process), or a :class:`gpt2np.Trace` (whose ``T_past`` it keeps)."""

    def __init__(self, tensors: Mapping[str, Any], label: str = "<in-memory>") -> None:
        self.label = label
        self._arrays: dict[str, np.ndarray] = {}
        for name in tensors:
            if not isinstance(name, str):
                raise TypeError(f"tensor names must be str, got {name!r}")
        if isinstance(tensors, Trace):
            self.T_past = tensors.T_past
            self.label = f"<{tensors!r}>"
        self._tensors = tensors
        self.names = [n for n in tensors if n != MANIFEST_KEY]
        if MANIFEST_KEY in tensors:
            raw = np.asarray(tensors[MANIFEST_KEY])
            if raw.dtype != np.uint8 or raw.ndim != 1:
                raise ValueError(f"{MANIFEST_KEY} must be a uint8 [n] array of UTF-8 JSON")
            self.manifest = parse_manifest(raw.tobytes(), label)
            self.T_past = self.manifest.get("T_past", 0)

    def array(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            try:
                self._arrays[name] = np.asarray(self._tensors[name])
            except ValueError as e:  # a ragged nested list
                raise ValueError(f"tensor {name} is not an array: {e}") from None
        return self._arrays[name]

    def header(self, name: str) -> NpyHeader:
        a = self.array(name)
        return NpyHeader(a.dtype, a.shape, False, 0)

    def chunks(self, name: str, n: int = CHUNK) -> Iterator[np.ndarray]:
        flat = self.array(name).reshape(-1)
        for at in range(0, flat.size, n):
            yield flat[at : at + n]

    def read(self, name: str) -> np.ndarray:
        return self.array(name)


def open_source(x: Any, label: Optional[str] = None) -> Source:
    """A :class:`Source` for a path (an .npz or a directory), a mapping or a Trace."""
    if isinstance(x, Source):
        return x
    if isinstance(x, Mapping):
        return MappingSource(x, label or "<in-memory>")
    if isinstance(x, (str, os.PathLike)):
        return GoldenFile(x)
    raise TypeError(
        f"expected a path (.npz or directory), a mapping name -> array or a Trace, got {type(x)}"
    )
