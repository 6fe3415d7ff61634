"""The comparison itself: two sources of named tensors, streamed chunk by chunk in lockstep.

Memory stays at a few chunks (a million elements each) whatever the tensors' size; only a
failing tensor's hints read one of the port's tensors whole, and only when it is no larger than
the golden tensors it is checked against (see :mod:`gpt2np.golden.diff.hints`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

from ...errors import CheckpointError
from ..reader import CHUNK, Source, open_source
from . import hints
from .names import OPTIONAL, REFERENCE, Globs, globs, matches, selected, suggest_names
from .report import CompareReport, TensorDiff
from .stats import Stats, is_probs, row_scale
from .tolerance import tolerance
from .visible import axes_of, chunk_size, is_scores, visible

__all__ = ["compare"]

#: Manifest keys that must agree for the comparison to mean anything.
CHECKED_KEYS = ("weights_sha256", "hparams", "ids", "prefix_ids", "T_past", "pad")
#: /tol below this is noise when it comes to where an error is born (see TensorDiff.growth).
GROWTH_FLOOR = 0.05


def compare(
    golden: Any,
    port: Any,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    strict: bool = False,
    *,
    precision: Optional[str] = None,
    allow_mismatch: Iterable[str] = (),
    hint: bool = True,
    only: Globs = None,
    allow_missing: Globs = None,
) -> CompareReport:
    """Compare every tensor of ``golden`` with the port's, in the golden file's order.

    golden, port: a path (an ``.npz``, or a directory of ``NAME.npy`` files), a mapping
    name -> array (a port running in this process), or a :class:`gpt2np.Trace`.
    precision: the tolerance preset (float64, float32 — the default —, tf32, float16, bfloat16,
    :data:`gpt2np.golden.diff.PRECISIONS`); ``rtol``/``atol`` override its values.
    only: globs (``"h0.*"``, ``"*.attn.probs"``): compare just the golden tensors they match.
    allow_missing: globs (``"*"`` for all) of golden tensors the port may lack. Any other
    missing tensor fails the comparison, except the inputs (ids, prefix_ids, targets, past) and
    the loss (loss, loss.mean), which fail only with ``strict``: what :func:`gpt2np.trace`
    returns passes against :func:`gpt2np.dump` of the same ids. allow_mismatch: manifest keys
    (weights_sha256, hparams, ids, prefix_ids, T_past, pad, or "all") whose difference is
    reported but does not fail.
    hint: look for what a failing tensor equals instead (another tensor, a transpose, a scale,
    a variant of the computation that names a common bug).

    Unreadable files raise :class:`gpt2np.CheckpointError`; everything else (missing, extra,
    misshapen tensors, other dtypes, NaN, different manifests) ends up in the report.
    """
    precision, rtol, atol = tolerance(precision, rtol, atol)
    allowed = _allowed(allow_mismatch)
    only_globs, may_lack = globs(only, "only"), globs(allow_missing, "allow_missing")
    with open_source(golden, "<in-memory golden>") as g, open_source(port, "<in-memory port>") as p:
        ctx = _Context(g, rtol, atol)
        names = [n for n in g.names if n not in REFERENCE or n in p.names]
        rows = [_compare_one(name, g, p, ctx) for name in selected(names, only_globs)]
        for r in rows:
            r.required = not matches(r.name, may_lack) and (strict or r.name not in OPTIONAL)
        _growth(rows)
        born = _born(rows)
        if hint:
            hints.search_all(rows, born, g, p, ctx)
        mismatches, notes = _manifests(g, p, allowed)
        extra = [n for n in p.names if n not in g.names]
    return CompareReport(
        golden=_label(golden, g),
        port=_label(port, p),
        rtol=rtol,
        atol=atol,
        strict=strict,
        rows=rows,
        extra=extra,
        notes=notes + _ignored(g, p),
        precision=precision,
        mismatches=mismatches,
        allowed=sorted(allowed),
        born=born,
        renames=suggest_names(extra, [r.name for r in rows if r.status == "missing"]),
        only=only_globs,
        allow_missing=may_lack,
    )


class _Context:
    """What every tensor's comparison needs to know about the golden side and the tolerance."""

    def __init__(self, golden: Source, rtol: float, atol: float) -> None:
        m = golden.manifest or {}
        self.rtol, self.atol = rtol, atol
        self.T_past = golden.T_past
        self.pad = None if m.get("pad") is None else np.asarray(m["pad"], np.int64)
        self.hparams = m.get("hparams")


def _compare_one(name: str, g: Source, p: Source, ctx: _Context) -> TensorDiff:
    gh = g.header(name)
    if gh.dtype.kind not in _NUMERIC:
        kind = _KINDS.get(gh.dtype.kind, "not numbers")
        raise CheckpointError(
            f"{g.label}: tensor {name} holds {gh.dtype} ({kind}), not numbers: it cannot be a "
            "golden tensor"
        )
    row = TensorDiff(name, "missing", gh.shape, golden_dtype=gh.dtype.name)
    if name not in p.names:
        return row
    ph = p.header(name)
    row.port_shape, row.port_dtype = ph.shape, ph.dtype.name
    problem = _dtype_problem(gh.dtype, ph.dtype)
    if problem:
        row.status, row.note = "dtype", problem
        return row
    if ph.shape != gh.shape:
        row.status = "shape"
        row.note = f"port {_text(ph.shape)}, golden {_text(gh.shape)}"
        return row
    _stream(name, g, p, ctx, gh.shape).fill(row, gh.shape)
    return row


