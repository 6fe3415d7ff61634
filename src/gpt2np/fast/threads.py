"""Worker threads for the fast kernels.

NumPy lets go of Python's global lock inside its ufunc loops, its reductions and its BLAS calls,
so plain Python threads run them on several cores at once. BLAS already spreads a large product
over the cores; what it does not spread is the rest: the softmax's exp, GELU's tanh, LayerNorm's
passes, and attention's many small products (each too small for BLAS to thread well). The fast
kernels cut such work into parts and hand them to :func:`run`.

How many threads: ``GPT2NP_NUM_THREADS`` when it is set; otherwise the CPUs this process may run
on, but no more than ``OMP_NUM_THREADS`` or ``OPENBLAS_NUM_THREADS`` when either is set (whoever
limits BLAS's threads wants no more of ours). The environment is read once, at the first call
of :func:`threads`, as OpenBLAS and OpenMP read theirs once: a decode step asks ~50 times, and
reading three variables and the CPU mask costs 6-17 µs a time (about 0.8 ms of a 25 ms step).
:func:`set_threads` changes the count at run time (None reads the environment again); with 1,
everything runs in the calling thread. The numbers a kernel computes do not depend on it.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterable
from queue import SimpleQueue
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from ..support.checks import check_int

__all__ = ["THREADED_NUMBERS", "default_threads", "run", "set_threads", "share_rows", "threads"]

#: Numbers below which one thread does the whole array (a hand-over costs tens of µs).
THREADED_NUMBERS = 1 << 17

T = TypeVar("T")
R = TypeVar("R")

_ENV_LIMITS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")

_threads: Optional[int] = None  # None: default_threads(), read once into _default
_default: Optional[int] = None
_pool: Optional[_Workers] = None
_pool_key: tuple[int, int] = (0, 0)  # (pid, workers) the pool was made for
_lock = threading.Lock()


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name, "").strip()
    try:
        n = int(value)
    except ValueError:
        return None  # unset, or something we cannot read: not a limit
    return n if n >= 1 else None


def default_threads() -> int:
    """The thread count the environment asks for (see the module docstring)."""
    asked = _env_int("GPT2NP_NUM_THREADS")
    if asked is not None:
        return asked
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        n = os.cpu_count() or 1
    for name in _ENV_LIMITS:
        limit = _env_int(name)
        if limit is not None:
            n = min(n, limit)
    return max(1, n)


def threads() -> int:
    """How many threads :func:`run` uses (the calling one included)."""
    global _default
    if _threads is not None:
        return _threads
    if _default is None:
        _default = default_threads()
    return _default


def set_threads(n: Optional[int]) -> None:
    """Use ``n`` threads from now on (1: none besides the caller); None: the default again, from
    the environment as it is now."""
    global _threads, _default
    _threads = None if n is None else check_int("threads", n, minimum=1)
    _default = None


class _Workers:
    """``n`` daemon threads that run the tasks put on one queue, one at a time each.

    Lighter than :class:`concurrent.futures.ThreadPoolExecutor` (no Future, no Condition per
    task: a hand-over is a put on a C queue), which matters to a decode step: it hands work
    over about fifty times. A pool replaced by another (a new thread count) is told to stop.
    """

    def __init__(self, n: int) -> None:
        self.tasks: SimpleQueue[Optional[Callable[[], None]]] = SimpleQueue()
        for i in range(n):
            threading.Thread(target=self._serve, name=f"gpt2np-{i}", daemon=True).start()
        self.n = n

    def _serve(self) -> None:
        while (task := self.tasks.get()) is not None:
            task()

    def submit(self, task: Callable[[], None]) -> None:
        self.tasks.put(task)

    def stop(self) -> None:
        for _ in range(self.n):
            self.tasks.put(None)


def _executor(workers: int) -> _Workers:
    """The shared pool of ``workers`` threads, made anew after a fork (a forked child has none
    of its parent's threads, and a pool that thinks it has would never run anything)."""
    global _pool, _pool_key
    key = (os.getpid(), workers)
    with _lock:
        if _pool is None or _pool_key != key:
            if _pool is not None and _pool_key[0] == key[0]:
                _pool.stop()
            _pool = _Workers(workers)
            _pool_key = key
        return _pool


def run(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """[fn(item) for item in items], the items shared out among :func:`threads` threads.

    The calling thread works too, and every thread takes the next item as soon as it is free,
    so a core that another process keeps busy slows the whole by its share only. Returns when
    every item is done (the items may write into shared arrays); the first exception raised by
    an item is raised here, after the others have finished.
    """
    items = list(items)
    n = min(threads(), len(items))
    if n <= 1:
        return [fn(item) for item in items]
    results: list[Any] = [None] * len(items)  # each None becomes fn's R before it is returned
    errors: list[BaseException] = []
    taken, finished = itertools.count(), itertools.count(1)  # next() is atomic under the GIL
    all_done = threading.Lock()  # held until the last item finishes
    all_done.acquire()

    def work() -> None:
        # Waiting below is for the items, not for this task: a task that starts after the
        # items ran out finds nothing to do, so run() never waits on a pool that is busy.
        while (i := next(taken)) < len(items):
            try:
                if not errors:  # after a failure the remaining items are skipped
                    results[i] = fn(items[i])
            except BaseException as e:  # re-raised in the caller (Ctrl-C included)
                errors.append(e)
            finally:
                if next(finished) == len(items):
                    all_done.release()

    pool = _executor(threads() - 1)
    for _ in range(n - 1):
        pool.submit(work)
    work()
    all_done.acquire()
    if errors:
        raise errors[0]
    return results


def share_rows(work: Callable[[slice], object], n_rows: int, size: int) -> None:
    """work(rows) for slices of rows that together cover 0 … n_rows-1: one slice when ``size``
    (the numbers involved) is small, else about two per thread, run by :func:`run`."""
    n = threads() if size >= THREADED_NUMBERS else 1
    if n == 1 or n_rows < 2:
        work(slice(0, n_rows))
        return
    parts = min(n_rows, 2 * n)
    bounds = np.linspace(0, n_rows, parts + 1).round().astype(int)
    run(work, [slice(int(a), int(z)) for a, z in zip(bounds[:-1], bounds[1:])])
