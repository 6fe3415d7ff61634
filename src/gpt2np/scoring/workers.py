"""Scoring a corpus's chunks in ``jobs`` worker processes, the records coming back in order.

Each worker is a process of its own (multiprocessing's "spawn" start, the same on every
platform), which calls the loader once (``functools.partial(gpt2np.load, path)``): a loaded
model's weights are memory-mapped read-only from the file, so the workers share one copy of
them in the page cache and each costs only its own activations, tokenizer and interpreter
(docs/scoring-corpus.md has the measurements). A worker takes one chunk at a time, scores it
(:func:`gpt2np.scoring.records.score_documents`) and sends its records back; the main process
hands out the chunks in input order, no more than a few ahead of the first one not yet done,
and yields their records in that order.

A worker that dies (killed, out of memory, a crash in native code) is reported with a
RuntimeWarning and replaced, and the documents of the chunk it held are scored again, one
document at a time; a document whose worker dies a second time gets an error record. A worker
that dies before it has loaded the model, or an exception in a worker, stops the run (the
exception is raised in the main process, once the records of the chunks before are out;
an exception while scoring names the lines of its chunk, a death while loading is an
OSError: the command's one line of error). Each worker runs ``cpus // jobs`` threads (BLAS's and
gpt2np's), unless ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` or ``GPT2NP_NUM_THREADS`` say
otherwise.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import pickle
import signal
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple, Optional

from ..errors import warn
from ..fast.threads import default_threads
from .records import WORKER_DIED, Document, Loader, Settings, error_record, score_chunk

__all__ = ["WorkerPool"]

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: How many chunks past the first unfinished one may be handed out (a bound on memory).
AHEAD_PER_JOB = 4


class _Task(NamedTuple):
    """Chunk ``chunk`` (its number from 0), or document ``doc`` of it when it is retried."""

    chunk: int
    doc: Optional[int]
    docs: list[Document]


class WorkerPool:
    """``jobs`` worker processes that each call ``loader`` once and score chunks with
    ``settings`` (resolved for the model); :meth:`run` gives the records of each chunk, in
    order. ``deaths`` counts the workers that died (and were replaced).

    >>> with WorkerPool(partial(gpt2np.load, "124M"), settings, jobs=2) as pool:
    ...     for records in pool.run(chunks): ...
    """

    def __init__(self, loader: Loader, settings: Settings, jobs: int) -> None:
        try:
            pickle.dumps(loader)
        except Exception as e:
            raise TypeError(
                f"jobs > 1 needs a loader the worker processes can unpickle, such as "
                f"functools.partial(gpt2np.load, path); {loader!r} does not pickle ({e})"
            ) from None
        self.loader, self.settings = loader, settings
        self.threads = max(1, default_threads() // jobs)
        self.workers: list[_Worker] = []
        self.retries: collections.deque[_Task] = collections.deque()
        self.done: dict[int, list[dict[str, Any]]] = {}
        self.parts: dict[int, dict[int, dict[str, Any]]] = {}  # retried chunks, by document
        self.sizes: dict[int, int] = {}
        self.failed: dict[int, Exception] = {}  # chunks whose scoring raised, by number
        self.deaths = 0
        try:
            for i in range(jobs):
                self.workers.append(_Worker(i, loader, settings, self.threads))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, chunks: Iterator[list[Document]]) -> Iterator[list[dict[str, Any]]]:
        """The records of each chunk, in order."""
        ahead = AHEAD_PER_JOB * len(self.workers)
        handed, out, more = 0, 0, True
        while True:
            for w in self.workers:
                if not w.ready or w.task is not None:
                    continue
                if self.retries:
                    task: Optional[_Task] = self.retries.popleft()
                elif more and handed < out + ahead:
                    chunk = next(chunks, None)
                    more = chunk is not None
                    task = None if chunk is None else _Task(handed, None, chunk)
                    if chunk is not None:
                        self.sizes[handed] = len(chunk)
                        handed += 1
                else:
                    task = None
                if task is not None:
                    w.task = task
                    with contextlib.suppress(OSError):  # if it has died, _wait will see
                        w.conn.send(task)
            while out in self.done:
                yield self.done.pop(out)
                out += 1
            if out in self.failed:
                raise self.failed[out]
            if not more and out == handed:
                return
            self._wait()

    def _wait(self) -> None:
        """Wait for a message or a death, and take what came."""
        by_handle: dict[Any, _Worker] = {}
        for w in self.workers:
            by_handle[w.conn] = by_handle[w.process.sentinel] = w
        for handle in wait(list(by_handle)):
            w = by_handle[handle]
            if w not in self.workers:  # replaced already, seen through its other handle
                continue
            messages, gone = [], False
            try:
                while w.conn.poll():
                    messages.append(w.conn.recv())
            except (EOFError, OSError):
                gone = True
            for kind, payload in messages:
                if kind == "failed":  # loading: stop now; a chunk: once those before it are out
                    task, w.task = w.task, None
                    if task is None:
                        raise payload
                    self.failed.setdefault(task.chunk, payload)
                    continue
                if kind == "ready":
                    w.ready = True
                else:
                    task, w.task = w.task, None
                    assert task is not None
                    self._finish(task, payload)
            if gone or not w.process.is_alive():
                self._replace(w)

    def _finish(self, task: _Task, records: list[dict[str, Any]]) -> None:
        if task.doc is None:
            self.done[task.chunk] = records
            return
        parts = self.parts.setdefault(task.chunk, {})
        parts[task.doc] = records[0]
        if len(parts) == self.sizes[task.chunk]:
            self.done[task.chunk] = [parts[i] for i in range(len(parts))]
            del self.parts[task.chunk]

    def _replace(self, w: _Worker) -> None:
        w.process.join(5)
        how = _death(w.process.exitcode)
        if not w.ready:  # one line from the command, as any error; the records so far are kept
            raise ChildProcessError(f"a worker process {how} while loading the model (out of "
                                    "memory?); run the command again to go on")  # fmt: skip
        self.deaths += 1
        self.workers[self.workers.index(w)] = _Worker(w.index, self.loader, self.settings,
                                                      self.threads)  # fmt: skip
        w.conn.close()
        task, w.task = w.task, None
        if task is None:
            warn(f"worker {w.index} (pid {w.process.pid}) {how}; started another", RuntimeWarning)
        elif task.doc is None:
            lines = f"lines {task.docs[0].line}-{task.docs[-1].line}"
            warn(
                f"worker {w.index} (pid {w.process.pid}) {how} while scoring {lines}: scoring "
                f"its {len(task.docs)} documents again, one at a time",
                RuntimeWarning,
            )
            self.retries.extend(_Task(task.chunk, i, [d]) for i, d in enumerate(task.docs))
        else:
            (doc,) = task.docs
            warn(
                f"worker {w.index} (pid {w.process.pid}) {how} again while scoring line "
                f"{doc.line}: that document gets an error record, which a rerun scores again",
                RuntimeWarning,
            )
            why = f"{WORKER_DIED} {how}, twice (a rerun scores it again)"
            self._finish(task, [error_record(doc, why)])

    def close(self) -> None:
        """Ask the workers to stop; end those that do not within a second."""
        for w in self.workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in self.workers:
            w.process.join(1 if w.task is None else 0)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(5)
            w.conn.close()


class _Worker:
    def __init__(self, index: int, loader: Loader, settings: Settings, threads: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        self.process = context.Process(
            target=_work, args=(theirs, loader, settings), name=f"gpt2np-score-{index}"
        )
        self.process.daemon = True
        with _thread_limit(threads):
            self.process.start()
        theirs.close()
        self.index = index
        self.ready = False
        self.task: Optional[_Task] = None


def _work(conn: Connection, loader: Loader, settings: Settings) -> None:
    """A worker process: load the model, say "ready", then score each chunk it is sent and
    send back its records, until it is sent None or its parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    try:
        model = loader()
        reply: tuple[str, Any] = ("ready", os.getpid())
    except Exception as e:
        with contextlib.suppress(OSError):
            conn.send(("failed", _sendable(e)))
        return
    while True:
        try:
            conn.send(reply)
            task = conn.recv()
        except (EOFError, OSError):  # the main process is gone
            return
        if task is None:
            return
        try:
            reply = ("done", score_chunk(model, task.docs, settings))
        except Exception as e:
            reply = ("failed", _sendable(e))


def _sendable(e: Exception) -> Exception:
    """``e``, or a RuntimeError of its text when it would not pickle."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def _death(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


@contextlib.contextmanager
def _thread_limit(threads: int) -> Iterator[None]:
    """The environment a worker starts with: each of BLAS's thread variables that the user has
    not set, set to ``threads`` (gpt2np's own threads follow them, see gpt2np.fast.threads)."""
    unset = {name: os.environ.get(name) for name in _THREAD_VARIABLES if not os.environ.get(name)}
    os.environ.update({name: str(threads) for name in unset})
    try:
        yield
    finally:
        for name, value in unset.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
