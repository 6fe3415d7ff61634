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
the k-th, top-k after top-p, penalties on the wrong ids, a frequency counted once, ...) and the
one that reproduces the port is named.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Callable, Optional

import numpy as np

from ..errors import CheckpointError
from ..support.sizes import check_bytes
from .diff.tolerance import tolerance
from .kinds import SAMPLER_FORMAT
from .reader import Source, open_source
from .sampler import (
    STAGES,
    SUITE_FORMAT,
    SUITE_INDEX,
    SUITE_VERSION,
    Setting,
    distribution,
    min_p,
    penalize,
    top_k,
    top_p,
)

__all__ = ["SamplerReport", "SuiteReport", "compare_sampler", "compare_sampler_suite"]

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
        elif order == "top-k after top-p":
            z = fm(fk(fp(z / t, s.top_p), s.top_k), s.min_p)
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


def _penalize_frequency_once(z: np.ndarray, h: np.ndarray, n: int, s: Setting) -> np.ndarray:
    z = penalize(z, h, n, dataclasses.replace(s, presence_penalty=0.0, frequency_penalty=0.0))
    generated = np.unique(h[n:])
    z[generated] -= s.frequency_penalty + s.presence_penalty
    return z


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
    ("the frequency penalty counting a generated id once however often it was generated (a "
     "second presence penalty): the golden subtracts c · α_f, c the times it was generated",
     _pipeline(penalize=_penalize_frequency_once)),
    ("top-k applied after top-p: the golden (as HF) applies top-k first, and top-p "
     "renormalizes over the ids top-k kept", _pipeline("top-k after top-p")),
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


# -- the suite: one comparison per setting ------------------------------------------------------

#: suite.json is small (a dozen settings); anything much larger is not one.
MAX_INDEX_BYTES = 1 << 20


