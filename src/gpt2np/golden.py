"""Golden files: every traced intermediate in one .npz that a port can diff against.

:func:`dump` writes a trace (see :mod:`gpt2np.trace`) as an uncompressed NumPy ``.npz`` — one
``NAME.npy`` member per tensor, no pickle — plus a JSON manifest stored as a uint8 array named
``__manifest__.json``. :func:`compare` diffs two such files (or a golden file and a directory of
``NAME.npy`` files) tensor by tensor in forward order and names the first that diverges.
docs/golden-files.md specifies the layout so that a C, Rust, JS or GPU port can write it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ._version import __version__
from .errors import CheckpointError
from .hparams import HParams
from .params import Params, expected_shapes, flatten
from .trace import Names, trace

if TYPE_CHECKING:
    from .gpt2 import GPT2

__all__ = ["FORMAT", "MANIFEST_KEY", "GoldenFile", "dump", "weights_sha256"]

#: The manifest member's name (stored as ``__manifest__.json.npy``: a uint8 array of UTF-8 JSON).
MANIFEST_KEY = "__manifest__.json"
#: The manifest's ``format`` field; ``format_version`` changes if the layout ever does.
FORMAT = "gpt2np-golden"
FORMAT_VERSION = 1

PathLike = Union[str, "os.PathLike[str]"]


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
        sha.update(memoryview(a).cast("B"))
    return sha.hexdigest()


def dump(
    model: GPT2,
    ids_or_text: Any,
    path: PathLike,
    dtype: Any = None,
    names: Names = None,
    model_name: Optional[str] = None,
) -> dict[str, Any]:
    """Trace ``ids_or_text`` through ``model`` and write a golden file to ``path`` (exactly that
    name; no ``.npz`` is appended). Returns the manifest.

    ids_or_text: a str (encoded with ``model.tokenizer``, special tokens allowed) or token ids
    [T] / [B, T]. dtype: compute in this float dtype (e.g. ``np.float64`` for the
    higher-precision reference); the weights' hash is taken before the cast. names: globs
    selecting tensors, as for :func:`gpt2np.trace.trace`. model_name: recorded in the manifest.

    Besides the traced tensors, the file holds ``ids`` (int64 [B, T]). It is written to a
    temporary name, read back and checked, then renamed into place.
    """
    if names is not None and not isinstance(names, str):
        names = list(names)  # a generator would be used up by trace before the manifest
    sha = weights_sha256(model.params, model.hparams)
    weights_dtype = model.dtype.name
    if dtype is not None:
        dtype = _float_dtype(dtype)
        if dtype != model.dtype:
            model = model.astype(dtype)
    prompt = None
    if isinstance(ids_or_text, str):
        prompt = ids_or_text
        ids_or_text = model.tokenizer.encode(prompt, allowed_special="all")
        if not ids_or_text:
            raise ValueError("the prompt is empty: it encodes to no tokens")
    t = trace(model, ids_or_text, names=names)
    tensors = {"ids": t.ids, **t}
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model_name,
        "hparams": model.hparams.to_dict(),
        "ids": t.ids.tolist(),
        "prompt": prompt,
        "dtype": model.dtype.name,
        "weights_dtype": weights_dtype,
        "weights_sha256": sha,
        "gpt2np_version": __version__,
        "numpy_version": np.__version__,
        "names": None if names is None else ([names] if isinstance(names, str) else list(names)),
        "tensors": [
            {"name": n, "shape": list(a.shape), "dtype": a.dtype.name} for n, a in tensors.items()
        ],
    }
    _write_atomically(pathlib.Path(path), tensors, manifest)
    return manifest


def _float_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype {dtype!r} is not a numpy dtype; use float32 or float64") from None
    if not np.issubdtype(dt, np.floating):
        raise ValueError(f"dtype must be a float type such as float64, got {dt}")
    return dt


def _write_atomically(path: pathlib.Path, tensors: dict[str, np.ndarray], manifest: dict) -> None:
    """np.savez into a temporary file beside ``path``; verify by reading it back; rename."""
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give the golden file's name, e.g. golden.npz")
    if not path.parent.is_dir():
        raise ValueError(f"cannot write {path}: directory {path.parent} does not exist")
    members = {MANIFEST_KEY: np.frombuffer(json.dumps(manifest).encode("utf-8"), np.uint8)}
    members.update(tensors)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **members)  # a file object: numpy appends no ".npz" to the name
        with np.load(tmp, allow_pickle=False) as z:
            if z.files != list(members):
                raise OSError(f"{tmp}: the members read back differ from those written")
            for name, a in members.items():
                b = z[name]
                if (b.dtype, b.shape, b.tobytes()) != (a.dtype, a.shape, a.tobytes()):
                    raise OSError(f"{tmp}: tensor {name} differs after reading it back")
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


class GoldenFile:
    """Read-only access to a golden file, one tensor at a time (nothing is loaded up front).

    ``path`` is an ``.npz`` as :func:`dump` writes it, or a directory of ``NAME.npy`` files (the
    easiest thing for a port to write). ``.manifest`` is the parsed manifest or None; ``.names``
    lists the tensors in the manifest's order, else the file's order (sorted for a directory).
    Anything unreadable raises :class:`gpt2np.CheckpointError` naming the file and tensor.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = pathlib.Path(path)
        self._npz: Any = None
        self.names: list[str] = []
        if self.path.is_dir():
            files = sorted(p.name[: -len(".npy")] for p in self.path.glob("*.npy"))
            if not files:
                raise CheckpointError(f"{self.path}: directory holds no NAME.npy tensor files")
        else:
            self._npz = _open_npz(self.path)
            files = list(self._npz.files)
        try:
            self.manifest = self._read_manifest() if MANIFEST_KEY in files else None
            files = [f for f in files if f != MANIFEST_KEY]
            self.names = files
            if self.manifest is not None:
                listed = [t["name"] for t in self.manifest["tensors"]]
                lost = [n for n in listed if n not in files]
                if lost:
                    raise CheckpointError(
                        f"{self.path}: the manifest lists tensor {lost[0]}, absent"
                    )
                self.names = listed + [f for f in files if f not in listed]
        except BaseException:  # the caller gets no object to close: close the zip here
            self.close()
            raise

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise KeyError(f"{self.path} holds no tensor {name!r}")
        return self._read(name)

    def _read(self, name: str) -> np.ndarray:
        try:
            if self._npz is not None:
                return self._npz[name]
            npy = self.path / f"{name}.npy"
            reason = _not_numpy(npy)
            if reason:
                raise ValueError(reason)
            return np.load(npy, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise CheckpointError(f"{self.path}: cannot read tensor {name}: {e}") from None

    def _read_manifest(self) -> dict[str, Any]:
        raw = self._read(MANIFEST_KEY)
        try:
            if raw.dtype != np.uint8 or raw.ndim != 1:
                raise ValueError(f"stored as {raw.dtype} {list(raw.shape)}, expected uint8 [n]")
            manifest = json.loads(raw.tobytes().decode("utf-8"))
            if not isinstance(manifest, dict) or not isinstance(manifest.get("tensors"), list):
                raise ValueError("it is not an object with a 'tensors' list")
            for t in manifest["tensors"]:
                if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                    raise ValueError(f"tensor entry {t!r} has no name")
        except ValueError as e:  # also UnicodeDecodeError and json.JSONDecodeError
            raise CheckpointError(f"{self.path}: bad {MANIFEST_KEY}: {e}") from None
        return manifest

    def close(self) -> None:
        if self._npz is not None:
            self._npz.close()

    def __enter__(self) -> GoldenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _not_numpy(path: pathlib.Path) -> Optional[str]:
    """Why ``path`` is neither a zip (.npz) nor a .npy file, or None. np.load treats any other
    header as a pickle and would blame "pickled (object) data" for plain garbage."""
    with open(path, "rb") as f:
        head = f.read(6)
    if head.startswith((b"PK", b"\x93NUMPY")):
        return None
    return "the file is empty" if not head else f"unknown format (it starts with {head!r})"


def _open_npz(path: pathlib.Path) -> Any:
    try:
        reason = _not_numpy(path)
        if reason:
            raise ValueError(reason)
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: not a readable .npz file: {e}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise CheckpointError(f"{path}: a single .npy array, not an .npz of named tensors")
    return z
