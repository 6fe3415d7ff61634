"""What a failing tensor of the port equals instead: another golden tensor, a transpose, a scale,
raw 16-bit floats stored as integers, or the golden's own inputs put through a common bug.

The classic port bugs leave such fingerprints: q and k swapped (the port's ``attn.q`` is the
golden ``attn.k``), a cache laid out ``[B, T, H, Dh]`` instead of ``[B, H, T, Dh]`` (which slips
past the shape check when T = H), HF's last ``hidden_states`` taken for the last block's output
(it is ``ln_f``'s), a missing 1/√Dh (the scores are √Dh times too large), bfloat16 bits written
as uint16, a dropped batch axis; and those that :mod:`gpt2np.golden.diff.variants` recomputes
(LayerNorm's ε and variance, GELU's form, shifted positions, the causal mask, the cache's
order and layout, right padding). Each check streams the golden tensor in chunks against the
port's tensor, which is read whole, but only when it is no larger than the golden tensors it
is checked against: a small deflated file may declare a huge tensor.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, Optional

import numpy as np

from ..reader import CHUNK, Source
from . import variants
from .report import TensorDiff
from .stats import is_probs, row_scale
from .tolerance import PRECISIONS
from .visible import axes_of, chunk_size, visible

__all__ = ["search", "search_all"]

_MAX_CANDIDATES = 48  # other golden tensors tried, nearest first
_MAX_PERMUTATIONS = 24
_HINTED_ROWS = 3  # failing tensors whose hints are searched (each reads the port's tensor whole)


def search_all(rows: list[TensorDiff], born: Optional[str], g: Source, p: Source, ctx: Any) -> None:
    """Fill ``hints`` of the rows worth a search: the first few failing tensors, the one where
    the error is born (recomputed variants only, if it is within tolerance), and ``past``,
    which comes last; a dropped batch axis is said once for all the tensors that lack it."""
    failing = [r for r in rows if r.diverged]
    batchless = [r for r in failing if r.status == "shape" and _batch_dropped(r)]
    if batchless:
        batchless[0].hints = [_batch_text(batchless[0], len(batchless))]
    # right padding shifts the ids too: with the ids (or token embeddings) agreeing it is not that
    ctx.tokens_agree = any(r.name in ("ids", "embed.tokens") and r.status == "ok" for r in rows)
    ctx.agreeing = {r.name for r in rows if r.status == "ok"}  # a variant may need its input's
    # a compared NaN or inf explains every difference after it: no variant is named from there
    # on; its hint names where it is born, unless that is in padding before it (said elsewhere:
    # CompareReport.first_nonfinite). NaN left in the padding alone stops nothing.
    origin = next((i for i, r in enumerate(rows) if r.n_nan or r.n_inf), len(rows))
    if origin < len(rows) and not any(r.nonfinite for r in rows[:origin]):
        rows[origin].hints = [_nonfinite_hint(rows[origin])]
    rows = rows[:origin]
    failing = [r for r in failing if r in rows]
    chosen = [r for r in failing if r not in batchless][:_HINTED_ROWS]
    chosen += [r for r in failing if r.name in (born, "past") and r not in chosen + batchless]
    for r in chosen:
        r.hints = search(r, g, p, ctx)
    for r in rows:
        if r.name == born and r.status == "ok":
            port = _port_array(p, r.name, g.header(r.name).size)
            if port is not None:
                r.hints = variants.recompute(r.name, port.reshape(r.golden_shape), g, ctx)


def _nonfinite_hint(row: TensorDiff) -> str:
    """Where a NaN (or inf) is born: the first tensor that holds one, every tensor before it
    finite; no bug's variant is guessed at."""
    nan = row.n_nan > 0
    kind, count = ("NaN", row.n_nan) if nan else ("inf", row.n_inf)
    return (
        f"{kind} first appears in port {row.name} ({count:,} where the golden has numbers, the "
        f"first at {list(row.first_nonfinite or ())}); every tensor before it is finite, so the "
        f"operation that computes {row.name} made it (an overflow, 0/0, the log or √ of a "
        "negative number, memory never written); the divergences after it follow from it"
    )


