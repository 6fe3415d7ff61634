"""Comparing a port's sampler with a sampler golden file (:mod:`gpt2np.golden.sampler`).

The port runs its sampler on the golden's ``logits``, history and draws ``u`` and writes, as
``NAME.npy`` files, an ``.npz`` or a mapping: ``probs`` [steps, V] and ``chosen`` [steps], and
as many of the stages (``penalized``, ``tempered``, ``top_k``, ``top_p``, ``min_p``: logits
[steps, V], removed ids as −inf or anything ≤ −1e9) as it can. The comparison walks the steps
in order and names the first step and, in it, the first stage that differs:

* a stage the port wrote: which ids it removed, then its kept logits as log-softmax (a
  constant shift is no difference);
* ``probs``: the ids with a probability (when they differ, the first filter whose kept set the
  port's departs from), then the probabilities, within the precision's tolerance (the atol
  scaled by the row's largest probability, as for attention);
* ``chosen``: the draw, once the distribution agrees.

When a step differs, variants of the sampler with a common port bug are run on the golden's
inputs (top-p with an inclusive cumulative sum, temperature after the filters, ties dropped at
the k-th, penalties on the wrong ids, ...) and the one that reproduces the port is named.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Optional

import numpy as np

from ..errors import CheckpointError
from ..support.sizes import check_bytes
from .diff.tolerance import tolerance
from .kinds import SAMPLER_FORMAT
from .reader import Source, open_source
from .sampler import STAGES, Setting, distribution, min_p, penalize, top_k, top_p

__all__ = ["SamplerReport", "compare_sampler"]

REMOVED = -1e9  # a port's logit at or below this is a removed id (OpenAI's code uses -1e10)


@dataclasses.dataclass
class SamplerReport:
    """``ok``; ``findings``: (step, stage, message) of the first difference (one per step that
    differs); ``hints``: the variant that reproduces the port, when one does."""

    golden: str
    port: str
    steps: int
    findings: list[tuple[int, str, str]]
    hints: list[str]
    precision: str
    rtol: float
    atol: float

    @property
    def ok(self) -> bool:
        return self.steps > 0 and not self.findings

    @property
    def first(self) -> Optional[tuple[int, str, str]]:
        return self.findings[0] if self.findings else None

    def format(self, rows: str = "default") -> str:
        lines = [f"sampler golden {self.golden}  vs  port {self.port}"]
        lines.append(f"tolerance ({self.precision}): rtol {self.rtol:g}, atol {self.atol:g}")
        shown = self.findings if rows != "default" else self.findings[:8]
        lines += [f"step {step}, {stage}: {message}" for step, stage, message in shown]
        if len(shown) < len(self.findings):
            lines.append(f"… and {len(self.findings) - len(shown)} more steps differ")
        lines += [f"hint: {h}" for h in self.hints]
        if self.ok:
            lines.append(f"OK: {self.steps} steps agree, every stage the port wrote")
        elif self.first is None:
            lines.append("FAIL: no step to compare")
        else:
            step, stage, _ = self.first
            lines.append(f"FAIL: {len(self.findings)} of {self.steps} steps differ; the first "
                         f"is step {step}, at {stage}")  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "golden": self.golden, "port": self.port, "steps": self.steps,
            "findings": [{"step": s, "stage": st, "message": m} for s, st, m in self.findings],
            "hints": self.hints, "precision": self.precision, "rtol": self.rtol,
            "atol": self.atol,
        }  # fmt: skip

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


#: The golden's tensors and the shape each must have: S steps, V ids, P prompt ids.
_SHAPES = {"logits": "SV", "prompt_ids": "P", "u": "S", **{n: "SV" for n in STAGES},
           "probs": "SV", "chosen": "S"}  # fmt: skip


class _Golden:
    """The golden file's inputs and stages, read whole (they are [steps, V]) once their
    headers say they have the golden's shapes and fit in memory; ids checked in [0, V)."""

    def __init__(self, g: Source) -> None:
        m = g.manifest or {}
        if m.get("format") != SAMPLER_FORMAT:
            raise CheckpointError(f"{g.label}: not a sampler golden (format {m.get('format')!r})")
        try:
            self.setting = Setting(**m["setting"])
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{g.label}: bad sampler setting: {e}") from None
        self.shape = _golden_shapes(g)
        self.t = {n: np.asarray(g.read(n)) for n in _SHAPES}
        for name in ("logits", *STAGES, "probs", "u"):
            if self.t[name].dtype.kind != "f":
                raise CheckpointError(f"{g.label}: {name} is {self.t[name].dtype}, not floats")
        probs = self.t["probs"]
        if not (np.isfinite(probs).all() and (probs >= 0).all() and (probs.sum(axis=-1) > 0).all()):
            raise CheckpointError(f"{g.label}: probs is not a distribution in every step (NaN, "
                                  "negative, or all zero)")  # fmt: skip
        for name in ("prompt_ids", "chosen"):
            ids = self.t[name]
            if ids.dtype.kind not in "iu" or (ids.size and not 0 <= ids.min() <= ids.max() <
                                              self.shape["V"]):  # fmt: skip
                raise CheckpointError(f"{g.label}: {name} must be ids in [0, {self.shape['V']})")
        self.steps = self.shape["S"]

    def history(self, i: int) -> np.ndarray:
        return np.concatenate([self.t["prompt_ids"], self.t["chosen"][:i]]).astype(np.int64)


