"""The worker threads of the fast kernels: results in order, really concurrent, errors raised,
no hang (nested calls, after a fork), and the thread count the environment asks for."""

from __future__ import annotations

import multiprocessing
import sys
import threading

import pytest

from gpt2np.fast import threads as parallel


@pytest.fixture
def threads3():
    parallel.set_threads(3)
    yield
    parallel.set_threads(None)


def test_results_in_order_whatever_the_thread_count() -> None:
    for n in (1, 2, 5):
        parallel.set_threads(n)
        try:
            assert parallel.run(lambda x: x * x, range(20)) == [x * x for x in range(20)]
            assert parallel.run(lambda x: x, []) == []
        finally:
            parallel.set_threads(None)


def test_items_run_at_the_same_time(threads3) -> None:
    """Three items that each wait for the other two finish only if three threads run them."""
    barrier = threading.Barrier(3, timeout=30)
    names = parallel.run(lambda _: (barrier.wait(), threading.current_thread().name)[1], range(3))
    assert len(set(names)) == 3 and threading.current_thread().name in names


def test_an_error_is_raised_after_the_other_items(threads3) -> None:
    done, raised = [], threading.Event()

    def item(i: int) -> int:
        if i == 0:
            raised.set()
            raise KeyError("boom")
        raised.wait(30)  # every other item starts after item 0 has failed, or is in flight
        done.append(i)
        return i

    with pytest.raises(KeyError, match="boom"):
        parallel.run(item, range(50))
    assert len(done) < 10  # the items not yet started were skipped


def test_nested_runs_do_not_wait_on_a_busy_pool(threads3) -> None:
    inner = lambda i: sum(parallel.run(lambda j: i * j, range(4)))  # noqa: E731
    assert parallel.run(inner, range(8)) == [6 * i for i in range(8)]


def _child(queue) -> None:
    parallel.set_threads(3)
    queue.put(parallel.run(lambda x: x + 1, range(6)))


@pytest.mark.skipif(sys.platform != "linux", reason="fork is the Linux default start method")
# Python 3.12+ warns that forking a process with threads may deadlock the child: the very case
# this test checks does not (the child makes a pool of its own).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_gets_a_pool_of_its_own(threads3) -> None:
    parallel.run(lambda x: x, range(6))  # the parent's pool exists before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=60) == [1, 2, 3, 4, 5, 6]
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


@pytest.fixture(autouse=True)
def default_read_again():
    """After each test the default is read again: the next threads() sees the environment as
    monkeypatch restores it."""
    yield
    parallel.set_threads(None)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"GPT2NP_NUM_THREADS": "3"}, 3),
        ({"GPT2NP_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, 3),  # ours wins when set
        ({"OPENBLAS_NUM_THREADS": "1"}, 1),
        ({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "4"}, 1),
        ({"GPT2NP_NUM_THREADS": "zero", "OMP_NUM_THREADS": "1"}, 1),  # unreadable: not set
        ({"OMP_NUM_THREADS": "0"}, None),  # not a limit
        ({}, None),  # the CPUs this process may use
    ],
)
def test_default_thread_count(monkeypatch, env, expected) -> None:
    for name in ("GPT2NP_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cpus = parallel.default_threads() if expected is None else expected
    assert parallel.default_threads() == cpus >= 1
    parallel.set_threads(None)  # the environment is read once; None reads it again
    assert parallel.threads() == cpus
    parallel.set_threads(2)
    try:
        assert parallel.threads() == 2
    finally:
        parallel.set_threads(None)
    assert parallel.threads() == cpus
    monkeypatch.setenv("GPT2NP_NUM_THREADS", str(cpus + 1))
    assert parallel.threads() == cpus  # read once: a later change waits for set_threads(None)
    parallel.set_threads(None)
    assert parallel.threads() == cpus + 1


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (2.0, TypeError),
                                        (True, TypeError), ("2", TypeError)])  # fmt: skip
def test_set_threads_checks_its_argument(bad, error) -> None:
    with pytest.raises(error):
        parallel.set_threads(bad)
