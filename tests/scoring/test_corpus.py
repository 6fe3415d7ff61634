"""Scoring a corpus (gpt2np.scoring.score_corpus and ``gpt2np score-corpus``): each record
against the clear forward pass's score of its document alone, bad lines as error records, two
worker processes against one process, resuming after ``kill -9`` and after a torn last line
against an uninterrupted run, refusing output of another input, model or settings, a worker
that dies, and the command's summary, progress bar and errors.

The model is small and byte-level (tests/helpers/corpus.py), saved to a directory so that
worker processes load it by path, memory-mapped, as they would 124M."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import gpt2np
import gpt2np.cli.app as cli
from gpt2np.fast.threads import set_threads
from gpt2np.scoring import CorpusSummary, score, score_corpus
from gpt2np.scoring.resume import Output
from tests.helpers.corpus import (
    BAD_LINES,
    assert_same_records,
    corpus_lines,
    load_dying_in_a_worker,
    load_faulty,
    read_records,
    save_byte_model,
    write_lines,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> pathlib.Path:
    return save_byte_model(tmp_path_factory.mktemp("corpus") / "byte")


@pytest.fixture(scope="module")
def loader(model_dir) -> functools.partial:
    return functools.partial(gpt2np.load, str(model_dir))


@pytest.fixture(autouse=True)
def one_thread(monkeypatch, tmp_path) -> Iterator[None]:
    """One thread per process: the model is so small that threads cost more than they give
    on a busy machine. And a cache of our own."""
    monkeypatch.setenv("GPT2NP_NUM_THREADS", "1")
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    set_threads(None)  # this process's kernels read the environment again (they read it once)
    yield
    set_threads(None)  # ... and after monkeypatch restores it


def mixed_corpus(n: int, seed: int = 0) -> list[str]:
    """n good documents with every bad line of BAD_LINES among them, at random places."""
    lines = corpus_lines(n, seed)
    rng = random.Random(seed)
    for bad in BAD_LINES:
        lines.insert(rng.randrange(len(lines) + 1), bad)
    return lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> pathlib.Path:
    return write_lines(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", mixed_corpus(150))


@pytest.fixture(scope="module")
def reference(corpus, loader, tmp_path_factory) -> pathlib.Path:
    """The records of an uninterrupted run in one process."""
    out = tmp_path_factory.mktemp("reference") / "scores.jsonl"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("GPT2NP_NUM_THREADS", "1")
        set_threads(None)
        score_corpus(loader, corpus, out, progress=False)
    set_threads(None)
    return out


def test_each_record_is_its_document_scored_alone_by_the_clear_forward_pass(loader, tmp_path):
    """Every good line's record against score() of its text alone on the clear path (one
    forward pass per window, no batching); every bad line's record names what is wrong."""
    lines = mixed_corpus(40, seed=1)
    out = tmp_path / "scores.jsonl"
    summary = score_corpus(loader, write_lines(tmp_path / "c.jsonl", lines), out)
    records = read_records(out)
    clear = gpt2np.load(loader.args[0], fast=False)
    expected = []
    for number, line in enumerate(lines, 1):
        if line in BAD_LINES:
            expected.append({"line": number, "error": BAD_LINES[line]})
            continue
        doc = json.loads(line)
        s = score(clear, doc["text"], stride=24, max_len=48)
        mean = -s.nll / s.n_scored
        expected.append({"line": number, "id": doc["id"], "n_tokens": s.n_tokens,
                         "logprob_sum": -s.nll, "logprob_mean": mean,
                         "perplexity": s.perplexity})  # fmt: skip
    for got, want in zip(records, expected):
        if "error" in want:
            assert got["error"].startswith(want["error"]), (got, want)
            assert got["line"] == want["line"]
            want = {k: got[k] for k in got}  # the rest (id, digest) is checked below
        assert len(got["line_sha256"]) == 16
        want["line_sha256"] = got["line_sha256"]
        assert_same_records([got], [want])
    assert len(records) == len(lines) == summary.documents
    assert summary.errors == len(BAD_LINES) and summary.resumed == 0
    assert summary.tokens == sum(r.get("n_tokens", 0) for r in records)
    assert {r["id"] for r in records if "id" in r and "error" in r} == {"n", "no-text", 3}