@dataclasses.dataclass
class SuiteReport:
    """A port's outputs against every setting of a sampler suite (``gpt2np dump-sampler
    --suite``). ``results``: (name, the setting's :class:`SamplerReport` or None, the error
    when the port's output for it is missing or unreadable, else "")."""

    golden: str
    port: str
    suite_version: int
    results: list[tuple[str, Optional[SamplerReport], str]]
    precision: str

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r is not None and r.ok for _, r, _ in self.results)

    @property
    def failed(self) -> list[str]:
        return [name for name, r, _ in self.results if r is None or not r.ok]

    def format(self, rows: str = "default") -> str:
        lines = [f"sampler suite {self.golden} (version {self.suite_version}, "
                 f"{len(self.results)} settings)  vs  port {self.port}"]  # fmt: skip
        for name, report, error in self.results:
            if report is None:
                lines.append(f"FAIL {name}: {error}")
            elif report.ok:
                lines.append(f"ok   {name}: {report.steps} steps agree")
            else:
                step, stage, message = report.findings[0]
                lines.append(f"FAIL {name}: step {step}, {stage}: {message}")
                more = report.findings[1:] if rows != "default" else []
                lines += [f"     {name}: step {st}, {sg}: {m}" for st, sg, m in more]
                lines += [f"     hint: {h}" for h in report.hints]
        if self.ok:
            lines.append(f"OK: every setting of the suite agrees ({len(self.results)})")
        else:
            lines.append(f"FAIL: {len(self.failed)} of {len(self.results)} settings differ: "
                         + ", ".join(self.failed))  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        settings = [{"name": name, "ok": r is not None and r.ok, "error": error,
                     "report": None if r is None else r.to_dict()}
                    for name, r, error in self.results]  # fmt: skip
        return {"ok": self.ok, "golden": self.golden, "port": self.port,
                "suite_version": self.suite_version, "precision": self.precision,
                "settings": settings}  # fmt: skip

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def read_suite_index(directory: Any) -> dict[str, Any]:
    """A sampler suite's ``suite.json``, checked: its format and version, and each setting's
    ``name`` and ``file`` (a file name in the directory) and ``setting``. CheckpointError
    naming what is wrong."""
    path = pathlib.Path(directory) / SUITE_INDEX
    try:
        if path.stat().st_size > MAX_INDEX_BYTES:
            raise CheckpointError(f"{path}: {path.stat().st_size} bytes, not a suite index")
        index = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the suite index: {e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not JSON: {e}") from None
    if not isinstance(index, dict) or index.get("format") != SUITE_FORMAT:
        raise CheckpointError(
            f"{path}: not a sampler suite index (format "
            f"{index.get('format') if isinstance(index, dict) else None!r})"
        )
    version = index.get("suite_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > SUITE_VERSION:
        raise CheckpointError(f"{path}: suite_version {version!r}; this gpt2np reads up to "
                              f"{SUITE_VERSION}")  # fmt: skip
    settings = index.get("settings")
    if not isinstance(settings, list) or not settings:
        raise CheckpointError(f"{path}: settings must be a non-empty list")
    names = set()
    for i, entry in enumerate(settings):
        ok = isinstance(entry, dict) and all(
            isinstance(entry.get(k), str) for k in ("name", "file")
        )
        if not ok or not isinstance(entry.get("setting"), dict):
            raise CheckpointError(f"{path}: settings[{i}] needs a name, a file and a setting")
        name, file = entry["name"], entry["file"]
        if pathlib.PurePath(file).name != file or file in ("", ".", ".."):
            raise CheckpointError(f"{path}: settings[{i}] file {file!r} is not a file name in "
                                  "the suite's directory")  # fmt: skip
        if name in names or not name or "/" in name or name in (".", ".."):
            raise CheckpointError(f"{path}: settings[{i}] name {name!r} is empty, repeated or "
                                  "not a file name")  # fmt: skip
        names.add(name)
    return index


def compare_sampler_suite(
    golden: Any,
    port: Any,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    *,
    precision: Optional[str] = None,
) -> SuiteReport:
    """Compare a port's outputs with every setting of a sampler suite.

    golden: the suite's directory (``suite.json`` and one ``NAME.npz`` per setting). port: a
    directory holding, for each setting NAME, the port's output as ``NAME/`` (a directory of
    ``NAME.npy`` files) or ``NAME.npz``. A setting whose output is missing or unreadable is a
    failure of that setting (the others are still compared); a damaged suite is a
    CheckpointError."""
    precision, rtol, atol = tolerance(precision, rtol, atol)
    index = read_suite_index(golden)
    port_dir = pathlib.Path(port)
    if not port_dir.is_dir():
        raise ValueError(
            f"{port}: a sampler suite is compared with a directory holding the port's "
            "output for each setting NAME, as NAME/ (NAME.npy files) or NAME.npz"
        )
    results: list[tuple[str, Optional[SamplerReport], str]] = []
    for entry in index["settings"]:
        name, gold = entry["name"], pathlib.Path(golden) / entry["file"]
        if not gold.is_file():
            raise CheckpointError(f"{gold}: the suite's {name!r} golden is absent")
        candidates = [port_dir / name, port_dir / f"{name}.npz"]
        found = [c for c in candidates if c.exists()]
        if not found:
            results.append((name, None, f"the port wrote neither {name}/ nor {name}.npz in "
                                        f"{port_dir}"))  # fmt: skip
            continue
        try:
            report = compare_sampler(gold, found[0], rtol, atol, precision=precision)
        except ValueError as e:  # the port's output: its shapes, its names
            results.append((name, None, str(e)))
            continue
        except CheckpointError as e:  # the golden's errors start with its path, the port's
            if str(e).startswith(f"{gold}:"):  # with the port's
                raise
            results.append((name, None, str(e)))
            continue
        if report.steps and dataclasses.asdict(_setting_of(gold)) != entry["setting"]:
            raise CheckpointError(f"{gold}: its setting is not the one suite.json gives for "
                                  f"{name!r}")  # fmt: skip
        results.append((name, report, ""))
    return SuiteReport(str(golden), str(port), index["suite_version"], results, precision)


def _setting_of(path: pathlib.Path) -> Setting:
    with open_source(path, str(path)) as g:
        return Setting(**(g.manifest or {})["setting"])