def _golden_shapes(g: Source) -> dict[str, int]:
    """{S, V, P} from the golden's headers (no data read), every tensor present and of its
    shape, their bytes (read whole, and their float64 copies) within memory."""
    missing = [n for n in _SHAPES if n not in g.names]
    if missing:
        raise CheckpointError(f"{g.label}: a sampler golden holds {', '.join(missing)}: absent")
    headers = {n: g.header(n) for n in _SHAPES}
    dims = {"S": headers["chosen"].shape[:1], "V": headers["logits"].shape[1:2],
            "P": headers["prompt_ids"].shape[:1]}  # fmt: skip
    size = {k: int(v[0]) if v else 0 for k, v in dims.items()}
    for name, axes in _SHAPES.items():
        want = tuple(size[a] for a in axes)
        if headers[name].shape != want:
            raise CheckpointError(f"{g.label}: {name} is {list(headers[name].shape)}, expected "
                                  f"{list(want)} ({' '.join(axes)})")  # fmt: skip
    total = sum(max(h.nbytes, h.size * 8) for h in headers.values())
    check_bytes(2 * total, "its tensors", g.label)
    return size


def _read_port(p: Source, gold: _Golden) -> dict[str, np.ndarray]:
    """The port's stages, probs and chosen, each read only once its header has the golden's
    shape (a port file may declare any shape, and deflate it to nothing)."""
    missing = [n for n in ("probs", "chosen") if n not in p.names]
    if missing:
        raise ValueError(f"{p.label} lacks {', '.join(missing)}: a port writes at least "
                         "probs [steps, V] and chosen [steps]")  # fmt: skip
    names = [n for n in (*STAGES, "probs", "chosen") if n in p.names]
    for name in names:
        shape, want = tuple(p.header(name).shape), gold.t[name].shape
        if shape != want:
            raise ValueError(f"port {name} is {list(shape)}, the golden's {list(want)}")
    out = {n: np.asarray(p.read(n)) for n in names}
    for name, a in out.items():
        if a.dtype.kind not in ("iu" if name == "chosen" else "iuf"):
            raise ValueError(f"port {name} is {a.dtype}, not numbers")
    return out


def compare_sampler(
    golden: Any,
    port: Any,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    *,
    precision: Optional[str] = None,
) -> SamplerReport:
    """Compare a port's sampler output with a sampler golden file, step by step."""
    precision, rtol, atol = tolerance(precision, rtol, atol)
    with open_source(golden, "<in-memory golden>") as g, open_source(port, "<in-memory port>") as p:
        gold = _Golden(g)
        port_t = _read_port(p, gold)
        labels = (g.label, p.label)
    findings: list[tuple[int, str, str]] = []
    hints: list[str] = []
    for i in range(gold.steps):
        found = _step(i, gold, port_t, rtol, atol)
        if found is not None:
            findings.append((i, *found))
            if not hints:
                hints = _variants(i, gold, port_t["probs"][i], rtol, atol)
    return SamplerReport(*labels, gold.steps, findings, hints, precision, rtol, atol)


def _step(i: int, gold: _Golden, port: dict[str, np.ndarray], rtol: float, atol: float) -> Any:
    """(stage, message) of the first difference in step i, or None. A stage the port wrote is
    named first when it differs, but only when the step's outcome differs too: a port may order
    stages that commute (temperature and top-k) its own way."""
    outcome = _outcome(i, gold, port, rtol, atol)
    if outcome is None:
        return None
    for stage in STAGES:
        if stage in port:
            found = _stage(gold.t[stage][i], np.asarray(port[stage][i], np.float64), rtol, atol)
            if found:
                return stage, found + _stage_why(stage, port[stage][i], gold.setting)
    return outcome


