"""What each file of OpenAI's GPT-2 release must be, checked offline before a download counts.

Each ``check_*`` returns why the file is wrong, or None if it passes. The checkpoint's own
checksums do most of the work: the index (an SSTable) carries a CRC-32C per block and, per
tensor, its offset, size and the masked CRC-32C of its bytes in the data file
(:mod:`gpt2np.checkpoint.tf_bundle`), so a data file is verified exactly against its index.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Optional

from ..checkpoint.crc32c import crc32c, unmask
from ..checkpoint.tf_bundle import read_tf_index
from ..hparams import HParams

__all__ = [
    "check_checkpoint_state",
    "check_data",
    "check_hparams",
    "check_index",
    "index_extent",
]

MAX_SMALL_FILE = 64 * 1024  # hparams.json and checkpoint are ~100 bytes
MAX_INDEX = 64 << 20  # the 1558M release's index is ~30 KB
MAX_META = 64 << 20  # the MetaGraphDef, never read: 1558M's is ~2 MB
CRC_BLOCK = 64 << 20  # bytes of the data file read (and CRC'd, on two threads) at a time
_STATE_LINE = re.compile(r'[a-z_]+: (?:"[^"\n]*"|[-+0-9.eE]+)')


def check_hparams(path: pathlib.Path, expected: HParams, name: str) -> Optional[str]:
    """hparams.json must parse and equal the published hparams of size ``name``."""
    if path.stat().st_size > MAX_SMALL_FILE:
        return f"not a valid hparams.json (over {MAX_SMALL_FILE} bytes)"
    try:
        got = HParams.from_json(path)
    except (ValueError, TypeError, RecursionError) as e:  # RecursionError: deep nesting
        return f"not a valid hparams.json ({e})"
    if got != expected:
        return f"hparams {got} differ from the published {name} {expected}"
    return None


def check_checkpoint_state(path: pathlib.Path) -> Optional[str]:
    """``checkpoint`` is TensorFlow's CheckpointState in text form, whole lines, naming the
    model's checkpoint (``model_checkpoint_path: "model.ckpt"``)."""
    if path.stat().st_size > MAX_SMALL_FILE:
        return f"not a checkpoint state file (over {MAX_SMALL_FILE} bytes)"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "not a checkpoint state file (not UTF-8 text)"
    lines = [line for line in text.split("\n") if line.strip()]
    bad = next((line for line in lines if not _STATE_LINE.fullmatch(line.strip())), None)
    if bad is not None:
        return f"not a checkpoint state file (line {bad[:60]!r})"
    if not any(line.startswith("model_checkpoint_path:") for line in lines):
        return "not a checkpoint state file (no model_checkpoint_path)"
    if not text.endswith("\n"):
        return "cut short (its last line is not whole)"
    return None


def check_index(path: pathlib.Path, hparams: HParams, name: str) -> Optional[str]:
    """model.ckpt.index reads as a tensor bundle (block CRCs checked) with one data shard,
    tensors laid end to end from byte 0, each with a checksum, and ``model/`` tensors of
    4 bytes per parameter of GPT-2 ``name`` (float32, as released)."""
    if path.stat().st_size > MAX_INDEX:
        return f"not a checkpoint index (over {MAX_INDEX >> 20} MiB)"
    try:
        header, entries = read_tf_index(path)
    except (ValueError, RecursionError) as e:  # CheckpointError is a ValueError
        return f"not a readable checkpoint index ({e})"
    if header.num_shards != 1:
        return f"it describes {header.num_shards} data shards; the release has one"
    end = 0
    for tensor, entry in sorted(entries.items(), key=lambda item: item[1].offset):
        if entry.shard_id != 0 or entry.has_slices or entry.crc32c is None:
            return f"tensor {tensor} is not one checksummed piece of shard 0"
        if entry.offset != end:
            return f"tensor {tensor} starts at byte {entry.offset}, not at {end}"
        end += entry.size
    model_bytes = sum(e.size for t, e in entries.items() if t.startswith("model/"))
    if model_bytes != 4 * hparams.n_params:
        return (
            f"its model/ tensors hold {model_bytes} bytes, but GPT-2 {name} has "
            f"{hparams.n_params} float32 parameters ({4 * hparams.n_params} bytes)"
        )
    return None


def index_extent(index: pathlib.Path) -> int:
    """The size the data file must have: where the index's last tensor ends."""
    _, entries = read_tf_index(index)
    return max((e.offset + e.size for e in entries.values()), default=0)


def check_data(path: pathlib.Path, index: pathlib.Path) -> Optional[str]:
    """Every tensor of the data file has the CRC-32C that the (verified) ``index`` records.
    The data file's size is checked before this, against :func:`index_extent`."""
    _, entries = read_tf_index(index)
    with open(path, "rb") as f:
        for tensor, entry in sorted(entries.items(), key=lambda item: item[1].offset):
            if entry.crc32c is None:  # check_index refused this already
                return f"tensor {tensor} has no CRC-32C"
            f.seek(entry.offset)
            crc, remaining = 0, entry.size
            while remaining:
                block = f.read(min(CRC_BLOCK, remaining))
                if not block:
                    return f"it ends inside tensor {tensor}"
                crc = crc32c(block, crc)
                remaining -= len(block)
            stored = unmask(entry.crc32c)
            if crc != stored:
                return (
                    f"tensor {tensor} has CRC-32C {crc:#010x}, the index says {stored:#010x} "
                    f"(bytes {entry.offset}-{entry.offset + entry.size} of {os.fspath(path)})"
                )
    return None
