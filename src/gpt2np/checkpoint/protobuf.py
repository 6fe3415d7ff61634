"""Hand decoding of the two protobuf messages in a TensorFlow tensor bundle's index.

Protobuf's wire format is a sequence of (key, value) pairs: the key is a varint
``field_number << 3 | wire_type``; wire type 0 is a varint, 1 a little-endian 64-bit value,
2 a varint length followed by that many bytes (strings, bytes, embedded messages, packed
repeated fields), 5 a little-endian 32-bit value. Messages (tensorflow/core/protobuf/
tensor_bundle.proto, framework/tensor_shape.proto)::

    BundleHeaderProto  { int32 num_shards = 1; Endianness endianness = 2; VersionDef version = 3; }
    BundleEntryProto   { DataType dtype = 1; TensorShapeProto shape = 2; int32 shard_id = 3;
                         int64 offset = 4; int64 size = 5; fixed32 crc32c = 6;
                         repeated TensorSliceProto slices = 7; }
    TensorShapeProto   { repeated Dim dim = 2; bool unknown_rank = 3; }   Dim { int64 size = 1; }

Unknown fields are skipped, as protobuf requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

__all__ = ["BundleEntry", "BundleHeader", "ProtobufError", "parse_entry", "parse_header"]


class ProtobufError(ValueError):
    """The bytes are not a well-formed message of the expected kind."""


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos``: (value, position after it)."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        if shift > 63:
            raise ProtobufError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _signed64(v: int) -> int:
    """A varint-encoded int32/int64 is two's complement in 64 bits."""
    return v - (1 << 64) if v >= 1 << 63 else v


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field_number, wire_type, value) for each field of a message."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: int | bytes
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise ProtobufError(f"truncated fixed{width * 8} field {number}")
            value = int.from_bytes(buf[pos : pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            if pos + length > len(buf):
                raise ProtobufError(f"field {number} claims {length} bytes past the end")
            value = bytes(buf[pos : pos + length])
            pos += length
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        yield number, wire, value


def _uint(wire: int, want: int, value: int | bytes, what: str) -> int:
    """A field of wire type ``want`` (0: varint, 1 or 5: fixed width): its value, unsigned."""
    if wire != want or not isinstance(value, int):  # fields() yields ints for 0, 1 and 5
        raise ProtobufError(f"{what} has wire type {wire}, expected {want}")
    return value


def _bytes(wire: int, value: int | bytes, what: str) -> bytes:
    """A length-delimited field (wire type 2, a string or a sub-message): its bytes."""
    if wire != 2 or not isinstance(value, bytes):
        raise ProtobufError(f"{what} has wire type {wire}, expected 2")
    return value


def _int64(wire: int, value: int | bytes, what: str) -> int:
    """An int32/int64 field's value: a varint, two's complement in 64 bits."""
    return _signed64(_uint(wire, 0, value, what))


@dataclasses.dataclass
class BundleHeader:
    num_shards: int = 0
    endianness: int = 0  # 0 little, 1 big
    producer: int = 0


@dataclasses.dataclass
class BundleEntry:
    dtype: int = 0
    shape: tuple[int, ...] = ()
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    crc32c: int | None = None  # masked, as stored
    has_slices: bool = False
    unknown_rank: bool = False


def parse_header(buf: bytes) -> BundleHeader:
    """Decode a BundleHeaderProto."""
    header = BundleHeader()
    for number, wire, value in fields(buf):
        if number == 1:
            header.num_shards = _int64(wire, value, "num_shards")
        elif number == 2:
            header.endianness = _uint(wire, 0, value, "endianness")
        elif number == 3:
            for n, w, v in fields(_bytes(wire, value, "version")):
                if n == 1 and w == 0:
                    header.producer = _int64(w, v, "version.producer")
    return header


def _parse_shape(buf: bytes) -> tuple[tuple[int, ...], bool]:
    dims: list[int] = []
    unknown_rank = False
    for number, wire, value in fields(buf):
        if number == 2:
            size = 0
            for n, w, v in fields(_bytes(wire, value, "shape.dim")):
                if n == 1:
                    size = _int64(w, v, "dim.size")
            dims.append(size)
        elif number == 3:
            unknown_rank = bool(value)
    return tuple(dims), unknown_rank


def parse_entry(buf: bytes) -> BundleEntry:
    """Decode a BundleEntryProto."""
    entry = BundleEntry()
    for number, wire, value in fields(buf):
        if number == 1:
            entry.dtype = _uint(wire, 0, value, "dtype")
        elif number == 2:
            entry.shape, entry.unknown_rank = _parse_shape(_bytes(wire, value, "shape"))
        elif number == 3:
            entry.shard_id = _int64(wire, value, "shard_id")
        elif number == 4:
            entry.offset = _int64(wire, value, "offset")
        elif number == 5:
            entry.size = _int64(wire, value, "size")
        elif number == 6:
            entry.crc32c = _uint(wire, 5, value, "crc32c")
        elif number == 7:
            entry.has_slices = True
    return entry
