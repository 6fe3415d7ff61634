"""gpt2np.fast.owner chooses OpenBLAS's pool or one thread for the few-row products of a forward
pass from the times it measures: driven here by a simulated clock (each product advances it by
the time the scenario says), so nothing is timed."""

from __future__ import annotations

import math
from typing import Callable

import pytest

from gpt2np.fast import owner as fast_owner
from gpt2np.fast.owner import HOLD, MAX_WAIT, PROBE_WAIT, SLOWER, Owner

#: Simulated seconds of one product: the pool's on an idle machine, one thread's (1.4x, as
#: measured for a 124M decode step), the pool's beside a CPU-bound process (collapsed).
POOL, ONE, COLLAPSED = 1.0, 1.4, 20.0

#: Products per simulated pass (the last one is the head, which ends it).
PRODUCTS = 5


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


Cost = Callable[[bool, int, int], float]  # (on the pool?, pass, product) -> seconds


def simulate(
    cost: Cost, passes: int, owner: Owner | None = None, key: str = "k"
) -> list[list[bool]]:
    """Run ``passes`` passes of PRODUCTS products through an Owner whose clock advances by
    cost(on the pool?, pass, product) during each product; per pass, where each product ran
    (True: the pool)."""
    clock = Clock()
    owner = owner or Owner(clock)
    owner.clock = clock
    ran: list[list[bool]] = []
    for p in range(passes):
        ran.append([])
        for i in range(PRODUCTS):

            def product(p: int = p, i: int = i) -> None:
                ran[-1].append(owner.on_pool)
                clock.now += cost(owner.on_pool, p, i)

            owner.run(key, product, threads=2, last=i == PRODUCTS - 1)
    return ran


def started_on_pool(ran: list[list[bool]]) -> list[bool]:
    return [products[0] for products in ran]


def probes(ran: list[list[bool]]) -> list[int]:
    """Indices of passes that started on the pool after one thread had taken over."""
    chosen = started_on_pool(ran)
    first_one = chosen.index(False)
    return [i for i in range(first_one, len(chosen)) if chosen[i]]


def test_an_idle_machine_keeps_the_pool() -> None:
    """Steady pooled times with jitter, single products up to 3x slow now and then (an
    interrupt): the pool runs every product, which a per-product choice would not."""
    jitter = [1.0, 1.3, 0.9, 1.6, 1.1, 3.0, 1.0]
    ran = simulate(lambda pooled, p, i: POOL * jitter[(p * PRODUCTS + i) % 7], 2000)
    assert all(all(products) for products in ran)


def test_a_busy_core_hands_the_passes_to_one_thread_and_probes_ever_more_rarely() -> None:
    """From pass 100 on the pool collapses: that pass finishes on one thread as soon as it has
    spent SLOWER x the fastest pooled pass, the next passes run on one thread; probes follow
    after 16, 32, ... one-thread passes, never more than MAX_WAIT apart, all lose, and each
    goes back to one thread once it has spent a one-thread pass's time."""
    ran = simulate(
        lambda pooled, p, i: COLLAPSED if pooled and p >= 100 else (POOL if pooled else ONE),
        20_000,
    )
    assert all(all(products) for products in ran[:100])
    assert ran[100] == [True, False, False, False, False]  # 20 > 2 x 5: lost after one product
    found = probes(ran)
    gaps = [b - a - 1 for a, b in zip([100, *found], found)]  # one-thread passes between
    assert gaps == [min(PROBE_WAIT << k, MAX_WAIT) for k in range(len(gaps))]
    assert all(ran[p] == [True, False, False, False, False] for p in found)
    # Beside the busy process nearly every pass runs on one thread.
    assert sum(started_on_pool(ran)[101:]) / len(ran[101:]) < 0.002


def test_a_probe_stops_once_it_has_spent_a_one_thread_pass() -> None:
    """A pool slowed 1.6x (not collapsed) loses its probes, and a probe's pooled products stop
    once they have taken as long as the fastest one-thread pass: no probe costs more than that
    pass and one product."""
    slow = 1.6 * ONE
    ran = simulate(lambda pooled, p, i: (slow if p >= 50 else POOL) if pooled else ONE, 3000)
    found = probes(ran)
    assert len(found) >= 3
    for p in found:
        pooled = sum(ran[p])
        assert pooled == math.floor(PRODUCTS * ONE / slow) + 1  # over the limit: one thread