def test_plain_text_from_a_file_and_from_stdin(loader, tmp_path, monkeypatch):
    """A .txt file is read one document per line ("\\r\\n" too); an empty line is an error
    record; stdin ("-") gives the same records as the file."""
    text = b"the cat sat on the mat\r\n\nx\nthe old grey house by the sea caf\xc3\xa9\n\xff\xfe\n"
    path = tmp_path / "docs.txt"
    path.write_bytes(text)
    score_corpus(loader, path, tmp_path / "file.jsonl")
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": __import__("io").BytesIO(text)}))
    score_corpus(loader, "-", tmp_path / "stdin.jsonl", format="text")
    records = read_records(tmp_path / "file.jsonl")
    assert records == read_records(tmp_path / "stdin.jsonl")
    assert [r.get("n_tokens") for r in records] == [22, None, None, 35, None]
    assert [r.get("error", "")[:14] for r in records] == ["", "empty line", "too short to s",
                                                          "", "not UTF-8 (byt"]  # fmt: skip
    model = gpt2np.load(loader.args[0])
    assert records[0]["logprob_sum"] == pytest.approx(-score(model, "the cat sat on the mat").nll)


def test_a_byte_order_mark_and_a_lone_surrogate_are_read(loader, tmp_path):
    """A UTF-8 byte order mark before the first line is not part of it; an id holding a lone
    surrogate (a JSON "\\ud800" escape, not UTF-8) is written back escaped."""
    lines = [json.dumps({"id": "\ud800", "text": "the cat sat"}), '{"text": "on a mat"}']
    score_corpus(loader, write_lines(tmp_path / "plain.jsonl", lines), tmp_path / "plain.out")
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "plain.jsonl").read_bytes())
    score_corpus(loader, tmp_path / "bom.jsonl", tmp_path / "bom.out")
    plain, bom = read_records(tmp_path / "plain.out"), read_records(tmp_path / "bom.out")
    assert plain[0]["id"] == "\ud800" and b"\\ud800" in (tmp_path / "plain.out").read_bytes()
    assert [r["n_tokens"] for r in bom] == [r["n_tokens"] for r in plain] == [11, 8]
    assert bom[0]["logprob_sum"] == plain[0]["logprob_sum"] and bom[1] == plain[1]
    assert bom[0]["line_sha256"] != plain[0]["line_sha256"]  # the digest is of the bytes


def test_two_worker_processes_give_the_records_of_one_in_input_order(model_dir, loader, tmp_path):
    """A document of the first chunk holds up its worker for two seconds (its tokenizer
    sleeps), so the records of the next chunks, scored by the other worker, come back before
    the first chunk's: they are written in input order all the same, and equal those of one
    process."""
    lines = mixed_corpus(250, seed=3)
    lines[10] = json.dumps({"id": "slow", "text": "a SLOW document"})
    corpus = write_lines(tmp_path / "c.jsonl", lines)
    score_corpus(loader, corpus, tmp_path / "jobs1.jsonl")
    slow = functools.partial(load_faulty, str(model_dir), str(tmp_path))
    summary = score_corpus(slow, corpus, tmp_path / "jobs2.jsonl", jobs=2, progress=False)
    expected = read_records(tmp_path / "jobs1.jsonl")
    assert_same_records(read_records(tmp_path / "jobs2.jsonl"), expected)
    assert summary.documents == len(expected) == len(lines) and summary.worker_deaths == 0


