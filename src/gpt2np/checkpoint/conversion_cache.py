"""The verified cache: a TF checkpoint checked once, memory-mapped after.

The first load of a TF checkpoint checks every tensor's CRC-32C against its index and records
what it checked in an *entry*, ``<cache_dir>/<key>.json`` (the key hashes where the checkpoint
and its hparams.json are). Later loads memory-map the weights at the recorded offsets:

* OpenAI's layout (every tensor float32, back to back, in one shard, as the model needs them)
  is mapped **in place**, from the checkpoint's own data file: nothing is linked or copied,
  and nothing the cache does can change the user's files.
* Any other layout is converted once into ``<key>.<random>.safetensors`` beside the entry.

An entry holds the SHA-256 of the ``.index`` and the hyperparameters it was checked with; each
data shard's path and *stamp* (device, inode, size, mtime_ns, ctime_ns); the mapped file's path
and stamp; each tensor's offset, dtype, shape and CRC-32C there; and a SHA-256 of all that.

An entry is used only if its checksum holds, its tensors are exactly the model's (each inside
the file, none overlapping), the index and hparams are unchanged and every stamp is the same.
Otherwise it is discarded (with a warning if it was damaged, not merely outdated) and the
checkpoint is verified again. A write to a file changes its ctime, which no call can set back
(``touch -r`` sets mtime only); replacing it changes the inode. What a stamp cannot see: bytes
changed beneath the file system (bit rot, a write to the device), and a second write within one
tick of the file system's clock, which git calls "racy": an entry whose file changed less than
``RACY_NS`` before it was verified is verified again on its next use.

``verify=True`` does not ask the entry: it checks the checkpoint against its own index again,
as a first load does (every tensor's CRC-32C, in OpenAI's layout at the offsets the index
gives), and serves an entry only if it agrees (a conversion must hold exactly the tensors read
from the checkpoint). A checkpoint that fails the check leaves no entry behind.

What the cache removes is only ever its own: entries of its format, conversions named
``<key>.gpt2np-PID-RANDOM.safetensors`` that no entry names (once their writer is gone, or a
minute after they were written), and the temporaries of a writer that died
(:func:`gpt2np.support.atomic.is_leftover`). Every load removes such leftovers; other files in
``cache_dir`` are never touched.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pathlib
import re
import time
from typing import Any

import numpy as np

from ..errors import CheckpointError, warn
from ..hparams import HParams
from ..params import expected_shapes
from ..support.atomic import marked_name, sweep, write_bytes, writer_gone
from ..support.bounded_read import read_json_file
from ..support.paths import home_dir
from ..support.progress import tqdm
from .convert import flat_from_openai, hf_name
from .crc32c import crc32c
from .safetensors import DTYPES, read_safetensors_header, write_safetensors
from .tf_bundle import data_path, parse_tf_index, read_index_bytes, read_tf_checkpoint
from .verify import Span, file_crcs, in_place_layout, map_file, stamp, verify_in_place

__all__ = ["default_cache_dir", "entry_path", "load_cached"]

FORMAT = "gpt2np-cache-2"
RACY_NS = 2 * 10**9  # coarser than any file system's timestamps (FAT's mtime: 2 s)
MAX_ENTRY_BYTES = 16 << 20  # 1558M's entry is ~60 KB
GRACE_SECONDS = 60  # a conversion just written may be about to be named by its entry
#: A conversion of the entry ``<key>.json``, named by its writer: the marker, and its pid.
_CONVERTED = re.compile(r"^(?P<key>[0-9a-f]{40})\.gpt2np-(?P<pid>\d+)-[0-9a-f]{12}\.safetensors$")
_KEYS = {"format", "kind", "index_sha256", "hparams", "shards", "data", "racy", "tensors"}
_SAFETENSORS_DTYPE = {np.dtype(v).str: k for k, v in DTYPES.items() if k in ("F16", "F32", "F64")}


def default_cache_dir() -> str:
    """``$GPT2NP_HOME/cache``, where GPT2NP_HOME defaults to ``~/.cache/gpt2np``."""
    return os.path.join(home_dir(), "cache")  # the same home as download's models/


def entry_path(cache_dir: str, prefix: str, hparams_path: str) -> str:
    """The entry for the checkpoint ``prefix`` read with ``hparams_path``."""
    where = f"{FORMAT}\0{os.path.abspath(prefix)}\0{os.path.abspath(hparams_path)}"
    return os.path.join(cache_dir, hashlib.sha256(where.encode()).hexdigest()[:40] + ".json")


def load_cached(
    prefix: str,
    hparams: HParams,
    hparams_path: str,
    cache_dir: str,
    verify: bool = False,
    progress: bool = False,
) -> dict[str, np.ndarray]:
    """The flat params of the TF checkpoint ``prefix``: from its entry in ``cache_dir`` when
    that entry holds (see the module docstring), else verified, recorded and returned.

    ``verify`` checks the checkpoint against its index even when the entry holds; ``progress``
    shows a bar while CRC-32Cs are checked (nothing is checked when the entry holds). A cache
    that cannot be written (read-only, full) warns and still returns the weights. Raises
    CheckpointError naming the file (and tensor) for a checkpoint that does not verify.
    """
    index = prefix + ".index"
    index_bytes = read_index_bytes(index)
    index_sha = hashlib.sha256(index_bytes).hexdigest()
    path = entry_path(cache_dir, prefix, hparams_path)
    sweep(cache_dir)  # what killed processes left
    if not verify:
        flat = _use_entry(path, prefix, index_sha, hparams, progress)
        if flat is not None:
            return flat
    try:
        return _verify_and_record(path, prefix, index_bytes, index_sha, hparams, verify, progress)
    except CheckpointError:
        _discard(path)  # nothing may claim that this checkpoint verified
        raise


def _verify_and_record(
    path: str,
    prefix: str,
    index_bytes: bytes,
    index_sha: str,
    hparams: HParams,
    verify: bool,
    progress: bool,
) -> dict[str, np.ndarray]:
    """Check the checkpoint against its index (a first load), record it in the entry ``path``
    and return its flat params; with ``verify``, an entry that agrees is kept (and served)."""
    header, entries = parse_tf_index(index_bytes, prefix + ".index")
    shards = []
    for i in range(header.num_shards):  # stop at the first missing one: the count may lie
        shards.append(data_path(prefix, i, header.num_shards))
        if not os.path.isfile(shards[-1]):
            raise CheckpointError(f"missing data file {shards[-1]}")
    body: dict[str, Any] = {"format": FORMAT, "index_sha256": index_sha,
                            "hparams": hparams.to_dict()}  # fmt: skip
    layout = in_place_layout(header, entries, shards, hparams)
    if layout is not None:
        with _bar(sum(e.size for _, _, e in layout), progress) as bar:
            in_place, data_stamp, crcs = verify_in_place(shards[0], layout, bar.update)
        if in_place is not None:  # OpenAI's layout, checked, mapped in place
            data = [os.path.abspath(shards[0]), data_stamp]
            placed = {f: [e.offset, "<f4", list(in_place[f].shape), crc]
                      for (_, f, e), crc in zip(layout, crcs)}  # fmt: skip
            body.update(kind="in-place", shards=[data], data=data, tensors=placed)
            if not (verify and _recorded(path, body)):
                _write(path, body, None)
            return in_place
    before = [stamp(os.stat(s)) for s in shards]
    tensors = read_tf_checkpoint(prefix, index=(header, entries), progress=progress)  # CRCs too
    flat = flat_from_openai(tensors, hparams, f"checkpoint {prefix}")
    if [stamp(os.stat(s)) for s in shards] != before:
        raise CheckpointError(f"checkpoint {prefix} changed while it was read; load it again")
    if verify:  # the conversion is served if it holds exactly what was read
        mapped = _use_entry(path, prefix, index_sha, hparams, progress, source=flat)
        if mapped is not None:
            return mapped
    body.update(kind="converted", shards=[[os.path.abspath(s), b] for s, b in zip(shards, before)])
    _write(path, body, flat)
    return flat


def _recorded(path: str, body: dict[str, Any]) -> bool:
    """Whether the entry ``path`` records ``body`` already (but for its ``racy`` flag)."""
    try:
        old = read_json_file(path, MAX_ENTRY_BYTES, max_depth=8)["body"]
        return {**old, "racy": None} == {**body, "racy": None}
    except (CheckpointError, LookupError, TypeError):
        return False


class _Outdated(Exception):
    """The entry describes another state of the checkpoint: replace it, no warning needed."""


def _use_entry(
    path: str,
    prefix: str,
    index_sha: str,
    hparams: HParams,
    progress: bool,
    source: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray] | None:
    """The entry's memory-mapped flat params, or None (after discarding an entry that is
    outdated or damaged). With ``source`` (the flat params read from the checkpoint), a
    converted entry must hold exactly those tensors."""
    if not os.path.lexists(path):
        return None
    body = None
    try:
        try:
            raw = read_json_file(path, MAX_ENTRY_BYTES, max_depth=8)
        except CheckpointError as e:  # not JSON, too big, too deep, not a regular file
            raise _Damaged(str(e)) from None
        body = _body(raw, path)
        _names_its_files(body, path, prefix)
        if body["index_sha256"] != index_sha or body["hparams"] != hparams.to_dict():
            raise _Outdated
        for shard, shard_stamp in body["shards"]:
            if not os.path.exists(shard) or stamp(os.stat(shard)) != shard_stamp:
                raise _Outdated
        spans = _spans(body, hparams, path)
        flat = _map(body, spans)
        if source is not None:
            _same_tensors(flat, source, body["data"][0])
        elif body["racy"]:
            _check_crcs(body, spans, progress)
            if not _racy(body["data"][1]):
                _write(path, body, None)  # verified again long enough after the last change
    except _Outdated:
        _discard(path, body)
        return None
    except (_Damaged, OSError, ValueError) as e:  # a file vanished; a path with a NUL
        warn(f"discarding a damaged cache entry: {e}")
        _discard(path, body)
        return None
    if body["kind"] == "converted":
        _remove_converted(path, keep=body["data"][0])  # left by a writer killed before its entry
    return flat


def _same_tensors(flat: dict[str, np.ndarray], source: dict[str, np.ndarray], data: str) -> None:
    """Every tensor of ``flat`` has the dtype, shape and bits of its namesake in ``source``."""
    for name, a in source.items():
        b = flat[name]
        little = a.dtype.newbyteorder("<")
        if (
            b.dtype != little
            or b.shape != a.shape
            or not np.array_equal(
                np.ascontiguousarray(a, little).reshape(-1).view(np.uint8),
                np.ascontiguousarray(b, little).reshape(-1).view(np.uint8),
            )
        ):
            raise _Damaged(f"tensor {name} in {data} differs from the checkpoint's")


class _Damaged(Exception):
    pass


def _body(raw: Any, path: str) -> dict[str, Any]:
    """The entry's body, once its checksum and the types of its fields are right."""
    if not (isinstance(raw, dict) and set(raw) == {"body", "sha256"}):
        raise _Damaged(f"{path} is not a cache entry")
    body = raw["body"]
    if not isinstance(raw["sha256"], str) or _digest(body) != raw["sha256"]:
        raise _Damaged(f"{path} does not match its checksum")
    if not (isinstance(body, dict) and set(body) == _KEYS and body["format"] == FORMAT):
        raise _Damaged(f"{path} is not an entry of format {FORMAT}")
    files = [*body["shards"], body["data"]] if isinstance(body["shards"], list) else []
    if not (
        body["kind"] in ("in-place", "converted")
        and files[:-1]
        and all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) for f in files)
        and all(isinstance(f[1], list) and len(f[1]) == 5 for f in files)
        and all(_is_uint(x) for f in files for x in f[1])
        and isinstance(body["racy"], bool)
        and isinstance(body["tensors"], dict)
    ):
        raise _Damaged(f"{path} has fields of the wrong kind")
    return body


