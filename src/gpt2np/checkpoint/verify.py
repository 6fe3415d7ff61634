"""Checking a checkpoint's data file in place: the tensors' CRC-32Cs, read in parallel pieces,
and a memory map of exactly the bytes that were checked.

OpenAI's releases store exactly the model's float32 tensors back to back in one data shard,
and those bytes need no conversion (a conv1d weight [1, D, 3D] has the bytes of [D, 3D]), so
the cache (:mod:`.cache`) maps them where they are once :func:`verify_in_place` has checked them.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..params import expected_shapes
from .convert import openai_name
from .crc32c import crc32c, crc32c_combine
from .protobuf import BundleEntry, BundleHeader
from .tf_bundle import DT_FLOAT, check_crc

__all__ = [
    "Layout",
    "Span",
    "file_crcs",
    "in_place_layout",
    "map_file",
    "stamp",
    "verify_in_place",
]

Layout = list[tuple[str, str, BundleEntry]]  # (OpenAI name, flat name, entry) in file order
Span = tuple[int, str, tuple[int, ...]]  # a tensor's (offset, dtype, shape) in a data file


def stamp(st: os.stat_result) -> list[int]:
    """What identifies one state of a file: device, inode, size, mtime_ns, ctime_ns. A write
    changes ctime (which no system call sets back) and replacing the file changes the inode."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def in_place_layout(
    header: BundleHeader, entries: dict[str, BundleEntry], shards: list[str], hparams: HParams
) -> Layout | None:
    """The tensors in file order when the checkpoint is exactly the model's float32 tensors,
    back to back in one little-endian shard with the shapes ``hparams`` needs; else None (then
    the general path converts it, and reports whatever is wrong)."""
    if hparams.n_layer > len(entries):  # a lying n_layer: the general path says what is wrong
        return None
    wanted = {openai_name(flat): (flat, shape) for flat, shape in expected_shapes(hparams).items()}
    if header.num_shards != 1 or header.endianness != 0 or set(entries) != set(wanted):
        return None
    layout, offset = [], 0
    for name, entry in sorted(entries.items(), key=lambda item: item[1].offset):
        flat, shape = wanted[name]
        stored = (1, *shape) if flat.endswith(".w") else shape  # conv1d weights: [1, n_in, n_out]
        if (
            entry.dtype != DT_FLOAT
            or entry.shard_id != 0  # what the general path refuses, this one must not accept
            or entry.unknown_rank
            or entry.has_slices
            or entry.crc32c is None
            or tuple(entry.shape) != stored
            or entry.offset != offset
            or entry.size != 4 * int(np.prod(shape))
        ):
            return None
        layout.append((name, flat, entry))
        offset += entry.size
    if os.path.getsize(shards[0]) != offset:
        return None
    return layout


