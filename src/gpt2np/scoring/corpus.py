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
from typing import IO, TYPE_CHECKING, Any, Callable, Optional, Union

from ..support.progress import show_progress, tqdm
from .records import Document, Loader, Settings, chunks, parse_line, score_documents
from .records import line_digest as _digest
from .resume import Output, fingerprint

if TYPE_CHECKING:
    from ..runtime import Runtime
    from .workers import WorkerPool

__all__ = ["CorpusSummary", "score_corpus"]

PathLike = Union[str, "os.PathLike[str]"]
#: Input files with these suffixes are read as plain text (one document per line) by default.
TEXT_SUFFIXES = (".txt", ".text")


@dataclasses.dataclass
class CorpusSummary:
    """What :func:`score_corpus` did.

    documents, errors, tokens: records in the output (all of them, resumed ones included), how
    many of them are errors, and the tokens of the others. new_documents, new_tokens, seconds:
    what this run scored, and in how long. resumed: records that were there before this run;
    repaired: bytes of a torn last line cut off; worker_deaths: worker processes that died.
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
        notebook). Raises ValueError when ``out`` holds records of another input, model or
        settings (and TypeError/ValueError for bad arguments); a bad line of the input is an
        error record, not an exception.
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
        summary = CorpusSummary(repaired=output.repaired)
        _check_prefix(output, lines, summary)
        docs = (parse_line(n, raw, settings) for n, raw in enumerate(lines, summary.resumed + 1))
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
        _write((score_documents(model, c, settings) for c in todo), output, summary, bar, start)
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
    """Append each record as it comes, count it, and move the bar."""
    for records in results:
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


def _check_prefix(output: Output, lines: Iterator[bytes], summary: CorpusSummary) -> None:
    """Read the input's first lines, one per record ``output`` holds, each checked to be the
    line its record was scored from (ValueError if not)."""
    afresh = f"delete {output.path} (and {output.side.name}) or write to another file"
    for record in output.records():
        number = record["line"]
        raw = next(lines, None)
        if raw is None:
            raise ValueError(
                f"{output.path} holds a record of line {number}, but the input has only "
                f"{number - 1} lines: it holds the scores of another input; {afresh}"
            )
        if record.get("line_sha256") != _digest(raw[:-1] if raw.endswith(b"\n") else raw):
            raise ValueError(
                f"line {number} of the input is not the line {output.path} scored there (its "
                f"SHA-256 differs): it holds the scores of another input; {afresh}"
            )
        _count(record, summary, new=False)
        summary.resumed += 1


class _InputLines:
    """The input's lines as bytes, each with its "\\n" (but perhaps the last); "-" is stdin."""

    def __init__(self, corpus: PathLike) -> None:
        self.stdin = str(corpus) == "-"
        self.file: IO[bytes]
        if self.stdin:
            if sys.stdin is None:
                raise ValueError("no stdin to read the corpus from")
            self.file = sys.stdin.buffer
        else:
            self.file = open(corpus, "rb")  # closed by __exit__

    def __enter__(self) -> Iterator[bytes]:
        return iter(self.file)

    def __exit__(self, *exc: object) -> None:
        if not self.stdin:
            self.file.close()


def _count_lines(corpus: PathLike) -> Optional[int]:
    """The number of lines of a regular file (None for stdin or a pipe): the bar's total."""
    if str(corpus) == "-" or not pathlib.Path(corpus).is_file():
        return None
    n, last = 0, b"\n"
    with open(corpus, "rb") as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def _resume_notice(path: pathlib.Path, summary: CorpusSummary) -> str:
    torn = f" (cut off a torn last line of {summary.repaired} bytes)" if summary.repaired else ""
    return f"resuming {path} after line {summary.resumed}{torn}"
