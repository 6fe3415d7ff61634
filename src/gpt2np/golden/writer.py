"""``dump``: trace a forward pass (or one KV-cached decode step) straight into a golden file.

Every tensor is written the moment the forward pass computes it
(:func:`gpt2np.golden.trace.trace_each`),
so memory holds the model and one layer's intermediates, not the whole trace. The file's layout
is fixed before the pass starts (every shape is known from the hparams and the inputs), which is
what lets the manifest, the first member, list each tensor's offset, and lets the rows of a
ragged batch, traced one at a time, go straight to their place. The file is written under a
temporary name in the target directory, read back and checked, and only then renamed.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from .._version import __version__
from ..model import forward
from ..support.atomic import atomic_write
from .inputs import Batch, batch_of
from .manifest import FORMAT, FORMAT_VERSION, MANIFEST_KEY, weights_sha256
from .npy import ALIGN, header_bytes
from .reader import GoldenFile, PathLike
from .trace import Names, selected_names, tensor_axes, tensor_shapes, trace_each
from .zipwrite import AlignedZip

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["dump", "write_tensors"]


#: Where a tensor goes in the file: its (dtype, shape, axes).
Slot = tuple[np.dtype, tuple[int, ...], str]
_ROWS_PER_LOSS_STEP = 64  # logits rows whose log-softmax is taken at once (bounds the temporaries)


def dump(
    model: Runtime,
    ids_or_text: Any,
    path: PathLike,
    dtype: Any = None,
    names: Names = None,
    model_name: Optional[str] = None,
    *,
    prefix: Any = None,
    targets: Any = None,
) -> dict[str, Any]:
    """Trace ``ids_or_text`` through ``model`` and write a golden file to ``path`` (exactly that
    name; no ``.npz`` is appended). Returns the manifest.

    ids_or_text: a str (encoded with ``model.tokenizer``, special tokens allowed), a list of str,
    token ids [T] / [B, T], or a list of rows of different lengths (left-padded, the padding
    recorded as ``pad``). prefix: a decode step instead of a plain pass: an int (the first that
    many positions are the prefix) or a str / ids whose rows come before ``ids_or_text``'s; its
    keys and values become the past (stored as ``past`` [B, L, 2, H, T_past, Dh]) and the traced
    tensors are the step's. dtype: compute in this float dtype (``np.float64`` for the
    higher-precision reference); the weights' hash is taken before the cast. names: globs
    selecting traced tensors, as for :func:`gpt2np.golden.trace.trace`. targets: ids [B, T] whose
    cross-entropy ``loss`` [B, T] is recorded; by default each position's next token
    (``loss`` [B, T - 1]; none for a single token). model_name: recorded in the manifest
    (default: ``repo@commit`` for a model loaded from the Hugging Face Hub, else null).
    """
    if model_name is None:
        model_name = _model_name(model)
    if names is not None and not isinstance(names, str):
        names = list(names)  # a generator would be used up before the manifest records it
    traced = selected_names(names, model.hparams.n_layer)
    sha = weights_sha256(model.params, model.hparams)
    weights_dtype = model.dtype.name
    if dtype is not None:
        dtype = _float_dtype(dtype)
        if dtype != model.dtype:
            model = model.astype(dtype)
    batch = batch_of(model, ids_or_text, prefix, targets)
    layout = _layout(model, batch, traced)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model_name,
        "hparams": model.hparams.to_dict(),
        "ids": batch.layout()[:, batch.T_past :].tolist(),
        "prompt": batch.texts[0] if batch.texts and len(batch.texts) == 1 else batch.texts,
        "T_past": batch.T_past,
        "prefix_ids": batch.layout()[:, : batch.T_past].tolist() if batch.T_past else None,
        "prefix": batch.prefix_text,
        "pad": batch.pad.tolist() if batch.padded else None,
        "targets": batch.targets_kind,
        "dtype": model.dtype.name,
        "weights_dtype": weights_dtype,
        "weights_sha256": sha,
        "gpt2np_version": __version__,
        "numpy_version": np.__version__,
        "names": None if names is None else ([names] if isinstance(names, str) else list(names)),
        "alignment": ALIGN,
        "tensors": [],
    }
    _write_atomically(
        pathlib.Path(path), manifest, layout, lambda out: _run(model, batch, out, traced)
    )
    return manifest


def _model_name(model: Runtime) -> Optional[str]:
    """``repo@commit`` for a model that knows its Hub snapshot (``model.source``), else None."""
    source = getattr(model, "source", None)
    repo, commit = getattr(source, "repo", None), getattr(source, "commit", None)
    return f"{repo}@{commit}" if isinstance(repo, str) and isinstance(commit, str) else None


def _float_dtype(dtype: Any) -> np.dtype:
    try:
        dt: np.dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype {dtype!r} is not a numpy dtype; use float32 or float64") from None
    if not np.issubdtype(dt, np.floating):
        raise ValueError(f"dtype must be a float type such as float64, got {dt}")
    return dt


def _layout(model: Runtime, batch: Batch, traced: list[str]) -> dict[str, Slot]:
    """name -> (dtype, shape, axes) of every tensor, in the file's order."""
    h, f, i64 = model.hparams, model.dtype, np.dtype(np.int64)
    B, T, P = batch.B, batch.T, batch.T_past
    layout: dict[str, Slot] = {"ids": (i64, (B, T), "B T")}
    if P:
        layout["prefix_ids"] = (i64, (B, P), "B P")
    if batch.targets is not None:
        layout["targets"] = (i64, batch.targets.shape, "B T")
    if P:  # wpe's rows 0 … T_past + T − 1: what compare needs to recompute a step whose
        # positions are counted from 0, which the step's own tensors cannot show
        layout["wpe.rows"] = (f, (P + T, h.n_embd), "S D")
    shapes, axes = tensor_shapes(h, B, T, P), tensor_axes(h.n_layer)
    layout.update((name, (f, shapes[name], axes[name])) for name in traced)
    if batch.targets is not None:
        layout["loss"] = (f, batch.targets.shape, "B T")
        layout["loss.mean"] = (f, (), "")
    if P:  # last: a port whose prefix pass is wrong is first reported inside the step, where
        # the operation that is wrong shows, rather than at the keys and values it left behind
        layout["past"] = (f, (B, h.n_layer, 2, h.n_head, P, h.d_head), "B L 2 H P Dh")
    return {name: (np.dtype(d).newbyteorder("<"), s, a) for name, (d, s, a) in layout.items()}