def _stream(name: str, g: Source, p: Source, ctx: _Context, shape: tuple[int, ...]) -> Stats:
    """Both tensors, chunk by chunk: the compared elements, the padding's non-finite values,
    and for a probability row the tolerance scaled by the row's largest probability."""
    axes = axes_of(name, g.axes(name), len(shape))
    stats = Stats(ctx.rtol, ctx.atol)
    n = chunk_size(shape, CHUNK)
    probs = is_probs(name, axes) and n % shape[-1] == 0
    scores = is_scores(name)
    at, port_chunks = 0, p.chunks(name, n)
    for gc in g.chunks(name, n):
        mask = visible(name, axes, shape, ctx.T_past, ctx.pad, at, at + gc.size)
        padding = None
        if mask is not None and ctx.pad is not None:  # (with no padding, no padded position)
            real = visible(name, axes, shape, ctx.T_past, ctx.pad, at, at + gc.size, False)
            padding = None if real is None else ~real
        scale = row_scale(gc, shape[-1]) if probs else None
        stats.add(gc, next(port_chunks), at, mask, padding, scale, only_nan=scores)
        at += gc.size
    next(port_chunks, None)  # the port's reader runs to its end, where a ZIP CRC is checked
    return stats


def _label(x: Any, source: Source) -> str:
    return str(x) if isinstance(x, (str, os.PathLike)) else source.label


_NUMERIC = "biuf"
_KINDS = {"V": "raw bytes", "c": "complex", "U": "text", "S": "bytes", "M": "dates"}


def _dtype_problem(golden: np.dtype, port: np.dtype) -> str:
    """Why the port's dtype cannot stand for the golden's, or ""."""
    if port.kind not in _NUMERIC:
        return f"port stores {port} ({_KINDS.get(port.kind, 'not numbers')}), golden {golden}"
    if golden.kind == "f" and port.kind in "biu":
        return f"port stores integers ({port}) where the golden holds {golden}"
    return ""


def _growth(rows: list[TensorDiff]) -> None:
    """Each compared tensor's /tol against the largest one before it (see GROWTH_FLOOR)."""
    upstream = 0.0
    for r in rows:
        if r.status in ("ok", "diverged"):
            with np.errstate(invalid="ignore"):
                r.growth = (r.tol_ratio + GROWTH_FLOOR) / (upstream + GROWTH_FLOOR)
            if math.isinf(upstream) and math.isinf(r.tol_ratio):
                r.growth = 1.0
            upstream = max(upstream, r.tol_ratio)


def _born(rows: list[TensorDiff]) -> Optional[str]:
    """Where the first failure's error is born: the tensor, at or before the first divergence,
    whose /tol grows most over everything before it."""
    failing = [i for i, r in enumerate(rows) if r.diverged]
    if not failing:
        return None
    before = [r for r in rows[: failing[0] + 1] if not math.isnan(r.growth)]
    if rows[failing[0]].status != "diverged" or not before:
        return rows[failing[0]].name
    return max(before, key=lambda r: r.growth).name


def _allowed(allow: Iterable[str]) -> set[str]:
    allow = {allow} if isinstance(allow, str) else set(allow)
    if "all" in allow:
        return set(CHECKED_KEYS)
    unknown = allow - set(CHECKED_KEYS)
    if unknown:
        raise ValueError(
            f"allow_mismatch takes {', '.join(CHECKED_KEYS)} or all, got {sorted(unknown)}"
        )
    return allow


def _manifests(g: Source, p: Source, allowed: set[str]) -> tuple[list[str], list[str]]:
    """(mismatches that fail the comparison, notes) from the two manifests."""
    gm, pm = g.manifest, p.manifest
    notes = []
    if gm is not None:
        ids = gm.get("ids") or [[]]
        about = f"golden: {_model_text(gm)}, {gm.get('dtype')}, ids [{len(ids)}, "
        about += f"{len(ids[0])}]" + (f", T_past {gm['T_past']}" if gm.get("T_past") else "")
        about += f", pad {gm['pad']}" if gm.get("pad") else ""
        about += f", weights sha256 {str(gm.get('weights_sha256'))[:16]}…"
        notes.append(about)
    if gm is None or pm is None:
        if gm is not None and pm is None:
            notes.append("port: no manifest, so its weights and inputs are not checked")
        return [], notes
    mismatches = []
    for key in CHECKED_KEYS:
        if key in gm and key in pm and gm[key] != pm[key]:
            text = f"{key}: golden {_short(gm[key])}, port {_short(pm[key])}"
            if key in allowed:
                notes.append(f"allowed mismatch, {text}")
            else:
                mismatches.append(text + " (allow it with --allow-mismatch " + key + ")")
    return mismatches, notes


def _model_text(manifest: dict[str, Any]) -> str:
    """ "model 124M", or for a file that names none (a dump from Python), its shape."""
    if isinstance(manifest.get("model"), str):
        return f"model {manifest['model']}"
    h = manifest.get("hparams") or {}
    shape = ", ".join(f"{k} {h[k]}" for k in ("n_layer", "n_embd", "n_head", "n_vocab") if k in h)
    return f"an unnamed model ({shape})" if shape else "an unnamed model"  # a dump from Python


def _ignored(g: Source, p: Source) -> list[str]:
    out = []
    for side, s in (("golden", g), ("port", p)):
        ignored = getattr(s, "ignored", [])
        if ignored:
            out.append(f"{side}: {len(ignored)} members that are not .npy ignored ({ignored[0]}…)")
    return out


def _short(x: Any, n: int = 40) -> str:
    s = str(x)
    return s if len(s) <= n else s[: n - 1] + "…"


def _text(shape: tuple[int, ...]) -> str:
    return str(list(shape)).replace(" ", "")
