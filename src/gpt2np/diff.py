"""Diff a port's tensors against a golden file, in forward order, and name the first divergence.

An element passes when ``|port - golden| <= atol + rtol * |golden|`` (numpy's ``isclose``
convention, with the golden file as the reference); NaN passes only where the golden value is
NaN too. A tensor diverges when any element fails, or when its shape differs. Missing tensors
(a port rarely dumps everything) and extra ones are reported; with ``strict`` a missing tensor
fails the comparison as well. See docs/golden-files.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from .golden import GoldenFile, PathLike

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "CompareReport", "TensorDiff", "compare"]

#: Defaults that a correct float32 port passes against a float32 or float64 golden file: float32
#: carries about 7 significant digits, and sums over thousands of terms in a different order
#: lose one or two of them.
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-4


@dataclasses.dataclass
class TensorDiff:
    """One golden tensor's comparison. ``status``: ok, diverged, shape, dtype or missing.

    max_abs = max |port - golden|; max_rel = max |port - golden| / |golden| over elements where
    golden ≠ 0; tol_ratio = max |port - golden| / (atol + rtol·|golden|), ≤ 1 when within
    tolerance. ``worst`` is the index of the element with the largest tol_ratio, and
    ``golden_value`` / ``port_value`` are the two values there.
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

    @property
    def diverged(self) -> bool:
        return self.status in ("diverged", "shape", "dtype")


@dataclasses.dataclass
class CompareReport:
    """The result of :func:`compare`; ``str(report)`` is the table the CLI prints."""

    golden: str
    port: str
    rtol: float
    atol: float
    strict: bool
    rows: list[TensorDiff]
    extra: list[str]
    notes: list[str]

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
    def compared(self) -> int:
        return sum(r.status != "missing" for r in self.rows)

    @property
    def ok(self) -> bool:
        """No tensor diverges, at least one was compared, and (if strict) none is missing."""
        return not self.diverged and self.compared > 0 and not (self.strict and self.missing)

    def __str__(self) -> str:
        return _format(self)

    def __repr__(self) -> str:
        return (
            f"CompareReport(ok={self.ok}, compared={self.compared}, "
            f"diverged={len(self.diverged)}, first_divergence={self.first_divergence!r})"
        )


