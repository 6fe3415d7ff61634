"""The conversion cache: a TF checkpoint verified (and converted if need be) once, memory-mapped
after.

An entry is a directory ``<cache_dir>/tf-<key>/`` with an HF ``config.json`` and the weights in
one of two forms (below). The key is a SHA-256 over

* the ``.index`` file's bytes — it holds every tensor's dtype, shape, offset and CRC-32C, so any
  change to the weights that TensorFlow wrote changes it;
* each data shard's name, size and modification time (a shard edited in place, or truncated,
  changes these even when the index is untouched);
* ``hparams.json``'s bytes and the cache format version.

An entry is built in a temporary directory next to it and renamed into place only when all its
files are complete and every tensor's CRC-32C is verified, so an interrupted conversion never
leaves an entry that looks finished.

OpenAI's releases store exactly the model's float32 tensors back to back in one data shard, and
those bytes need no conversion at all (a conv1d weight [1, D, 3D] has the bytes of [D, 3D]). For
such a checkpoint :func:`write_entry_from_layout` makes a *linked* entry: ``model.ckpt.data``, a
hard link to the data shard (no byte copied, no second copy on disk; being the checkpoint's own
file, it must not be edited in place), and ``tensors.json``, each tensor's shape and offset in
it. Where a hard link cannot be made (another file system, a file owned by someone else) it
writes ``model.safetensors`` instead: a header, then the data file by the kernel's copy,
verified on the copy; such an entry is itself a directory HF can load. Any other layout is
converted to ``model.safetensors`` by :func:`write_entry`.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..params import expected_shapes
from ..paths import home_dir
from ..progress import tqdm
from .convert import hf_name, openai_name
from .crc32c import crc32c, crc32c_combine
from .protobuf import BundleEntry
from .safetensors import header_bytes, read_safetensors_header, write_safetensors
from .tf_bundle import DT_FLOAT, check_crc, data_path, read_tf_index

__all__ = [
    "byte_copy_layout",
    "cache_key",
    "default_cache_dir",
    "entry_dir",
    "is_linked",
    "read_linked_entry",
    "write_entry",
    "write_entry_from_layout",
]

FORMAT_VERSION = "gpt2np-tf-cache-1"
LINKED_DATA, LINKED_INDEX = "model.ckpt.data", "tensors.json"
_KINDS = (("model.safetensors", "config.json"), (LINKED_DATA, LINKED_INDEX, "config.json"))


def default_cache_dir() -> str:
    """``$GPT2NP_HOME/cache``, where GPT2NP_HOME defaults to ``~/.cache/gpt2np``."""
    return os.path.join(home_dir(), "cache")  # the same home as download's models/


def cache_key(index_path: str, shard_paths: list[str], hparams_path: str) -> str:
    """A hex digest that changes whenever the checkpoint or its hyperparameters change."""
    h = hashlib.sha256(FORMAT_VERSION.encode())
    for path in (index_path, hparams_path):
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    for path in shard_paths:
        st = os.stat(path)
        h.update(f"{os.path.basename(path)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def entry_dir(cache_dir: str, key: str) -> str | None:
    """The finished entry for ``key``, or None."""
    path = os.path.join(cache_dir, f"tf-{key[:40]}")
    if any(all(os.path.isfile(os.path.join(path, f)) for f in files) for files in _KINDS):
        return path
    return None


def is_linked(entry: str) -> bool:
    """Whether the entry is the linked kind (else it holds model.safetensors)."""
    return os.path.isfile(os.path.join(entry, LINKED_INDEX))


def read_linked_entry(entry: str, hparams: HParams) -> dict[str, np.ndarray]:
    """A linked entry's flat params, as read-only views of one memory map of its data file.

    Raises CheckpointError for a damaged entry: an index that does not place every tensor of
    the model inside the data file, or a data file of the wrong size.
    """
    index_path = os.path.join(entry, LINKED_INDEX)
    data_file = os.path.join(entry, LINKED_DATA)
    try:
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
        tensors, size = index["tensors"], int(index["size"])
        data = np.memmap(data_file, dtype=np.uint8, mode="r")
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"cannot read cache entry {entry}: {e}") from None
    if data.size != size:
        raise CheckpointError(f"{data_file} has {data.size} bytes, its index says {size}")
    flat = {}
    for name, shape in expected_shapes(hparams).items():
        t = tensors.get(name) if isinstance(tensors, dict) else None
        t = t if isinstance(t, dict) else {}
        offset, nbytes = t.get("offset"), 4 * math.prod(shape)
        placed = isinstance(offset, int) and 0 <= offset <= size - nbytes
        if t.get("shape") != list(shape) or not placed:
            raise CheckpointError(f"{index_path} does not place tensor {name} {list(shape)}")
        flat[name] = data[offset : offset + nbytes].view("<f4").reshape(shape)  # float32, LE
    return flat


def write_entry(
    cache_dir: str,
    key: str,
    tensors: dict[str, np.ndarray],
    config: dict[str, Any],
    metadata: dict[str, str],
) -> str:
    """Write an entry atomically and return its directory."""

    def write(directory: str) -> None:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, metadata)

    return _write_atomically(cache_dir, key, write, config)


Layout = list[tuple[str, str, BundleEntry]]  # (OpenAI name, flat name, entry) in file order


def byte_copy_layout(prefix: str, hparams: HParams) -> Layout | None:
    """The tensors in file order when the checkpoint is exactly the model's float32 tensors, back
    to back in one little-endian shard with the shapes ``hparams`` needs; else None (then the
    general path converts it, and reports whatever is wrong)."""
    header, entries = read_tf_index(prefix)
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
    data = data_path(prefix, 0, 1)
    if not os.path.isfile(data) or os.path.getsize(data) != offset:
        return None
    return layout


def write_entry_from_layout(
    cache_dir: str,
    key: str,
    prefix: str,
    layout: Layout,
    config: dict[str, Any],
    metadata: dict[str, str],
    progress: bool = False,
) -> str:
    """Write an entry for a checkpoint in OpenAI's layout (see :func:`byte_copy_layout`): a
    linked one where a hard link to the data file can be made, else a byte copy (see the module
    docstring). Every tensor's CRC-32C is verified on the entry's own data file before the
    entry is renamed into place (``progress``: a bar over the bytes verified). Returns the
    entry's directory."""
    source = data_path(prefix, 0, 1)

    def write(directory: str) -> None:
        linked = os.path.join(directory, LINKED_DATA)
        try:  # the file itself: a hard link to a (relative) symlink could dangle in the cache
            os.link(os.path.realpath(source), linked)
        except OSError:  # another file system, no hard links there, or not our file to link
            model = os.path.join(directory, "model.safetensors")
            _write_copy(model, source, layout, metadata, progress)
            return
        # The link is the checkpoint's own file: make sure its bytes are on disk (a download
        # just written may not be) while the CRCs are checked, then write the index.
        _verify_while_syncing(linked, 0, layout, source, lambda: _fsync_path(linked), progress)
        index = {
            "format": FORMAT_VERSION,
            "metadata": metadata,
            "size": os.path.getsize(linked),
            "tensors": {
                flat: {"shape": _shape(flat, entry), "offset": entry.offset}
                for _, flat, entry in layout
            },
        }
        with open(os.path.join(directory, LINKED_INDEX), "w", encoding="utf-8") as f:
            json.dump(index, f, indent=1)
            f.flush()
            os.fsync(f.fileno())

    return _write_atomically(cache_dir, key, write, config)


