"""An uncompressed ZIP whose members' data all start at multiples of 64 bytes in the file.

A golden file is an ``.npz``: a ZIP archive of ``NAME.npy`` members (PKWARE's APPNOTE.TXT,
sections 4.3 and 4.5). Every member here is stored (no compression); its local header is padded
with an alignment extra field (ID 0xD935, as Android's zipalign writes it) so that the member
starts 64-byte aligned, and each ``.npy`` header is a multiple of 64 bytes long, so the tensor's
data is 64-byte aligned from the start of the file: a reader in any language can map the file
and cast a pointer. ZIP64 records are written only where a size or an offset needs them
(a member of 4 GiB or more, a file past 4 GiB).

The whole layout is fixed before anything is written, so a member (or one row of it) may be
written in any order; :meth:`AlignedZip.finish` then reads every member back, checks each piece
against the CRC-32 taken when it was written, and writes the headers with the member's CRC.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import BinaryIO

from .npy import ALIGN

__all__ = ["AlignedZip"]

_LOCAL = struct.Struct("<IHHHHHIIIHH")  # 30 bytes, signature 0x04034B50
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes, signature 0x02014B50
_END = struct.Struct("<IHHHHIIH")  # 22 bytes, signature 0x06054B50
_END64 = struct.Struct("<IQHHIIQQQQ")  # 56 bytes, signature 0x06064B50
_LOCATOR64 = struct.Struct("<IIQI")  # 20 bytes, signature 0x07064B50
_LIMIT = 0xFFFFFFFF
_ALIGN_EXTRA_ID = 0xD935
_VERSION = 20  # "version needed to extract" 2.0; 4.5 where ZIP64 records are used
_MADE_BY = (3 << 8) | 45  # Unix, APPNOTE 4.5
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, 00:00: the same inputs give the same bytes
_ATTRS = 0o100644 << 16  # a regular file, rw-r--r--
_CHUNK = 16 << 20


@dataclasses.dataclass
class _Member:
    name: bytes
    size: int  # bytes of the member: the .npy header and the data
    offset: int  # of its local header
    extra: bytes  # the local header's extra fields (ZIP64 sizes, then the alignment padding)
    start: int  # of its first byte (the .npy header) in the file
    pieces: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)
    crc: int = 0

    @property
    def zip64(self) -> bool:
        return self.size >= _LIMIT


class AlignedZip:
    """Lay out ``members`` (name, size in bytes) in ``f``; write them with :meth:`write` in any
    order; :meth:`finish` verifies and closes the archive. ``start(name)`` is the member's
    first byte in the file; callers put the 64-byte-multiple ``.npy`` header there."""

    def __init__(self, f: BinaryIO, members: list[tuple[str, int]]) -> None:
        self.f = f
        self.members: dict[str, _Member] = {}
        offset = 0
        for name, size in members:
            raw = name.encode("utf-8")
            zip64 = struct.pack("<HHQQ", 1, 16, size, size) if size >= _LIMIT else b""
            fixed = offset + _LOCAL.size + len(raw) + len(zip64)
            pad = -fixed % ALIGN
            if 0 < pad < 6:  # an extra field needs 4 bytes of header and 2 of alignment value
                pad += ALIGN
            extra = zip64
            if pad:
                extra += struct.pack("<HHH", _ALIGN_EXTRA_ID, pad - 4, ALIGN) + bytes(pad - 6)
            if name in self.members:
                raise ValueError(f"two members named {name!r}")
            self.members[name] = _Member(raw, size, offset, extra, fixed + pad)
            offset = fixed + pad + size
        self.end = offset  # where the central directory goes

    def start(self, name: str) -> int:
        return self.members[name].start

    def write(self, name: str, at: int, data: memoryview | bytes) -> None:
        """Write ``data`` at byte ``at`` of member ``name`` (0 = its first byte)."""
        m = self.members[name]
        view = memoryview(data).cast("B")
        if not 0 <= at <= at + len(view) <= m.size:
            raise ValueError(f"{len(view)} bytes at {at} do not fit member {name} ({m.size})")
        self.f.seek(m.start + at)
        self.f.write(view)
        m.pieces.append((at, len(view), zlib.crc32(view)))

    def finish(self) -> None:
        """Read each member back: every piece must be there with the CRC it was written with,
        and the pieces must cover the member exactly; then write the local headers, the central
        directory and the end records."""
        for name, m in self.members.items():
            m.crc = self._verify(name, m)
        for m in self.members.values():
            self.f.seek(m.offset)
            self.f.write(self._local_header(m))
        self.f.seek(self.end)
        central = b"".join(self._central_header(m) for m in self.members.values())
        self.f.write(central)
        self.f.write(self._end_records(len(central)))
        self.f.truncate()
        self.f.flush()

    def _verify(self, name: str, m: _Member) -> int:
        crc, at = 0, 0
        for start, length, piece_crc in sorted(m.pieces):
            if start != at:
                raise OSError(f"member {name}: bytes {at}..{start} were never written")
            self.f.seek(m.start + start)
            mine, left = 0, length
            while left:
                chunk = self.f.read(min(left, _CHUNK))
                if not chunk:
                    raise OSError(f"member {name}: the file ends inside it")
                mine, crc, left = zlib.crc32(chunk, mine), zlib.crc32(chunk, crc), left - len(chunk)
            if mine != piece_crc:
                raise OSError(f"member {name}: bytes {start}..{start + length} differ on disk")
            at = start + length
        if at != m.size:
            raise OSError(f"member {name}: bytes {at}..{m.size} were never written")
        return crc

    def _local_header(self, m: _Member) -> bytes:
        size = _LIMIT if m.zip64 else m.size
        flags = 0 if m.name.isascii() else 0x800  # bit 11: the name is UTF-8
        version = 45 if m.zip64 else _VERSION
        fields = (0x04034B50, version, flags, 0, 0, _DOS_DATE, m.crc, size, size)
        return _LOCAL.pack(*fields, len(m.name), len(m.extra)) + m.name + m.extra

    def _central_header(self, m: _Member) -> bytes:
        zip64 = b""
        size, offset = m.size, m.offset
        if m.zip64:
            zip64 += struct.pack("<QQ", m.size, m.size)
            size = _LIMIT
        if m.offset >= _LIMIT:
            zip64 += struct.pack("<Q", m.offset)
            offset = _LIMIT
        extra = struct.pack("<HH", 1, len(zip64)) + zip64 if zip64 else b""
        flags = 0 if m.name.isascii() else 0x800
        version = 45 if extra else _VERSION
        fields = (0x02014B50, _MADE_BY, version, flags, 0, 0, _DOS_DATE, m.crc, size, size,
                  len(m.name), len(extra), 0, 0, 0, _ATTRS, offset)  # fmt: skip
        return _CENTRAL.pack(*fields) + m.name + extra

    def _end_records(self, central_size: int) -> bytes:
        n, at = len(self.members), self.end
        records = b""
        if n >= 0xFFFF or at >= _LIMIT or central_size >= _LIMIT:
            end64 = at + central_size
            records += _END64.pack(0x06064B50, _END64.size - 12, _MADE_BY, 45, 0, 0, n, n,
                                   central_size, at)  # fmt: skip
            records += _LOCATOR64.pack(0x07064B50, 0, end64, 1)
        n16 = min(n, 0xFFFF)
        return records + _END.pack(
            0x06054B50, 0, 0, n16, n16, min(central_size, _LIMIT), min(at, _LIMIT), 0
        )
