"""Fuzz targets for score-corpus (tests/helpers/fuzzing.py): damaged inputs read from odd
sources, and damaged, foreign or linked outputs to resume onto.

``corpus-input``: the corpus (JSON Lines with good documents, odd ids and a long line) damaged,
then read from a file, a pipe, stdin from a file, or refused sources (/dev/zero, /dev/urandom,
a FIFO without a writer, a directory); some cases also get an id of 1e999, NaN, 10**400 or
nested 500 deep, or a line of megabytes with or without its end. A readable source must give
one record per line, numbered 1, 2, … (scores or error records), a refused one a ValueError
(the command's one line of error). The line bound is lowered to 64 KiB so a case takes well
under a second.

``corpus-output``: an uninterrupted run's OUTPUT and OUTPUT.fingerprint, one of them damaged
(bits, bytes, cuts, appends, 100000 "[", a JSON value changed), or OUTPUT replaced by a user's
notes or made a symlink, then the same run again. It must either finish with the records of an
uninterrupted run after those it kept (the kept bytes as they were), or refuse with a
ValueError leaving OUTPUT byte-identical, the same inode (a symlink is never followed).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import random
import sys
import tempfile
import threading

from tests.helpers.fuzzing import TARGETS, Wrong, target

_state: dict[str, object] = {}
LINE_BOUND = 1 << 16  # the per-line bound in these cases (score-corpus's is 1 MiB)


def _model():
    """The byte-level model of tests/helpers/corpus.py, saved and loaded once per worker."""
    if "model" not in _state:
        import gpt2np
        from tests.helpers.corpus import save_byte_model

        directory = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-fuzz-corpus-")) / "byte"
        _state["model"] = gpt2np.load(str(save_byte_model(directory)))
    return _state["model"]


def _corpus_lines() -> list[str]:
    from tests.helpers.corpus import BAD_LINES, corpus_lines

    lines = corpus_lines(20, seed=5)
    return [*lines[:10], *list(BAD_LINES)[:4], *lines[10:]]


def _input_fixture(case: pathlib.Path) -> None:
    case.mkdir(parents=True)
    (case / "corpus.jsonl").write_text("".join(x + "\n" for x in _corpus_lines()), "utf-8")


_SOURCES = ["file", "file", "file", "pipe", "pipe", "stdin-file", "dev-zero", "dev-urandom",
            "fifo", "directory"]  # fmt: skip
_ODD = [
    b'{"id": 1e999, "text": "the cat sat"}',
    b'{"id": NaN, "text": "the cat sat"}',
    b'{"id": 1' + b"0" * 400 + b', "text": "the cat sat"}',
    b'{"id": ' + b"[" * 500 + b"]" * 500 + b', "text": "the cat sat"}',
    b'{"text": "' + b"a" * (3 * LINE_BOUND) + b'"}',
    b"[" * 100_000,
    b"\0" * (5 * LINE_BOUND),
]


@target("corpus-input", _input_fixture, ["corpus.jsonl"], errors=(ValueError,))
def corpus_input(case: pathlib.Path) -> None:
    import gpt2np.scoring.records as records
    from gpt2np.scoring import score_corpus

    data = (case / "corpus.jsonl").read_bytes()
    rng = random.Random(hashlib.sha256(data).digest())
    if rng.random() < 0.5:
        at = rng.randrange(data.count(b"\n") + 1)
        lines = data.split(b"\n")
        lines.insert(at, rng.choice(_ODD))
        data = b"\n".join(lines)
    source = rng.choice(_SOURCES)
    out = case / "scores.jsonl"
    bound = getattr(records, "MAX_LINE_BYTES", None)
    records.MAX_LINE_BYTES = LINE_BOUND  # type: ignore[attr-defined]
    try:
        corpus, stdin, cleanup = _source(case, source, data)
        saved = sys.stdin
        sys.stdin = stdin if stdin is not None else saved
        try:
            summary = score_corpus(_model(), corpus, out, progress=False)
        finally:
            sys.stdin = saved
            for thing in cleanup:
                (thing.join if isinstance(thing, threading.Thread) else thing.close)()
    except ValueError:
        if source in ("file", "pipe", "stdin-file"):
            raise Wrong(f"{source}: a readable input was refused") from None
        raise
    finally:
        records.MAX_LINE_BYTES = bound  # type: ignore[attr-defined]
    if source not in ("file", "pipe", "stdin-file"):
        raise Wrong(f"read from {source}, which must be refused")
    n = data.count(b"\n") + (not data.endswith(b"\n") and bool(data))
    got = [json.loads(line)["line"] for line in out.read_bytes().splitlines()]
    if got != list(range(1, n + 1)) or summary.documents != n:
        raise Wrong(f"{source}: {len(got)} records of {n} lines, or out of order")


class _Stdin:
    """sys.stdin over a binary file: ``buffer`` and ``fileno`` as a real one has."""

    def __init__(self, f) -> None:
        self.buffer = f

    def fileno(self) -> int:
        return self.buffer.fileno()


def _source(case: pathlib.Path, source: str, data: bytes) -> tuple:
    """(INPUT argument, sys.stdin or None, things to join or close after)."""
    devices = {"dev-zero": "/dev/zero", "dev-urandom": "/dev/urandom"}
    if source in devices:
        f = open(devices[source], "rb")
        return "-", _Stdin(f), [f]
    (case / "input.jsonl").write_bytes(data)
    if source == "file":
        return str(case / "input.jsonl"), None, []
    if source == "stdin-file":
        f = open(case / "input.jsonl", "rb")
        return "-", _Stdin(f), [f]
    if source == "pipe":
        read_fd, write_fd = os.pipe()
        writer = threading.Thread(target=_feed, args=(write_fd, data), daemon=True)
        writer.start()
        f = os.fdopen(read_fd, "rb")
        return "-", _Stdin(f), [f, writer]
    special = case / "special"
    if source == "fifo":
        os.mkfifo(special)
    else:
        special.mkdir()
    return str(special), None, []


def _feed(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the reader is gone
        pass
    finally:
        os.close(fd)


# -- OUTPUT --------------------------------------------------------------------------------------


def _reference() -> tuple[bytes, bytes, bytes]:
    """(corpus, an uninterrupted run's OUTPUT, its fingerprint), once per worker."""
    if "reference" not in _state:
        from gpt2np.scoring import score_corpus

        directory = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-fuzz-reference-"))
        corpus = directory / "corpus.jsonl"
        corpus.write_text("".join(x + "\n" for x in _corpus_lines() * 5), "utf-8")
        score_corpus(_model(), corpus, directory / "scores.jsonl", progress=False)
        _state["reference"] = tuple(
            (directory / name).read_bytes()
            for name in ("corpus.jsonl", "scores.jsonl", "scores.jsonl.fingerprint")
        )
    return _state["reference"]  # type: ignore[return-value]


def _output_fixture(case: pathlib.Path) -> None:
    corpus, scores, fingerprint = _reference()
    case.mkdir(parents=True)
    (case / "corpus.jsonl").write_bytes(corpus)
    cut = random.Random(case.name).randrange(len(scores) + 1)  # a run stopped anywhere
    (case / "scores.jsonl").write_bytes(scores[:cut])
    (case / "scores.jsonl.fingerprint").write_bytes(fingerprint)


_OUTPUT_FILES = ["scores.jsonl", "scores.jsonl", "scores.jsonl.fingerprint"]


@target("corpus-output", _output_fixture, _OUTPUT_FILES, errors=(ValueError,))
def corpus_output(case: pathlib.Path) -> None:
    from gpt2np.scoring import score_corpus

    out = case / "scores.jsonl"
    damaged = out.read_bytes()
    rng = random.Random(hashlib.sha256(damaged).digest())
    what = rng.choice(["as damaged"] * 5 + ["notes", "symlink", "deep", "deep-fingerprint"])
    if what == "notes":
        out.write_bytes(damaged := b"my notes, not records")
    elif what == "deep":
        out.write_bytes(damaged := damaged + b"[" * 100_000 + b"\n")
    elif what == "deep-fingerprint":
        (case / "scores.jsonl.fingerprint").write_bytes(b"[" * 100_000)
    watched = out
    if what == "symlink":
        watched = case / "notes.jsonl"
        out.rename(watched)
        out.symlink_to(watched.name)
    inode = watched.stat().st_ino
    try:
        summary = score_corpus(_model(), case / "corpus.jsonl", out, progress=False)
    except ValueError:
        if watched.read_bytes() != damaged or watched.stat().st_ino != inode:
            raise Wrong(f"{what}: refused, but the file was changed") from None
        raise
    _, scores, _ = _reference()
    got = out.read_bytes()
    kept = len(damaged) - summary.repaired
    if what in ("symlink", "notes") or not got.startswith(damaged[:kept]):
        raise Wrong(f"{what}: resumed onto what it did not write, or changed what it kept")
    tail = scores.splitlines(keepends=True)[summary.resumed :]
    if got[kept:] != b"".join(tail) or len(got.splitlines()) != len(scores.splitlines()):
        raise Wrong(f"{what}: the records after the {summary.resumed} kept differ from a run's")


TARGETS["corpus-output"].json_files = (".fingerprint",)  # JSON mutations for the fingerprint
