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

import pytest

import gpt2np
import gpt2np.cli.app as cli
from gpt2np.scoring import CorpusSummary, score, score_corpus
from gpt2np.scoring.resume import Output
from tests.helpers.corpus import (
    BAD_LINES,
    assert_same_records,
    corpus_lines,
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
def one_thread(monkeypatch, tmp_path) -> None:
    """One thread per process: the model is so small that threads cost more than they give
    on a busy machine. And a cache of our own."""
    monkeypatch.setenv("GPT2NP_NUM_THREADS", "1")
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))


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
        score_corpus(loader, corpus, out, progress=False)
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
    document that kills its worker a second time gets an error record; both are warned of."""
    lines = corpus_lines(130, seed=2)
    lines[40] = json.dumps({"id": "once", "text": "a document that kills once: DIE-ONCE"})
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
                        "SIGKILL, twice"}  # fmt: skip
    assert_same_records(got[:100] + got[101:], expected[:100] + expected[101:])


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
