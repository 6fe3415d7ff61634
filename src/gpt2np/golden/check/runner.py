"""``gpt2np check-port``'s runner: write each case of a suite, run the port's program on it,
compare what it wrote with the golden, and report one row per case.

The file protocol (docs/golden-files.md, "Checking a port"): for each case the runner makes a
directory CASE_DIR holding ``case.json`` (the kind, the suite and its version, the model's
files, the precision, the inputs) and the golden file, and an empty ``CASE_DIR/port/``; it runs
``COMMAND ARG... CASE_DIR`` (stdin empty, stdout and stderr to ``CASE_DIR/stdout.txt`` and
``stderr.txt``, in the caller's working directory and environment plus ``GPT2NP_CASE_DIR``),
and the port writes its outputs into ``CASE_DIR/port/``: ``NAME.npy`` per traced tensor
(forward), ``port.json`` (tokenizer), ``probs.npy`` and ``chosen.npy`` (sampler). They are
compared with :func:`gpt2np.compare`, :func:`~gpt2np.golden.tokens_diff.compare_tokenizer` and
:func:`~gpt2np.golden.sampler_diff.compare_sampler` at the given precision.

A port that exits non-zero, is killed, runs past the time limit, writes nothing or writes
what cannot be read is a ``port error`` row naming that (with the tail of its stderr); a port
whose numbers differ is a ``FAIL`` row with the first divergence and the hint. Nothing a port
does raises here. The time limit is a safety net for a hung port, not a measurement.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
from collections.abc import Sequence
from typing import Any, Callable, Optional

from ...errors import CheckpointError
from ..diff import compare
from ..sampler import SUITE as SAMPLER_SUITE
from ..sampler import dump_suite_entry
from ..sampler_diff import compare_sampler
from ..tokens import dump_tokenizer
from ..tokens_diff import compare_tokenizer
from ..writer import dump
from .suite import SAMPLER_STEPS, SAMPLER_VOCAB, SUITE_VERSION, Case, suite_cases

__all__ = ["CASE_FORMAT", "CaseResult", "CheckReport", "check_port"]

CASE_FORMAT = "gpt2np-check-port-case"
PASS, FAIL, PORT_ERROR = "pass", "FAIL", "port error"
#: Lines of the port's stderr quoted in a port error row.
STDERR_TAIL = 5
#: The golden file of each kind, in the case directory.
GOLDEN_NAME = {"forward": "golden.npz", "tokenizer": "tokenizer.json", "sampler": "sampler.npz"}


@dataclasses.dataclass
class CaseResult:
    """One row: ``result`` is pass, FAIL (the port's numbers differ) or port error (it crashed,
    timed out, wrote nothing or wrote what cannot be read); ``divergence`` the first divergence
    or what went wrong, ``hint`` what it looks like; ``report`` the comparison's own report as
    a dict (None when there was nothing to compare)."""

    case: str
    kind: str
    result: str
    divergence: str = ""
    hint: str = ""
    case_dir: str = ""
    report: Optional[dict[str, Any]] = None

    @property
    def ok(self) -> bool:
        return self.result == PASS


@dataclasses.dataclass
class CheckReport:
    """Every case's row; ``ok`` when all pass. ``format()`` is the CLI's table, ``to_json()``
    the same for tools."""

    suite: str
    suite_version: int
    precision: str
    model: str
    command: list[str]
    results: list[CaseResult]
    work_dir: Optional[str] = None  # kept (--keep), else None

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def format(self) -> str:
        head = ("case", "result", "first divergence", "hint")
        rows = [(r.case, r.result, r.divergence or "-", r.hint or "-") for r in self.results]
        widths = [max(len(row[i]) for row in [head, *rows]) for i in range(3)]
        lines = [
            f"check-port: suite {self.suite} v{self.suite_version}, precision {self.precision}, "
            f"model {self.model}",
            f"port: {' '.join(self.command)} CASE_DIR",
            "",
        ]
        for row in [head, *rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[3])
        failed = [r for r in self.results if not r.ok]
        lines.append("")
        if not failed:
            lines.append(f"OK: all {len(self.results)} cases pass")
        else:
            lines.append(f"FAIL: {len(failed)} of {len(self.results)} cases fail: "
                         + ", ".join(r.case for r in failed))  # fmt: skip
            if self.work_dir:
                r = failed[0]
                lines.append(f"details: gpt2np compare {r.case_dir}/{GOLDEN_NAME[r.kind]} "
                             f"{r.case_dir}/port{'/port.json' if r.kind == 'tokenizer' else ''}"
                             f" --precision {self.precision}")  # fmt: skip
            else:
                lines.append("keep the case directories with --keep DIR to rerun one")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "suite": self.suite, "suite_version": self.suite_version,
            "precision": self.precision, "model": self.model, "command": self.command,
            "work_dir": self.work_dir,
            "cases": [dataclasses.asdict(r) for r in self.results],
        }  # fmt: skip

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, default=str)


def check_port(
    command: Sequence[str],
    model: Any,
    model_dir: pathlib.Path,
    work_dir: pathlib.Path,
    *,
    suite: str = "quick",
    precision: str = "float32",
    timeout: Optional[float] = 600.0,
    allow_missing: Optional[Sequence[str]] = None,
    model_name: Optional[str] = None,
    cases: Optional[Sequence[str]] = None,
    progress: Optional[Callable[[str], Any]] = None,
) -> CheckReport:
    """Run the port's ``command`` over every case of ``suite`` and compare its outputs.

    model: the GPT2 the goldens are traced from (float64 goldens of its weights); model_dir:
    the directory holding the same weights as HF's ``config.json`` + ``model.safetensors``,
    which the port is told to read; work_dir: an existing directory for the case directories.
    timeout: seconds a case may run before the port is killed (None: no limit).
    allow_missing: globs of golden tensors a forward port may leave out (as compare's).
    cases: run only the cases of these names (the suite's order kept).
    progress: called with one line before each case runs.
    """
    from ..diff.tolerance import tolerance

    precision = tolerance(precision, None, None)[0]  # ValueError for an unknown one
    if not command:
        raise ValueError("check-port needs the port's command")
    hp = model.hparams
    chosen = suite_cases(suite, hp.n_vocab, hp.n_ctx)
    if cases is not None:
        unknown = sorted(set(cases) - {c.name for c in chosen})
        if unknown:
            raise ValueError(f"no case {', '.join(unknown)} in the {suite} suite; its cases: "
                             + ", ".join(c.name for c in chosen))  # fmt: skip
        chosen = [c for c in chosen if c.name in set(cases)]
    model_dir = pathlib.Path(model_dir).resolve()
    results = []
    for i, case in enumerate(chosen):
        case_dir = pathlib.Path(work_dir).resolve() / f"{i + 1:02d}-{case.name}"
        case_dir.mkdir()
        (case_dir / "port").mkdir()
        if progress is not None:
            progress(f"case {i + 1}/{len(chosen)}: {case.name} ({case.about})")
        _write_case(case, case_dir, model, model_dir, suite, precision, model_name)
        failure = _run(list(command), case_dir, timeout)
        if failure is not None:
            result = CaseResult(case.name, case.kind, PORT_ERROR, *failure)
        else:
            result = _compare(case, case_dir, precision, allow_missing)
        result.case_dir = str(case_dir)
        results.append(result)
    return CheckReport(suite, SUITE_VERSION, precision, model_name or str(model_dir),
                       list(command), results)  # fmt: skip


# -- writing a case ------------------------------------------------------------------------------


def _write_case(
    case: Case,
    case_dir: pathlib.Path,
    model: Any,
    model_dir: pathlib.Path,
    suite: str,
    precision: str,
    model_name: Optional[str],
) -> dict[str, Any]:
    """The golden file and case.json of one case; returns case.json's content."""
    golden = case_dir / GOLDEN_NAME[case.kind]
    spec: dict[str, Any] = {
        "format": CASE_FORMAT,
        "suite": suite,
        "suite_version": SUITE_VERSION,
        "case": case.name,
        "kind": case.kind,
        "about": case.about,
        "precision": precision,
        "golden": str(golden),
        "out": str(case_dir / "port"),
    }
    if case.kind == "forward":
        hp = model.hparams
        spec["model"] = {
            "name": model_name,
            "dir": str(model_dir),
            "config": str(model_dir / "config.json"),
            "safetensors": str(model_dir / "model.safetensors"),
            "hparams": {"n_vocab": hp.n_vocab, "n_ctx": hp.n_ctx, "n_embd": hp.n_embd,
                        "n_head": hp.n_head, "n_layer": hp.n_layer},
        }  # fmt: skip
        m = dump(model, case.rows, golden, dtype="float64", prefix=case.prefix or None,
                 model_name=model_name)  # fmt: skip
        spec.update({k: m[k] for k in ("ids", "prefix_ids", "pad", "T_past")})
        spec["weights_sha256"] = m["weights_sha256"]
    elif case.kind == "tokenizer":
        from ...tokenizer import Tokenizer

        tokenizer = Tokenizer()
        encoder, merges = tokenizer.files
        dump_tokenizer(golden, tokenizer)
        spec["vocabulary"] = {"encoder": str(encoder), "merges": str(merges)}
    else:
        entry = next(e for e in SAMPLER_SUITE if e.name == case.sampler)
        m = dump_suite_entry(golden, entry, steps=SAMPLER_STEPS, n_vocab=SAMPLER_VOCAB)
        spec.update({k: m[k] for k in ("setting", "steps", "n_vocab", "prompt_ids")})
    (case_dir / "case.json").write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return spec


# -- running the port ----------------------------------------------------------------------------


def _run(
    command: list[str], case_dir: pathlib.Path, timeout: Optional[float]
) -> Optional[tuple[str, str]]:
    """Run the port on one case: None if it exited 0, else (what happened, its stderr's tail)."""
    env = {**os.environ, "GPT2NP_CASE_DIR": str(case_dir)}
    with open(case_dir / "stdout.txt", "wb") as out, open(case_dir / "stderr.txt", "wb") as err:
        try:
            proc = subprocess.Popen(
                [*command, str(case_dir)], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env=env, start_new_session=True,
            )  # fmt: skip
        except OSError as e:  # not found, not executable
            return f"could not start {command[0]!r}: {e.strerror or e}", ""
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return f"timed out after {timeout:g} s (the --timeout limit): killed", _tail(case_dir)
        except BaseException:  # Ctrl-C: no port left running behind us
            _kill(proc)
            raise
    if code == 0:
        return None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}", _tail(case_dir)
    return f"exit status {code}", _tail(case_dir)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the port and whatever it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, AttributeError):
        proc.kill()
    proc.wait()


