"""Reading a LevelDB-format table (SSTable), the format of a TensorFlow bundle's ``.index``.

Layout (leveldb/doc/table_format.md; TensorFlow's copy is tensorflow/core/lib/io/table)::

    [data block 1] … [data block N] [meta blocks] [metaindex block] [index block] [footer]

* footer: the last 48 bytes — the metaindex and index BlockHandles (each two varints, offset
  and size), zero padding to 40 bytes, then the magic number 0xdb4775248b80fb57 (fixed64 LE).
* every block is followed by a 5-byte trailer: a compression type (0 none, 1 Snappy) and the
  masked CRC-32C of the block's bytes plus that type byte.
* a block's entries are prefix-compressed: each is varints (shared, non_shared, value_length),
  then the key's non-shared suffix, then the value. The block ends with the restart array
  (uint32 offsets of entries whose ``shared`` is 0) and its length (uint32).
* the index block maps a key ≥ every key of a data block to that block's handle.

All problems raise :class:`~gpt2np.CheckpointError` naming the file.
"""

from __future__ import annotations

import os
import struct

from ..errors import CheckpointError
from ..support.bounded_read import read_small_file
from . import snappy
from .crc32c import crc32c, unmask
from .protobuf import ProtobufError, read_varint

__all__ = ["parse_table", "read_table"]

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
TRAILER_SIZE = 5
NO_COMPRESSION, SNAPPY_COMPRESSION = 0, 1
MAX_INDEX = 256 << 20  # a 1558M index is ~60 KB; refuse to slurp anything huge


def read_table(
    path: str | os.PathLike[str], stats: dict[str, int] | None = None
) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of the table at ``path``, in key order, with every block's CRC checked.

    If ``stats`` is a dict it receives ``data_blocks`` and ``snappy_blocks`` counts.
    """
    name = os.fspath(path)
    try:
        data = read_small_file(name, MAX_INDEX)
    except CheckpointError as e:
        raise CheckpointError(f"cannot read index: {e}") from None
    return parse_table(data, name, stats)


def parse_table(
    data: bytes, name: str, stats: dict[str, int] | None = None
) -> list[tuple[bytes, bytes]]:
    """:func:`read_table` of a table's bytes ``data``; ``name`` is the file's, for errors."""
    table = _Table(name, data)
    entries = table.entries()
    if stats is not None:
        stats.update(table.stats)
    return entries


class _Table:
    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        self.data = data
        self.stats = {"data_blocks": 0, "snappy_blocks": 0}

    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"corrupt index {self.name}: {what}")

    def entries(self) -> list[tuple[bytes, bytes]]:
        index_handle = self._footer()
        out: list[tuple[bytes, bytes]] = []
        for _, handle in self._block(index_handle, "index block"):
            block_handle = self._handle(handle, 0, "index entry")[0]
            out.extend(self._block(block_handle, f"data block at {block_handle[0]}"))
            self.stats["data_blocks"] += 1
        for (k1, _), (k2, _) in zip(out, out[1:]):
            if k1 >= k2:
                raise self.fail(f"keys out of order ({k1!r} then {k2!r})")
        return out

    def _footer(self) -> tuple[int, int]:
        if len(self.data) < FOOTER_SIZE:
            raise self.fail(f"{len(self.data)} bytes is too short for the 48-byte footer")
        footer = self.data[-FOOTER_SIZE:]
        (magic,) = struct.unpack("<Q", footer[-8:])
        if magic != MAGIC:
            raise self.fail(f"bad magic number {magic:#x} (not a table, or truncated)")
        _, pos = self._handle(footer, 0, "metaindex handle")
        index_handle, _ = self._handle(footer, pos, "index handle")
        return index_handle

    def _handle(self, buf: bytes, pos: int, what: str) -> tuple[tuple[int, int], int]:
        try:
            offset, pos = read_varint(buf, pos)
            size, pos = read_varint(buf, pos)
        except ProtobufError as e:
            raise self.fail(f"bad {what}: {e}") from None
        return (offset, size), pos

    def _read_block(self, handle: tuple[int, int], what: str) -> bytes:
        """The block's contents, CRC-checked and decompressed."""
        offset, size = handle
        end = offset + size + TRAILER_SIZE
        if end > len(self.data) - FOOTER_SIZE:
            raise self.fail(f"{what} [{offset}, {end}) runs past the end of the blocks")
        raw = self.data[offset : offset + size]
        kind = self.data[offset + size]
        (stored,) = struct.unpack("<I", self.data[offset + size + 1 : end])
        actual = crc32c(self.data[offset : offset + size + 1])  # contents + type byte
        if actual != unmask(stored):
            raise self.fail(f"CRC mismatch in {what} (stored {unmask(stored):#010x}, "
                            f"computed {actual:#010x})")  # fmt: skip
        if kind == NO_COMPRESSION:
            return raw
        if kind == SNAPPY_COMPRESSION:
            self.stats["snappy_blocks"] += 1
            try:
                return snappy.decompress(raw, max_length=max(1 << 20, 64 * len(raw)))
            except snappy.SnappyError as e:
                raise self.fail(f"bad Snappy data in {what}: {e}") from None
        raise self.fail(f"unknown compression type {kind} in {what}")

    def _block(self, handle: tuple[int, int], what: str) -> list[tuple[bytes, bytes]]:
        """Decode the prefix-compressed entries of one block."""
        block = self._read_block(handle, what)
        if len(block) < 4:
            raise self.fail(f"{what} is {len(block)} bytes, too short for its restart count")
        (n_restarts,) = struct.unpack("<I", block[-4:])
        limit = len(block) - 4 - 4 * n_restarts  # where the restart array begins
        if n_restarts == 0 or limit < 0:
            raise self.fail(f"{what} has an impossible restart count {n_restarts}")
        restarts = set(struct.unpack(f"<{n_restarts}I", block[limit:-4]))
        entries: list[tuple[bytes, bytes]] = []
        starts = set()
        key = b""
        pos = 0
        try:
            while pos < limit:
                at = pos
                starts.add(at)
                shared, pos = read_varint(block, pos)
                non_shared, pos = read_varint(block, pos)
                value_len, pos = read_varint(block, pos)
                if shared > len(key) or (at in restarts and shared):
                    raise self.fail(f"{what}: entry at {at} shares {shared} bytes it cannot")
                if pos + non_shared + value_len > limit:
                    raise self.fail(f"{what}: entry at {at} runs into the restart array")
                key = key[:shared] + block[pos : pos + non_shared]
                pos += non_shared
                entries.append((key, block[pos : pos + value_len]))
                pos += value_len
        except ProtobufError as e:
            raise self.fail(f"{what}: {e}") from None
        if not restarts <= (starts or {0}):  # every restart must point at an entry
            raise self.fail(f"{what}: restart offsets {sorted(restarts - starts)[:3]} point "
                            "inside entries")  # fmt: skip
        return entries
