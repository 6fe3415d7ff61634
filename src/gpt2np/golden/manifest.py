"""The manifest of a golden file, and the weights' hash it carries.

The manifest is UTF-8 JSON stored as the first member, ``__manifest__.json.npy`` (a uint8 array).
docs/golden-files.md lists its keys. Reading one checks every key that gpt2np uses, so that a
damaged or hostile manifest is a :class:`gpt2np.CheckpointError` naming the file and the key,
never a raw exception further on.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Optional

import numpy as np

from ..errors import CheckpointError
from ..hparams import HParams
from ..params import Params, expected_shapes, flatten

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST_KEY", "check_manifest", "weights_sha256"]

#: The manifest member's name (stored as ``__manifest__.json.npy``: a uint8 array of UTF-8 JSON).
MANIFEST_KEY = "__manifest__.json"
#: The manifest's ``format`` field; ``format_version`` changes if the layout ever changes in a
#: way an existing reader would misread (new keys and new tensors are not such a change).
FORMAT = "gpt2np-golden"
FORMAT_VERSION = 1
#: A manifest larger than this is refused before it is read (B·T ids take ~8 bytes each).
MAX_MANIFEST_BYTES = 64 << 20
#: Positions, paddings and sizes in a manifest are below this (no model comes near; anything
#: larger is damage, and would overflow the int64 arithmetic of the comparison).
MAX_COUNT = 1 << 40
#: The hparams a comparison reads, each a positive int below MAX_COUNT where present.
_HPARAM_KEYS = ("n_vocab", "n_ctx", "n_embd", "n_head", "n_layer")


def weights_sha256(params: Params, hparams: HParams) -> str:
    """SHA-256 (hex) identifying a set of weights, defined so that any port can reproduce it.

    For each tensor in :func:`gpt2np.params.expected_shapes` order (``wte``, ``wpe``,
    ``blocks.0.ln_1.g`` … ``ln_f.b``; conv1d weights 2-D ``[n_in, n_out]``), feed the hash the
    ASCII line ``"{name}:{dtype}:{d0}x{d1}…\\n"`` (e.g. ``"wte:float32:50257x768\\n"``), then the
    tensor's elements as raw little-endian bytes in C (row-major) order.
    """
    flat = flatten(params)
    sha = hashlib.sha256()
    for name, shape in expected_shapes(hparams).items():
        a = np.asarray(flat[name])
        if a.shape != shape:
            raise ValueError(f"tensor {name} has shape {list(a.shape)}, expected {list(shape)}")
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        sha.update(f"{name}:{a.dtype.name}:{'x'.join(map(str, shape))}\n".encode("ascii"))
        sha.update(a.data.cast("B"))  # its bytes (C order, as ascontiguousarray made it)
    return sha.hexdigest()


def parse_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """JSON bytes -> the checked manifest, or a CheckpointError naming ``where``."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # also UnicodeDecodeError and json.JSONDecodeError
        raise CheckpointError(f"{where}: bad {MANIFEST_KEY}: {e}") from None
    except RecursionError:
        raise CheckpointError(f"{where}: bad {MANIFEST_KEY}: JSON nested too deeply") from None
    return check_manifest(manifest, where)


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """The keys gpt2np reads, checked: ``tensors`` (a list of {name, shape?, dtype?, axes?}),
    and where present ``ids``/``prefix_ids`` (rectangular [B, n] int lists), ``T_past`` (an int
    ≥ 0), ``pad`` ([B] ints), ``hparams`` (an object whose n_* are positive ints),
    ``weights_sha256`` (a str). Counts (T_past, pad, hparams, shapes) are below
    :data:`MAX_COUNT`."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{where}: bad {MANIFEST_KEY}: {what}")

    if not isinstance(manifest, dict) or not isinstance(manifest.get("tensors"), list):
        raise bad("it is not an object with a 'tensors' list")
    for t in manifest["tensors"]:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise bad(f"tensor entry {_clip(t)} has no name")
        if "shape" in t and not _ints(t["shape"]):
            raise bad(f"tensor {t['name']}: shape {_clip(t['shape'])} is not a list of ints")
        for key in ("dtype", "axes"):
            if t.get(key) is not None and not isinstance(t[key], str):
                raise bad(f"tensor {t['name']}: {key} {_clip(t[key])} is not a str")
    rows = None
    for key in ("ids", "prefix_ids"):
        if manifest.get(key) is not None:
            shape = _rectangle(manifest[key])
            if shape is None:
                raise bad(f"{key} is not a rectangular [B, n] list of ints")
            if key == "ids":
                rows = shape[0]
    T_past = manifest.get("T_past", 0)
    if T_past is not None and not (_int(T_past) and 0 <= T_past < MAX_COUNT):
        raise bad(f"T_past {_clip(T_past)} is not an int in [0, {MAX_COUNT})")
    pad = manifest.get("pad")
    if pad is not None and not (_ints(pad) and (rows is None or len(pad) == rows)):
        raise bad(f"pad {_clip(pad)} is not a list of one int in [0, {MAX_COUNT}) per row of ids")
    _check_hparams(manifest.get("hparams"), bad)
    sha = manifest.get("weights_sha256")
    if sha is not None and not isinstance(sha, str):
        raise bad("weights_sha256 is not a str")
    return manifest


def _check_hparams(hparams: Any, bad: Callable[[str], CheckpointError]) -> None:
    if hparams is None:
        return
    if not isinstance(hparams, dict):
        raise bad("hparams is not an object")
    for key in _HPARAM_KEYS:
        value = hparams.get(key)
        if value is not None and not (_int(value) and 0 < value < MAX_COUNT):
            raise bad(f"hparams {key} {_clip(value)} is not an int in [1, {MAX_COUNT})")
    if _int(hparams.get("n_embd")) and _int(hparams.get("n_head")):
        if hparams["n_embd"] % hparams["n_head"]:
            raise bad(f"hparams n_embd {hparams['n_embd']} is not a multiple of n_head")


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _ints(x: Any) -> bool:
    return isinstance(x, list) and all(_int(d) and 0 <= d < MAX_COUNT for d in x)


def _rectangle(x: Any) -> Optional[tuple[int, int]]:
    """(B, n) for a non-empty list of equally long lists of ints, else None."""
    if not isinstance(x, list) or not x or not all(isinstance(r, list) for r in x):
        return None
    if len({len(r) for r in x}) != 1 or not all(_int(i) for r in x for i in r):
        return None
    return len(x), len(x[0])


def _clip(x: Any, n: int = 60) -> str:
    try:
        s = repr(x)
    except RecursionError:
        s = f"<a {type(x).__name__} nested too deeply>"
    return s if len(s) <= n else s[:n] + "…"