def run_cli(*args: str, **kwargs) -> subprocess.Popen:
    """``python -m gpt2np score-corpus ARGS``, with one BLAS thread (as one_thread)."""
    env = dict(os.environ, PYTHONIOENCODING="utf-8", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("GPT2NP_DEBUG", None)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    command = [sys.executable, "-m", "gpt2np", "score-corpus", *args]
    return subprocess.Popen(command, env=env, **{**pipes, **kwargs})


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie that no one has reaped yet has ended)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_resume_after_kill_9_at_random_points_equals_an_uninterrupted_run(model_dir, tmp_path):
    """The command is killed with SIGKILL when its output has reached a random number of
    records (three times, once with two workers, whose processes must then go away too), and
    run again to the end: its records are those of a run never interrupted. (That run, into a
    pipe, prints its summary on stdout and no bar.)"""
    corpus = write_lines(tmp_path / "corpus.jsonl", mixed_corpus(600, seed=4))
    where = ["--model", str(model_dir), "-q"]
    proc = run_cli(str(corpus), "--out", str(tmp_path / "uninterrupted.jsonl"), *where[:2])
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and stderr == b"", stderr  # no bar into a pipe
    _assert_summary(stdout.decode(), read_records(tmp_path / "uninterrupted.jsonl"))
    out = tmp_path / "scores.jsonl"
    rng = random.Random(7)
    for kill, jobs in enumerate(["1", "2", "1"]):
        target = rng.randrange(kill * 150 + 1, (kill + 1) * 150)
        proc = run_cli(str(corpus), "--out", str(out), *where, "--jobs", jobs)
        workers: set[int] = set()
        while proc.poll() is None and (not out.exists() or out.read_bytes().count(b"\n") < target):
            if jobs == "2":
                workers.update(children(proc.pid))
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL, proc.stderr.read()  # killed before the end
        assert jobs == "1" or workers
        deadline = time.monotonic() + 30
        while any(alive(w) for w in workers):
            assert time.monotonic() < deadline, "worker processes outlived their parent"
            time.sleep(0.05)
    proc = run_cli(str(corpus), "--out", str(out), *where)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert_same_records(read_records(out), read_records(tmp_path / "uninterrupted.jsonl"))
    assert b"resumed" in stdout


def _assert_summary(stdout: str, records: list[dict]) -> None:
    """The summary line counts the records, their errors and tokens, and gives throughputs."""
    errors = sum("error" in r for r in records)
    tokens = sum(r.get("n_tokens", 0) for r in records)
    head = f"score-corpus: {len(records)} documents ({errors} errors), {tokens} tokens; "
    assert stdout.startswith(head + f"this run {len(records)} documents, "), stdout
    assert stdout.endswith(" tokens/s\n") and " documents/s, " in stdout, stdout
    assert stdout.count("\n") == 1


def test_a_torn_last_line_is_cut_off_and_the_run_goes_on(corpus, loader, reference, tmp_path):
    """OUTPUT cut at byte offsets of every kind (inside a record, just after one, inside a
    multi-byte character, in the first record): the next run gives the uninterrupted records."""
    whole = reference.read_bytes()
    newlines = [i + 1 for i, b in enumerate(whole) if b == ord("\n")]
    cuts = [5, newlines[100], *random.Random(3).sample(range(newlines[120], len(whole)), 2)]
    café = whole.find("é".encode())
    if café >= 0:
        cuts.append(café + 1)
    fingerprint = reference.with_name(reference.name + ".fingerprint")
    for cut in cuts:
        out = tmp_path / f"cut-{cut}.jsonl"
        out.write_bytes(whole[:cut])
        shutil.copy(fingerprint, out.with_name(out.name + ".fingerprint"))
        summary = score_corpus(loader, corpus, out, progress=False)
        assert_same_records(read_records(out), read_records(reference))
        kept = whole[:cut].rfind(b"\n") + 1
        assert summary.repaired == cut - kept and summary.resumed == whole[:kept].count(b"\n")
        assert summary.documents == len(newlines)