def _outcome(i: int, gold: _Golden, port: dict[str, np.ndarray], rtol: float, atol: float) -> Any:
    """(stage, message) when step i's distribution or choice differs, else None."""
    g, p = gold.t["probs"][i], np.asarray(port["probs"][i], np.float64)
    if not np.array_equal(g > 0, p > 0):
        return _support(i, gold, p)
    bad = np.abs(p - g) > atol * g.max() + rtol * np.abs(g)
    if bad.any():
        j = int(np.argmax(bad))
        message = f"the kept ids agree, their probabilities do not (id {j}: golden {g[j]:.6g}, "
        return "probs", message + f"port {p[j]:.6g}): the penalties or the temperature"
    mine, theirs = int(port["chosen"][i]), int(gold.t["chosen"][i])
    if mine != theirs:
        return "chosen", (
            f"the distribution agrees but the port chose {mine}, the golden {theirs} with u = "
            f"{gold.t['u'][i]:.17g}: the golden takes the first id, in id order, whose "
            "cumulative probability exceeds u · Σ probs (not sorted by probability, and u from "
            "the golden, not the port's generator)"
        )
    return None


def _stage(g: np.ndarray, p: np.ndarray, rtol: float, atol: float) -> str:
    g_removed, p_removed = ~np.isfinite(g), (p <= REMOVED) | np.isneginf(p)
    if not np.array_equal(g_removed, p_removed):
        more = np.flatnonzero(p_removed & ~g_removed)
        fewer = np.flatnonzero(g_removed & ~p_removed)
        return (f"the port removes {_ids(len(more))} the golden keeps and keeps "
                f"{_ids(len(fewer))} it removes (of {len(g)}; the golden keeps "
                f"{int((~g_removed).sum())})")  # fmt: skip
    keep = ~g_removed
    lg = g[keep] - np.logaddexp.reduce(g[keep])
    lp = p[keep] - np.logaddexp.reduce(p[keep])
    bad = np.abs(lp - lg) > atol + rtol * np.abs(lg)
    if bad.any():
        j = int(np.flatnonzero(keep)[np.argmax(bad)])
        return f"the kept logits differ beyond a constant shift (id {j})"
    return ""


def _stage_why(stage: str, row: np.ndarray, setting: Setting) -> str:
    """Why a stage the port wrote differs, when its row says so (else "")."""
    row = np.asarray(row, np.float64)
    if stage == "tempered" and setting.temperature == 0:
        return (": temperature 0 is greedy; the golden does not divide by it (z / 0 is ±inf or "
                "NaN), its tempered row is the penalized one and the port's next step is the "
                "argmax of the penalized logits")  # fmt: skip
    if np.isnan(row).any() or np.isposinf(row).any():
        return f": the port's {stage} row holds NaN or +inf (a division by zero?)"
    if stage in ("penalized", "tempered") and ((row <= REMOVED) | np.isneginf(row)).any():
        return f": the port's {stage} row already has removed ids, so a filter ran before it"
    return ""


def _support(i: int, gold: _Golden, p: np.ndarray) -> tuple[str, str]:
    """The first filter whose kept set the port's support departs from (for a greedy golden,
    the argmax), else the ids the port keeps or removes against the golden's final set."""
    port_kept = p > 0
    golden_kept = gold.t["probs"][i] > 0
    if gold.setting.temperature == 0:
        best = int(np.argmax(gold.t["probs"][i]))
        kept = np.flatnonzero(port_kept)
        what = (f"only id {int(kept[0])}" if kept.size == 1 else
                f"{_ids(kept.size)}, a distribution to sample from")  # fmt: skip
        return "probs", (f"temperature 0 is greedy: the golden keeps only the argmax of the "
                         f"penalized logits, id {best}, with probability 1 and draws nothing; "
                         f"the port keeps {what}")  # fmt: skip
    for stage in ("top_k", "top_p", "min_p"):
        kept = np.isfinite(gold.t[stage][i])
        extra = np.flatnonzero(port_kept & ~kept)
        if extra.size:
            return stage, (f"the port keeps {_ids(extra.size)} this filter removes (id "
                           f"{int(extra[0])} first; golden keeps {int(kept.sum())}, port "
                           f"{int(port_kept.sum())})")  # fmt: skip
    lost = np.flatnonzero(golden_kept & ~port_kept)
    stage = _last_active(gold.setting)
    if lost.size:
        first = int(lost[0])
        return stage, (f"the port removes {_ids(lost.size)} the golden keeps after every filter "
                       f"(id {first}, probability {gold.t['probs'][i][first]:.4g})")  # fmt: skip
    extra = np.flatnonzero(port_kept & ~golden_kept)
    return stage, (f"the port keeps {_ids(extra.size)} the golden removes after every filter (id "
                   f"{int(extra[0])} first; golden keeps {int(golden_kept.sum())}, port "
                   f"{int(port_kept.sum())})")  # fmt: skip


def _ids(n: int) -> str:
    return f"{n} id" if n == 1 else f"{n} ids"


def _last_active(s: Setting) -> str:
    active = [n for n, on in (("top_k", s.top_k), ("top_p", s.top_p < 1), ("min_p", s.min_p)) if on]
    return active[-1] if active else "probs"


