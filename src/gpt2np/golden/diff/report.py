"""The result of a comparison, as a table for people and as JSON for programs."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import textwrap
from collections.abc import Sequence
from typing import Any, Optional

__all__ = ["CompareReport", "TensorDiff"]

_FAILING = ("diverged", "shape", "dtype")
_DEFAULT_ROWS = 10  # failing rows the default view prints before summing up the rest


@dataclasses.dataclass
class TensorDiff:
    """One golden tensor's comparison. ``status``: ok, diverged, shape, dtype or missing.

    Over the compared (visible) elements: max_abs = max |port - golden|; max_rel =
    max |port - golden| / |golden| where golden ≠ 0; tol_ratio = max |port - golden| /
    tolerance, ≤ 1 when within it (see :mod:`gpt2np.golden.diff.stats`; NaN in the port where
    the golden has a number makes max_abs NaN and tol_ratio inf); ``growth``: tol_ratio against
    the largest tol_ratio of the tensors before it (a correct port grows slowly, a bug jumps
    where it is born). ``worst`` is the index of the element with the largest tol_ratio,
    ``golden_value`` / ``port_value`` the two values there; ``n_nan`` / ``n_inf`` count the
    port's NaN and infinite values among the compared elements (where the golden differs),
    ``hidden_nan`` / ``hidden_inf`` those in the padding, which is not compared;
    ``first_nonfinite`` is the index of the first of either. ``required``: whether a missing
    tensor fails the comparison. ``note`` says what a shape or dtype failure is, ``hints`` what
    the port's tensor equals instead.
    """

    name: str
    status: str
    golden_shape: tuple[int, ...]
    port_shape: Optional[tuple[int, ...]] = None
    max_abs: float = math.nan
    max_rel: float = math.nan
    tol_ratio: float = math.nan
    n_bad: int = 0
    worst: Optional[tuple[int, ...]] = None
    golden_value: Optional[float] = None
    port_value: Optional[float] = None
    n_compared: int = 0
    growth: float = math.nan
    golden_dtype: str = ""
    port_dtype: str = ""
    note: str = ""
    hints: list[str] = dataclasses.field(default_factory=list)
    n_nan: int = 0
    n_inf: int = 0
    hidden_nan: int = 0
    hidden_inf: int = 0
    first_nonfinite: Optional[tuple[int, ...]] = None
    required: bool = True

    @property
    def diverged(self) -> bool:
        return self.status in _FAILING

    @property
    def nonfinite(self) -> bool:
        """The port holds NaN or ±inf here where the golden does not (compared or not)."""
        return bool(self.n_nan or self.n_inf or self.hidden_nan or self.hidden_inf)


@dataclasses.dataclass
class CompareReport:
    """The result of :func:`gpt2np.compare`. ``str(report)`` is the CLI's default view,
    ``report.format("all")`` / ``("failures")`` the others, ``report.to_dict()`` the JSON."""

    golden: str
    port: str
    rtol: float
    atol: float
    strict: bool
    rows: list[TensorDiff]
    extra: list[str]
    notes: list[str]
    precision: str = "float32"
    mismatches: list[str] = dataclasses.field(default_factory=list)
    allowed: list[str] = dataclasses.field(default_factory=list)
    born: Optional[str] = None
    #: extra port name -> the missing golden name it looks like (``h0_ln_1`` -> ``h0.ln_1``)
    renames: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the ``only`` and ``allow_missing`` globs the comparison was given
    only: list[str] = dataclasses.field(default_factory=list)
    allow_missing: list[str] = dataclasses.field(default_factory=list)

    @property
    def diverged(self) -> list[TensorDiff]:
        return [r for r in self.rows if r.diverged]

    @property
    def first_divergence(self) -> Optional[str]:
        """The name of the first tensor, in forward order, that diverges (None if none does)."""
        return self.diverged[0].name if self.diverged else None

    @property
    def missing(self) -> list[str]:
        return [r.name for r in self.rows if r.status == "missing"]

    @property
    def missing_required(self) -> list[str]:
        """Missing tensors that fail the comparison (not inputs, not allowed to be missing)."""
        return [r.name for r in self.rows if r.status == "missing" and r.required]

    @property
    def first_nonfinite(self) -> Optional[str]:
        """Where a NaN or infinity first appears in the port, in forward order, compared or in
        the padding: a sentence, or None."""
        row = next((r for r in self.rows if r.nonfinite), None)
        return None if row is None else _nonfinite_text(row)

    @property
    def compared(self) -> int:
        return sum(r.status != "missing" for r in self.rows)

    @property
    def hints(self) -> list[str]:
        return [h for r in self.rows for h in r.hints]

    @property
    def ok(self) -> bool:
        """No tensor diverges, at least one was compared, the manifests agree (or their
        differences were allowed) and no tensor is missing that the port was expected to write
        (every golden tensor but the inputs, unless ``only`` or ``allow_missing`` said
        otherwise; with ``strict`` the inputs too)."""
        return (
            not self.diverged
            and self.compared > 0
            and not self.missing_required
            and not self.mismatches
        )

    def __str__(self) -> str:
        return self.format("default")

    def __repr__(self) -> str:
        return (
            f"CompareReport(ok={self.ok}, compared={self.compared}, "
            f"diverged={len(self.diverged)}, first_divergence={self.first_divergence!r}, "
            f"born={self.born!r})"
        )

    def format(self, rows: str = "default") -> str:
        """The report as text. rows: "default" (failing rows, the first few), "failures"
        (every failing row), "all" (every row)."""
        if rows not in ("default", "failures", "all"):
            raise ValueError(f"rows must be 'default', 'failures' or 'all', got {rows!r}")
        return _format(self, rows)

    def to_dict(self) -> dict[str, Any]:
        """Everything in the report, JSON-ready (non-finite numbers as "inf", "-inf", "nan")."""
        d = {
            "ok": self.ok,
            "golden": self.golden,
            "port": self.port,
            "precision": self.precision,
            "rtol": self.rtol,
            "atol": self.atol,
            "strict": self.strict,
            "compared": self.compared,
            "first_divergence": self.first_divergence,
            "born": self.born,
            "missing": self.missing,
            "missing_required": self.missing_required,
            "extra": self.extra,
            "renames": self.renames,
            "only": self.only,
            "allow_missing": self.allow_missing,
            "first_nonfinite": self.first_nonfinite,
            "mismatches": self.mismatches,
            "allowed_mismatches": self.allowed,
            "notes": self.notes,
            "hints": self.hints,
            "summary": _summary(self),
            "rows": [dataclasses.asdict(r) for r in self.rows],
        }
        jsonable: dict[str, Any] = _jsonable(d)
        return jsonable

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _format(report: CompareReport, which: str) -> str:
    lines = [f"golden {report.golden}  vs  port {report.port}"]
    for note in report.notes:
        lines += textwrap.wrap(note, 100, subsequent_indent="  ", break_on_hyphens=False)
    lines += [f"MISMATCH: {m}" for m in report.mismatches]
    lines.append(
        f"tolerance ({report.precision}): |port - golden| <= {report.atol:g} + "
        f"{report.rtol:g}·|golden| (masked scores and padding skipped)"
    )
    if any(r.name.endswith("attn.probs") and r.status != "missing" for r in report.rows):
        lines.append(f"  and for attn.probs, {report.atol:g} × the row's largest probability")
    shown = _rows_to_show(report, which)
    if shown:
        lines += ["", f"{'tensor':<22} {'shape':<18} {'max abs':>9} {'max rel':>9} "
                      f"{'/tol':>8} {'growth':>9}  status"]  # fmt: skip
        for r in shown:
            lines.append(_row(report, r) if r is not None else "…")
        hidden = sum(r.diverged for r in report.rows) - sum(
            r is not None and r.diverged for r in shown
        )
        if hidden:
            lines.append(f"… and {hidden} more diverging tensors (--only-failures lists them)")
    for r in report.rows:
        lines += [f"hint: {h}" for h in r.hints]
    if report.renames:
        lines.append(_renames_text(report))
    if report.first_nonfinite:
        lines.append(f"non-finite: {report.first_nonfinite}")
    lines += _missing_lines(report)
    if report.extra:
        lines += _wrapped(f"extra in port, not compared ({len(report.extra)}): ", report.extra)
    lines += ["", _summary(report)]
    return "\n".join(lines)


def _missing_lines(report: CompareReport) -> list[str]:
    failing = report.missing_required
    allowed = [n for n in report.missing if n not in failing]
    lines = []
    if failing:
        lines += _wrapped(f"missing in port ({len(failing)}): ", failing)
    if allowed:
        lines += _wrapped(f"missing in port, allowed ({len(allowed)}): ", allowed)
    return lines


def _renames_text(report: CompareReport) -> str:
    pairs = list(report.renames.items())
    shown = ", ".join(f"{extra} → {meant}" for extra, meant in pairs[:3])
    n, meant = len(pairs), pairs[0][1]
    which = "the port tensor looks" if n == 1 else f"{n} port tensors look"
    return (
        f"hint: {which} misnamed ({shown}{', …' if n > 3 else ''}): name each file after the "
        f"golden tensor it holds ({meant}.npy)"
    )


def _nonfinite_text(row: TensorDiff) -> str:
    nan = row.n_nan + row.hidden_nan
    kind = "NaN" if nan else "inf"
    count = nan if nan else row.n_inf + row.hidden_inf
    where = list(row.first_nonfinite or ())
    if row.n_nan + row.n_inf == 0:  # only in the padding
        text = f"{kind} in the padded positions of {row.name} ({count:,}, the first at {where}"
        text += "), which are not compared"
        if kind == "NaN" and row.name.endswith("attn.probs"):
            text += (
                ": a −inf mask? A padded query row has no key to attend to, and a softmax over "
                "keys all masked with −inf is 0/0; mask with a large finite negative number "
                "(−1e10, or the dtype's lowest) or zero those rows, before the NaN reaches real "
                "rows through the next layer's keys and values"
            )
        return text
    return f"{kind} first appears in {row.name} ({count:,} values, the first at {where})"


def _rows_to_show(report: CompareReport, which: str) -> Sequence[Optional[TensorDiff]]:
    if which == "all":
        return [r for r in report.rows if r.status != "missing"]
    failing = [r for r in report.rows if r.diverged]
    if which == "failures":
        return failing
    if not failing:
        return []
    shown: list[Optional[TensorDiff]] = []
    compared = [r for r in report.rows if r.status != "missing"]
    first = compared.index(failing[0])
    born = next((i for i, r in enumerate(compared) if r.name == report.born), first)
    if born < first:  # where the error is born, and (elided) the way to the first divergence
        shown += compared[max(born - 1, 0) : born + 1]
        if first > born + 1:
            shown.append(None)
    elif first > 0:
        shown.append(compared[first - 1])  # the last tensor that still agrees
    shown += failing[:_DEFAULT_ROWS]
    return shown


def _row(report: CompareReport, r: TensorDiff) -> str:
    shape = _shape(r.golden_shape)
    if r.status in ("ok", "diverged"):
        growth = "" if math.isnan(r.growth) else f"×{r.growth:.3g}"
        stats = f"{r.max_abs:9.2e} {r.max_rel:9.2e} {r.tol_ratio:8.3g} {growth:>9}"
        status = "ok" if r.status == "ok" else f"DIVERGES ({r.n_bad:,} of {r.n_compared:,}"
        counts = [f"{n:,} {what}" for n, what in ((r.n_nan, "NaN"), (r.n_inf, "inf")) if n]
        if r.status != "ok":
            status += "; " + ", ".join(counts) + ")" if counts else ")"
        elif r.hidden_nan or r.hidden_inf:
            status += f" (NaN/inf in {r.hidden_nan + r.hidden_inf:,} padded positions)"
    else:
        stats = f"{'':9} {'':9} {'':8} {'':9}"
        status = {"shape": "SHAPE: ", "dtype": "DTYPE: "}[r.status] + r.note
    marks = []
    if r.name == report.first_divergence:
        marks.append("first divergence")
    if r.name == report.born and report.diverged:
        marks.append("error born here")
    mark = f"  <- {', '.join(marks)}" if marks else ""
    return f"{r.name:<22} {shape:<18} {stats}  {status}{mark}"


def _shape(shape: Optional[tuple[int, ...]]) -> str:
    return str(list(shape or ())).replace(" ", "")


def _wrapped(lead: str, names: list[str]) -> list[str]:
    """Names grouped by pattern (``h*.attn.q (12)``), wrapped to 100 columns."""
    groups: dict[str, int] = {}
    for name in names:
        key = re.sub(r"^h\d+(?=[._])", "h*", name)
        groups[key] = groups.get(key, 0) + 1
    parts = [f"{k} ({n})" if n > 1 else k for k, n in groups.items()]
    return textwrap.wrap(lead + ", ".join(parts), 100, subsequent_indent="  ")


def _digits(g: float, p: float) -> tuple[str, str]:
    """The two values with enough significant digits to show their difference to two digits."""
    d = 6
    scale, diff = max(abs(g), abs(p)), abs(g - p)
    if math.isfinite(scale) and diff > 0:
        d = min(max(d, math.ceil(math.log10(scale / diff)) + 2), 17)
    return f"{g:.{d}g}", f"{p:.{d}g}"


def _summary(report: CompareReport) -> str:
    n = report.compared
    if report.ok:
        worst = max(
            (r for r in report.rows if r.status == "ok" and not math.isnan(r.tol_ratio)),
            key=lambda r: r.tol_ratio,
            default=None,
        )
        text = f"OK: {n} tensor{'s' if n != 1 else ''} within tolerance"
        if worst is not None and worst.tol_ratio > 0:
            text += f" (the closest: {worst.name} at {worst.tol_ratio:.2g} of it)"
        return text + (f", {len(report.missing)} not in the port" if report.missing else "")
    if not report.diverged:
        if report.mismatches:
            return f"FAIL: the manifests differ ({len(report.mismatches)}); see MISMATCH above"
        return _missing_summary(report)
    d = report.diverged[0]
    text = f"FAIL: {len(report.diverged)} of {n} tensors diverge; the first is {d.name}"
    if d.worst is not None and d.golden_value is not None and d.port_value is not None:
        g, p = _digits(d.golden_value, d.port_value)
        text += f" (worst element {list(d.worst)}: golden {g}, port {p})"
    elif d.note:
        text += f" ({d.note})"
    if report.born and report.born != d.name:
        text += f"; the error is born at {report.born}"
    upstream = next((r for r in report.rows if r.nonfinite), None)
    if upstream is not None and report.rows.index(upstream) <= report.rows.index(d):
        where = " (in the padding)" if not (upstream.n_nan or upstream.n_inf) else ""
        kind = "NaN" if upstream.n_nan or upstream.hidden_nan else "inf"
        text += f"; {kind} first appears in {upstream.name}{where}"
    if report.missing_required:
        text += f"; {len(report.missing_required)} missing"
    return text


def _missing_summary(report: CompareReport) -> str:
    missing = report.missing_required
    if report.compared == 0:
        text = "FAIL: no tensor of the golden file is in the port's file"
        return text + (" (see the hint on names)" if report.renames else "")
    text = f"FAIL: {len(missing)} tensor{'s' if len(missing) != 1 else ''} missing in port"
    renamed = sum(meant in missing for meant in report.renames.values())
    if renamed:
        return text + f", {renamed} of them under other names (see the hint)"
    return text + " (a port that writes fewer: --only GLOB, or --allow-missing GLOB)"