def test_probes_won_by_luck_on_a_busy_machine_still_back_off() -> None:
    """Busy from pass 100 on, but every other pooled pass is fast (the other process was off
    its core for a moment), so every probe wins and the next pass collapses: the waits still
    double up to MAX_WAIT, and nearly every pass runs on one thread."""
    pooled_passes: set[int] = set()

    def cost(pooled: bool, p: int, i: int) -> float:
        if not pooled:
            return ONE
        if p < 100:
            return POOL
        pooled_passes.add(p)
        return POOL if len(pooled_passes) % 2 else COLLAPSED  # a lucky probe, then the collapse

    chosen = started_on_pool(simulate(cost, 40_000))
    runs = [i for i in range(101, len(chosen)) if not chosen[i] and chosen[i - 1]]
    waits = [
        next((j for j in range(start, len(chosen)) if chosen[j]), len(chosen)) - start
        for start in runs
    ]
    assert waits[:-1] == [min(PROBE_WAIT << k, MAX_WAIT) for k in range(len(waits) - 1)]
    assert sum(chosen[101:]) / len(chosen[101:]) < 0.005


def test_the_pool_comes_back_when_the_other_process_ends() -> None:
    """Busy from pass 100 to 3000, idle after: the first probe after 3000 wins and the pool
    owns every pass from then on; a pool held HOLD passes starts its next wait short again."""
    busy = range(100, 3000)
    owner = Owner()
    ran = simulate(
        lambda pooled, p, i: (COLLAPSED if p in busy else POOL) if pooled else ONE, 6000, owner
    )
    back = next(i for i in probes(ran) if i >= 3000)
    assert back - 3000 <= MAX_WAIT and all(all(products) for products in ran[back:])
    assert 6000 - back > HOLD
    ran = simulate(lambda pooled, p, i: COLLAPSED if pooled else ONE, 200, owner)
    assert probes(ran)[0] == PROBE_WAIT + 1  # the pass that lost, PROBE_WAIT passes, a probe


def test_one_slow_pass_costs_only_a_short_spell_on_one_thread() -> None:
    """A single pooled pass over SLOWER x the fastest (the process was descheduled for a
    while): PROBE_WAIT passes on one thread, then the probe wins and the pool is back."""
    ran = simulate(lambda pooled, p, i: (COLLAPSED if p == 50 else POOL) if pooled else ONE, 200)
    chosen = started_on_pool(ran)
    assert chosen[:51] == [True] * 51
    assert chosen[51 : 51 + PROBE_WAIT] == [False] * PROBE_WAIT
    assert all(chosen[51 + PROBE_WAIT :])


def test_a_machine_slower_for_good_is_followed() -> None:
    """Pooled times that drift up slowly (1.5x over the run, never a jump) keep the pool."""
    ran = simulate(lambda pooled, p, i: POOL * (1 + p / 4000), 2000)
    assert all(all(products) for products in ran)


def test_passes_are_judged_by_their_first_product() -> None:
    """A prompt's pass (its first product a different shape, and three times as long) does not
    move decode steps off the pool, nor do decode steps judge the prompt's passes."""
    clock = Clock()
    owner = Owner(clock)
    for _ in range(300):
        for key, cost in (("prompt", 3 * POOL), *([("step", POOL)] * 10)):
            for i in range(PRODUCTS):
                owner.run(key, lambda c=cost: setattr(clock, "now", clock.now + c), 2,
                          last=i == PRODUCTS - 1)  # fmt: skip
                assert owner.on_pool
    assert set(owner.passes) == {"prompt", "step"}


def test_a_pass_not_ended_by_a_head_is_ended_by_the_next_one() -> None:
    """The head of many rows is not a few-row product, yet it ends the pass (end_pass)."""
    owner = Owner(Clock())
    owner.run("k", lambda: None, 2, last=False)
    assert owner.current is not None
    owner.end()
    assert owner.current is None and owner.passes["k"].best_pool == 0.0
    owner.end()  # no pass open: nothing to learn
    assert owner.passes["k"].held == HOLD + 1


def test_one_thread_asked_runs_on_one_thread_and_learns_nothing() -> None:
    owner = Owner(Clock())
    ran = []
    owner.run("k", lambda: ran.append(1), threads=1, last=True)
    assert ran == [1] and owner.passes == {} and owner.current is None


def test_the_limit_of_a_pass_follows_slower() -> None:
    """A pooled pass is lost only past SLOWER x the fastest: just under it keeps the pool."""
    under = SLOWER * 0.99
    ran = simulate(lambda pooled, p, i: POOL * (under if p == 20 else 1.0), 100)
    assert all(all(products) for products in ran)


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
        assert (owner.current is not None) == (threads == 2)
        fast_owner.end_pass()
        assert owner.current is None
    finally:
        parallel.set_threads(None)
    assert ran == [1, 1] and list(owner.passes) == (["k"] if threads == 2 else [])