def test_refuses_to_resume_onto_records_of_another_input_model_or_settings(
    corpus, loader, reference, tmp_path
):
    lines = corpus.read_bytes().decode().splitlines()
    done = b"".join(reference.read_bytes().splitlines(keepends=True)[:50])
    fingerprint = reference.with_name(reference.name + ".fingerprint").read_bytes()
    other_model = functools.partial(gpt2np.load, str(save_byte_model(tmp_path / "other", 1)))
    changed = lines.copy()
    changed[16] = json.dumps({"id": "doc-16", "text": "a changed document"})
    cases = [
        (loader, write_lines(tmp_path / "changed.jsonl", changed), {}, "line 17 of the input"),
        (loader, write_lines(tmp_path / "short.jsonl", lines[:30]), {}, "has only 30 lines"),
        (other_model, corpus, {}, "another model (weights_sha256"),
        (loader, corpus, {"stride": 20}, "other settings (stride 24 there, 20 now)"),
        (loader, corpus, {"field": "body"}, "other settings (field 'text' there, 'body' now)"),
    ]
    for model, source, kwargs, words in cases:
        out = tmp_path / "partial.jsonl"
        out.write_bytes(done)
        out.with_name(out.name + ".fingerprint").write_bytes(fingerprint)
        with pytest.raises(ValueError, match=r"(?s)" + ".*".join(map(re.escape, words.split()))):
            score_corpus(model, source, out, **kwargs)
        assert out.read_bytes() == done  # untouched
    out.with_name(out.name + ".fingerprint").unlink()
    with pytest.raises(ValueError, match=r"partial\.jsonl\.fingerprint is missing"):
        score_corpus(loader, corpus, out)
    out.write_bytes(done.splitlines(keepends=True)[0] + b'{"no": "line"}\n')
    out.with_name(out.name + ".fingerprint").write_bytes(fingerprint)
    with pytest.raises(ValueError, match="line 2: not the record of input line 2"):
        score_corpus(loader, corpus, out)


def test_one_output_one_writer(reference, tmp_path):
    out = tmp_path / "locked.jsonl"
    fingerprint = json.loads(reference.with_name(reference.name + ".fingerprint").read_text())
    with Output(out, fingerprint):
        with pytest.raises(ValueError, match="being written by another process"):
            Output(out, fingerprint)


@pytest.mark.skipif(os.name != "posix", reason="kills with SIGKILL")
def test_a_dead_worker_is_reported_and_its_documents_scored_again(model_dir, loader, tmp_path):
    """Worker processes killed (SIGKILL) while scoring a document: the first death's chunk
    is scored again, one document at a time, and gives the records of an undisturbed run; a
    document that kills its worker a second time gets an error record; both are warned of.
    The second chunk's worker dies first, always: the first chunk's document that kills once
    waits for that death (an event, whichever worker runs faster)."""
    lines = corpus_lines(130, seed=2)
    lines[40] = json.dumps(
        {"id": "once", "text": "kills once, after the other: AFTER-ALWAYS DIE-ONCE"}
    )
    lines[100] = json.dumps({"id": "always", "text": "one that kills each time: DIE-ALWAYS"})
    source = write_lines(tmp_path / "c.jsonl", lines)
    score_corpus(loader, source, tmp_path / "expected.jsonl")
    marks = tmp_path / "marks"
    marks.mkdir()
    dying = functools.partial(load_faulty, str(model_dir), str(marks))
    with pytest.warns(RuntimeWarning) as warned:
        summary = score_corpus(dying, source, tmp_path / "got.jsonl", jobs=2)
    messages = [str(w.message) for w in warned]
    assert any("killed by SIGKILL while scoring lines 1-64: scoring its 64 documents again, "
               "one at a time" in m for m in messages), messages  # fmt: skip
    assert any("again while scoring line 101: that document gets an error record" in m
               for m in messages), messages  # fmt: skip
    assert summary.worker_deaths == 3 and summary.errors == 1
    expected, got = read_records(tmp_path / "expected.jsonl"), read_records(tmp_path / "got.jsonl")
    assert got[100] == {"line": 101, "id": "always", "line_sha256": expected[100]["line_sha256"],
                        "error": "the worker process scoring this document was killed by "
                        "SIGKILL, twice (a rerun scores it again)"}  # fmt: skip
    assert_same_records(got[:100] + got[101:], expected[:100] + expected[101:])


@pytest.mark.skipif(os.name != "posix", reason="kills with SIGKILL")
def test_a_rerun_scores_again_a_document_whose_worker_died_twice(model_dir, loader, tmp_path):
    """A document that killed its worker twice gets an error record; the next run (the same
    command) cuts the output there, scores it and the records after it again, and ends with
    the records of an undisturbed run."""
    lines = corpus_lines(150, seed=6)
    lines[70] = json.dumps({"id": "twice", "text": "a document that kills twice: DIE-TWICE"})
    source = write_lines(tmp_path / "c.jsonl", lines)
    score_corpus(loader, source, tmp_path / "expected.jsonl")
    marks = tmp_path / "marks"
    marks.mkdir()
    dying = functools.partial(load_faulty, str(model_dir), str(marks))
    out = tmp_path / "got.jsonl"
    with pytest.warns(RuntimeWarning):
        first = score_corpus(dying, source, out, jobs=2)
    assert first.errors == 1 and read_records(out)[70]["error"].endswith("a rerun scores it again)")
    before = out.read_bytes()
    kept = b"".join(before.splitlines(keepends=True)[:70])
    second = score_corpus(dying, source, out, jobs=2)
    assert second.resumed == 70 and second.errors == 0 and second.worker_deaths == 0
    assert second.repaired == len(before) - len(kept)
    assert out.read_bytes().startswith(kept)
    assert_same_records(read_records(out), read_records(tmp_path / "expected.jsonl"))