def search(row: TensorDiff, g: Source, p: Source, ctx: Any) -> list[str]:
    """Hints for one failing tensor (``row``), as sentences."""
    if row.status == "dtype":
        return _sixteen_bits(row, g, p, ctx)
    if row.status == "shape":
        return _shape(row, g, p, ctx)
    port = _port_array(p, row.name, g.header(row.name).size)
    if port is None:
        return []
    found = variants.recompute(row.name, port, g, ctx)
    if not found:
        found = _equal_elsewhere(row.name, port, g, ctx)
    if not found and port.shape == row.golden_shape:
        pad = variants.right_padding(row.name, port, g, ctx)
        found = [pad] if pad else _scaled(row.name, port, g, ctx)
    return found


def _port_array(p: Source, name: str, limit: int) -> Optional[np.ndarray]:
    """The port's tensor, read whole, if it holds at most ``limit`` elements; else None."""
    if p.header(name).size > limit:
        return None
    return np.ascontiguousarray(p.read(name))


def _batch_dropped(row: TensorDiff) -> bool:
    """The port's shape is the golden's without its leading batch axis of 1."""
    return bool(row.port_shape is not None and row.golden_shape[:1] == (1,)
                and tuple(row.port_shape) == tuple(row.golden_shape[1:]))  # fmt: skip


def _batch_text(row: TensorDiff, n: int) -> str:
    more = f" (so do {n - 1} more tensors)" if n > 1 else ""
    return (
        f"port {row.name} is {_text(row.port_shape)}, golden {_text(row.golden_shape)}: the "
        f"batch axis is dropped{more}; keep it even when B = 1 (reshape to "
        f"{_text(row.golden_shape)})"
    )


def _shape(row: TensorDiff, g: Source, p: Source, ctx: Any) -> list[str]:
    """Hints for a tensor whose shape differs: a dropped batch axis, a past saved after the step,
    or the golden tensor transposed (read only when no larger than the golden)."""
    if _batch_dropped(row):
        return [_batch_text(row, 1)]
    port_shape = tuple(row.port_shape or ())
    if row.name == "past":
        limit = g.header("past").size // max(row.golden_shape[4], 1) * (port_shape[4:5] or (0,))[0]
        after = variants.past_after_step(
            port_shape, lambda: np.asarray(p.read("past"), np.float64), g, ctx
        ) if p.header("past").size <= max(limit, 0) else None  # fmt: skip
        if after:
            return [after]
    port = _port_array(p, row.name, g.header(row.name).size)
    return [] if port is None else _equal_elsewhere(row.name, port, g, ctx)


def _equal_elsewhere(name: str, port: np.ndarray, g: Source, ctx: Any) -> list[str]:
    for other in _candidates(name, port.size, g):
        gh = g.header(other)
        for perm in _permutations(gh.shape, port.shape):
            if other == name and perm == tuple(range(port.ndim)):
                continue  # that comparison is the one that failed
            if _matches(g, other, port, perm, ctx):
                return [_equal_text(name, other, perm, g)]
    return []


def _candidates(name: str, size: int, g: Source) -> list[str]:
    """Golden tensors of ``size`` elements, ``name`` first, then by distance in forward order."""
    order = {n: i for i, n in enumerate(g.names)}
    same = [n for n in g.names if n != name and g.header(n).size == size]
    same.sort(key=lambda n: abs(order[n] - order[name]))
    return [name, *same][:_MAX_CANDIDATES]


