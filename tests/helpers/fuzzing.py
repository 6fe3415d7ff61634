"""A mutation fuzzer for the files gpt2np reads: seeded damage to the tiny fixtures, each case
run in a worker process with a memory cap and a timeout.

Each *target* names a fixture directory, the files of it to damage, and a check that loads the
damaged copy and judges the outcome. A case is (target, seed): the seed picks the file, the
mutation and its place, so any failure is reproduced by

    python tests/helpers/fuzzing.py TARGET SEED        # prints the mutation and the outcome

The verdict of a case is one of

* ``ok``: the result is right (the weights are exactly the fixture's, for a loader), or the
  input was refused with one of the target's documented error classes (CheckpointError);
* a failure: any other exception (the class and message are kept), wrong weights, a hang
  (no answer within the case timeout: the worker is killed), a crash or a MemoryError (the
  worker's address space is capped with ``resource.setrlimit``).

A worker runs many cases in turn (``python tests/helpers/fuzzing.py --worker DIR``, reading one
JSON case a line and answering one JSON verdict a line); :func:`run` keeps one worker busy,
replaces it when it hangs or dies, and stops at a time budget. Each worker writes only inside its
own directory (its TMPDIR too), which the runner removes when the worker ends.

Adding a target (a golden file for ``gpt2np compare``, say): decorate a check function with
``@target(name, fixture, files)``. ``fixture`` is a directory to copy (or a function making the
case's directory), ``files`` the relative paths to damage (a glob pattern is allowed) or a
callable listing them once the case's directory exists (after ``prepare``); the check gets the
case's directory and raises :class:`Wrong` for a wrong result; an exception of a class in
``errors`` counts as a clear refusal. ``tests/test_fuzz.py`` runs every registered target.

A target whose file is a *plan* (JSON describing what a test server does, say) rather than a
file gpt2np reads may ask for ``json_only`` mutations (a value replaced or a key dropped: the
plan stays readable) drawn from its own ``values``, and a smaller ``smoke`` count for the
default run when its cases are slow (tests/helpers/fuzz_servers.py has two such targets).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import random
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository: `tests.helpers.fuzzing` imports from here
FIXTURES = HERE.parent / "fixtures"
MEMORY_CAP = 2 << 30  # address space of a worker: NumPy, threads' stacks and the case
CASE_TIMEOUT = 20.0  # seconds; a tiny fixture loads in milliseconds


class Wrong(AssertionError):
    """The case finished without an error, but its result is wrong."""


@dataclasses.dataclass
class Target:
    name: str
    fixture: Callable[[pathlib.Path], None]
    files: Callable[[pathlib.Path], list[str]]
    check: Callable[[pathlib.Path], None]
    prepare: Callable[[pathlib.Path], None] | None = None
    errors: tuple[type[BaseException], ...] = ()
    json_files: tuple[str, ...] = (".json",)
    region: Callable[[pathlib.Path, bytes], tuple[int, int]] | None = None
    values: tuple[Any, ...] = ()
    json_only: bool = False
    smoke: int = 8


TARGETS: dict[str, Target] = {}


def target(
    name: str,
    fixture: str | pathlib.Path | Callable[[pathlib.Path], None],
    files: list[str] | Callable[[pathlib.Path], list[str]],
    prepare: Callable[[pathlib.Path], None] | None = None,
    errors: tuple[type[BaseException], ...] | None = None,
    region: Callable[[pathlib.Path, bytes], tuple[int, int]] | None = None,
    values: tuple[Any, ...] = (),
    json_only: bool = False,
    smoke: int = 8,
) -> Callable[[Callable[[pathlib.Path], None]], Callable[[pathlib.Path], None]]:
    """Register ``check`` as the fuzz target ``name`` (see the module docstring)."""

    def register(check: Callable[[pathlib.Path], None]) -> Callable[[pathlib.Path], None]:
        from gpt2np import CheckpointError

        if callable(fixture):
            make = fixture
        else:

            def make(case: pathlib.Path, src: pathlib.Path = pathlib.Path(fixture)) -> None:
                shutil.copytree(src, case, ignore=shutil.ignore_patterns("expected.npz"))

        if callable(files):
            listing = files
        else:

            def listing(case: pathlib.Path) -> list[str]:
                found = [p for pattern in files for p in glob.glob(str(case / pattern))]
                return sorted(os.path.relpath(p, case) for p in found if os.path.isfile(p))

        refusals = (CheckpointError,) if errors is None else errors
        TARGETS[name] = Target(name, make, listing, check, prepare, refusals, region=region,
                               values=values, json_only=json_only, smoke=smoke)  # fmt: skip
        return check

    return register


# --- mutations --------------------------------------------------------------------------------

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x20, 0x22, 0x5B, 0x7B, 0x30)
INTERESTING_INTS = (0, 1, -1, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1, 10**12)
INTERESTING_JSON: tuple[Any, ...] = (
    0, -1, 1, 2**64, 10**400, 1.5, -0.0, True, False, None, "", "x", [], {}, [1], {"": 0},
    "\udcff" * 0 + "é", 1e308, 2**63, -(2**63), 2**31, 10**30, [2**63], [10**30, 0],
)  # fmt: skip


def mutate(
    data: bytes,
    rng: random.Random,
    is_json: bool,
    lo: int = 0,
    hi: int | None = None,
    values: tuple[Any, ...] = (),
    json_only: bool = False,
):
    """A damaged copy of ``data`` and a description of the damage; in-place changes fall in
    bytes [lo, hi) (the whole file by default). ``values``: what a JSON value may become (by
    default INTERESTING_JSON); ``json_only``: only the mutations that keep the JSON readable."""
    hi = len(data) if hi is None else hi
    kinds = ["flip", "byte", "int", "truncate", "append", "delete", "duplicate", "insert"]
    if is_json:
        kinds += ["json value"] * 4 + ["json drop key"] * 2 + ["json deep", "json text number"]
    if json_only:
        kinds = ["json value"] * 3 + ["json drop key"]
    kind = rng.choice(kinds)
    if kind.startswith("json"):
        out = _mutate_json(data, rng, kind, values or INTERESTING_JSON)
        if out is not None:
            return out
        kind = "flip" if not json_only else "json value"
        out = _mutate_json(data, rng, kind, values or INTERESTING_JSON) if json_only else None
        if out is not None:
            return out
    if not data or lo >= hi:
        return data + bytes([rng.randrange(256)]), "append 1 byte to an empty file"
    at = rng.randrange(lo, hi)
    b = bytearray(data)
    if kind == "flip":
        bit = rng.randrange(8)
        b[at] ^= 1 << bit
        return bytes(b), f"flip bit {bit} of byte {at}"
    if kind == "byte":
        v = rng.choice((*INTERESTING_BYTES, rng.randrange(256)))
        b[at] = v
        return bytes(b), f"byte {at} := {v:#04x}"
    if kind == "int":
        width = rng.choice((1, 2, 4, 8))
        v = rng.choice(INTERESTING_INTS) & ((1 << 8 * width) - 1)
        chunk = v.to_bytes(width, rng.choice(("little", "big")))
        b[at : at + width] = chunk[: len(b) - at]
        return bytes(b), f"bytes {at}:{at + width} := {chunk.hex()}"
    if kind == "truncate":
        return data[:at], f"truncate to {at} bytes"
    if kind == "append":
        extra = rng.randbytes(rng.choice((1, 7, 64, 4096)))
        return data + extra, f"append {len(extra)} bytes"
    if kind == "delete":
        n = rng.choice((1, 2, 4, 16, 256))
        return data[:at] + data[at + n :], f"delete bytes {at}:{at + n}"
    if kind == "duplicate":
        n = rng.choice((1, 4, 16, 256))
        return data[:at] + data[at : at + n] + data[at:], f"duplicate bytes {at}:{at + n}"
    extra = rng.randbytes(rng.choice((1, 4, 16)))
    return data[:at] + extra + data[at:], f"insert {extra.hex()} at {at}"


def _mutate_json(data: bytes, rng: random.Random, kind: str, values: tuple[Any, ...]):
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if kind == "json deep":
        n = rng.choice((40, 1000, 100_000))
        return b"[" * n + data + b"]" * n, f"nest the document {n} deep"
    if kind == "json text number":
        numbers = [i for i in range(len(data)) if data[i : i + 1].isdigit()]
        if not numbers:
            return None
        at = rng.choice(numbers)
        new = rng.choice(
            (
                b"1e400",
                b"-1",
                b"0",
                b"99999999999999999999",
                b"1.0",
                b"true",
                b"9223372036854775808",
                b"1" + b"0" * 30,
                b"-9223372036854775809",
            )
        )
        end = at
        while end < len(data) and data[end : end + 1].isdigit():
            end += 1
        return data[:at] + new + data[end:], f"number at byte {at} := {new.decode()}"
    nodes: list[tuple[Any, Any]] = []  # (container, key) of every value

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in list(items):
            nodes.append((node, k))
            if isinstance(v, (dict, list)):
                walk(v)

    if not isinstance(doc, (dict, list)):
        return None
    walk(doc)
    if not nodes:
        return None
    container, key = rng.choice(nodes)
    if kind == "json drop key":
        del container[key]
        what = f"drop {key!r}"
    else:
        value = rng.choice(values)
        if isinstance(container[key], bool):
            value = not container[key]
        container[key] = value
        what = f"{key!r} := {json.dumps(value)[:40]}"
    try:
        return json.dumps(doc).encode(), f"json: {what}"
    except (ValueError, OverflowError):
        return None


def apply(t: Target, case: pathlib.Path, seed: int) -> str:
    """Make the case's directory for ``seed`` and damage one of its files; return what was
    done."""
    rng = random.Random(f"{t.name}:{seed}")
    t.fixture(case)
    if t.prepare is not None:
        t.prepare(case)
    files = t.files(case)
    name = rng.choice(files)
    path = case / name
    data = path.read_bytes()
    lo, hi = t.region(path, data) if t.region else (0, len(data))
    new, what = mutate(data, rng, name.endswith(t.json_files), lo, hi, t.values, t.json_only)
    if new == data:
        new, what = data + b"\0", what + " (no change), then append a zero byte"
    path.write_bytes(new)
    return f"{name}: {what}"


def run_case(name: str, seed: int, root: pathlib.Path) -> dict[str, Any]:
    """Run one case in this process; the verdict as a dict (``ok``, ``outcome``, ``mutation``)."""
    t = TARGETS[name]
    case = root / f"{name}-{seed}"
    shutil.rmtree(case, ignore_errors=True)
    verdict: dict[str, Any] = {"target": name, "seed": seed}
    try:
        verdict["mutation"] = apply(t, case, seed)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t.check(case)
            verdict.update(ok=True, outcome="loaded right")
        except Wrong as e:
            verdict.update(ok=False, outcome=f"WRONG RESULT: {e}")
        except t.errors as e:
            verdict.update(ok=True, outcome=f"{type(e).__name__}: {_first_words(e)}")
        except BaseException as e:  # a MemoryError, a RecursionError, ...
            tb = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{os.path.basename(tb.filename)}:{tb.lineno}"
            verdict.update(ok=False, outcome=f"{type(e).__name__} at {where}: {str(e)[:200]}")
    finally:
        shutil.rmtree(case, ignore_errors=True)
    return verdict


def _first_words(e: BaseException) -> str:
    """A short class of an error message: its words before the first path or number."""
    words = []
    for w in str(e).split():
        if "/" in w or any(c.isdigit() for c in w) or len(words) == 6:
            break
        words.append(w)
    return " ".join(words)


# --- the worker and the runner ----------------------------------------------------------------


def worker(root: pathlib.Path) -> None:
    """Answer cases from stdin until it closes (see the module docstring), working in ``root``,
    which the runner made and removes (a worker that hangs is killed, and cleans nothing)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    import tests.helpers.fuzz_targets  # noqa: F401  (registers the targets)

    for line in sys.stdin:
        case = json.loads(line)
        os.environ["GPT2NP_HOME"] = str(root / "home")
        print(json.dumps(run_case(case["target"], case["seed"], root)), flush=True)