def _shape(flat: str, entry: BundleEntry) -> list[int]:
    """The model's shape of a tensor stored in OpenAI's layout (conv1d weights lose the 1)."""
    return list(entry.shape[1:]) if flat.endswith(".w") else list(entry.shape)


def _fsync_path(path: str) -> None:
    """fsync a file we may only read (POSIX flushes the file, whichever way it was opened)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # Windows cannot flush a read-only handle; the data is the source's
        if e.errno not in (errno.EBADF, errno.EINVAL):
            raise
    finally:
        os.close(fd)


def _write_copy(
    path: str, source: str, layout: Layout, metadata: dict[str, str], progress: bool
) -> None:
    """model.safetensors at ``path``: a header, then a byte copy of ``source``, verified."""
    header: dict[str, Any] = {"__metadata__": metadata}
    for _, flat, entry in layout:
        header[hf_name(flat)] = {
            "dtype": "F32",
            "shape": _shape(flat, entry),
            "data_offsets": [entry.offset, entry.offset + entry.size],
        }
    with open(path, "wb") as out, open(source, "rb") as src:
        out.write(header_bytes(header))
        out.flush()
        _copy_file(src, out, os.fstat(src.fileno()).st_size)
        out.flush()
        start = read_safetensors_header(path)[1]
        sync = functools.partial(os.fsync, out.fileno())
        _verify_while_syncing(path, start, layout, source, sync, progress)


def _verify_while_syncing(
    path: str,
    start: int,
    layout: Layout,
    source: str,
    sync: Callable[[], None],
    progress: bool = False,
) -> None:
    """Check every tensor's CRC-32C in ``path`` (data from byte ``start``) while ``sync``
    flushes it to disk, side by side: the flush waits on I/O, the CRCs on the CPU. A mismatch
    is a CheckpointError naming the tensor and the checkpoint file ``source``."""
    with ThreadPoolExecutor(1) as flusher:
        synced = flusher.submit(sync)
        crcs = _tensor_crcs(path, start, layout, progress=progress)
        synced.result()
    for name, _, entry, actual in crcs:
        check_crc(entry, actual, name, source)


def _tensor_crcs(
    path: str, start: int, layout: Layout, piece: int = 16 << 20, progress: bool = False
) -> list[tuple[str, str, BundleEntry, int]]:
    """Each tensor's CRC-32C as it lies in the entry's data file ``path`` (the link, or the copy
    whose data section starts at byte ``start``).

    Tensors are cut into pieces of at most ``piece`` bytes, which two threads check in turn
    (NumPy releases the GIL), each reading through a reused buffer: faster than the first
    touches of a fresh memory map, and memory stays at two pieces. Even pieces keep both threads
    busy to the end (the last tensor, wte, is a third of the file), and a tensor's CRC is
    recombined from its pieces' with :func:`crc32c_combine`.
    """
    local = threading.local()
    opened: list[Any] = []
    pieces = [
        (i, lo, min(piece, entry.size - lo))
        for i, (_, _, entry) in enumerate(layout)
        for lo in range(0, entry.size, piece)
    ]

    def crc_of(item: tuple[int, int, int]) -> int:
        i, lo, size = item
        name, _, entry = layout[i]
        if not hasattr(local, "file"):  # one file and one buffer per thread (portable reads)
            local.file = open(path, "rb", buffering=0)  # closed in the finally below
            opened.append(local.file)
            local.buffer = np.empty(piece, dtype=np.uint8)
        local.file.seek(start + entry.offset + lo)
        done = 0
        while done < size:
            n = local.file.readinto(memoryview(local.buffer)[done:size])
            if not n:
                raise CheckpointError(f"{path} ended early while verifying tensor {name}")
            done += n
        return crc32c(local.buffer[:size])

    total = sum(size for _, _, size in pieces)
    bar = tqdm(total=total, desc="verifying checkpoint", unit="B", unit_scale=True,
               unit_divisor=1024, disable=not progress)  # fmt: skip
    piece_crcs = []
    try:
        with bar, ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
            for (_, _, size), crc in zip(pieces, pool.map(crc_of, pieces)):
                piece_crcs.append(crc)
                bar.update(size)
    finally:
        for f in opened:
            f.close()
    crcs = [0] * len(layout)  # an empty tensor has no pieces, and crc32c(b"") == 0
    for (i, lo, size), crc in zip(pieces, piece_crcs):
        crcs[i] = crc if lo == 0 else crc32c_combine(crcs[i], crc, size)
    return [(name, flat, entry, crc) for (name, flat, entry), crc in zip(layout, crcs)]


def _copy_file(src: Any, out: Any, size: int) -> None:
    """Append ``size`` bytes of ``src`` (from its start) to ``out``, in the kernel where it can."""
    start, copied = out.tell(), 0
    try:
        while copied < size:  # advances both files' offsets
            n = os.copy_file_range(src.fileno(), out.fileno(), size - copied)
            if n == 0:  # the end, or a file system that copies nothing this way (as procfs and
                break  # some FUSE ones do): the plain copy below tells which
            copied += n
    except (AttributeError, OSError):  # no copy_file_range here (OS, kernel or file system)
        pass
    if copied < size:
        src.seek(copied)
        out.seek(start + copied)
        shutil.copyfileobj(src, out, 16 << 20)
        out.flush()
    if os.fstat(out.fileno()).st_size != start + size:
        raise CheckpointError(f"{src.name} changed while it was copied into the cache")


STALE_TMP_SECONDS = 24 * 3600


def _remove_abandoned(cache_dir: str) -> None:
    """Remove temporary entries untouched for a day: left by a process that was killed (no
    ``except`` runs on SIGKILL or power loss), each as large as the model. A live conversion
    writes its files every few seconds, so it is never this old."""
    now = time.time()
    for name in os.listdir(cache_dir):
        path = os.path.join(cache_dir, name)
        if not (name.startswith("tf-") and name.endswith(".tmp")):
            continue
        try:
            paths = [path] + [os.path.join(path, f) for f in os.listdir(path)]
            newest = max(os.stat(p).st_mtime for p in paths)
        except OSError:  # gone already (renamed or removed by its owner)
            continue
        if now - newest > STALE_TMP_SECONDS:
            shutil.rmtree(path, ignore_errors=True)


def _write_atomically(cache_dir: str, key: str, write: Any, config: dict[str, Any]) -> str:
    """Build an entry in a temporary directory with ``write(directory)`` and the config, then
    rename it into place; return the entry's directory."""
    final = os.path.join(cache_dir, f"tf-{key[:40]}")
    os.makedirs(cache_dir, exist_ok=True)
    _remove_abandoned(cache_dir)
    tmp = tempfile.mkdtemp(prefix=f"tf-{key[:40]}.", suffix=".tmp", dir=cache_dir)
    try:
        write(tmp)
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        if os.path.isdir(final):  # a stale half-entry, or another process just finished one
            if entry_dir(cache_dir, key):
                shutil.rmtree(tmp)
                return final
            shutil.rmtree(final)
        try:
            os.rename(tmp, final)
        except OSError:  # another process renamed its entry into place since the check above
            if not entry_dir(cache_dir, key):
                raise
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