def _permutations(golden: tuple[int, ...], port: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Axis orders ``perm`` with ``golden.transpose(perm)`` shaped like ``port``, identity first."""
    if len(golden) != len(port) or len(golden) > 6:
        return []
    found = [
        perm
        for perm in itertools.permutations(range(len(golden)))
        if tuple(golden[i] for i in perm) == port
    ]
    return found[:_MAX_PERMUTATIONS]


def _matches(g: Source, name: str, port: np.ndarray, perm: tuple[int, ...], ctx: Any) -> bool:
    """port == golden[name].transpose(perm) within the tolerance (visible elements only)."""
    gh = g.header(name)
    axes = axes_of(name, g.axes(name), len(gh.shape))
    flat = port.reshape(-1)
    identity = perm == tuple(range(port.ndim))
    at = 0
    for chunk in g.chunks(name, chunk_size(gh.shape, CHUNK)):
        where = np.arange(at, at + chunk.size)
        if identity:
            theirs = flat[at : at + chunk.size]
        else:  # golden element j sits at port index (j[perm[0]], j[perm[1]], ...)
            j = np.unravel_index(where, gh.shape)
            theirs = flat[np.ravel_multi_index(tuple(j[k] for k in perm), port.shape)]
        mask = visible(name, axes, gh.shape, ctx.T_past, ctx.pad, at, at + chunk.size)
        atol = ctx.atol * row_scale(chunk, gh.shape[-1]) if is_probs(name, axes) else ctx.atol
        if not _close(chunk, theirs, mask, ctx.rtol, atol):
            return False
        at += chunk.size
    return at == port.size


def _close(
    g: np.ndarray, p: np.ndarray, mask: Optional[np.ndarray], rtol: float, atol: Any
) -> bool:
    """|p - g| <= atol + rtol·|g| everywhere in ``mask`` (atol: a number, or one per element)."""
    g64, p64 = g.astype(np.float64), p.astype(np.float64)
    if mask is not None:
        g64, p64 = g64[mask], p64[mask]
        atol = atol[mask] if isinstance(atol, np.ndarray) else atol
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (np.abs(p64 - g64) <= atol + rtol * np.abs(g64)) | (g64 == p64)
        ok |= np.isnan(g64) & np.isnan(p64)
    return bool(ok.all())


def _equal_text(name: str, other: str, perm: tuple[int, ...], g: Source) -> str:
    shape = g.header(other).shape
    axes = axes_of(other, g.axes(other), len(shape))
    text = f"port {name} equals golden {other}"
    if perm != tuple(range(len(shape))):
        layout = [axes[i] for i in perm] if axes else [shape[i] for i in perm]
        before = axes if axes else list(shape)
        text += (
            f" transposed: the port's axes are [{', '.join(map(str, layout))}] where the golden "
            f"has [{', '.join(map(str, before))}] (np.transpose(golden, {perm}))"
        )
    if other == "ln_f" and name.endswith(".out"):
        text += "; HF's last hidden_states is ln_f's output, not the last block's"
    if {re.sub(r"^h\d+\.", "", n) for n in (name, other)} == {"attn.q", "attn.k"}:
        text += " (q and k swapped?)"
    return text


def _scaled(name: str, port: np.ndarray, g: Source, ctx: Any) -> list[str]:
    """port ≈ c · golden for one constant c at least 5% from 1 (a missing or doubled scale, a
    flipped sign), within tolerance and far closer than the golden (variants.EXPLAINS)."""
    gh = g.header(name)
    axes = axes_of(name, g.axes(name), len(gh.shape))
    flat, gg, gp, at = port.reshape(-1).astype(np.float64), 0.0, 0.0, 0
    for chunk in g.chunks(name, chunk_size(gh.shape, CHUNK)):
        mask = visible(name, axes, gh.shape, ctx.T_past, ctx.pad, at, at + chunk.size)
        x, y = chunk.astype(np.float64), flat[at : at + chunk.size]
        if mask is not None:
            x, y = x[mask], y[mask]
        gg, gp, at = gg + float(x @ x), gp + float(x @ y), at + chunk.size
    if not (gg > 0 and gp != 0 and math.isfinite(gp)):
        return []
    c = gp / gg
    if c > 0 and abs(math.log(c)) < max(0.05, 2 * ctx.rtol):
        # within 5% of 1, or within twice the relative tolerance (at bfloat16 a fitted ×0.8 is
        # an error absorbed by the fit, not a scale): no scale names that
        return []
    scaled = g.chunks(name, chunk_size(gh.shape, CHUNK))
    at, mine, theirs = 0, 0.0, 0.0
    for chunk in scaled:
        mask = visible(name, axes, gh.shape, ctx.T_past, ctx.pad, at, at + chunk.size)
        x, y = chunk.astype(np.float64), flat[at : at + chunk.size]
        if not _close(c * x, y, mask, ctx.rtol, ctx.atol):
            return []
        # c·golden explains the port only if it is far closer than the golden: values all
        # within atol of 0 (small position embeddings at float16) fit any small c
        mine = max(mine, variants.worst_ratio(y, c * x, mask, ctx))
        theirs = max(theirs, variants.worst_ratio(y, x, mask, ctx))
        at += chunk.size
    if not (theirs > 0 and mine <= variants.EXPLAINS * theirs):
        return []
    return [f"port {name} equals golden {name} × {c:.6g}" + _scale_cause(name, c, ctx)]


def _scale_cause(name: str, c: float, ctx: Any) -> str:
    """The scale ``c`` named by its cause: a power of D (n_embd), Dh (the head's width) or H
    (n_head), and what that factor on this tensor usually means."""
    h = ctx.hparams or {}
    if not (h.get("n_head") and h.get("n_embd")):
        return ""
    D, H = int(h["n_embd"]), int(h["n_head"])
    Dh = D // H
    base = re.sub(r"^h\d+\.", "", name)
    scores = base == "attn.scores"
    causes: list[tuple[float, str, str]] = [  # (factor, symbol, why on this tensor)
        (math.sqrt(Dh), f"√Dh (Dh = {Dh})", "the 1/√Dh scale is missing?" if scores else ""),
        (1 / math.sqrt(Dh), f"1/√Dh (Dh = {Dh})", _one_over_root_dh(base)),
        (
            math.sqrt(Dh / D),
            f"1/√H (H = {H}, n_head) = √(Dh/D)",
            f"the scores divided by √D = √{D} (d_model) instead of √Dh = √{Dh}?" if scores else "",
        ),
        (math.sqrt(D / Dh), f"√H (H = {H}, n_head) = √(D/Dh)", ""),
        (
            math.sqrt(D),
            f"√D (D = {D}, d_model)",
            "token embeddings multiplied by √d_model, as in 'Attention Is All You Need'? GPT-2 "
            "does not scale them"
            if base in ("embed.tokens", "embed.sum")
            else "",
        ),
        (
            1 / math.sqrt(D),
            f"1/√D = D^-½ (D = {D}, d_model)",
            "the scores scaled by both 1/√Dh and 1/√D?"
            if scores
            else "divided by √d_model? GPT-2 does not scale it"
            if base.startswith("embed")
            else "",
        ),
        (1 / Dh, f"1/Dh (Dh = {Dh})", "the scores divided by Dh instead of √Dh?" if scores else ""),
        (float(Dh), f"Dh (Dh = {Dh})", ""),
        (float(H), f"H (H = {H})", ""),
        (1 / H, f"1/H (H = {H})", ""),
    ]
    for factor, symbol, why in causes:
        if math.isclose(c, factor, rel_tol=1e-3):
            return f" = {symbol}" + (f": {why}" if why else "")
    return ""


def _one_over_root_dh(base: str) -> str:
    if base in ("attn.k", "attn.q"):
        what = "keys" if base == "attn.k" else "queries"
        return (f"{what} stored already scaled by 1/√Dh? GPT-2's q, k and cache are unscaled; the "
                "scale belongs to the scores")  # fmt: skip
    return "the 1/√Dh scale applied twice?" if base == "attn.scores" else ""


def _sixteen_bits(row: TensorDiff, g: Source, p: Source, ctx: Any) -> list[str]:
    """A 2-byte integer (or raw) tensor where the golden holds floats: bfloat16 or float16 bits?"""
    ph = p.header(row.name)
    if ph.dtype.itemsize != 2 or ph.dtype.kind == "f" or ph.shape != row.golden_shape:
        return []
    for kind in ("bfloat16", "float16"):
        rtol, atol = PRECISIONS[kind]
        rtol, atol = max(rtol, ctx.rtol), max(atol, ctx.atol)
        ok = True
        port_chunks = p.chunks(row.name, CHUNK)
        for chunk in g.chunks(row.name, CHUNK):
            bits = np.ascontiguousarray(next(port_chunks)).view(np.uint16)
            if kind == "bfloat16":
                values = (bits.astype(np.uint32) << 16).view(np.float32)
            else:
                values = bits.view(np.float16)
            if not _close(chunk, values, None, rtol, atol):
                ok = False
                break
        if ok:
            return [
                f"port {row.name} holds raw {kind} bits as {ph.dtype}: read as {kind} they "
                f"match within the {kind} preset; write floats (e.g. float32) instead"
            ]
    return [f"port {row.name} is {ph.dtype}: if these are bfloat16 or float16 bits, write floats"]


def _text(shape: Optional[tuple[int, ...]]) -> str:
    return str(list(shape or ())).replace(" ", "")