class _Out:
    """Writes whole tensors, or one row of one, to their places in the archive."""

    def __init__(self, z: AlignedZip, layout: dict[str, Slot]) -> None:
        self.z, self.layout = z, layout
        self.headers = {name: header_bytes(d, s) for name, (d, s, _) in layout.items()}

    def tensor(self, name: str, a: np.ndarray) -> None:
        dtype, shape, _ = self.layout[name]
        if a.shape != shape:
            raise AssertionError(f"{name}: computed {a.shape}, laid out {shape}")
        self.z.write(name + ".npy", len(self.headers[name]), np.ascontiguousarray(a, dtype).data)

    def row(self, name: str, b: int, a: np.ndarray) -> None:
        """``a`` [1, ...] is row b's tensor for its real tokens only: it goes to the end of each
        T, S and P axis, after the row's padding, which stays 0."""
        dtype, shape, axes = self.layout[name]
        full = np.zeros(shape[1:], dtype)
        where = tuple(
            slice(n - m, None) if axis in ("T", "S", "P") else slice(None)
            for axis, n, m in zip(axes.split()[1:], shape[1:], a.shape[1:])
        )
        full[where] = a[0]
        at = len(self.headers[name]) + b * full.nbytes
        self.z.write(name + ".npy", at, full.data)


def _run(model: Runtime, batch: Batch, out: _Out, traced: list[str]) -> None:
    """The forward pass(es), every tensor written as it comes."""
    ids = batch.layout()  # [B, T_past + T]
    out.tensor("ids", ids[:, batch.T_past :])
    if batch.T_past:
        out.tensor("prefix_ids", ids[:, : batch.T_past])
    targets = batch.targets  # [B, T] or None
    if targets is not None:
        out.tensor("targets", targets)
    if "wpe.rows" in out.layout:
        out.tensor("wpe.rows", model.params["wpe"][: ids.shape[1]])
    loss: Optional[np.ndarray] = None if targets is None else np.zeros(targets.shape, np.float64)
    if not batch.padded:  # one pass over the whole batch
        past = _past(model, ids[:, : batch.T_past], out, None)
        t = trace_each(model, ids[:, batch.T_past :], out.tensor, past=past, names=traced)
        if targets is not None and loss is not None:
            for b in range(batch.B):
                loss[b] = _loss(t.logits[b], targets[b])
    else:  # each row alone, on its real tokens, placed after its padding
        for b in range(batch.B):
            prefix, step = batch.split(b)
            past = _past(model, np.array([prefix], np.int64), out, b)

            def emit(name: str, a: np.ndarray, b: int = b) -> None:
                out.row(name, b, a)

            t = trace_each(model, [step], emit, past=past, names=traced)
            if targets is not None and loss is not None:  # step's position t is row's t - first
                first, end = batch.T - len(step), loss.shape[1]
                if end > first:
                    loss[b, first:] = _loss(t.logits[0], targets[b, first:])
    if loss is not None:
        real = batch.real_queries()[:, : loss.shape[1]]
        out.tensor("loss", np.where(real, loss, 0.0))
        out.tensor("loss.mean", np.asarray(loss[real].mean()))


def _past(
    model: Runtime, prefix: np.ndarray, out: _Out, row: Optional[int]
) -> Optional[np.ndarray]:
    """The prefix's keys and values by the clear forward pass, written as ``past`` (all of it,
    or row ``row``: zeros for a row whose prefix is all padding). None without a prefix."""
    if "past" not in out.layout:
        return None
    present = None
    if prefix.shape[1]:
        _, present = forward(model.params, model.hparams, prefix)  # [B, L, 2, H, T_past, Dh]
    if row is not None:
        _, shape, _ = out.layout["past"]
        empty = np.zeros((1, *shape[1:4], 0, shape[5]))
        out.row("past", row, empty if present is None else present)
    elif present is not None:  # (the layout has a past only for a prefix; finish() checks)
        out.tensor("past", present)
    return present