def test_the_progress_bar_shows_documents_and_tokens_per_second_and_the_time_left(
    corpus, loader, tmp_path, capsys
):
    score_corpus(loader, corpus, tmp_path / "scores.jsonl", progress=True)
    err = capsys.readouterr().err
    assert "documents/s" in err and "tokens/s" in err, err
    assert "<00:00" in err  # tqdm's time left, known since the file's lines are counted


@pytest.mark.skipif(os.name != "posix", reason="needs a pty")
@pytest.mark.parametrize("quiet", [False, True])
def test_on_a_terminal_the_bar_shows_unless_quiet(corpus, model_dir, tmp_path, quiet):
    import fcntl
    import termios

    from tests.cli.test_pipes import read_pty

    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    args = [str(corpus), "--out", str(tmp_path / "s.jsonl"), "--model", str(model_dir)]
    proc = run_cli(*args, *(["-q"] if quiet else []), stderr=secondary)
    os.close(secondary)
    err = read_pty(primary)
    os.close(primary)
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and stdout.startswith(b"score-corpus: ")
    assert ("documents/s" in err and "tokens/s" in err) is not quiet, err
    if quiet:
        assert err == ""


def test_the_command_s_mistakes_are_one_line_errors(corpus, model_dir, tmp_path, capsys):
    where = ["--model", str(model_dir)]
    cases = [
        ([str(corpus), *where], 2, "the following arguments are required: --out"),
        ([str(corpus), "--out", "o.jsonl", "--jobs", "0", *where], 2,
         "--jobs: the value must be >= 1"),
        ([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o.jsonl"), *where], 1,
         "missing.jsonl"),
        ([str(corpus), "--out", str(corpus), *where], 1, "is the input"),
        ([str(corpus), "--out", str(tmp_path / "o.jsonl"), "--max-len", "49", *where], 1,
         "max_len must be in [2, 48], got 49"),
    ]  # fmt: skip
    for argv, code, words in cases:
        assert cli.main(["score-corpus", *argv]) == code if code == 1 else _usage(argv)
        err = capsys.readouterr().err
        assert err.startswith("gpt2np: error: ") and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "o.jsonl").exists()  # no output for a run that could not start


def _usage(argv: list[str]) -> bool:
    with pytest.raises(SystemExit) as e:
        cli.main(["score-corpus", *argv])
    return e.value.code == 2


def test_the_function_checks_its_arguments(corpus, loader, tmp_path):
    model = loader()
    out = tmp_path / "o.jsonl"
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        score_corpus(loader, corpus, out, jobs=0)
    with pytest.raises(TypeError, match="jobs must be an int, got float"):
        score_corpus(loader, corpus, out, jobs=2.0)
    with pytest.raises(TypeError, match="jobs > 1 needs a loader"):
        score_corpus(model, corpus, out, jobs=2)
    with pytest.raises(TypeError, match="does not pickle"):
        score_corpus(lambda: model, corpus, out, jobs=2)
    with pytest.raises(ValueError, match="format must be one of"):
        score_corpus(model, corpus, out, format="csv")
    with pytest.raises(ValueError, match="not to stdout"):
        score_corpus(model, corpus, "-")
    summary = score_corpus(model, corpus, out, progress=False)  # a loaded model: one process
    assert isinstance(summary, CorpusSummary) and summary.documents > 0
    assert "documents/s" in str(summary) and "tokens/s" in str(summary)


def _untouched(path: pathlib.Path):
    """A check that ``path`` still holds what it holds now, in the same file (inode)."""
    before, inode = path.read_bytes(), path.stat().st_ino

    def check() -> None:
        assert path.read_bytes() == before and path.stat().st_ino == inode

    return check