def verify_in_place(
    path: str, layout: Layout, update: Callable[[int], Any] | None = None
) -> tuple[dict[str, np.ndarray] | None, list[int], list[int]]:
    """Check every tensor of ``layout`` in the data file ``path`` against the CRC-32C its index
    stores, while the file is flushed to disk (a download just written may not be there yet).

    Returns the flat params as read-only views of one memory map of the file (None if the file
    cannot be mapped), the file's :func:`stamp` and each tensor's CRC-32C. A mismatch is a
    CheckpointError naming the tensor and the file; so is a file that changed while it was
    checked. ``update(n)`` is called as each n bytes are checked (a progress bar's).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        before = stamp(os.fstat(fd))
        with ThreadPoolExecutor(1) as flusher:
            synced = flusher.submit(_fsync, fd)
            crcs = file_crcs(
                path, [(e.offset, e.size) for _, _, e in layout], before, update=update
            )
            synced.result()
        for (name, _, entry), actual in zip(layout, crcs):
            check_crc(entry, actual, name, path)
        if stamp(os.fstat(fd)) != before or stamp(os.stat(path)) != before:
            raise CheckpointError(f"{path} changed while it was verified; load it again")
        spans = {flat: (e.offset, "<f4", _shape(flat, e)) for _, flat, e in layout}
        try:
            return map_file(fd, spans), before, crcs
        except (OSError, ValueError):  # a file system that cannot map files (some FUSE ones)
            return None, before, crcs
    finally:
        os.close(fd)


def _shape(flat: str, entry: BundleEntry) -> tuple[int, ...]:
    """The model's shape of a tensor stored in OpenAI's layout (conv1d weights lose the 1)."""
    return tuple(entry.shape[1:]) if flat.endswith(".w") else tuple(entry.shape)


def map_file(fd: int, spans: dict[str, Span]) -> dict[str, np.ndarray]:
    """{name: read-only array} viewing the open file ``fd`` through one memory map, each tensor
    at its (offset, dtype, shape). The caller has checked that every span lies in the file."""
    data = np.frombuffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ), dtype=np.uint8)
    out = {}
    for name, (offset, dtype, shape) in spans.items():
        nbytes = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        out[name] = data[offset : offset + nbytes].view(dtype).reshape(shape)
    return out


def _fsync(fd: int) -> None:
    """fsync a file we may only read (POSIX flushes the file, whichever way it was opened)."""
    try:
        os.fsync(fd)
    except OSError as e:  # Windows cannot flush a read-only handle; read-only file systems
        if e.errno not in (errno.EBADF, errno.EINVAL, errno.EROFS):
            raise


def file_crcs(
    path: str,
    spans: list[tuple[int, int]],
    expect: list[int] | None = None,
    piece: int = 16 << 20,
    update: Callable[[int], Any] | None = None,
) -> list[int]:
    """The CRC-32C of each (offset, size) span of the file ``path``.

    Spans are cut into pieces of at most ``piece`` bytes, which two threads check in turn
    (NumPy releases the GIL), each reading through a reused buffer: faster than the first
    touches of a fresh memory map, and memory stays at two pieces. Even pieces keep both threads
    busy to the end (the last tensor, wte, is a third of the file), and a span's CRC is
    recombined from its pieces' with :func:`crc32c_combine`. With ``expect`` (a :func:`stamp`),
    each thread's file must be that same file. ``update(n)`` is called after each piece of
    n bytes (from the worker threads: a tqdm bar's update is thread-safe).
    """
    local = threading.local()
    opened: list[Any] = []
    pieces = [(i, lo, min(piece, size - lo))
              for i, (_, size) in enumerate(spans) for lo in range(0, size, piece)]  # fmt: skip

    def crc_of(item: tuple[int, int, int]) -> int:
        i, lo, size = item
        if not hasattr(local, "file"):  # one file and one buffer per thread (portable reads)
            local.file = open(path, "rb", buffering=0)  # closed in the finally below
            opened.append(local.file)
            if expect is not None and stamp(os.fstat(local.file.fileno()))[:2] != expect[:2]:
                raise CheckpointError(f"{path} was replaced while it was verified")
            local.buffer = np.empty(piece, dtype=np.uint8)
        local.file.seek(spans[i][0] + lo)
        done = 0
        while done < size:
            n = local.file.readinto(memoryview(local.buffer)[done:size])
            if not n:
                raise CheckpointError(f"{path} ended early at byte {spans[i][0] + lo + done}")
            done += n
        crc = crc32c(local.buffer[:size])
        if update is not None:
            update(size)
        return crc

    try:
        with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
            piece_crcs = list(pool.map(crc_of, pieces))
    finally:
        for f in opened:
            f.close()
    crcs = [0] * len(spans)  # an empty span has no pieces, and crc32c(b"") == 0
    for (i, lo, size), crc in zip(pieces, piece_crcs):
        crcs[i] = crc if lo == 0 else crc32c_combine(crcs[i], crc, size)
    return crcs