# -- variants: the sampler with one common port bug ----------------------------------------------


def _top_p_inclusive(z: np.ndarray, p: float) -> np.ndarray:
    if p >= 1.0:
        return z
    order = np.sort(z)[::-1]
    cumulative = np.cumsum(distribution(order))
    kept = order[cumulative < p]
    smallest = kept.min() if kept.size else order[0]
    return np.where(z < smallest, -np.inf, z)


def _top_k_no_ties(z: np.ndarray, k: int) -> np.ndarray:
    if k == 0 or k >= z.size:
        return z
    keep = np.argsort(-z, kind="stable")[:k]
    out = np.full_like(z, -np.inf)
    out[keep] = z[keep]
    return out


Pipeline = Callable[[np.ndarray, np.ndarray, int, Setting], np.ndarray]


def _pipeline(order: str = "golden", **swap: Any) -> Pipeline:
    """The sampler as :func:`gpt2np.golden.sampler.reference_step`, with filters swapped for
    variants, or temperature applied ``after`` the filters."""
    fk, fp, fm = swap.get("top_k", top_k), swap.get("top_p", top_p), swap.get("min_p", min_p)
    pen = swap.get("penalize", penalize)

    def run(logits: np.ndarray, history: np.ndarray, n_prompt: int, s: Setting) -> np.ndarray:
        z = pen(logits, history, n_prompt, s)
        t = s.temperature or 1.0
        if order == "golden":
            z = fm(fp(fk(z / t, s.top_k), s.top_p), s.min_p)
        elif order == "temperature last":
            z = fm(fp(fk(z, s.top_k), s.top_p), s.min_p) / t
        else:  # temperature after top-k and top-p, before min-p
            z = fm(fp(fk(z, s.top_k), s.top_p) / t, s.min_p)
        return distribution(z)

    return run


def _penalize_generated_only(z: np.ndarray, h: np.ndarray, n: int, s: Setting) -> np.ndarray:
    return penalize(z, h[n:], 0, s)


def _penalize_by_division(z: np.ndarray, h: np.ndarray, n: int, s: Setting) -> np.ndarray:
    z = penalize(z, h, n, dataclasses.replace(s, repetition_penalty=1.0))
    seen = np.unique(h)
    z[seen] = z[seen] / s.repetition_penalty
    return z


def _penalize_counting_the_prompt(z: np.ndarray, h: np.ndarray, n: int, s: Setting) -> np.ndarray:
    return penalize(z, h, 0, s)


VARIANTS: list[tuple[str, Pipeline]] = [
    ("top-p with an inclusive cumulative sum (cumsum < top_p): it drops the token that crosses "
     "top_p; the golden keeps it (the mass before a token < top_p)",
     _pipeline(top_p=_top_p_inclusive)),
    ("temperature applied after the filters (top-k, top-p, min-p): the golden divides by the "
     "temperature first, and top-p and min-p see the tempered distribution",
     _pipeline("temperature last")),
    ("temperature applied after top-k and top-p (before min-p): the golden applies it first",
     _pipeline("temperature after top-p")),
    ("top-k without the ties at the k-th largest logit: the golden keeps every logit ≥ the k-th",
     _pipeline(top_k=_top_k_no_ties)),
    ("the repetition penalty on the generated ids only: the golden (as HF) penalizes the prompt's "
     "ids too", _pipeline(penalize=_penalize_generated_only)),
    ("the repetition penalty dividing every logit, negative ones too: a negative logit is "
     "multiplied by the penalty", _pipeline(penalize=_penalize_by_division)),
    ("presence and frequency penalties counting the prompt: OpenAI's count the generated ids only",
     _pipeline(penalize=_penalize_counting_the_prompt)),
]  # fmt: skip


def _variants(i: int, gold: _Golden, port: np.ndarray, rtol: float, atol: float) -> list[str]:
    """The variant whose distribution at step i is the port's, as a sentence (or none)."""
    s, logits = gold.setting, gold.t["logits"][i]
    if s.temperature == 0:
        return []
    port = np.asarray(port, np.float64)
    golden = gold.t["probs"][i]
    for text, run in VARIANTS:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            probs = run(logits, gold.history(i), len(gold.t["prompt_ids"]), s)
        if _same(probs, golden, rtol, atol):
            continue  # this variant makes no difference here: it explains nothing
        if _same(port, probs, rtol, atol):
            return [f"step {i}: the port's distribution is the golden's with {text}"]
    return []


def _same(p: np.ndarray, g: np.ndarray, rtol: float, atol: float) -> bool:
    """The same ids kept, and their probabilities within tolerance (atol × the row's max)."""
    if not np.array_equal(p > 0, g > 0):
        return False
    return bool(np.all(np.abs(p - g) <= atol * g.max() + rtol * g))
