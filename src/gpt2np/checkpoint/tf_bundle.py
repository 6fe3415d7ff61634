"""Reading a TensorFlow checkpoint (a "tensor bundle") with only the standard library and NumPy.

A checkpoint with prefix ``P`` is ``P.index`` plus data shards ``P.data-NNNNN-of-MMMMM``
(tensorflow/core/util/tensor_bundle/tensor_bundle.h). The index is an SSTable
(:mod:`.sstable`) whose empty key holds a BundleHeaderProto (number of shards, endianness) and
whose every other key is a tensor name mapping to a BundleEntryProto: dtype, shape, shard,
byte offset and size in that shard, and the masked CRC-32C of those bytes (:mod:`.protobuf`).

Each tensor is read with one ``np.fromfile`` at its offset (no Python loop over bytes), its CRC
verified (:mod:`.crc32c`), and viewed with its dtype and shape.
"""

from __future__ import annotations

import math
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import CheckpointError
from ..support.bounded_read import read_small_file
from ..support.progress import tqdm
from .crc32c import crc32c, unmask
from .protobuf import BundleEntry, BundleHeader, ProtobufError, parse_entry, parse_header
from .sstable import MAX_INDEX, parse_table

__all__ = [
    "check_crc",
    "data_path",
    "parse_tf_index",
    "read_index_bytes",
    "read_tf_checkpoint",
    "read_tf_index",
]

DT_FLOAT = 1
_DT_BFLOAT16 = 14
# TensorFlow's DataType enum (tensorflow/core/framework/types.proto) -> stored little-endian type.
_DTYPES: dict[int, str] = {
    DT_FLOAT: "<f4",
    2: "<f8",  # DT_DOUBLE
    3: "<i4",  # DT_INT32
    9: "<i8",  # DT_INT64
    _DT_BFLOAT16: "<u2",  # the top half of a float32, widened on read
    19: "<f2",  # DT_HALF
}
_DTYPE_NAMES = {1: "float", 2: "double", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
                7: "string", 8: "complex64", 9: "int64", 10: "bool", 14: "bfloat16",
                19: "half", 20: "resource", 21: "variant"}  # fmt: skip


def _index_path(prefix: str) -> str:
    return prefix + ".index"


def data_path(prefix: str, shard: int, num_shards: int) -> str:
    """``P.data-00000-of-00001``: the file holding shard ``shard`` of ``num_shards``."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _normalize(prefix: str | os.PathLike[str]) -> str:
    prefix = os.fspath(prefix)
    return prefix[: -len(".index")] if prefix.endswith(".index") else prefix


def read_tf_index(
    prefix: str | os.PathLike[str],
) -> tuple[BundleHeader, dict[str, BundleEntry]]:
    """The bundle's header and each tensor's entry, in name order (every block CRC checked)."""
    index = _index_path(_normalize(prefix))
    if not os.path.exists(index):
        raise CheckpointError(f"no checkpoint index {index}")
    return parse_tf_index(read_index_bytes(index), index)


def read_index_bytes(index: str) -> bytes:
    """The bytes of the ``.index`` file ``index`` (a regular file of at most MAX_INDEX bytes)."""
    try:
        return read_small_file(index, MAX_INDEX)
    except CheckpointError as e:
        raise CheckpointError(f"cannot read checkpoint index: {e}") from None


def parse_tf_index(data: bytes, index: str) -> tuple[BundleHeader, dict[str, BundleEntry]]:
    """:func:`read_tf_index` of the index file's bytes ``data`` (``index`` names it in errors)."""
    table = parse_table(data, index)
    if not table or table[0][0] != b"":
        raise CheckpointError(f"corrupt index {index}: no bundle header (empty key)")
    try:
        header = parse_header(table[0][1])
    except ProtobufError as e:
        raise CheckpointError(f"corrupt index {index}: bundle header: {e}") from None
    if header.num_shards < 1:
        raise CheckpointError(f"corrupt index {index}: num_shards is {header.num_shards}")
    if header.endianness not in (0, 1):
        raise CheckpointError(f"corrupt index {index}: endianness {header.endianness}")
    entries: dict[str, BundleEntry] = {}
    for key, value in table[1:]:
        if key.startswith(b"\x00"):  # the slices of a partitioned tensor, named by its entry
            continue
        name = key.decode("utf-8", errors="replace")
        try:
            entries[name] = parse_entry(value)
        except ProtobufError as e:
            raise CheckpointError(f"corrupt index {index}: entry for tensor {name}: {e}") from None
    return header, entries


