"""Scoring a corpus: one record per line of a JSON Lines or text file, resumable, in one process
or in ``jobs``.

>>> from functools import partial
>>> from gpt2np.scoring import score_corpus
>>> score_corpus(partial(gpt2np.load, "124M"), "corpus.jsonl", "scores.jsonl", jobs=2)
CorpusSummary(documents=10000, errors=3, tokens=4123456, ...)

What a record holds and how a line is read: :mod:`gpt2np.scoring.records`. How the output is
appended and resumed (a fingerprint beside it, a torn last line cut off, the input's first lines
checked): :mod:`gpt2np.scoring.resume`. How ``jobs`` processes share the work:
:mod:`gpt2np.scoring.workers`. The command ``gpt2np score-corpus`` runs this function; on a
Dask cluster, :func:`gpt2np.scoring.dask.score_bag` gives the same records.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ..support.bounded_read import check_stdin, open_regular
from ..support.progress import show_progress, tqdm
from .records import (
    CHUNK_DOCS,
    Document,
    Loader,
    LongLine,
    Settings,
    chunks,
    parse_line,
    read_lines,
    score_chunk,
)
from .records import line_digest as _digest
from .resume import Output, fingerprint

if TYPE_CHECKING:
    from ..runtime import Runtime
    from .workers import WorkerPool

__all__ = ["CorpusSummary", "score_corpus"]

PathLike = Union[str, "os.PathLike[str]"]
Line = Union[bytes, LongLine]
#: Input files with these suffixes are read as plain text (one document per line) by default.
TEXT_SUFFIXES = (".txt", ".text")


@dataclasses.dataclass
class CorpusSummary:
    """What :func:`score_corpus` did.

    documents, errors, tokens: records in the output (all of them, resumed ones included), how
    many of them are errors, and the tokens of the others. new_documents, new_tokens, seconds:
    what this run scored, and in how long. resumed: records that were there before this run;
    repaired: bytes cut off (a torn last line, or the records from one scored again);
    worker_deaths: worker processes that died.
    """

    documents: int = 0
    errors: int = 0
    tokens: int = 0
    new_documents: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    resumed: int = 0
    repaired: int = 0
    worker_deaths: int = 0

    @property
    def documents_per_second(self) -> float:
        return self.new_documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        """One line: the output's counts, then this run's throughput."""
        resumed = f", {self.resumed} of them resumed" if self.resumed else ""
        return (
            f"{self.documents} documents ({self.errors} errors{resumed}), {self.tokens} tokens; "
            f"this run {self.new_documents} documents, {self.new_tokens} tokens in "
            f"{self.seconds:.1f} s: {self.documents_per_second:.1f} documents/s, "
            f"{self.tokens_per_second:.0f} tokens/s"
        )


def score_corpus(
    model: Union[Runtime, Loader],
    corpus: PathLike,
    out: PathLike,
    *,
    format: Optional[str] = None,
    field: str = "text",
    id_field: Optional[str] = "id",
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    batch_size: Optional[int] = None,
    jobs: int = 1,
    progress: Optional[bool] = None,
) -> CorpusSummary:
    """Score every line of ``corpus`` and append one record per line to ``out`` (JSON Lines,
    in input order; the records: :mod:`gpt2np.scoring.records`), after those ``out`` already
    holds from an earlier run of the same model and settings on the same input.

    model: a GPT2, or a loader (a zero-argument callable returning one, such as
        ``functools.partial(gpt2np.load, "124M")``); ``jobs`` > 1 needs a loader that pickles,
        which each worker process calls once.
    corpus: a JSON Lines file (the text in ``field``, an optional id in ``id_field``) or a text
        file with one document per line (``format="text"``; the default for a .txt file, else
        "jsonl"); "-" reads stdin.
    stride, max_len, batch_size: as for :func:`gpt2np.scoring.score` (batch_size's default
        here is as many windows as make 4096 tokens, for each chunk's longest window).
    progress: a bar of documents/s, tokens/s and the time left (None: on a terminal or in a
        notebook). Raises ValueError, leaving ``out`` untouched, when it holds anything but
        records of this input, model and settings (a symlink at ``out`` included), and when
        ``corpus`` is not a regular file (stdin: a file or a pipe); TypeError/ValueError for bad
        arguments. A bad line of the input (one over MAX_LINE_BYTES too) is an error record,
        not an exception; an exception while scoring is a ScoringError naming the lines.
    """
    _check_paths_and_jobs(corpus, out, jobs)
    if callable(model):
        loader: Optional[Loader] = model
        loaded = model()
    elif jobs > 1:
        raise TypeError(
            "jobs > 1 needs a loader each worker process can call, such as "
            "functools.partial(gpt2np.load, path), not a loaded model"
        )
    else:
        loader, loaded = None, model
    if format is None:
        format = "text" if str(corpus).lower().endswith(TEXT_SUFFIXES) else "jsonl"
    settings = Settings(format, field, id_field, stride, max_len, batch_size)
    settings = settings.resolved(loaded.hparams.n_ctx)
    with _InputLines(corpus) as lines, Output(out, fingerprint(loaded, settings)) as output:
        summary = CorpusSummary()
        block = _check_prefix(output, lines, summary)  # nothing of OUTPUT is cut before this
        summary.repaired = output.resume(summary.resumed)
        rest = _rest(block, lines)
        start = summary.resumed - len(block) + 1  # a multiple of CHUNK_DOCS, plus one
        docs = (parse_line(n, raw, settings) for n, raw in enumerate(rest, start))
        show = show_progress(progress)
        with tqdm(total=_count_lines(corpus) if show else None, initial=summary.resumed,
                  unit=" documents", desc="scoring", disable=not show) as bar:  # fmt: skip
            if show and (summary.resumed or summary.repaired):
                bar.write(_resume_notice(output.path, summary))
            workers = None
            if loader is not None and jobs > 1:
                from .workers import WorkerPool  # multiprocessing's machinery, when it is used

                workers = functools.partial(WorkerPool, loader, settings, jobs)
            _score_chunks(chunks(docs), loaded, settings, workers, output, summary, bar)
    return summary


def _check_paths_and_jobs(corpus: PathLike, out: PathLike, jobs: object) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"jobs must be an int, got {type(jobs).__name__}")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if str(out) == "-":
        raise ValueError("the records go to a file, which a later run resumes, not to stdout")
    if str(corpus) != "-" and os.path.realpath(corpus) == os.path.realpath(out):
        raise ValueError(f"the output {out} is the input: write the records to another file")


def _score_chunks(
    todo: Iterator[list[Document]],
    model: Runtime,
    settings: Settings,
    workers: Optional[Callable[[], WorkerPool]],
    output: Output,
    summary: CorpusSummary,
    bar: Any,
) -> None:
    """Score the chunks in this process, or in the worker processes ``workers()`` starts, and
    append their records to ``output``."""
    first = next(todo, None)
    if first is None:  # nothing left to score: start no workers
        return
    todo = itertools.chain([first], todo)
    start = time.perf_counter()
    if workers is None:
        _write((score_chunk(model, c, settings) for c in todo), output, summary, bar, start)
        return
    with workers() as pool:
        _write(pool.run(todo), output, summary, bar, start)
    summary.worker_deaths = pool.deaths


def _write(
    results: Iterator[list[dict[str, Any]]],
    output: Output,
    summary: CorpusSummary,
    bar: Any,
    start: float,
) -> None:
    """Append each record as it comes (but those of lines resumed: a chunk that began before
    the resumed run's first line is scored whole, as an uninterrupted run scores it), count it,
    and move the bar."""
    for records in results:
        records = [r for r in records if r["line"] > summary.resumed]
        for record in records:
            output.append(record)
            _count(record, summary, new=True)
        summary.seconds = time.perf_counter() - start
        bar.set_postfix_str(f"{summary.tokens_per_second:,.0f} tokens/s", refresh=False)
        bar.update(len(records))


def _count(record: dict[str, Any], summary: CorpusSummary, new: bool) -> None:
    tokens = record.get("n_tokens", 0)
    summary.documents += 1
    summary.errors += "error" in record
    summary.tokens += tokens
    if new:
        summary.new_documents += 1
        summary.new_tokens += tokens


def _check_prefix(output: Output, lines: Iterator[Line], summary: CorpusSummary) -> list[Line]:
    """Read the input's first lines, one per record ``output`` holds, each checked to be the
    line its record was scored from (ValueError if not). -> those lines of the last block of
    CHUNK_DOCS lines that the records do not fill (the start of the first chunk to score)."""
    afresh = f"delete {output.path} (and {output.side.name}) or write to another file"
    block: list[Line] = []
    for record in output.records():
        number = record["line"]
        raw = next(lines, None)
        if raw is None:
            raise ValueError(
                f"{output.path} holds a record of line {number}, but the input has only "
                f"{number - 1} lines: it holds the scores of another input; {afresh}"
            )
        digest = raw.digest if isinstance(raw, LongLine) else _digest(raw)
        if record.get("line_sha256") != digest:
            raise ValueError(
                f"line {number} of the input is not the line {output.path} scored there (its "
                f"SHA-256 differs): it holds the scores of another input; {afresh}"
            )
        _count(record, summary, new=False)
        summary.resumed += 1
        block = [] if (number - 1) % CHUNK_DOCS == 0 else block
        block.append(raw)
    return block if len(block) < CHUNK_DOCS else []


def _rest(block: list[Line], lines: Iterator[Line]) -> Iterator[Line]:
    """The lines to score: ``block`` (scored again, not written) and the lines after it, or
    none when there is no line after it."""
    following = next(lines, None)
    if following is None:
        return iter(())
    return itertools.chain(block, [following], lines)


class _InputLines:
    """The input's lines as bytes, without their "\\n" (a line over MAX_LINE_BYTES as a
    LongLine); "-" is stdin. A FILE must be a regular file, and stdin a file, a pipe, a
    terminal or /dev/null (:mod:`gpt2np.support.bounded_read`): /dev/zero, /dev/urandom or a
    FIFO given by name are refused with one line, without reading them."""

    def __init__(self, corpus: PathLike) -> None:
        self.fd: Optional[int] = None
        if str(corpus) == "-":
            if sys.stdin is None:
                raise ValueError("no stdin to read the corpus from")
            stream: Any = getattr(sys.stdin, "buffer", sys.stdin)
            try:
                fd: Optional[int] = stream.fileno()
            except (AttributeError, OSError, ValueError):  # an in-memory stream (tests)
                fd = None
            if fd is not None:
                check_stdin(fd, ValueError)
            self.read = getattr(stream, "read1", None) or stream.read
        else:
            hint = " (pipe it in and give - instead)"
            self.fd = opened = open_regular(corpus, ValueError, fifo_hint=hint)
            self.read = lambda n: os.read(opened, n)

    def __enter__(self) -> Iterator[Line]:
        return read_lines(self.read)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _count_lines(corpus: PathLike) -> Optional[int]:
    """The number of lines of a regular file (None for stdin or a pipe): the bar's total."""
    if str(corpus) == "-":
        return None
    n, last = 0, b"\n"
    fd = open_regular(corpus, ValueError)
    try:
        while block := os.read(fd, 1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    finally:
        os.close(fd)
    return n + (last != b"\n")


def _resume_notice(path: pathlib.Path, summary: CorpusSummary) -> str:
    torn = (f" (cut off {summary.repaired} bytes: a torn last line, or the records from one "
            "that is scored again)") if summary.repaired else ""  # fmt: skip
    return f"resuming {path} after line {summary.resumed}{torn}"
