"""gpt2np.fast.owner chooses OpenBLAS's pool or one thread for few-row products from the times it
measures: driven here by a simulated clock (each product advances it by the time the scenario
says), so nothing is timed."""

from __future__ import annotations

from typing import Callable

import pytest

from gpt2np.fast import owner as fast_owner
from gpt2np.fast.owner import MAX_WAIT, PROBE_WAIT, SLOWER, Owner

#: Simulated seconds of one product: the pool's on an idle machine, one thread's (1.4x, as
#: measured for a 124M decode step), the pool's beside a CPU-bound process (collapsed).
POOL, ONE, COLLAPSED = 1.0, 1.4, 20.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(cost: Callable[[bool, int], float], products: int, key: str = "k") -> list[bool]:
    """Run ``products`` products of one shape through an Owner whose clock advances by
    cost(on the pool?, index) during each; the list of choices (True: the pool)."""
    clock = Clock()
    owner = Owner(clock)
    chosen = []
    for i in range(products):
        pooled = owner.pooled(key)
        chosen.append(pooled)

        def product(pooled: bool = pooled, i: int = i) -> None:
            clock.now += cost(pooled, i)

        owner.run(key, product, threads=2)
    return chosen


def probes(chosen: list[bool]) -> list[int]:
    """Indices of products that ran on the pool after one thread had taken over."""
    first_one = chosen.index(False)
    return [i for i in range(first_one, len(chosen)) if chosen[i]]


def test_an_idle_machine_keeps_the_pool() -> None:
    """Steady pooled times, with the usual jitter below SLOWER: the pool owns every product."""
    jitter = [1.0, 1.3, 0.9, 1.6, 1.1]
    assert all(simulate(lambda pooled, i: POOL * jitter[i % 5], 5000))


def test_a_busy_core_hands_the_products_to_one_thread_and_probes_ever_more_rarely() -> None:
    """From product 100 on the pool collapses: the next product runs on one thread; probes
    follow after 16, 32, ... one-thread products, never more than MAX_WAIT apart, and all of
    them lose."""
    chosen = simulate(
        lambda pooled, i: COLLAPSED if pooled and i >= 100 else (POOL if pooled else ONE), 20_000
    )
    assert all(chosen[:101]) and not chosen[101]
    found = probes(chosen)
    gaps = [b - a - 1 for a, b in zip([100, *found], found)]  # one-thread products between
    expected = [min(PROBE_WAIT << k, MAX_WAIT) for k in range(len(gaps))]
    assert gaps == expected
    # Beside the busy process nearly every product runs on one thread.
    assert sum(chosen[101:]) / len(chosen[101:]) < 0.002


def test_probes_won_by_luck_on_a_busy_machine_still_back_off() -> None:
    """Busy from product 100 on, but every other pooled product is fast (the other process was
    off its core for a moment), so every probe wins and the next product collapses: the waits
    still double up to MAX_WAIT, and nearly every product runs on one thread."""
    pooled_calls = [0]

    def cost(pooled: bool, i: int) -> float:
        if not pooled:
            return ONE
        if i < 100:
            return POOL
        pooled_calls[0] += 1
        return POOL if pooled_calls[0] % 2 else COLLAPSED  # a lucky probe, then the collapse

    chosen = simulate(cost, 40_000)
    runs = [i for i in range(101, len(chosen)) if not chosen[i] and chosen[i - 1]]
    waits = [
        next((j for j in range(start, len(chosen)) if chosen[j]), len(chosen)) - start
        for start in runs
    ]
    assert waits[:-1] == [min(PROBE_WAIT << k, MAX_WAIT) for k in range(len(waits) - 1)]
    assert sum(chosen[101:]) / len(chosen[101:]) < 0.005


def test_the_pool_comes_back_when_the_other_process_ends() -> None:
    """Busy from product 100 to 3000, idle after: the first probe after 3000 wins and the pool
    owns every product from then on, the wait starting short again next time."""
    busy = range(100, 3000)
    chosen = simulate(lambda pooled, i: (COLLAPSED if i in busy else POOL) if pooled else ONE, 6000)
    back = next(i for i in probes(chosen) if i >= 3000)
    assert back - 3000 <= MAX_WAIT and all(chosen[back:])


def test_one_slow_product_costs_only_a_short_spell_on_one_thread() -> None:
    """A single pooled product over SLOWER x the fastest (the process was descheduled once):
    PROBE_WAIT products on one thread, then the probe wins and the pool is back."""
    chosen = simulate(lambda pooled, i: (SLOWER * 1.5 if i == 50 else POOL) if pooled else ONE, 200)
    assert chosen[:51] == [True] * 51
    assert chosen[51 : 51 + PROBE_WAIT] == [False] * PROBE_WAIT
    assert all(chosen[51 + PROBE_WAIT :])


def test_a_machine_slower_for_good_is_followed() -> None:
    """Pooled times that drift up slowly (1.5x over the run, never a jump) keep the pool."""
    assert all(simulate(lambda pooled, i: POOL * (1 + i / 10_000), 5000))


def test_shapes_are_judged_apart() -> None:
    """One shape collapsing does not move another off the pool."""
    clock = Clock()
    owner = Owner(clock)
    for i in range(200):
        for key, cost in (("slow", COLLAPSED if i >= 10 else POOL), ("fast", POOL)):
            pooled = owner.pooled(key)
            owner.run(
                key, lambda c=cost if pooled else ONE: setattr(clock, "now", clock.now + c), 2
            )
    assert not owner.pooled("slow") and owner.pooled("fast")


def test_one_thread_asked_runs_on_one_thread_and_learns_nothing() -> None:
    owner = Owner(Clock())
    ran = []
    owner.run("k", lambda: ran.append(1), threads=1)
    assert ran == [1] and owner.shapes == {}


@pytest.mark.parametrize("threads", [1, 2])
def test_few_rows_runs_the_product_once_with_the_shared_owner(monkeypatch, threads) -> None:
    from gpt2np.fast import threads as parallel

    owner = Owner(Clock())
    monkeypatch.setattr(fast_owner, "OWNER", owner)
    parallel.set_threads(threads)
    try:
        ran = []
        fast_owner.few_rows("k", lambda: ran.append(1))
        fast_owner.few_rows("k", lambda: ran.append(1), threaded=False)
    finally:
        parallel.set_threads(None)
    assert ran == [1, 1] and list(owner.shapes) == (["k"] if threads == 2 else [])
