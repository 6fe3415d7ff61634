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
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Optional, Union

from ..errors import CheckpointError
from ..hparams import HPARAMS, HParams
from ..support.bounded_read import open_regular
from ..tokenizer.tokenizer import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256

__all__ = ["RELEASE_SHA256", "describe_checkpoint", "published_release"]

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