def _names_its_files(body: dict[str, Any], path: str, prefix: str) -> None:
    """The entry may map only this checkpoint's own data shard (in place) or a conversion of
    its own in the cache, never some other file a damaged entry names."""
    shard_name = os.path.abspath(prefix) + ".data-"
    if body["kind"] == "in-place":
        mine = len(body["shards"]) == 1 and body["data"] == body["shards"][0]
    else:
        mine = body["data"][0] in _converted_files(path)
    if not (mine and all(s.startswith(shard_name) for s, _ in body["shards"])):
        raise _Damaged(f"{path} names files that are not its checkpoint's")


def _spans(body: dict[str, Any], hparams: HParams, path: str) -> dict[str, Span]:
    """{flat name: (offset, dtype, shape)} once every tensor of the model is there exactly once,
    with its shape, inside the data file and overlapping none of the others."""
    tensors, shapes = body["tensors"], None
    if len(tensors) == 12 * hparams.n_layer + 4:  # before listing n_layer blocks' shapes
        shapes = expected_shapes(hparams)
    if shapes is None or set(tensors) != set(shapes):
        raise _Damaged(f"{path} does not list the model's tensors")
    dtypes = ("<f4",) if body["kind"] == "in-place" else tuple(_SAFETENSORS_DTYPE)
    spans, ends = {}, []
    for name, shape in shapes.items():
        t = tensors[name]
        if not (isinstance(t, list) and len(t) == 4 and _is_uint(t[0]) and t[1] in dtypes
                and t[2] == list(shape) and _is_uint(t[3]) and t[3] <= 0xFFFFFFFF):  # fmt: skip
            raise _Damaged(f"{path} does not place tensor {name} {list(shape)}")
        spans[name] = (t[0], t[1], shape)
        ends.append((t[0], t[0] + np.dtype(t[1]).itemsize * int(np.prod(shape)), name))
    covered, size = 0, body["data"][1][2]
    for begin, end, name in sorted(ends):
        if begin < covered or end > size:
            raise _Damaged(f"{path} places tensor {name} over another or past the file's end")
        covered = end
    return spans


