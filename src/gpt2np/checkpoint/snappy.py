"""A small Snappy decompressor (raw block format, no framing), for SSTable blocks.

Format (google/snappy, format_description.txt): a varint with the uncompressed length, then
elements, each starting with a tag byte whose low 2 bits give its kind:

    00 literal     length-1 in the upper 6 bits; 60..63 mean 1..4 more bytes hold length-1 (LE)
    01 copy        length 4 + bits 2..4, offset = bits 5..7 << 8 | next byte      (11-bit offset)
    10 copy        length 1 + upper 6 bits, offset = next 2 bytes (LE)
    11 copy        length 1 + upper 6 bits, offset = next 4 bytes (LE)

A copy repeats ``length`` bytes starting ``offset`` bytes back in the output; when
offset < length the source overlaps what is being written, which repeats the last ``offset``
bytes (run-length encoding). The loop runs once per element, not per byte.
"""

from __future__ import annotations

from .protobuf import ProtobufError, read_varint

__all__ = ["SnappyError", "decompress"]


class SnappyError(ValueError):
    """The input is not a valid Snappy block."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The uncompressed length: a varint of at most 32 bits."""
    try:
        result, pos = read_varint(buf, pos)
    except ProtobufError:
        raise SnappyError("bad uncompressed-length varint") from None
    if result > 0xFFFFFFFF:
        raise SnappyError("bad uncompressed-length varint")
    return result, pos


def _need(buf: bytes, pos: int, n: int) -> None:
    if pos + n > len(buf):
        raise SnappyError(f"input ends inside an element at byte {pos}")


def decompress(buf: bytes, max_length: int = 1 << 30) -> bytes:
    """Decompress one raw Snappy block. Raises :class:`SnappyError` on malformed input.

    ``max_length`` bounds the claimed uncompressed length, so a lying header cannot make us
    allocate without bound.
    """
    buf = bytes(buf)
    expected, pos = _varint(buf, 0)
    if expected > max_length:
        raise SnappyError(f"claims {expected} uncompressed bytes, more than {max_length}")
    out = bytearray()
    while pos < len(buf):
        tag = buf[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                _need(buf, pos, extra)
                length = int.from_bytes(buf[pos : pos + extra], "little")
                pos += extra
            length += 1
            _need(buf, pos, length)
            out += buf[pos : pos + length]
            pos += length
        else:
            if kind == 1:
                _need(buf, pos, 1)
                length = 4 + ((tag >> 2) & 7)
                offset = ((tag >> 5) << 8) | buf[pos]
                pos += 1
            else:
                width = 2 if kind == 2 else 4
                _need(buf, pos, width)
                length = (tag >> 2) + 1
                offset = int.from_bytes(buf[pos : pos + width], "little")
                pos += width
            _copy(out, offset, length)
        if len(out) > expected:
            raise SnappyError(f"output exceeds the declared {expected} bytes")
    if len(out) != expected:
        raise SnappyError(f"produced {len(out)} bytes, the header declared {expected}")
    return bytes(out)


def _copy(out: bytearray, offset: int, length: int) -> None:
    """Append ``length`` bytes copied from ``offset`` bytes back (may overlap itself)."""
    if offset == 0 or offset > len(out):
        raise SnappyError(f"copy offset {offset} outside the {len(out)} bytes produced so far")
    start = len(out) - offset
    if offset >= length:
        out += out[start : start + length]
    else:  # overlapping: the pattern of the last `offset` bytes repeats
        pattern = bytes(out[start:])
        reps, rest = divmod(length, offset)
        out += pattern * reps + pattern[:rest]
