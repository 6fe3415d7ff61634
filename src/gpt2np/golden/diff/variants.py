"""Hints that name a port bug by recomputing the failing tensor the way the bug would.

A golden file holds the inputs of every operation, so a suspect variant of the operation can be
run on the golden's own inputs and compared with the port's output. If the variant explains the
port — it is within the comparison's tolerance of the port's tensor, and its error is at most a
fifth of the golden's at the worst element — the hint names the variant; otherwise nothing is
said (a variant that only comes closer would name a wrong cause):

==================  ==========================================================================
tensor              variants tried
==================  ==========================================================================
``*.ln_1/2, ln_f``  ε = 1e-6, 1e-12, 1e-3 (TF's default) or 0; the unbiased (n - 1) variance;
                    ε added to σ instead of σ². The gain and bias are not in the file: they are
                    fitted per channel from the golden's input and output (2 or more positions)
``*.mlp.gelu``      the exact (erf) form; x·σ(1.702x)
``embed.*``         positions shifted by ±1, ±2 along the step; counted from 0 on a decode
                    step (from the golden's ``wpe.rows``); not shifted by left padding
``*.attn.q/k/v``    q, k, v split per head ([H, 3, Dh]); heads laid out [Dh, H]
``*.attn.scores``   the cache's K and V swapped; the past placed after the step's keys
``*.attn.probs``    a token that cannot see itself; no causal mask on the step; the mask's
                    upper-left corner; only the step's keys seen; the past after the step's
                    keys; K and V swapped; the softmax over the queries; the mask after it;
                    padded keys left unmasked (the rest scaled by 1 − their mass)
``*.attn.merged``   the heads merged without the transpose
``*.attn.c_proj``   its square weight transposed (fitted: needs more real positions than D)
``*.attn.qkv`` …   one constant per channel added at every position (also ``attn.c_proj``,
                    ``mlp.c_fc``, ``mlp.c_proj``): a bias dropped, doubled or another one
``*.resid_mid/out`` the residual taken from the LayerNorm's output
``past``            K and V swapped; keys stored × 1/√Dh; saved after the step was appended
any, padded batch   right padding instead of left
==================  ==========================================================================

Each check reads a few golden tensors of one layer whole; the port's tensor was read (within a
bound) by the caller.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Optional

import numpy as np

from ...layers import gelu_erf
from ..reader import Source
from .stats import row_scale
from .visible import axes_of, visible

__all__ = ["recompute", "right_padding"]

#: A variant explains the port when its worst error is at most this share of the golden's.
EXPLAINS = 0.2
_LN_EPS = 1e-5


class Golden:
    """The golden side of a comparison, read a whole tensor at a time (cached)."""

    def __init__(self, g: Source, ctx: Any) -> None:
        self.g, self.ctx = g, ctx
        self.P = int(ctx.T_past or 0)
        self.pad = ctx.pad
        self._cache: dict[str, np.ndarray] = {}

    def has(self, *names: str) -> bool:
        return all(n in self.g.names for n in names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = np.asarray(self.g.read(name), np.float64)
        return self._cache[name]

    def mask(self, name: str, shape: tuple[int, ...]) -> Optional[np.ndarray]:
        """The compared elements of golden ``name`` (None: all), shaped like it."""
        axes = axes_of(name, self.g.axes(name), len(shape))
        size = int(np.prod(shape))
        m = visible(name, axes, shape, self.ctx.T_past, self.pad, 0, size)
        return None if m is None else m.reshape(shape)


def worst_ratio(
    port: np.ndarray, ref: np.ndarray, mask: Optional[np.ndarray], ctx: Any, probs: bool = False
) -> float:
    """max |port - ref| / tolerance over the masked elements (inf for a NaN the ref lacks)."""
    p, r = np.asarray(port, np.float64), np.asarray(ref, np.float64)
    scale = row_scale(r, r.shape[-1]).reshape(r.shape) if probs and r.ndim else 1.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = (p == r) | (np.isnan(p) & np.isnan(r))
        ratio = np.abs(p - r) / (ctx.atol * scale + ctx.rtol * np.abs(r))
    ratio = np.where(same, 0.0, np.nan_to_num(ratio, nan=np.inf))
    if mask is not None:
        ratio = ratio[mask]
    return float(ratio.max()) if ratio.size else 0.0


def explains(
    port: np.ndarray,
    variant: np.ndarray,
    golden: np.ndarray,
    mask: Optional[np.ndarray],
    ctx: Any,
    probs: bool = False,
) -> Optional[str]:
    """ "within tolerance" when ``variant`` explains ``port``, else None: the variant must be
    within the comparison's tolerance of the port (as close as the port's precision allows a
    correct port to come to the golden) and far closer than the golden is (see
    :data:`EXPLAINS`). A variant that only comes closer explains nothing: a hint that names a
    wrong cause costs a porter more than no hint."""
    if variant.shape != port.shape:
        return None
    mine = worst_ratio(port, variant, mask, ctx, probs)
    theirs = worst_ratio(port, golden, mask, ctx, probs)
    if not (mine <= 1 and theirs > 0 and mine <= EXPLAINS * theirs):
        return None
    return "within tolerance"


def recompute(name: str, port: np.ndarray, g: Source, ctx: Any) -> list[str]:
    """The variant hints for the port's tensor ``name`` (see the module docstring)."""
    base = re.sub(r"^h\d+\.", "", name)
    check = _CHECKS.get(base)
    if check is None or port.shape != g.header(name).shape:
        return []
    try:
        found = check(name, port, Golden(g, ctx))
    except (KeyError, ValueError, IndexError, FloatingPointError, ZeroDivisionError):
        return []  # a golden file without the inputs this check needs (or an odd one)
    return [found] if found else []