def _loss(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Cross-entropy of ``targets`` [n] under ``logits`` [>= n, V] (rows 0 … n-1), in float64:
    log Σ_v exp(logits[t, v]) - logits[t, target_t]."""
    n = len(targets)
    loss = np.empty(n, np.float64)
    for at in range(0, n, _ROWS_PER_LOSS_STEP):
        x = logits[at : at + _ROWS_PER_LOSS_STEP][: n - at].astype(np.float64)
        top = x.max(axis=-1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(x - top).sum(axis=-1))
        loss[at : at + len(x)] = lse - x[np.arange(len(x)), targets[at : at + len(x)]]
    return loss


def write_tensors(path: pathlib.Path, manifest: dict[str, Any], tensors: dict[str, Any]) -> None:
    """Write ``tensors`` (name -> array, in this order) after ``manifest`` as an aligned golden
    archive, whole or not at all; fills ``manifest["tensors"]`` with each one's place."""
    arrays = {name: np.asarray(a) for name, a in tensors.items()}
    layout: dict[str, Slot] = {
        name: (a.dtype.newbyteorder("<"), a.shape, "") for name, a in arrays.items()
    }

    def produce(out: _Out) -> None:
        for name, a in arrays.items():
            out.tensor(name, a)

    _write_atomically(path, manifest, layout, produce)


def _write_atomically(
    path: pathlib.Path,
    manifest: dict[str, Any],
    layout: dict[str, Slot],
    produce: Callable[[_Out], None],
) -> None:
    """Lay the archive out, ``produce`` every tensor into it under a temporary name beside
    ``path``, verify, and rename. Any failure (a full disk included) removes the temporary."""
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give the golden file's name, e.g. golden.npz")
    if not path.parent.is_dir():
        raise ValueError(f"cannot write {path}: directory {path.parent} does not exist")
    with atomic_write(path, "w+b", verify=lambda tmp: _verify(tmp, manifest)) as f:
        z, raw = _fix_layout(f, manifest, layout)
        _reserve(f, z.end)
        out = _Out(z, layout)
        z.write(MANIFEST_KEY + ".npy", 0, header_bytes(np.uint8, (len(raw),)) + raw)
        for name, header in out.headers.items():
            z.write(name + ".npy", 0, header)
        produce(out)
        z.finish()


def _fix_layout(
    f: Any, manifest: dict[str, Any], layout: dict[str, Slot]
) -> tuple[AlignedZip, bytes]:
    """The archive's layout and the manifest's bytes: the manifest lists every tensor's offset,
    which depends on the manifest's own length, so its JSON is padded with spaces to a length
    that the offsets it lists fit in."""
    reserved = 256
    while True:
        members = [(MANIFEST_KEY + ".npy", len(header_bytes(np.uint8, (reserved,))) + reserved)]
        members += [(n + ".npy", len(header_bytes(d, s)) + d.itemsize * int(np.prod(s)))
                    for n, (d, s, _) in layout.items()]  # fmt: skip
        z = AlignedZip(f, members)
        manifest["tensors"] = [
            {"name": n, "shape": list(s), "dtype": d.name, "axes": a,
             "offset": z.start(n + ".npy") + len(header_bytes(d, s)),
             "nbytes": d.itemsize * int(np.prod(s))}
            for n, (d, s, a) in layout.items()
        ]  # fmt: skip
        raw = json.dumps(manifest).encode("utf-8")
        if len(raw) <= reserved:
            return z, raw + b" " * (reserved - len(raw))
        reserved = -(-len(raw) // 256) * 256


def _reserve(f: Any, size: int) -> None:
    """Allocate the whole file now where the OS can, so that a disk too small fails before the
    forward pass rather than after it."""
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(f.fileno(), 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):  # a file system that
            raise  # cannot preallocate is no error; a full one is


def _verify(tmp: pathlib.Path, manifest: dict[str, Any]) -> None:
    """Read the finished archive back as any reader would: every member where the manifest says,
    with the dtype and shape it says, its data 64-byte aligned."""
    with GoldenFile(tmp) as g:
        if json.loads(json.dumps(g.manifest)) != json.loads(json.dumps(manifest)):
            raise OSError(f"{tmp}: the manifest read back differs from the one written")
        if g.names != [t["name"] for t in manifest["tensors"]]:
            raise OSError(f"{tmp}: the members read back differ from those written")
        for t in manifest["tensors"]:
            h = g.header(t["name"])
            at = g.data_offset(t["name"])
            if at is None or (h.dtype.name, list(h.shape), at) != (
                t["dtype"],
                t["shape"],
                t["offset"],
            ):
                raise OSError(f"{tmp}: tensor {t['name']} differs after reading it back")
            if at % ALIGN:
                raise OSError(f"{tmp}: tensor {t['name']} is not {ALIGN}-byte aligned")
