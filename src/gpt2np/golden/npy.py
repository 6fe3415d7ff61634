"""The ``.npy`` header, read safely and written so that the data behind it is 64-byte aligned.

An ``.npy`` file (or ``.npz`` member) is the 6 bytes ``\\x93NUMPY``, a major and a minor version
byte, the header's length (uint16 little-endian for version 1, uint32 for 2 and 3), the header
(a Python dict literal such as ``{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }``
padded with spaces and ending in ``\\n``) and the raw data in C (or, if ``fortran_order``,
Fortran) order. NumPy pads the header so that the data starts at a multiple of 64 bytes; so do
we. Reading a header here never allocates the data: the declared size is checked against the
bytes that are actually there before anything reads them.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["ALIGN", "MAGIC", "NpyHeader", "header_bytes", "read_header"]

MAGIC = b"\x93NUMPY"
#: Data offsets (inside an .npy, and from the start of a golden file) are multiples of this.
ALIGN = 64
#: A longer header is refused (NumPy's own default limit is 10,000 characters).
MAX_HEADER_LEN = 65536


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """What an .npy header declares. ``header_len``: bytes before the data."""

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    header_len: int

    @property
    def size(self) -> int:
        """The number of elements (a Python int: no overflow for absurd shapes)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


def read_header(read: Callable[[int], bytes]) -> NpyHeader:
    """Parse the header from ``read(n)`` (a file's or stream's read); ValueError says what is
    wrong with it. Object (pickled) and structured dtypes are refused: a golden file holds plain
    numbers."""
    lead = read(len(MAGIC) + 2)
    if not lead:
        raise ValueError("it is empty, not a .npy array")
    if lead[: len(MAGIC)] != MAGIC[: len(lead)]:
        raise ValueError(f"not a .npy array (it starts with {lead!r})")
    if len(lead) < len(MAGIC) + 2:
        raise ValueError("truncated .npy header")
    major = lead[len(MAGIC)]
    if major not in (1, 2, 3):
        raise ValueError(f"unsupported .npy format version {major}.{lead[-1]}")
    width = 2 if major == 1 else 4
    raw_len = read(width)
    if len(raw_len) < width:
        raise ValueError("truncated .npy header")
    n = int.from_bytes(raw_len, "little")
    if n > MAX_HEADER_LEN:
        raise ValueError(f".npy header of {n} bytes (at most {MAX_HEADER_LEN} accepted)")
    text = read(n)
    if len(text) < n:
        raise ValueError("truncated .npy header")
    try:
        header = ast.literal_eval(text.decode("utf-8" if major == 3 else "latin-1"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError):
        raise ValueError(f"unreadable .npy header {_clip(text)!r}") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"bad .npy header {_clip(text)!r}")
    return NpyHeader(
        _dtype(header["descr"]),
        _shape(header["shape"]),
        _fortran(header["fortran_order"]),
        len(MAGIC) + 2 + width + n,
    )


def _dtype(descr: object) -> np.dtype:
    if not isinstance(descr, str):
        raise ValueError(f"unsupported .npy dtype {_clip(repr(descr))} (structured)")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError, SyntaxError):
        raise ValueError(f"unknown .npy dtype {descr!r}") from None
    if dtype.hasobject:
        raise ValueError(f"dtype {descr!r} holds Python objects (pickled data); refused")
    if dtype.fields is not None or dtype.subdtype is not None or dtype.itemsize == 0:
        raise ValueError(f"unsupported .npy dtype {descr!r}")
    return dtype


def _shape(shape: object) -> tuple[int, ...]:
    if not (
        isinstance(shape, tuple)
        and len(shape) <= 32
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise ValueError(f"bad .npy shape {_clip(repr(shape))}")
    return shape


def _fortran(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"bad .npy fortran_order {_clip(repr(value))}")
    return value


def _clip(text: object, n: int = 80) -> str:
    s = text.decode("latin-1") if isinstance(text, bytes) else str(text)
    return s if len(s) <= n else s[:n] + "…"


def header_bytes(dtype: npt.DTypeLike, shape: tuple[int, ...]) -> bytes:
    """A version 1.0 header for C-order data of ``dtype`` and ``shape``, padded with spaces so
    that its length (and so the data's offset) is a multiple of 64, as NumPy writes it."""
    text = (
        f"{{'descr': {np.dtype(dtype).str!r}, 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    )
    fixed = len(MAGIC) + 2 + 2
    pad = -(fixed + len(text) + 1) % ALIGN
    body = (text + " " * pad + "\n").encode("latin-1")
    if len(body) > 0xFFFF:
        raise ValueError(f"shape {shape} needs a header longer than .npy version 1 allows")
    return MAGIC + b"\x01\x00" + len(body).to_bytes(2, "little") + body