def _layer(name: str) -> int:
    return int(name[1 : name.index(".")])


# -- LayerNorm -----------------------------------------------------------------------------------


def _ln_input(name: str, gold: Golden) -> str:
    if name == "ln_f":
        L = int(gold.ctx.hparams["n_layer"])
        return f"h{L - 1}.out"
    i = _layer(name)
    if name.endswith("ln_2"):
        return f"h{i}.resid_mid"
    return "embed.sum" if i == 0 else f"h{i - 1}.out"


def _normalise(x: np.ndarray, eps: float, ddof: int = 0, on_sigma: bool = False) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    var = (centred * centred).sum(-1, keepdims=True) / (x.shape[-1] - ddof)
    out: np.ndarray = centred / (np.sqrt(var) + eps if on_sigma else np.sqrt(var + eps))
    return out


_LN_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("LayerNorm with ε = 1e-6 (GPT-2's is 1e-5)", {"eps": 1e-6}),
    ("LayerNorm with ε = 1e-12 (GPT-2's is 1e-5)", {"eps": 1e-12}),
    ("LayerNorm with ε = 1e-3, TF's default (GPT-2's is 1e-5)", {"eps": 1e-3}),
    ("LayerNorm with no ε (GPT-2's is 1e-5)", {"eps": 0.0}),
    ("LayerNorm with the unbiased (n − 1) variance: GPT-2's is biased, a mean over n",
     {"eps": _LN_EPS, "ddof": 1}),
    ("LayerNorm with ε added to σ instead of to σ² (GPT-2's: (x − μ) / √(σ² + ε))",
     {"eps": _LN_EPS, "on_sigma": True}),
]  # fmt: skip