def test_an_output_that_is_not_its_own_records_of_this_input_is_left_untouched(
    corpus, loader, reference, tmp_path
):
    """score-corpus cuts and appends only to its own records of this input: the user's notes
    where the records were, two lines of foreign text, the user's own records of another
    input (with a torn last line), a line longer than any record among records, a user's
    file beside OUTPUT where the fingerprint goes,
    and a symlink at OUTPUT are each refused with the file byte-identical, the same inode."""
    fingerprint = reference.with_name(reference.name + ".fingerprint").read_bytes()
    ours = reference.read_bytes().splitlines(keepends=True)
    other_input = write_lines(tmp_path / "other.jsonl", mixed_corpus(60, seed=9))
    mine = tmp_path / "mine.jsonl"
    score_corpus(loader, other_input, mine, progress=False)
    cases = {
        "notes": (b"my notes", "not part of a record"),
        "foreign": (b"first line of mine\nsecond line of mine\n", "line 1: not the record"),
        "foreign-torn": (b"first line of mine\nsecond line", "line 1: not the record"),
        "other-input": (mine.read_bytes()[:-20], "scores of another input"),
        "over-long": (
            b"".join(ours[:3]) + b'{"line": 4, "x": "' + b"a" * (3 << 20) + b'"}\n' + ours[4],
            "line 4: not the record",
        ),
    }
    for name, (content, words) in cases.items():
        out = tmp_path / f"{name}.jsonl"
        out.write_bytes(content)
        out.with_name(out.name + ".fingerprint").write_bytes(fingerprint)
        unchanged = _untouched(out)
        with pytest.raises(ValueError, match=re.escape(words)):
            score_corpus(loader, corpus, out, progress=False)
        unchanged()
    beside = tmp_path / "new.jsonl.fingerprint"
    beside.write_bytes(b"the user's own file\n")
    unchanged = _untouched(beside)
    with pytest.raises(ValueError, match="not a fingerprint of score-corpus: not writing over"):
        score_corpus(loader, corpus, tmp_path / "new.jsonl", progress=False)
    unchanged()
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my notes\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(notes)
    link.with_name(link.name + ".fingerprint").write_bytes(fingerprint)
    unchanged = _untouched(notes)
    with pytest.raises(ValueError, match="is a symlink"):
        score_corpus(loader, corpus, link, progress=False)
    unchanged()
    assert link.is_symlink()


def test_a_damaged_output_or_fingerprint_is_refused_with_one_line(
    corpus, model_dir, reference, tmp_path, capsys
):
    """A line of 100000 "[" in OUTPUT or in its fingerprint, a record whose line is true, or
    whose n_tokens is a string: one line of error naming the file, the file untouched."""
    whole = reference.read_bytes()
    first = whole.splitlines(keepends=True)[0]
    fingerprint = reference.with_name(reference.name + ".fingerprint").read_bytes()
    deep = b"[" * 100_000 + b"\n"
    cases = [
        (whole[:300].rsplit(b"\n", 1)[0] + b"\n" + deep, fingerprint, "not the record"),
        (first, deep, "not a fingerprint of score-corpus"),
        (first.replace(b'"line": 1', b'"line": true'), fingerprint, "line 1: not the record"),
        (re.sub(rb'"n_tokens": \d+', b'"n_tokens": "9"', first), fingerprint, "line 1: not the"),
        (first, b'{"format": "gpt2np score-corpus records, version 1", "model": 1}', "another"),
    ]
    for i, (records, side, words) in enumerate(cases):
        out = tmp_path / f"damaged-{i}.jsonl"
        out.write_bytes(records)
        out.with_name(out.name + ".fingerprint").write_bytes(side)
        unchanged = _untouched(out)
        argv = ["score-corpus", str(corpus), "--out", str(out), "--model", str(model_dir), "-q"]
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("gpt2np: error: ") and err.count("\n") == 1, err
        assert words in err and out.name in err, err
        unchanged()


