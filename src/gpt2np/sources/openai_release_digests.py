"""The SHA-256 of OpenAI's published GPT-2 files: what tells OpenAI's release from any other
well-formed checkpoint of the same shape.

A directory that passes :mod:`gpt2np.sources.openai_checks` holds *a* checkpoint of the right
shape whose data matches its own index; random weights saved in TensorFlow's format pass too.
Only the digests of the seven files as OpenAI published them say "these are OpenAI's weights".
:func:`describe_checkpoint` says which of the two a directory holds, for the notebooks and
anyone who labels a result.

Where the pins come from (no file here was downloaded to make them):

* ``encoder.json`` and ``vocab.bpe``: tiktoken's pins for its "gpt2" encoding (the same as
  :data:`gpt2np.tokenizer.tokenizer.ENCODER_JSON_SHA256` and ``VOCAB_BPE_SHA256``);
* 124M's ``hparams.json`` and ``checkpoint``: the digests published beside the others, which
  are also the SHA-256 of the files' known text (the published hparams as JSON indented by 2
  with a final newline; the two CheckpointState lines naming ``model.ckpt``):
  tests/sources/test_openai_release_digests.py recomputes both;
* 124M's ``model.ckpt.data-00000-of-00001``: published by two independent sources, the
  ``CHECKSUMS`` table of a GPT-2 download script in MontrealAI/AGI-Alpha-Agent-v0 (its pull
  request 2925, "verify GPT-2 downloads using SHA-256 checksums"), and the description of the
  gpt2-codegolf benchmark task, which pins the file with its size, 497,759,232 bytes (4 bytes x
  124,439,808 parameters, as the test checks);
* 124M's ``model.ckpt.index`` and ``model.ckpt.meta``: that ``CHECKSUMS`` table (one source).

No digests are known here for the data, index and meta files of 355M, 774M and 1558M: for those
sizes :func:`describe_checkpoint` can say only that a checkpoint has the size's shape.

:func:`provenance` is what ``gpt2np info`` and ``gpt2np.load(SIZE)`` say of ``models/SIZE``:
OpenAI's published weights, not them, or not verified (no pins). Hashing 124M's files reads
0.5 GB, so the verdict is kept in ``provenance.json`` in the weights cache, beside each file's
stamp (device, inode, size, mtime_ns, ctime_ns): a file written or replaced since is hashed
again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
from typing import Any, NamedTuple, Optional, Union

from ..errors import CheckpointError
from ..hparams import HPARAMS, HParams
from ..support.atomic import write_bytes
from ..support.bounded_read import open_regular, read_json_file
from ..tokenizer.tokenizer import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256

__all__ = ["RELEASE_SHA256", "Provenance", "describe_checkpoint", "provenance", "published_release"]

#: size -> file -> SHA-256 of the file as OpenAI published it (sizes with all seven known).
RELEASE_SHA256: dict[str, dict[str, str]] = {
    "124M": {
        "checkpoint": "dd1b025d2e155283f5e300ce95bf6d5b6bc0f7fe010db73daa6975eb896ab9cb",
        "encoder.json": ENCODER_JSON_SHA256,
        "hparams.json": "d9d56e4121c427164e0c55c6f03c08e1daf9002b9b672825112d19097b680318",
        "model.ckpt.data-00000-of-00001": (
            "2060c885360cc0cf41d7a6dbc4d24b5127aae20260c8b5ae521b5a6578407118"
        ),
        "model.ckpt.index": "71916f763f9746f9b2a06b12d91996cf1084ae008d0424543d39391c5f2dc687",
        "model.ckpt.meta": "4668c448fa11531fd6700460487f73e82d3272960cea942252f8744bf225c77b",
        "vocab.bpe": VOCAB_BPE_SHA256,
    },
}

_BLOCK = 1 << 20
#: The seven files' names, the same for every size.
_RELEASE_FILES = tuple(sorted(RELEASE_SHA256["124M"]))

PathLike = Union[str, "os.PathLike[str]"]


def published_release(directory: PathLike, name: str) -> Optional[str]:
    """None when ``directory`` holds the seven files of OpenAI's release of size ``name``
    byte for byte (their SHA-256 are the pinned ones), else why not: no pins for that size,
    a file missing, or the first file whose digest differs. The small files are checked first;
    the data file (0.5 GB for 124M) is read only when they all match."""
    pins = RELEASE_SHA256.get(name)
    if pins is None:
        return f"gpt2np knows no published digests for {name}"
    directory = pathlib.Path(directory)
    for file in sorted(pins, key=lambda f: f.startswith("model.ckpt.data")):
        digest = _sha256(directory / file)
        if digest is None:
            return f"no regular file {file}"
        if digest != pins[file]:
            return f"{file} differs from OpenAI's published file"
    return None


def describe_checkpoint(directory: PathLike, name: str) -> str:
    """ "OpenAI's 124M" for the published files of size ``name``; else "a 124M-shaped
    checkpoint (why it is not the published one)" when its hparams.json is that size's, and
    "a checkpoint that is not 124M-shaped" when it is not."""
    why = published_release(directory, name)
    if why is None:
        return f"OpenAI's {name}"
    try:
        shaped = HParams.from_json(pathlib.Path(directory) / "hparams.json") == HPARAMS[name]
    except (ValueError, TypeError, KeyError):  # CheckpointError is a ValueError
        shaped = False
    if not shaped:
        return f"a checkpoint that is not {name}-shaped"
    return f"a {name}-shaped checkpoint (not OpenAI's published files: {why})"


class Provenance(NamedTuple):
    """Whether ``models/SIZE`` holds OpenAI's published files: ``published`` is True (every
    pinned SHA-256 matches), False (pins exist and a file differs) or None (no pins for that
    size: not verified); ``text`` says it in words; ``fresh`` is True when the files were
    hashed for this answer (not taken from the cache)."""

    published: Optional[bool]
    text: str
    fresh: bool


#: The cache file of :func:`provenance`'s verdicts, in the weights cache directory.
PROVENANCE_FILE = "provenance.json"
_MAX_CACHE_BYTES = 1 << 20


def provenance(directory: PathLike, name: str, cache_dir: Optional[PathLike]) -> Provenance:
    """Whether ``directory`` holds OpenAI's published files of size ``name``, from the cache in
    ``cache_dir`` when no file has changed since it was last hashed (``cache_dir`` None: no
    cache). Never says "as released" of files it has not checked."""
    key = os.path.abspath(directory)
    stamps = _stamps(pathlib.Path(directory))
    cache = pathlib.Path(cache_dir) / PROVENANCE_FILE if cache_dir is not None else None
    known = _cached(cache, key) if cache is not None else None
    if known is not None and known.get("name") == name and known.get("stamps") == stamps:
        return _verdict(name, known.get("why"), fresh=False)
    why = published_release(directory, name)
    if cache is not None and _stamps(pathlib.Path(directory)) == stamps:  # none changed meanwhile
        with contextlib.suppress(OSError, ValueError):  # a cache that cannot be written: no cache
            _record(cache, key, {"name": name, "stamps": stamps, "why": why})
    return _verdict(name, why, fresh=True)


def _verdict(name: str, why: Optional[str], fresh: bool) -> Provenance:
    if name not in RELEASE_SHA256:
        return Provenance(None, f"not verified (gpt2np knows no published digests for {name})",
                          fresh)  # fmt: skip
    if why is None:
        return Provenance(True, f"OpenAI's published {name} weights (SHA-256 checked)", fresh)
    return Provenance(False, f"not OpenAI's published {name} weights: {why}", fresh)


def _stamps(directory: pathlib.Path) -> dict[str, Optional[list[int]]]:
    """Each release file's stamp, None for one that is missing."""
    stamps: dict[str, Optional[list[int]]] = {}
    for file in _RELEASE_FILES:
        try:
            st = os.stat(directory / file)
        except OSError:
            stamps[file] = None
            continue
        stamps[file] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return stamps


def _cached(cache: pathlib.Path, key: str) -> Optional[dict[str, Any]]:
    try:
        entries = read_json_file(cache, _MAX_CACHE_BYTES)
    except ValueError:  # missing or damaged (a CheckpointError): hash again
        return None
    entry = entries.get(key) if isinstance(entries, dict) else None
    return entry if isinstance(entry, dict) else None


def _record(cache: pathlib.Path, key: str, entry: dict[str, Any]) -> None:
    try:
        entries = read_json_file(cache, _MAX_CACHE_BYTES)
    except ValueError:
        entries = {}
    if not isinstance(entries, dict):
        entries = {}
    entries[key] = entry
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(cache, json.dumps(entries, indent=1, sort_keys=True) + "\n")


def _sha256(path: pathlib.Path) -> Optional[str]:
    """The SHA-256 of the regular file at ``path``, or None if there is none (a FIFO is not
    opened for reading: :func:`gpt2np.support.bounded_read.open_regular`)."""
    try:
        fd = open_regular(path)
    except CheckpointError:
        return None
    with os.fdopen(fd, "rb") as f:
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