def _tail(case_dir: pathlib.Path) -> str:
    """The last lines of the port's stderr, joined by ' | ' (at most 600 characters)."""
    try:
        with open(case_dir / "stderr.txt", "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()][-STDERR_TAIL:]
    tail = " | ".join(lines)
    return ("stderr: " + (tail if len(tail) <= 600 else "…" + tail[-600:])) if tail else ""


# -- comparing -----------------------------------------------------------------------------------


def _compare(
    case: Case, case_dir: pathlib.Path, precision: str, allow_missing: Optional[Sequence[str]]
) -> CaseResult:
    golden, out = case_dir / GOLDEN_NAME[case.kind], case_dir / "port"
    port = out / "port.json" if case.kind == "tokenizer" else out
    if not port.exists() or (port.is_dir() and not any(port.iterdir())):
        want = {"forward": "NAME.npy files", "tokenizer": "port.json",
                "sampler": "probs.npy and chosen.npy"}[case.kind]  # fmt: skip
        return CaseResult(case.name, case.kind, PORT_ERROR, "exit status 0 but wrote nothing",
                          f"expected {want} in {out}")  # fmt: skip
    try:
        if case.kind == "forward":
            return _forward(case, compare(golden, port, precision=precision,
                                          allow_missing=allow_missing))  # fmt: skip
        if case.kind == "tokenizer":
            return _tokenizer(case, compare_tokenizer(golden, port))
        return _sampler(case, compare_sampler(golden, port, precision=precision))
    except (CheckpointError, ValueError, TypeError, OSError) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        return CaseResult(case.name, case.kind, PORT_ERROR, "unreadable output", message)


def _forward(case: Case, report: Any) -> CaseResult:
    d = report.to_dict()
    if report.ok:
        return CaseResult(case.name, case.kind, PASS, report=d)
    hint = report.hints[0] if report.hints else (report.first_nonfinite or "")
    if report.mismatches:
        return CaseResult(case.name, case.kind, FAIL, "MISMATCH: " + report.mismatches[0], hint,
                          report=d)  # fmt: skip
    first = report.first_divergence
    if first is not None:
        row = next(r for r in report.rows if r.name == first)
        what = {"shape": "SHAPE", "dtype": "DTYPE"}.get(row.status)
        text = f"{first} ({what}: {row.note})" if what else first
        if report.born and report.born != first:
            text += f", born at {report.born}"
        return CaseResult(case.name, case.kind, FAIL, text, hint, report=d)
    missing = report.missing_required
    if missing:
        names = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        return CaseResult(case.name, case.kind, FAIL, f"missing in port: {names}",
                          hint or "write every traced tensor, or pass --allow-missing GLOB",
                          report=d)  # fmt: skip
    return CaseResult(case.name, case.kind, FAIL, str(report).splitlines()[-1], hint, report=d)


def _tokenizer(case: Case, report: Any) -> CaseResult:
    d = report.to_dict()
    if report.ok:
        return CaseResult(case.name, case.kind, PASS, report=d)
    f = report.first
    if f is None:
        return CaseResult(case.name, case.kind, FAIL, "no case to compare", report=d)
    text = f"case {f.case} ({f.name}), {f.kind}"
    return CaseResult(case.name, case.kind, FAIL, text, f.message, report=d)


def _sampler(case: Case, report: Any) -> CaseResult:
    d = report.to_dict()
    if report.ok:
        return CaseResult(case.name, case.kind, PASS, report=d)
    if report.first is None:
        return CaseResult(case.name, case.kind, FAIL, "no step to compare", report=d)
    step, stage, message = report.first
    hint = report.hints[0] if report.hints else message
    return CaseResult(case.name, case.kind, FAIL, f"step {step}, {stage}", hint, report=d)
