"""The conversion cache: a TF checkpoint converted once to safetensors, memory-mapped after.

An entry is a directory ``<cache_dir>/tf-<key>/`` holding ``model.safetensors`` and an HF
``config.json`` (so an entry is itself a directory HF can load). The key is a SHA-256 over

* the ``.index`` file's bytes — it holds every tensor's dtype, shape, offset and CRC-32C, so any
  change to the weights that TensorFlow wrote changes it;
* each data shard's name, size and modification time (a shard edited in place, or truncated,
  changes these even when the index is untouched);
* ``hparams.json``'s bytes and the cache format version.

An entry is built in a temporary directory next to it and renamed into place only when both
files are complete, so an interrupted conversion never leaves an entry that looks finished.

OpenAI's releases store exactly the model's float32 tensors back to back in one data shard, and
those bytes are already what safetensors needs (a conv1d weight [1, D, 3D] has the bytes of
[D, 3D]). For such a checkpoint :func:`write_entry_by_copy` writes a header and copies the data
file with the kernel's copy (no pass through Python memory), then verifies every tensor's
CRC-32C on the copy itself. Any other layout goes through :func:`write_entry`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..download import home_dir
from ..errors import CheckpointError
from ..hparams import HParams
from ..params import expected_shapes
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
    "write_entry",
    "write_entry_by_copy",
]

FORMAT_VERSION = "gpt2np-tf-cache-1"
_FILES = ("model.safetensors", "config.json")


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
    if all(os.path.isfile(os.path.join(path, f)) for f in _FILES):
        return path
    return None


def write_entry(
    cache_dir: str,
    key: str,
    tensors: dict[str, np.ndarray],
    config: dict[str, Any],
    metadata: dict[str, str],
) -> str:
    """Write an entry atomically and return its directory."""

    def write(path: str) -> None:
        write_safetensors(path, tensors, metadata)

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


def write_entry_by_copy(
    cache_dir: str,
    key: str,
    prefix: str,
    layout: Layout,
    config: dict[str, Any],
    metadata: dict[str, str],
) -> str:
    """Write an entry whose data section is a byte copy of the checkpoint's data file (see the
    module docstring), verify every tensor's CRC-32C on the copy, and return its directory."""
    source = data_path(prefix, 0, 1)
    header: dict[str, Any] = {"__metadata__": metadata}
    for _, flat, entry in layout:
        shape = list(entry.shape[1:]) if flat.endswith(".w") else list(entry.shape)
        header[hf_name(flat)] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [entry.offset, entry.offset + entry.size],
        }

    def write(path: str) -> None:
        with open(path, "wb") as out, open(source, "rb") as src:
            out.write(header_bytes(header))
            out.flush()
            _copy_file(src, out, os.fstat(src.fileno()).st_size)
            out.flush()
            # the disk flush waits on I/O, the CRCs on the CPU: run them side by side
            with ThreadPoolExecutor(1) as flusher:
                synced = flusher.submit(os.fsync, out.fileno())
                crcs = _crcs_of_copy(path, read_safetensors_header(path)[1], layout)
                synced.result()
        for name, _, entry, actual in crcs:
            check_crc(entry, actual, name, source)

    return _write_atomically(cache_dir, key, write, config)


def _crcs_of_copy(
    path: str, start: int, layout: Layout, piece: int = 16 << 20
) -> list[tuple[str, str, BundleEntry, int]]:
    """Each tensor's CRC-32C as it lies in the copy.

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

    try:
        with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
            piece_crcs = list(pool.map(crc_of, pieces))
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
    """Build an entry in a temporary directory with ``write(path_of_model_safetensors)`` and the
    config, then rename it into place; return the entry's directory."""
    final = os.path.join(cache_dir, f"tf-{key[:40]}")
    os.makedirs(cache_dir, exist_ok=True)
    _remove_abandoned(cache_dir)
    tmp = tempfile.mkdtemp(prefix=f"tf-{key[:40]}.", suffix=".tmp", dir=cache_dir)
    try:
        write(os.path.join(tmp, "model.safetensors"))
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