def _map(body: dict[str, Any], spans: dict[str, Span]) -> dict[str, np.ndarray]:
    """The entry's data file mapped, once it is the file that was checked."""
    data, data_stamp = body["data"]
    try:
        fd = os.open(data, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as e:
        if body["kind"] == "in-place":
            raise _Outdated from None
        raise _Damaged(f"cannot open {data}: {e.strerror}") from None
    try:
        if stamp(os.fstat(fd)) != data_stamp:  # replaced or written since it was checked
            if body["kind"] == "in-place":
                raise _Outdated
            raise _Damaged(f"{data} was changed after it was verified")
        try:
            return map_file(fd, spans)
        except (OSError, ValueError) as e:  # a file system that cannot map files
            raise _Damaged(f"cannot map {data}: {e}") from None
    finally:
        os.close(fd)


def _check_crcs(body: dict[str, Any], spans: dict[str, Span], progress: bool) -> None:
    data, data_stamp = body["data"]
    sizes = [(o, np.dtype(d).itemsize * int(np.prod(s))) for o, d, s in spans.values()]
    try:
        with _bar(sum(size for _, size in sizes), progress) as bar:
            crcs = file_crcs(data, sizes, data_stamp, update=bar.update)
    except CheckpointError as e:  # replaced or truncated since its stamp was compared
        if body["kind"] == "in-place":
            raise _Outdated from None
        raise _Damaged(str(e)) from None
    for name, actual in zip(spans, crcs):
        if actual != body["tensors"][name][3]:
            if body["kind"] == "in-place":  # verifying against the index again tells whether
                raise _Outdated  # the checkpoint or the entry is wrong, and names the tensor
            raise _Damaged(f"checksum mismatch for tensor {name} in {data}")


def _bar(total: int, progress: bool) -> Any:
    """A bar over the bytes whose CRC-32Cs are checked (tqdm.auto; hidden unless progress)."""
    return tqdm(total=total, desc="verifying checkpoint", unit="B", unit_scale=True,
                unit_divisor=1024, disable=not progress)  # fmt: skip


def _digest(body: Any) -> str:
    try:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):  # a float of 1e400 is inf, which JSON cannot hold
        return ""
    return hashlib.sha256(text.encode()).hexdigest()


