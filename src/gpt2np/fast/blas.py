"""The BLAS's own thread pool, held at one thread while a fast kernel runs.

Who owns the cores. NumPy's OpenBLAS keeps a pool of threads and spreads every large product
over it; the fast kernels keep one too (:mod:`gpt2np.fast.threads`). Two pools on the same
cores contend: OpenBLAS's threads spin for a while after each product, waiting for the next,
and while they spin a gpt2np thread that wants the core (a LayerNorm, a softmax) waits. On a
busy machine it is worse: a product split in two halves ends when the slower half ends, and the
half whose core another process holds is slow. Measured on 2 cores with a load average of 7, a
decode step's products ran 6× slower with OpenBLAS's two threads than with one.

So the fast kernels are the one owner: each cuts its products into parts, hands them to
gpt2np's threads (a thread takes the next part when it is free, so a slowed core costs only its
share), and each part runs single-threaded BLAS. :func:`single_threaded` holds OpenBLAS at one
thread for the duration of a kernel and gives the user's setting back afterwards, so NumPy code
outside gpt2np keeps OpenBLAS's threads.

OpenBLAS is reached through its ``openblas_set_num_threads`` (under the names NumPy's bundled
scipy-openblas gives it), looked up in the libraries NumPy's core loaded. With another BLAS
(Accelerate, MKL, a build without the symbol) nothing is changed: :func:`available` is False
and the kernels still work, sharing the cores as before.
"""

from __future__ import annotations

import ctypes
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional, TypeVar

from ..support.checks import check_int

__all__ = ["available", "blas_threads", "held_at", "run_at", "set_blas_threads", "single_threaded"]

R = TypeVar("R")

#: (set, get) symbol names: NumPy's wheels (scipy-openblas, 64-bit and 32-bit integers), then
#: OpenBLAS's own names (a NumPy built against a system OpenBLAS).
_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)

_lock = threading.Lock()
_users = 0  # kernels inside single_threaded() right now (several threads may run models)
_saved = 0  # the thread count to give back when the last of them leaves
_functions: Optional[tuple[Callable[[int], Any], Callable[[], int]]] = None
_looked_up = False


def _find() -> Optional[tuple[Callable[[int], Any], Callable[[], int]]]:
    """OpenBLAS's set and get functions, or None. dlsym on NumPy's core extension searches the
    libraries it was linked with, where its BLAS is, however the wheel names that file."""
    global _functions, _looked_up
    if _looked_up:
        return _functions
    _looked_up = True
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):  # 2.x, 1.x
        try:
            lib = ctypes.CDLL(importlib.import_module(name).__file__)
            break
        except (ImportError, OSError, TypeError):
            continue
    else:
        return None
    for set_name, get_name in _SYMBOLS:
        setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
        if setter is not None and getter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            _functions = (setter, getter)
            break
    return _functions


def available() -> bool:
    """Whether gpt2np can set NumPy's BLAS thread count (OpenBLAS, as NumPy's wheels bundle)."""
    return _find() is not None


def blas_threads() -> Optional[int]:
    """OpenBLAS's thread count now, or None when it cannot be read."""
    found = _find()
    return None if found is None else int(found[1]())


def set_blas_threads(n: int) -> None:
    """Set OpenBLAS's thread count for NumPy's products outside the fast kernels (a no-op
    without OpenBLAS). Inside a kernel it is one until the kernel returns."""
    n = check_int("threads", n, minimum=1)
    global _saved
    found = _find()
    with _lock:
        if _users:  # a kernel runs: it gives this back when it ends
            _saved = n
        elif found is not None:
            found[0](n)


def _enter(n: int, found: tuple[Callable[[int], Any], Callable[[], int]]) -> None:
    global _users, _saved
    with _lock:
        now = int(found[1]())
        if _users == 0:
            _saved = now
        if now != n:
            found[0](n)
        _users += 1


def _leave(found: tuple[Callable[[int], Any], Callable[[], int]]) -> None:
    global _users
    with _lock:
        _users -= 1
        if _users == 0 and int(found[1]()) != _saved:
            found[0](_saved)


@contextmanager
def held_at(n: int) -> Iterator[None]:
    """OpenBLAS at ``n`` threads inside the block, the user's count given back after it (when the
    last of several threads running kernels at once leaves; while several are inside, the last
    to enter sets the count: that changes the speed of the others' products, not their
    numbers)."""
    found = _find()
    if found is None:
        yield
        return
    _enter(n, found)
    try:
        yield
    finally:
        _leave(found)


def run_at(n: int, fn: Callable[[], R]) -> R:
    """fn() inside ``held_at(n)``, without a context manager's cost (a few µs, which a decode
    step would pay at each of its ~50 products)."""
    found = _functions if _looked_up else _find()
    if found is None:
        return fn()
    _enter(n, found)
    try:
        return fn()
    finally:
        _leave(found)


def single_threaded() -> Any:
    """OpenBLAS at one thread inside the block (:func:`held_at` one): the parts of a product
    that gpt2np's threads share each run in the thread that took them."""
    return held_at(1)