def _check_entry(index: str, name: str, entry: BundleEntry, header: BundleHeader) -> np.dtype:
    """The stored dtype of a well-formed entry, or a CheckpointError saying what is wrong."""
    where = f"tensor {name} in {index}"
    if entry.has_slices:
        raise CheckpointError(f"{where} is partitioned into slices, which gpt2np does not support")
    if entry.dtype not in _DTYPES:
        kind = _DTYPE_NAMES.get(entry.dtype, f"enum {entry.dtype}")
        raise CheckpointError(f"{where} has unsupported dtype {kind}")
    if entry.unknown_rank or any(d < 0 for d in entry.shape):
        raise CheckpointError(f"{where} has an unknown shape {list(entry.shape)}")
    if not 0 <= entry.shard_id < header.num_shards:
        raise CheckpointError(f"{where} is in shard {entry.shard_id} of {header.num_shards}")
    dtype = np.dtype(_DTYPES[entry.dtype])
    if header.endianness == 1:
        dtype = dtype.newbyteorder(">")
    expected = math.prod(entry.shape) * dtype.itemsize
    if entry.size != expected or entry.offset < 0:
        raise CheckpointError(
            f"{where} claims {entry.size} bytes at offset {entry.offset}; "
            f"shape {list(entry.shape)} of {dtype} needs {expected}"
        )
    if entry.crc32c is None:
        raise CheckpointError(f"{where} has no checksum")
    try:  # TF allows rank 254 and any dims of an empty tensor; NumPy does not (no allocation)
        np.broadcast_to(np.zeros((), dtype), entry.shape)
    except ValueError as e:
        raise CheckpointError(
            f"{where} has shape {list(entry.shape)}, which NumPy cannot hold: {e}"
        ) from None
    return dtype


def check_crc(entry: BundleEntry, actual: int, name: str, path: str) -> None:
    """CheckpointError unless ``actual`` is the CRC-32C the index stores (masked) for tensor
    ``name``, whose bytes were read from ``path``."""
    if entry.crc32c is None:  # _check_entry refuses such an entry before it is read
        raise CheckpointError(f"tensor {name} in {path} has no checksum")
    stored = unmask(entry.crc32c)
    if actual != stored:
        raise CheckpointError(
            f"checksum mismatch for tensor {name} in {path} "
            f"(stored {stored:#010x}, computed {actual:#010x}): the file is corrupt"
        )


def _read_tensor(
    path: str, name: str, entry: BundleEntry, dtype: np.dtype, verify: bool
) -> np.ndarray:
    """One tensor's bytes by a single read at its offset, CRC-checked, as its dtype and shape."""
    try:
        st = os.stat(path)
    except OSError:
        raise CheckpointError(f"missing data file {path} (needed for tensor {name})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read, a device never end
        raise CheckpointError(f"data file {path} is not a regular file")
    file_size = st.st_size
    if entry.offset + entry.size > file_size:
        raise CheckpointError(
            f"data file {path} is truncated: tensor {name} needs bytes up to "
            f"{entry.offset + entry.size}, the file has {file_size}"
        )
    count = entry.size // dtype.itemsize
    with open(path, "rb") as f:
        flat = np.fromfile(f, dtype=dtype, count=count, offset=entry.offset)
    if flat.size != count:
        raise CheckpointError(f"data file {path} ended early while reading tensor {name}")
    if verify:
        check_crc(entry, crc32c(flat), name, path)
    if entry.dtype == _DT_BFLOAT16:  # bfloat16 is the high 16 bits of a float32
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    elif not dtype.isnative:
        flat = flat.astype(dtype.newbyteorder("="))
    return flat.reshape(entry.shape)


def read_tf_checkpoint(
    prefix: str | os.PathLike[str],
    verify: bool = True,
    index: tuple[BundleHeader, dict[str, BundleEntry]] | None = None,
    progress: bool = False,
) -> dict[str, np.ndarray]:
    """Every tensor of the TensorFlow checkpoint at ``prefix`` (e.g. ``dir/model.ckpt``).

    Returns {name: array} with names as stored (``model/h0/attn/c_attn/w``) and shapes as stored
    ([1, D, 3D]); bfloat16 is widened to float32, float16/32/64 and int32/64 are kept. Every index
    block's and every tensor's CRC-32C is verified unless ``verify=False``; ``progress`` shows
    a bar over the bytes read. Raises :class:`~gpt2np.CheckpointError` naming the file and
    tensor for anything wrong. ``index``, the :func:`read_tf_index` of ``prefix`` when the
    caller has it, is not read again.
    """
    prefix = _normalize(prefix)
    header, entries = index if index is not None else read_tf_index(prefix)
    index_name = _index_path(prefix)
    jobs = []
    for name, entry in entries.items():
        dtype = _check_entry(index_name, name, entry, header)
        path = data_path(prefix, entry.shard_id, header.num_shards)
        jobs.append((path, name, entry, dtype, verify))
    # Two tensors at a time: one's read overlaps the other's CRC (both release the GIL).
    # Largest first, so the big embedding does not end up alone at the end.
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][2].size)
    bar = tqdm(total=sum(job[2].size for job in jobs), desc="reading checkpoint", unit="B",
               unit_scale=True, unit_divisor=1024, disable=not progress)  # fmt: skip
    arrays = {}
    with bar, ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        for i, array in zip(order, pool.map(lambda i: _read_tensor(*jobs[i]), order)):
            arrays[i] = array
            bar.update(jobs[i][2].size)
    return {jobs[i][1]: arrays[i] for i in range(len(jobs))}