def _racy(data_stamp: list[int]) -> bool:
    """Whether the file changed so recently that another write could leave the same stamp."""
    return max(data_stamp[3], data_stamp[4]) > time.time_ns() - RACY_NS


def _is_uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _converted_files(path: str) -> list[str]:
    """The conversions of the entry ``path`` (by name: the cache's own, marked)."""
    found = glob.glob(glob.escape(path[: -len(".json")]) + ".gpt2np-*.safetensors")
    return [f for f in found if _CONVERTED.match(os.path.basename(f))]


def _discard(path: str, body: dict[str, Any] | None = None) -> None:
    """Remove an entry and the file it converted to (a process that mapped it keeps its pages)."""
    converted = body["data"][0] if body and body.get("kind") == "converted" else None
    for f in (path, converted):
        if f is not None and (f == path or f in _converted_files(path)):
            _unlink(f)
    _remove_converted(path, keep=None)


def _remove_converted(path: str, keep: str | None) -> None:
    """Remove the conversions of the entry ``path`` but ``keep``, once no one can be about to
    name them in the entry: their writer is gone, or they were written over a minute ago."""
    for f in _converted_files(path):
        match = _CONVERTED.match(os.path.basename(f))
        if f == keep or match is None:
            continue
        try:
            if (
                writer_gone(int(match["pid"]), pathlib.Path(f))
                or time.time() - os.stat(f).st_mtime > GRACE_SECONDS
            ):
                os.unlink(f)
        except OSError:
            pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write(path: str, body: dict[str, Any], flat: dict[str, np.ndarray] | None) -> None:
    """Write the entry ``path`` (and the converted file of ``flat``, if given) atomically: each
    file under a temporary name, renamed when complete. Warns instead of raising when the cache
    cannot be written: the weights are verified and the load goes on."""
    cache_dir = os.path.dirname(path)
    new = None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        _tidy(cache_dir)
        if flat is not None:
            key = os.path.basename(path)[: -len(".json")]
            new = os.path.join(cache_dir, marked_name(key, ".safetensors", hidden=False))
            _write_converted(new, flat, body)
        body["racy"] = _racy(body["data"][1])
        write_json(path, {"body": body, "sha256": _digest(body)})
    except BaseException as e:
        if new is not None and os.path.exists(new):
            os.unlink(new)
        if not isinstance(e, OSError):
            raise
        warn(f"could not write the conversion cache in {cache_dir}: {e}")
        return
    _remove_converted(path, keep=body["data"][0])  # earlier conversions of this checkpoint