def compare(
    golden_path: PathLike,
    port_path: PathLike,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    strict: bool = False,
) -> CompareReport:
    """Compare every tensor of the golden file with the port's, in the golden file's order.

    Either path may be an ``.npz`` or a directory of ``NAME.npy`` files. Unreadable files raise
    :class:`gpt2np.CheckpointError`; everything else (missing, extra, misshapen tensors) ends up
    in the report. Tensors are read one pair at a time, so memory stays at one tensor's worth.
    """
    if not (rtol >= 0 and atol >= 0):  # also rejects NaN
        raise ValueError(f"rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    with GoldenFile(golden_path) as golden, GoldenFile(port_path) as port:
        rows = [
            _compare_one(name, golden[name], port[name] if name in port.names else None, rtol, atol)
            for name in golden.names
        ]
        extra = [n for n in port.names if n not in golden.names]
        notes = _manifest_notes(golden.manifest, port.manifest)
    return CompareReport(str(golden_path), str(port_path), rtol, atol, strict, rows, extra, notes)


def _compare_one(
    name: str, g: np.ndarray, p: Optional[np.ndarray], rtol: float, atol: float
) -> TensorDiff:
    if p is None:
        return TensorDiff(name, "missing", g.shape)
    if p.shape != g.shape:
        return TensorDiff(name, "shape", g.shape, p.shape)
    if not (_numeric(g) and _numeric(p)):
        return TensorDiff(name, "dtype", g.shape, p.shape)
    if g.size == 0:
        return TensorDiff(name, "ok", g.shape, p.shape, 0.0, 0.0, 0.0)
    g64, p64 = g.astype(np.float64), p.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # atol = rtol = 0 is legal
        diff = np.abs(p64 - g64)
        same = (g64 == p64) | (np.isnan(g64) & np.isnan(p64))  # equal infinities, shared NaNs
        diff[same] = 0.0
        ratio = diff / (atol + rtol * np.abs(g64))
        ratio[same] = 0.0
        ratio[np.isnan(ratio)] = np.inf  # a NaN the golden file does not have
        nonzero = g64 != 0
        max_rel = float(np.max(diff[nonzero] / np.abs(g64[nonzero]))) if nonzero.any() else 0.0
    n_bad = int(np.count_nonzero(ratio > 1.0))
    worst = np.unravel_index(int(np.argmax(ratio)), g.shape)
    return TensorDiff(
        name,
        "diverged" if n_bad else "ok",
        g.shape,
        p.shape,
        max_abs=float(np.max(diff)),
        max_rel=max_rel,
        tol_ratio=float(ratio[worst]),
        n_bad=n_bad,
        worst=tuple(int(i) for i in worst),
        golden_value=float(g64[worst]),
        port_value=float(p64[worst]),
    )


def _numeric(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_


def _manifest_notes(golden: Optional[dict], port: Optional[dict]) -> list[str]:
    """Lines saying what the two files were made from, and where their inputs disagree."""
    notes = []
    if golden is not None:
        ids = np.asarray(golden.get("ids", []))
        notes.append(
            f"golden: model {golden.get('model')}, {golden.get('dtype')}, ids {list(ids.shape)}, "
            f"gpt2np {golden.get('gpt2np_version')}, weights sha256 "
            f"{str(golden.get('weights_sha256'))[:16]}…"
        )
    if golden is not None and port is not None:
        for key in ("weights_sha256", "ids", "hparams"):
            if key in golden and key in port and golden[key] != port[key]:
                notes.append(f"WARNING: the two files' manifests have different {key}")
    return notes


def _format(report: CompareReport) -> str:
    lines = [
        f"golden {report.golden}  vs  port {report.port}",
        *report.notes,
        f"an element passes when |port - golden| <= {report.atol:g} + {report.rtol:g}·|golden|",
        "",
        f"{'tensor':<22} {'shape':<20} {'max abs':>9} {'max rel':>9} {'/tol':>8}  status",
    ]
    first = report.first_divergence
    for r in report.rows:
        shape = str(list(r.golden_shape)).replace(" ", "")
        if r.status in ("ok", "diverged"):
            stats = f"{r.max_abs:9.2e} {r.max_rel:9.2e} {r.tol_ratio:8.2g}"
            status = "ok" if r.status == "ok" else f"DIVERGES ({r.n_bad} elements)"
        else:
            stats = f"{'':9} {'':9} {'':8}"
            status = {
                "missing": "missing in port",
                "shape": "SHAPE differs: port " + str(list(r.port_shape or ())).replace(" ", ""),
                "dtype": "DTYPE not numeric",
            }[r.status]
        mark = "  <- first divergence" if r.name == first else ""
        lines.append(f"{r.name:<22} {shape:<20} {stats}  {status}{mark}")
    if report.missing:
        lines.append(f"\nmissing in port ({len(report.missing)}): {', '.join(report.missing)}")
    if report.extra:
        lines.append(
            f"extra in port, not compared ({len(report.extra)}): {', '.join(report.extra)}"
        )
    lines.append("")
    lines.append(_summary(report))
    return "\n".join(lines)


def _summary(report: CompareReport) -> str:
    n = report.compared
    if report.ok:
        return f"OK: {n} tensors within tolerance" + (
            f", {len(report.missing)} missing" if report.missing else ""
        )
    if not report.diverged:
        if n == 0:
            return "FAIL: no tensor of the golden file is in the port's file"
        return f"FAIL (strict): {len(report.missing)} tensors missing in port"
    d = report.diverged[0]
    where = ""
    if d.worst is not None:
        where = f" (worst element {list(d.worst)}: "
        where += f"golden {d.golden_value:.6g}, port {d.port_value:.6g})"
    return f"FAIL: {len(report.diverged)} of {n} tensors diverge; the first is {d.name}{where}"
