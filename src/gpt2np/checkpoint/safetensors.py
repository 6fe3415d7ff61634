"""Reading and writing the safetensors format, with a header parser that trusts nothing.

Layout (huggingface/safetensors, README "Format")::

    [u64 little-endian N] [N bytes of UTF-8 JSON header] [data]

The header maps each tensor name to ``{"dtype": "F32", "shape": [..], "data_offsets": [b, e]}``
(byte offsets into the data section, little-endian values) and may hold ``"__metadata__"``, a
string-to-string map. The data section must be exactly covered by the tensors, with no overlaps
and no holes.

Every claim of the header is checked against the real file size before anything is read or
allocated, so a header that lies (N = 2**60, offsets past the end) costs nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..support.atomic import atomic_write

__all__ = ["header_bytes", "read_safetensors", "read_safetensors_header", "write_safetensors"]

DTYPES: dict[str, str] = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items() if k not in ("BF16",)}
MAX_HEADER = 100 << 20  # the reference implementation's limit is 100 MB too


def _fail(path: str, what: str) -> CheckpointError:
    return CheckpointError(f"bad safetensors file {path}: {what}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {dup!r}")
    return dict(pairs)


def read_safetensors_header(path: str | os.PathLike[str]) -> tuple[dict[str, Any], int, int]:
    """(the validated header, the offset where the data section starts, its size in bytes)."""
    path = os.fspath(path)
    try:
        file_size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _fail(path, f"{file_size} bytes is too short for the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_HEADER, file_size - 8):
                raise _fail(path, f"header claims {n} bytes, the file has {file_size - 8} after it")
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e}") from None
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # deep nesting: recursion
        raise _fail(path, f"header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    data_start = 8 + n
    _validate(path, header, file_size - data_start)
    return header, data_start, file_size - data_start


def _validate(path: str, header: dict[str, Any], data_size: int) -> None:
    """Check every entry's dtype, shape and offsets; the offsets must tile the data exactly."""
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _fail(path, "__metadata__ must map strings to strings")
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"tensor {name}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise _fail(path, f"{where}: entry must have exactly dtype, shape, data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _fail(path, f"{where}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise _fail(path, f"{where}: shape {shape!r} is not a list of non-negative ints")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_uint, offsets))):
            raise _fail(path, f"{where}: data_offsets {offsets!r} is not two non-negative ints")
        begin, end = offsets
        if not begin <= end <= data_size:
            raise _fail(
                path,
                f"{where}: data_offsets [{begin}, {end}] outside the {data_size}-byte data section",
            )
        nbytes = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
        if end - begin != nbytes:
            raise _fail(
                path, f"{where}: {end - begin} bytes for shape {shape} of {dtype} ({nbytes} bytes)"
            )
        try:  # NumPy's own limits (at most 64 dims, a size that fits), checked with no memory
            np.broadcast_to(np.zeros((), DTYPES[dtype]), shape)
        except ValueError as e:
            raise _fail(path, f"{where}: shape {shape} is not possible in NumPy: {e}") from None
        spans.append((begin, end, name))
    covered = 0
    for begin, end, name in sorted(spans):
        if begin < covered:
            raise _fail(path, f"tensor {name} overlaps the tensor before it")
        if begin > covered:
            raise _fail(path, f"a hole of {begin - covered} bytes before tensor {name}")
        covered = end
    if covered != data_size:
        raise _fail(path, f"tensors cover {covered} of the {data_size} data bytes")


def _dtype_name(dtype: np.dtype) -> str | None:
    """safetensors' name for a NumPy dtype of either byte order (None if it has none)."""
    return _NAMES.get(dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype)


def _is_uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def read_safetensors(path: str | os.PathLike[str], mmap: bool = True) -> dict[str, np.ndarray]:
    """All tensors of a safetensors file as {name: array}.

    With ``mmap`` (the default) the arrays are read-only views of one memory map of the file:
    nothing is copied and pages are read on first use. Otherwise each tensor is read into its
    own array. BF16 is widened to float32 (a copy either way).
    """
    path = os.fspath(path)
    header, start, size = read_safetensors_header(path)
    data = (
        np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(size,))
        if mmap and size
        else None
    )
    tensors = {}
    with open(path, "rb") if data is None else contextlib.nullcontext(data) as source:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = np.dtype(DTYPES[info["dtype"]])
            begin, end = info["data_offsets"]
            if isinstance(source, np.memmap):
                flat = source[begin:end].view(np.ndarray).view(dtype)  # a plain array over it
            else:
                source.seek(start + begin)  # (fromfile's offset= counts from the position)
                flat = np.fromfile(source, dtype=dtype, count=(end - begin) // dtype.itemsize)
            if info["dtype"] == "BF16":
                flat = (flat.astype(np.uint32) << 16).view(np.float32)
            tensors[name] = flat.reshape(info["shape"])
    return tensors


def header_bytes(header: dict[str, Any]) -> bytes:
    """The file's first bytes for ``header``: its length as u64 little-endian, then the JSON,
    padded with spaces so that the data section starts 8-byte aligned."""
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: dict[str, np.ndarray],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write ``tensors`` as a safetensors file, atomically (a temporary name, then rename).

    Tensors are laid out largest item size first, so every tensor is aligned to its item size
    (the header is padded with spaces to a multiple of 8). Arrays are written from their own
    memory (one contiguous copy only for non-contiguous or big-endian ones).
    """
    path = os.fspath(path)
    if metadata is not None and not (
        isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise TypeError("metadata must be a dict of str to str")
    arrays = {}
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"bad tensor name {name!r}")
        a = np.asarray(value)
        if _dtype_name(a.dtype) is None:
            raise TypeError(f"tensor {name} has dtype {a.dtype}, which safetensors cannot hold")
        arrays[name] = a
    order = sorted(arrays, key=lambda k: -arrays[k].dtype.itemsize)  # stable: keeps input order
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name in order:
        a = arrays[name]
        dtype = _dtype_name(a.dtype)
        header[name] = {
            "dtype": dtype,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes
    blob = header_bytes(header)
    with atomic_write(path, "wb") as f:
        f.write(blob)
        for name in order:
            a = arrays[name]
            a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
            f.write(a.reshape(-1).data.cast("B"))