def _write_converted(path: str, flat: dict[str, np.ndarray], body: dict[str, Any]) -> None:
    """The flat params as a safetensors file (HF's names), recorded in ``body``."""
    write_safetensors(path, {hf_name(f): a for f, a in flat.items()}, {"format": "pt"})
    header, start, _ = read_safetensors_header(path)
    tensors = {}
    for name, a in flat.items():
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        begin = header[hf_name(name)]["data_offsets"][0]
        tensors[name] = [start + begin, a.dtype.str, list(a.shape), crc32c(a)]
    body.update(data=[os.path.abspath(path), stamp(os.stat(path))], tensors=tensors)


def write_json(path: str, value: Any) -> None:
    write_bytes(path, json.dumps(value, separators=(",", ":")))


def _tidy(cache_dir: str) -> None:
    """Remove the conversions that no entry will name: those of an entry that names another
    (or of no entry at all: a writer killed between the two), and those of a checkpoint that no
    longer exists. Only the cache's own files are looked at (see the module docstring)."""
    keys = {m["key"] for m in map(_CONVERTED.match, os.listdir(cache_dir)) if m is not None}
    for key in keys:
        path = os.path.join(cache_dir, key + ".json")
        try:
            if not os.path.lexists(path):
                _remove_converted(path, keep=None)
                continue
            body = read_json_file(path, MAX_ENTRY_BYTES, max_depth=8)["body"]
            if not any(os.path.exists(shard) for shard, _ in body["shards"]):
                _discard(path, body)  # the checkpoint it converted is gone
            else:
                _remove_converted(path, keep=body["data"][0])
        except (OSError, CheckpointError, LookupError, TypeError, ValueError):
            # gone already (renamed or removed by its owner), or not an entry to judge here
            continue