_CAPPED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import gpt2np.cli.app as cli
from gpt2np.fast.threads import set_threads
code = cli.main(["score-corpus", *sys.argv[1:]])
sys.stderr.write(f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}\\n")
sys.exit(code)
"""


def _cli_capped(*args: str, stdin=None) -> tuple[int, str, str, int]:
    """``gpt2np score-corpus ARGS`` in a process of at most 2 GiB of address space (a
    MemoryError instead of the machine's memory), bounded to 5 minutes (a hang fails):
    (status, stdout, stderr but its last line, the process's peak RSS in bytes)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("GPT2NP_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-c", _CAPPED, *args], stdin=stdin, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:  # timed out: end it, do not leave it running
            proc.kill()
            proc.wait()
    lines = err.decode().splitlines(keepends=True)
    peak = int(lines[-1].split()[1]) if lines and lines[-1].startswith("peak ") else -1
    return proc.returncode, out.decode(), "".join(lines[:-1] if peak >= 0 else lines), peak


@pytest.mark.skipif(os.name != "posix", reason="devices and FIFOs")
def test_devices_and_fifos_are_refused_in_one_line_without_reading(model_dir, tmp_path):
    """INPUT /dev/zero, /dev/urandom, a FIFO without a writer, and stdin from /dev/zero: one
    line of error, no OUTPUT written (not a MemoryError, endless error records or a hang)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    where = ["--model", str(model_dir), "-q"]
    for source in ("/dev/zero", "/dev/urandom", str(fifo), "-"):
        out = tmp_path / "o.jsonl"
        with open("/dev/zero", "rb") as zero:
            code, _, err, _ = _cli_capped(source, "--out", str(out), *where, stdin=zero)
        assert code == 1 and err.startswith("gpt2np: error: ") and err.count("\n") == 1, err
        kind = "a FIFO" if source == str(fifo) else "a character device"
        assert f"is {kind}" in err and not out.exists(), err


def test_over_long_lines_are_error_records_read_in_bounded_memory(model_dir, tmp_path):
    """A corpus with a 20 MiB and a 200 MiB document between good ones: each long line is an
    error record with its size and digest, the job goes on, and the process's peak memory
    is that of a run without them, give or take a few MiB (the lines are hashed as they are
    read, never held)."""
    import hashlib

    from gpt2np.scoring.records import MAX_LINE_BYTES

    good = corpus_lines(4, seed=8)
    corpus = tmp_path / "long.jsonl"
    digests = []
    with open(corpus, "wb") as f:
        f.write((good[0] + "\n").encode())
        for size in (20 << 20, 200 << 20):  # {"text": "aaa…a"}: a document to score
            digest = hashlib.sha256()
            block = b"a" * (1 << 20)
            for part in [b'{"text": "', *[block] * ((size >> 20) - 1), block[:-12], b'"}']:
                f.write(part)
                digest.update(part)
            f.write(b"\n")
            digests.append(digest.hexdigest()[:16])
        f.write("".join(line + "\n" for line in good[1:]).encode())
    short = write_lines(tmp_path / "short.jsonl", good)
    peaks = []
    for source in (short, corpus):
        out = tmp_path / f"{source.stem}.out"
        code, _, err, peak = _cli_capped(str(source), "--out", str(out), "--model",
                                              str(model_dir), "-q")  # fmt: skip
        assert code == 0, err
        peaks.append(peak)
    corpus.unlink()
    records = read_records(tmp_path / "long.out")
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5, 6]
    for record, size, digest in zip(records[1:3], (20 << 20, 200 << 20), digests):
        assert record["line_sha256"] == digest
        assert record["error"].startswith(f"a line of {size} bytes, longer than the "
                                          f"{MAX_LINE_BYTES} bytes")  # fmt: skip
    renumbered = [{**r, "line": n} for n, r in enumerate(records[:1] + records[3:], 1)]
    assert renumbered == read_records(tmp_path / "short.out")
    assert peaks[1] - peaks[0] < 3 * MAX_LINE_BYTES, peaks


def test_resumes_are_byte_exact_wherever_the_output_was_cut(loader, tmp_path):
    """An uninterrupted run's output, cut 17 bytes into line 202 of 400 and at seeded random
    offsets (inside records, at their ends), then resumed: byte for byte the same. The
    documents vary in length so that chunks end on characters as well as on counts."""
    lines = corpus_lines(400, seed=11)
    rng = random.Random(11)
    for i in rng.sample(range(400), 40):  # long ones: chunks of fewer than 64 documents
        lines[i] = json.dumps({"id": f"long-{i}", "text": " ".join(rng.choices(
            ["the", "cat", "sat", "café"], k=rng.randint(300, 900)))})  # fmt: skip
    corpus = write_lines(tmp_path / "c.jsonl", lines)
    reference = tmp_path / "reference.jsonl"
    score_corpus(loader, corpus, reference, progress=False)
    whole = reference.read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(whole) if b == ord("\n")]
    cuts = [starts[201] + 17, *(rng.randrange(1, len(whole)) for _ in range(6)), starts[128]]
    fingerprint = reference.with_name(reference.name + ".fingerprint").read_bytes()
    for cut in cuts:
        out = tmp_path / f"cut-{cut}.jsonl"
        out.write_bytes(whole[:cut])
        out.with_name(out.name + ".fingerprint").write_bytes(fingerprint)
        score_corpus(loader, corpus, out, progress=False)
        assert out.read_bytes() == whole, f"cut at byte {cut}"


def test_no_single_line_stops_a_corpus(model_dir, loader, tmp_path):
    """Ids JSON cannot write back: 1e999 is kept as its text, NaN is no JSON (an error
    record); an id nested 500 deep is an error record with one process and with two alike;
    a big integer or a shallow array is kept."""
    deep = json.loads("[" * 500 + "]" * 500)
    lines = [*corpus_lines(3, seed=12), '{"id": 1e999, "text": "the cat sat on a mat"}',
             '{"id": NaN, "text": "the cat sat on a mat"}',
             json.dumps({"id": deep, "text": "the cat sat on a mat"}),
             json.dumps({"id": 10**400, "text": "the cat sat on a mat"}),
             json.dumps({"id": [[[1]]], "text": "the cat sat on a mat"})]  # fmt: skip
    corpus = write_lines(tmp_path / "ids.jsonl", lines)
    score_corpus(loader, corpus, tmp_path / "one.jsonl", progress=False)
    score_corpus(loader, corpus, tmp_path / "two.jsonl", jobs=2, progress=False)
    one, two = read_records(tmp_path / "one.jsonl"), read_records(tmp_path / "two.jsonl")
    assert_same_records(two, one)
    assert one[3]["id"] == "1e999" and "n_tokens" in one[3]
    assert one[4]["error"] == "not JSON (NaN is not a JSON value)"
    assert one[5]["error"] == "the id 'id' nests deeper than 32 levels" and "id" not in one[5]
    assert one[6]["id"] == 10**400 and one[7]["id"] == [[[1]]] and "n_tokens" in one[7]


def test_an_error_that_stops_the_job_names_the_lines(model_dir, tmp_path):
    """An exception while scoring (here the tokenizer's) stops the job with an error that
    names the lines of the chunk, in one process and from a worker process."""
    lines = corpus_lines(100, seed=13)
    lines[70] = json.dumps({"id": "x", "text": "this one RAISES"})
    corpus = write_lines(tmp_path / "c.jsonl", lines)
    faulty = functools.partial(load_faulty, str(model_dir), str(tmp_path))
    for jobs in (1, 2):
        with pytest.raises(ValueError, match="while scoring lines 65-100 of the input: "
                           "RuntimeError: boom"):  # fmt: skip
            score_corpus(faulty, corpus, tmp_path / f"o{jobs}.jsonl", jobs=jobs, progress=False)
        assert len(read_records(tmp_path / f"o{jobs}.jsonl")) == 64


@pytest.mark.skipif(os.name != "posix", reason="kills with SIGKILL")
def test_a_worker_killed_while_loading_the_model_is_one_line(model_dir, corpus, tmp_path):
    """A worker process killed (SIGKILL) while it loads the model: an OSError of one line
    saying so, which the command prints as its one line of error, not a traceback."""
    dying = functools.partial(load_dying_in_a_worker, str(model_dir))
    with pytest.raises(
        OSError,
        match=r"^a worker process was killed by SIGKILL while loading "
        r"the model \(out of memory\?\); run the command again to go on$",
    ):
        score_corpus(dying, corpus, tmp_path / "o.jsonl", jobs=2, progress=False)