def _layernorm(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """y = n·g + b with n the normalised input: g and b fitted per channel on the golden's
    real positions (any two with different n suffice), then each variant's n put through them."""
    x, y = gold[_ln_input(name, gold)], gold[name]
    mask = gold.mask(name, y.shape)
    real = np.ones(y.shape[:-1], bool) if mask is None else mask.all(-1)
    if real.sum() < 2:
        return None
    n = _normalise(x[real], _LN_EPS)
    gain, bias = _fit(n, y[real])
    if worst_ratio(n * gain + bias, y[real], None, gold.ctx) > 0.1:
        return None  # the fit does not reproduce the golden: it is not a plain LayerNorm here
    best: Optional[tuple[float, str, str]] = None
    for text, kw in _LN_VARIANTS:
        variant = _normalise(x[real], **kw) * gain + bias
        how = explains(port[real], variant, y[real], None, gold.ctx)
        if how is not None:
            score = worst_ratio(port[real], variant, None, gold.ctx)
            if best is None or score < best[0]:
                best = (score, text, how)
    if best is None:
        return None
    return f"port {name} matches the golden's input put through a {best[1]} ({best[2]})"


def _fit(n: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per channel, the least-squares g, b of y = n·g + b over the rows."""
    nm, ym = n.mean(0), y.mean(0)
    dn = n - nm
    var = (dn * dn).sum(0)
    gain = np.divide((dn * (y - ym)).sum(0), var, out=np.zeros_like(nm), where=var > 0)
    return gain, ym - gain * nm


# -- GELU ----------------------------------------------------------------------------------------


def _gelu(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    fc = gold[name.replace("mlp.gelu", "mlp.c_fc")]
    mask = gold.mask(name, fc.shape)
    with np.errstate(over="ignore"):
        variants = (
            ("GELU in the exact erf form, x·Φ(x); GPT-2 uses the tanh approximation "
             "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))", gelu_erf(fc)),
            ("GELU as x·σ(1.702·x); GPT-2 uses the tanh approximation",
             fc / (1 + np.exp(-1.702 * fc))),
        )  # fmt: skip
    for text, variant in variants:
        how = explains(port, variant, gold[name], mask, gold.ctx)
        if how:
            return f"port {name} matches the golden's mlp.c_fc put through {text} ({how})"
    return None


# -- positions -----------------------------------------------------------------------------------


def _positions(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """port[:, t] = golden positions[:, t + k]: the step's positions off by k."""
    pos = gold["embed.positions"]
    if name == "embed.sum":
        port = port - gold["embed.tokens"]
    T = pos.shape[1]
    if gold.pad is not None and gold.pad.any():
        unshifted = _positions_unshifted(name, port, pos, gold)
        if unshifted:
            return unshifted
    from_0 = _positions_from_0(name, port, pos, gold)
    if from_0:
        return from_0
    first = np.zeros(len(pos), np.int64) if gold.pad is None else np.maximum(gold.pad - gold.P, 0)
    for k in (1, -1, 2, -2):
        if T <= abs(k):
            continue
        ts = np.arange(max(0, -k), T - max(0, k))
        rows = [(b, t) for b in range(len(pos)) for t in ts if t >= first[b] and t + k >= first[b]]
        if not rows:
            continue
        b, t = np.array(rows).T
        how = explains(port[b, t], pos[b, t + k], pos[b, t], None, gold.ctx)
        if how:
            ahead, sign = ("ahead", "+") if k > 0 else ("behind", "−")
            return (
                f"port {name} at step position t holds the golden's at t {sign} {abs(k)}: the "
                f"positions run {abs(k)} {ahead} (T_past {sign} {abs(k)} + t?); a step's token t "
                f"is at position T_past + t ({how})"
            )
    return None


def _positions_from_0(name: str, port: np.ndarray, pos: np.ndarray, gold: Golden) -> str:
    """A decode step whose positions restart at 0: port[b, t] = wpe[t], not wpe[T_past + t].
    The step's tensors hold only wpe[T_past + t]; a decode-step golden file also holds wpe's
    rows 0 … T_past + T − 1 (``wpe.rows``), from which this is recomputed (an unpadded batch;
    an older file without them gets no hint)."""
    if not gold.P or not gold.has("wpe.rows") or (gold.pad is not None and gold.pad.any()):
        return ""
    rows = gold["wpe.rows"]
    T = pos.shape[1]
    if rows.ndim != 2 or rows.shape[0] < T or rows.shape[1] != pos.shape[2]:
        return ""
    variant = np.broadcast_to(rows[:T], pos.shape)
    how = explains(port, variant, pos, None, gold.ctx)
    if not how:
        return ""
    return (
        f"port {name} at step position t holds wpe[t] (the golden's wpe.rows): the positions are "
        f"counted from 0 on the cached step; its token t is at position T_past + t = "
        f"{gold.P} + t, after the {gold.P} cached ones ({how})"
    )


def _positions_unshifted(name: str, port: np.ndarray, pos: np.ndarray, gold: Golden) -> str:
    """A left-padded row whose positions count from its first column, padding included:
    port[b, t] = golden positions[b, t + pad[b]] (the golden's row b starts at position 0 at
    column pad[b])."""
    assert gold.pad is not None
    T = pos.shape[1]
    rows = [(b, t) for b, n in enumerate(gold.pad) if n for t in range(int(n), T - int(n))]
    if not rows:
        return ""
    b, t = np.array(rows).T
    how = explains(port[b, t], pos[b, t + gold.pad[b]], pos[b, t], None, gold.ctx)
    if not how:
        return ""
    return (
        f"port {name} at a left-padded row's column t holds the golden's at t + pad[b]: the "
        "positions are not shifted by the left padding; a row's first real token is at position "
        f"T_past + 0, so position = T_past + t − pad[b] ({how})"
    )


# -- heads ---------------------------------------------------------------------------------------


def _heads(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """attn.q, attn.k, attn.v: c_attn's output split into heads the wrong way."""
    i, which = _layer(name), "qkv".index(name[-1])
    qkv = gold[f"h{i}.attn.qkv"]
    B, T, D3 = qkv.shape
    D, H, Dh = D3 // 3, port.shape[1], port.shape[3]
    if H * Dh != D or port.shape != (B, H, T, Dh):
        return None
    third = qkv[..., which * D : (which + 1) * D]
    variants = (
        ("q, k and v split per head: c_attn's output read as [T, H, 3, Dh] (each head's q, k, v "
         "side by side); GPT-2's is [T, 3, H, Dh]: q = qkv[..., :D], k = qkv[..., D:2D], v = "
         "qkv[..., 2D:], each then split into H heads",
         qkv.reshape(B, T, H, 3, Dh)[:, :, :, which].transpose(0, 2, 1, 3)),
        (f"heads laid out [Dh, H]: each third of c_attn's output reshaped to [T, Dh, H]; "
         f"GPT-2's is [T, H, Dh] (head h holds channels h·Dh … h·Dh + Dh − 1, Dh = {Dh})",
         third.reshape(B, T, Dh, H).transpose(0, 3, 1, 2)),
    )  # fmt: skip
    mask = gold.mask(name, port.shape)
    for text, variant in variants:
        how = explains(port, variant, gold[name], mask, gold.ctx)
        if how:
            return f"port {name} matches the golden's attn.qkv with {text} ({how})"
    return None


def _merged(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """attn.merged: the heads' outputs [B, H, T, Dh] reshaped to [B, T, D] without the
    transpose to [B, T, H, Dh]."""
    i = _layer(name)
    probs, v = gold[f"h{i}.attn.probs"], gold[f"h{i}.attn.v"]
    values = np.concatenate([gold["past"][:, i, 1], v], axis=2) if gold.P else v
    heads = np.nan_to_num(probs) @ values  # [B, H, T, Dh]
    B, H, T, Dh = heads.shape
    how = explains(port, heads.reshape(B, T, H * Dh), gold[name], gold.mask(name, port.shape),
                   gold.ctx)  # fmt: skip
    if not how:
        return None
    return (
        f"port {name} matches the golden's probs · v with the heads merged without the "
        "transpose: probs · v is [B, H, T, Dh]; transpose it to [B, T, H, Dh], then reshape to "
        f"[B, T, D] ({how})"
    )


def _attn_c_proj(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """attn.c_proj with its square weight transposed. The weight is not in the golden file: it
    is recovered from attn.merged and attn.c_proj by least squares, which takes more real
    positions than D (a plain pass of B·T > D tokens), and only if it reproduces the golden."""
    i = _layer(name)
    x, y = gold[f"h{i}.attn.merged"], gold[name]
    mask = gold.mask(name, y.shape)
    real = np.ones(y.shape[:-1], bool) if mask is None else mask.all(-1)
    X, Y = x[real], y[real]
    N, D = X.shape
    if N <= D + 1 or Y.shape[1] != D:
        return None
    A = np.concatenate([X, np.ones((N, 1))], axis=1)
    solution = np.linalg.lstsq(A, Y, rcond=None)[0]
    W, b = solution[:D], solution[D]
    if worst_ratio(X @ W + b, Y, None, gold.ctx) > 0.1:
        return None  # the fit does not reproduce the golden
    how = explains(port[real], X @ W.T + b, Y, None, gold.ctx)
    if not how:
        return None
    return (
        f"port {name} matches the golden's attn.merged through c_proj's weight transposed: "
        "y = x · W + b with W as stored ([D_in, D_out], a Conv1D), not x · Wᵀ; the weight is "
        f"square, so the shapes cannot tell ({how})"
    )


# -- a bias ----------------------------------------------------------------------------------------

#: The affine outputs, each x · W + b: the layer whose bias they add, and their input x.
_BIASES = {"attn.qkv": ("c_attn", "ln_1"), "attn.c_proj": ("attn.c_proj", "attn.merged"),
           "mlp.c_fc": ("mlp.c_fc", "ln_2"), "mlp.c_proj": ("mlp.c_proj", "mlp.gelu")}  # fmt: skip
_MIN_OFFSET_ROWS = 3  # with fewer real positions a per-channel constant fits too easily


def _offset(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """port = golden + c, one vector c for every position: the affine layer's bias dropped,
    doubled or another one. c is fitted as the mean difference over the real positions (3 or
    more) and named only if it explains the port (:func:`explains`), and only when the port's
    input x agrees with the golden's (a LayerNorm's dropped bias upstream also adds a constant
    per channel, through W: not this layer's bias)."""
    layer, x = _BIASES[re.sub(r"^h\d+\.", "", name)]
    if f"h{_layer(name)}.{x}" not in getattr(gold.ctx, "agreeing", ()):
        return None
    golden = gold[name]
    mask = gold.mask(name, golden.shape)
    real = np.ones(golden.shape[:-1], bool) if mask is None else mask.all(-1)
    if real.sum() < _MIN_OFFSET_ROWS:
        return None
    g, p = golden[real], np.asarray(port, np.float64)[real]
    c = (p - g).mean(0)
    how = explains(p, g + c, g, None, gold.ctx)
    if not how:
        return None
    return (
        f"port {name} is the golden's plus one constant per channel, the same at every position "
        f"(max |c| {np.abs(c).max():.3g}), its input {x} agreeing: {layer}'s bias dropped, "
        f"added twice or the wrong one? y = x · W + b ({how})"
    )


def _attn_c_proj_or_offset(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    return _attn_c_proj(name, port, gold) or _offset(name, port, gold)


# -- the residual stream -------------------------------------------------------------------------


def _residual(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    """resid_mid = x + attn.c_proj and out = resid_mid + mlp.c_proj, with the residual taken
    from the LayerNorm's output instead of its input."""
    i = _layer(name)
    if name.endswith("resid_mid"):
        ln, branch, x, y = "ln_1", "attn.c_proj", "x, the block's input", "resid_mid"
    else:
        ln, branch, x, y = "ln_2", "mlp.c_proj", "resid_mid", "out"
    variant = gold[f"h{i}.{ln}"] + gold[f"h{i}.{branch}"]
    how = explains(port, variant, gold[name], gold.mask(name, port.shape), gold.ctx)
    if not how:
        return None
    v = x.split(",")[0]
    return (
        f"port {name} equals the golden's {ln} + {branch}: the residual taken from {ln}'s "
        f"output; it is {ln}'s input, {x}: {y} = {v} + {branch}({ln}({v})) ({how})"
    )


# -- attention -----------------------------------------------------------------------------------


def _masked_softmax(scores: np.ndarray, allowed: np.ndarray, axis: int = -1) -> np.ndarray:
    s = np.where(allowed, scores, -np.inf)
    top = s.max(axis, keepdims=True)
    top[~np.isfinite(top)] = 0.0
    e = np.exp(s - top)
    out: np.ndarray = e / np.maximum(e.sum(axis, keepdims=True), 1e-300)
    return out


def _allowed(gold: Golden, shape: tuple[int, ...], rule: str) -> np.ndarray:
    """[B, 1, T, S] bool: the keys each query sees under ``rule``."""
    B, _, T, S = shape
    P = gold.P
    s, t = np.arange(S)[None, None, None, :], np.arange(T)[None, None, :, None]
    first = np.zeros(B, np.int64) if gold.pad is None else gold.pad
    keep = s >= first[:, None, None, None]
    rules = {"golden": s <= P + t, "self": s < P + t, "all": s < S, "upper-left": s <= t,
             "step-only": (s >= P) & (s <= P + t)}  # fmt: skip
    return keep & rules[rule]


def _scores_kv_swapped(name: str, gold: Golden) -> np.ndarray:
    """The step's scores with the past's values used as its keys."""
    i = _layer(name)
    q, k, past = gold[f"h{i}.attn.q"], gold[f"h{i}.attn.k"], gold["past"]
    keys = np.concatenate([past[:, i, 1], k], axis=2)  # [B, H, S, Dh]
    out: np.ndarray = np.einsum("bhtd,bhsd->bhts", q, keys) / math.sqrt(q.shape[-1])
    return out


def _past_after(x: np.ndarray, P: int) -> np.ndarray:
    """Columns in the order [the step's keys, the past's] (the port's order, in golden terms)."""
    return np.concatenate([x[..., P:], x[..., :P]], axis=-1)


_KV_SWAP = (
    "K and V swapped in the cache: the past's values used as keys (written [v, k], read [k, v]?)"
)
_PAST_AFTER = (
    "the past placed after the step's keys: keys must be the past's, then the step's (a new "
    "token t is key T_past + t)"
)


def _scores(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    scores = gold[name]
    mask = gold.mask(name, scores.shape)
    candidates: list[tuple[str, Callable[[], np.ndarray], Optional[np.ndarray]]] = []
    if gold.P and gold.has("past", name.replace("scores", "q"), name.replace("scores", "k")):
        candidates.append((_KV_SWAP, lambda: _scores_kv_swapped(name, gold), mask))
    if gold.P and gold.pad is None:
        seen = _allowed(gold, scores.shape, "golden")  # what the golden compares, reordered
        candidates.append((_PAST_AFTER, lambda: _past_after(scores, gold.P),
                           np.broadcast_to(_past_after(seen, gold.P), scores.shape)))  # fmt: skip
    for text, make, where in candidates:
        how = explains(port, make(), scores, where, gold.ctx)
        if how:
            return f"port {name} matches the golden's recomputed with {text} ({how})"
    return None


_MASKS = (
    ("self", "a new token unable to attend to itself: the causal mask must be s ≤ T_past + t "
     "(key s, query t), not s < T_past + t"),
    ("all", "no causal mask on the step: each new token also sees the step's later tokens "
     "(key s is visible to query t when s ≤ T_past + t)"),
    ("upper-left", "the causal mask counted from the upper-left corner (s ≤ t); with a past it is "
     "s ≤ T_past + t"),
    ("step-only", "a mask that lets each new token see only the step's keys, not the past's: "
     "query t sees every key s ≤ T_past + t, the cached ones included"),
)  # fmt: skip


def _probs(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    scores_name = name.replace("probs", "scores")
    if not gold.has(scores_name):
        return None
    probs, scores = gold[name], gold[scores_name]
    mask = gold.mask(name, probs.shape)

    def masked(rule: str) -> Callable[[], np.ndarray]:
        return lambda: _masked_softmax(scores, _allowed(gold, scores.shape, rule))

    candidates = [(text, masked(rule)) for rule, text in _MASKS if gold.P or rule == "self"]
    golden_mask = _allowed(gold, scores.shape, "golden")
    every = _allowed(gold, scores.shape, "all")  # every real key, none masked
    candidates += [
        ("a softmax over the wrong axis, the queries (axis −2): each key's column sums to 1; "
         "the softmax runs over the keys, the last axis",
         lambda: _masked_softmax(scores, golden_mask, axis=-2)),
        ("the mask applied after the softmax (masked probabilities zeroed, the rows no longer "
         "summing to 1): mask the scores (−1e10 or −inf), then take the softmax",
         lambda: _masked_softmax(scores, every) * golden_mask),
    ]  # fmt: skip
    if gold.P and gold.pad is None:
        port_order = _allowed(gold, scores.shape, "golden")
        candidates.append((_PAST_AFTER, lambda: _masked_softmax(_past_after(scores, gold.P),
                                                               port_order)))  # fmt: skip
    if gold.P and gold.has("past", name.replace("probs", "q"), name.replace("probs", "k")):
        swapped = lambda: _masked_softmax(  # noqa: E731
            _scores_kv_swapped(name, gold), _allowed(gold, scores.shape, "golden")
        )
        candidates.append((_KV_SWAP, swapped))
    for text, make in candidates:
        with np.errstate(invalid="ignore", over="ignore"):
            how = explains(port, make(), probs, mask, gold.ctx, probs=True)
        if how:
            return f"port {name} matches the golden's scores put through {text} ({how})"
    return _padding_seen(name, port, probs, mask, gold)


def _padding_seen(
    name: str, port: np.ndarray, probs: np.ndarray, mask: Optional[np.ndarray], gold: Golden
) -> Optional[str]:
    """A left-padded batch whose padded keys are not masked. The golden file holds no scores
    for padding (0 there), so the padded keys' probabilities are the port's own; what is
    checked is the rest: each real key's probability is the golden's times 1 − m, with m the
    mass the port's row puts on the padding."""
    if gold.pad is None or not gold.pad.any():
        return None
    S = probs.shape[-1]
    padded = np.arange(S)[None, None, None, :] < gold.pad[:, None, None, None]
    padded = np.broadcast_to(padded, probs.shape)
    seen = np.where(padded, np.nan_to_num(port.astype(np.float64)), 0.0)
    mass = seen.sum(-1, keepdims=True)
    if not (mass > gold.ctx.atol).any():
        return None
    variant = np.where(padded, seen, probs * (1.0 - mass))
    how = explains(port, variant, probs, mask, gold.ctx, probs=True)
    if not how:
        return None
    return (
        f"port {name} is the golden's with probability on the padded keys and the rest scaled "
        "down to make room: the padding is not masked; a left-padded row's keys s < pad[b] must "
        f"be masked like the future ones ({how})"
    )


# -- the past ------------------------------------------------------------------------------------


def _past(name: str, port: np.ndarray, gold: Golden) -> Optional[str]:
    past = gold[name]
    mask = gold.mask(name, past.shape)
    d_head = past.shape[-1]
    scaled = past.copy()
    scaled[:, :, 0] /= math.sqrt(d_head)
    variants = (
        ("K and V swapped: the port's cache holds [v, k] where the golden's holds [k, v]",
         past[:, :, ::-1]),
        (f"its keys × 1/√Dh (Dh = {d_head}): keys stored already scaled; GPT-2's cache holds "
         "unscaled keys, and the scale belongs to the scores", scaled),
    )  # fmt: skip
    for text, variant in variants:
        how = explains(port, variant, past, mask, gold.ctx)
        if how:
            return f"port past equals the golden's with {text} ({how})"
    return None


def past_after_step(
    port_shape: tuple[int, ...], read: Callable[[], np.ndarray], g: Source, ctx: Any
) -> Optional[str]:
    """A port ``past`` with T_past + T positions: saved after the step was appended?"""
    gh = g.header("past").shape
    gold = Golden(g, ctx)
    L = gh[1]
    if len(port_shape) != 6 or port_shape[:4] != gh[:4] or port_shape[5] != gh[5]:
        return None
    names = [f"h{i}.attn.{kv}" for i in range(L) for kv in "kv"]
    if not gold.has(*names) or port_shape[4] != gh[4] + gold["h0.attn.k"].shape[2]:
        return None
    kv = [np.stack([gold[f"h{i}.attn.k"], gold[f"h{i}.attn.v"]], 1) for i in range(L)]
    step = np.stack(kv, 1)  # [B, L, 2, H, T, Dh]
    whole = np.concatenate([gold["past"], step], axis=4)
    if worst_ratio(read(), whole, None, ctx) > 1:
        return None
    return (
        f"port past has T_past + T = {port_shape[4]} positions and equals the golden's past "
        "followed by the step's own keys and values: saved after the step was appended to the "
        f"cache; the golden's past is the prefix's {gh[4]} positions, as they were before the step"
    )


# -- padding -------------------------------------------------------------------------------------


def right_padding(name: str, port: np.ndarray, g: Source, ctx: Any) -> Optional[str]:
    """A padded plain pass whose rows the port padded on the right: port row b, shifted right by
    pad[b] along every T and S axis, is the golden's."""
    if ctx.pad is None or ctx.T_past or not ctx.pad.any() or port.shape != g.header(name).shape:
        return None
    if getattr(ctx, "tokens_agree", False):
        return None  # right padding moves the ids and token embeddings too: these agree
    gold = Golden(g, ctx)
    golden = gold[name]
    axes = axes_of(name, g.axes(name), golden.ndim)
    if not axes or axes[0] != "B" or not ({"T", "S"} & set(axes)):
        return None
    shifted = np.empty_like(np.asarray(port, np.float64))
    for b, n in enumerate(ctx.pad):
        row = np.asarray(port[b], np.float64)
        for k, axis in enumerate(axes[1:]):
            if axis in ("T", "S"):
                row = np.roll(row, int(n), axis=k)
        shifted[b] = row
    if worst_ratio(shifted, golden, gold.mask(name, golden.shape), ctx) > 1:
        return None
    return (
        f"port {name}, each row moved right by its padding, equals the golden's: the port pads "
        "on the right; the golden pads on the left, as generation does (row b's first pad[b] "
        "positions are padding)"
    )


_CHECKS: dict[str, Callable[[str, np.ndarray, Golden], Optional[str]]] = {
    "ln_1": _layernorm,
    "ln_2": _layernorm,
    "ln_f": _layernorm,
    "mlp.gelu": _gelu,
    "embed.positions": _positions,
    "embed.sum": _positions,
    "attn.q": _heads,
    "attn.k": _heads,
    "attn.v": _heads,
    "attn.scores": _scores,
    "attn.probs": _probs,
    "attn.qkv": _offset,
    "attn.merged": _merged,
    "attn.c_proj": _attn_c_proj_or_offset,
    "mlp.c_fc": _offset,
    "mlp.c_proj": _offset,
    "resid_mid": _residual,
    "out": _residual,
    "past": _past,
}
