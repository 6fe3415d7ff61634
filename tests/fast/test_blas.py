"""gpt2np.fast.blas: OpenBLAS's thread count is found, set, held at one inside a kernel and
given back, also when several threads run kernels at once; without OpenBLAS nothing changes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gpt2np.fast import blas


@pytest.fixture
def openblas():
    if not blas.available():
        pytest.skip("NumPy's BLAS is not an OpenBLAS whose threads gpt2np can set")
    before = blas.blas_threads()
    yield
    blas.set_blas_threads(before or 1)


def test_set_and_read_back(openblas) -> None:
    for n in (1, 2, 3):
        blas.set_blas_threads(n)
        assert blas.blas_threads() == n


def test_single_threaded_nests_and_gives_the_count_back(openblas) -> None:
    blas.set_blas_threads(3)
    with blas.single_threaded():
        assert blas.blas_threads() == 1
        with blas.single_threaded():
            assert blas.blas_threads() == 1
        assert blas.blas_threads() == 1  # the outer kernel still runs
    assert blas.blas_threads() == 3


def test_a_count_set_while_a_kernel_runs_takes_effect_after_it(openblas) -> None:
    blas.set_blas_threads(2)
    with blas.single_threaded():
        blas.set_blas_threads(3)
        assert blas.blas_threads() == 1
    assert blas.blas_threads() == 3


def test_the_last_of_several_threads_gives_the_count_back(openblas) -> None:
    """Kernels running in two threads at once: the first to leave keeps one thread for the
    other; the count comes back when the second leaves."""
    blas.set_blas_threads(2)
    inside, leave = threading.Barrier(2, timeout=30), threading.Event()
    seen: list[int | None] = []

    def kernel() -> None:
        with blas.single_threaded():
            inside.wait()
            leave.wait(30)
            seen.append(blas.blas_threads())

    other = threading.Thread(target=kernel)
    other.start()
    with blas.single_threaded():
        inside.wait()
        leave.set()
        other.join(30)
        seen.append(blas.blas_threads())
    assert seen == [1, 1] and blas.blas_threads() == 2


def test_an_error_inside_gives_the_count_back(openblas) -> None:
    blas.set_blas_threads(2)
    with pytest.raises(KeyError), blas.single_threaded():
        raise KeyError("boom")
    assert blas.blas_threads() == 2


def test_without_openblas_nothing_changes(monkeypatch) -> None:
    """Another BLAS (Accelerate, MKL): no symbol found, the kernels run as they are."""
    monkeypatch.setattr(blas, "_looked_up", True)
    monkeypatch.setattr(blas, "_functions", None)
    assert not blas.available() and blas.blas_threads() is None
    blas.set_blas_threads(2)  # a no-op
    with blas.single_threaded():
        a = np.ones((3, 3), np.float32)
        assert (a @ a == 3).all()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_counts_are_refused(bad) -> None:
    with pytest.raises(
        ValueError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError
    ):
        blas.set_blas_threads(bad)