@dataclasses.dataclass
class Report:
    target: str
    cases: int = 0
    seconds: float = 0.0
    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.target}: {self.cases} cases in {self.seconds:.0f} s, "
                 f"{len(self.failures)} failures"]  # fmt: skip
        for outcome, n in sorted(self.outcomes.items(), key=lambda kv: -kv[1])[:12]:
            lines.append(f"  {n:6d}  {outcome}")
        for f in self.failures[:20]:
            again = f"python tests/helpers/fuzzing.py {f['target']} {f['seed']}"
            lines.append(
                f"  FAIL seed {f['seed']}: {f.get('mutation')} -> {f['outcome']}   ({again})"
            )
        return "\n".join(lines)


class _Worker:
    """A worker process and its directory: every file it writes, its temporary files too
    (TMPDIR), is inside ``root``, which :meth:`close` removes after killing it."""

    def __init__(self) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-fuzz-"))
        (self.root / "tmp").mkdir()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
        env["TMPDIR"] = str(self.root / "tmp")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(HERE / "fuzzing.py"), "--worker", str(self.root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env,
        )  # fmt: skip
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def ask(self, name: str, seed: int, timeout: float) -> dict[str, Any] | None:
        """The verdict, or None if the worker hung or died (it is then killed)."""
        try:
            self.proc.stdin.write(json.dumps({"target": name, "seed": seed}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        if self.sel.select(timeout):
            line = self.proc.stdout.readline()
            if line:
                return json.loads(line)
        self.close()
        return None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.sel.close()
        shutil.rmtree(self.root, ignore_errors=True)


def run(name: str, seconds: float, first_seed: int = 0, max_cases: int | None = None) -> Report:
    """Fuzz target ``name`` with seeds first_seed, first_seed + 1, ... until ``seconds`` have
    passed (or ``max_cases`` ran)."""
    report = Report(name)
    start = time.monotonic()
    w = _Worker()
    seed = first_seed
    try:
        while time.monotonic() - start < seconds and (
            max_cases is None or report.cases < max_cases
        ):
            verdict = w.ask(name, seed, CASE_TIMEOUT)
            if verdict is None:  # hung, crashed, or killed by the memory cap
                code = w.proc.returncode
                what = f"HANG (no answer in {CASE_TIMEOUT:.0f} s)" if code == -9 else (
                    f"CRASH (worker exit code {code})")  # fmt: skip
                verdict = {"target": name, "seed": seed, "ok": False, "outcome": what}
                w = _Worker()
            report.cases += 1
            outcome = verdict["outcome"] if verdict["ok"] else "FAIL " + verdict["outcome"][:60]
            report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
            if not verdict["ok"]:
                report.failures.append(verdict)
            seed += 1
    finally:
        w.close()
        report.seconds = time.monotonic() - start
    return report


def main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        worker(pathlib.Path(argv[1]))
        return
    # python tests/helpers/fuzzing.py TARGET SEED: one case, here, with its traceback
    import tests.helpers.fuzz_targets  # noqa: F401

    name, seed = argv[0], int(argv[1])
    root = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-fuzz-"))
    os.environ["GPT2NP_HOME"] = str(root / "home")
    t = TARGETS[name]
    try:
        print("mutation:", apply(t, root / "case", seed))
        t.check(root / "case")
        print("loaded right")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # run as the module tests.helpers.fuzzing, where fuzz_targets registers
    sys.path.insert(0, str(ROOT))
    from tests.helpers import fuzzing

    fuzzing.main(sys.argv[1:])
