"""gpt2np.fast.owner chooses OpenBLAS's pool or one thread for few-row products from the times it
measures: driven here by a simulated clock (each product advances it by the time the scenario
says), so nothing is timed."""

from __future__ import annotations

from typing import Callable

import pytest

from gpt2np.fast import owner as fast_owner
from gpt2np.fast.owner import HOLD, MAX_WAIT, PROBE_WAIT, SLOWER, Owner

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
    """From product 100 on the pool collapses: after two slow products one thread takes over;
    probes follow after 16, 32, ... one-thread products, never more than MAX_WAIT apart, and all
    of them lose."""
    chosen = simulate(
        lambda pooled, i: COLLAPSED if pooled and i >= 100 else (POOL if pooled else ONE), 20_000
    )
    assert all(chosen[:102]) and not chosen[102]
    found = probes(chosen)
    gaps = [b - a - 1 for a, b in zip([101, *found], found)]  # one-thread products between
    expected = [min(PROBE_WAIT << k, MAX_WAIT) for k in range(len(gaps))]
    assert gaps == expected
    # Beside the busy process nearly every product runs on one thread.
    assert sum(chosen[102:]) / len(chosen[102:]) < 0.002


@pytest.mark.parametrize("lucky_every", [2, 3])
def test_probes_won_by_luck_on_a_busy_machine_still_back_off(lucky_every: int) -> None:
    """Busy from product 100 on, but every 2nd (or 3rd) pooled product is fast (the other
    process was off its core for a moment), so every probe wins and slow products follow: the
    lucky ones do not keep the pool (slow ones close together count), the waits still double up
    to MAX_WAIT, and nearly every product runs on one thread: a spell of MAX_WAIT one-thread
    products costs at most 5 pooled ones (the probe, then slow, fast, slow, fast, slow)."""
    pooled_calls = [0]

    def cost(pooled: bool, i: int) -> float:
        if not pooled:
            return ONE
        if i < 100:
            return POOL
        pooled_calls[0] += 1
        return POOL if pooled_calls[0] % lucky_every == 1 else COLLAPSED

    chosen = simulate(cost, 40_000)
    runs = [i for i in range(101, len(chosen)) if not chosen[i] and chosen[i - 1]]
    waits = [
        next((j for j in range(start, len(chosen)) if chosen[j]), len(chosen)) - start
        for start in runs
    ]
    assert waits[:-1] == [min(PROBE_WAIT << k, MAX_WAIT) for k in range(len(waits) - 1)]
    assert sum(chosen[101:]) / len(chosen[101:]) < 0.01


def test_the_pool_comes_back_when_the_other_process_ends() -> None:
    """Busy from product 100 to 3000, idle after: the first probe after 3000 wins and the pool
    owns every product from then on, the wait starting short again next time."""
    busy = range(100, 3000)
    chosen = simulate(lambda pooled, i: (COLLAPSED if i in busy else POOL) if pooled else ONE, 6000)
    back = next(i for i in probes(chosen) if i >= 3000)
    assert back - 3000 <= MAX_WAIT and all(chosen[back:])


def test_isolated_slow_products_on_an_idle_machine_keep_the_pool() -> None:
    """On an idle machine about one pooled product in 250 takes over SLOWER x its usual time (an
    interrupt, a page fault), almost never two in a row: none of them hands a product to one
    thread. (The owner of e44631d..a7b01ab switched at each, for PROBE_WAIT products or more.)"""
    outliers = {i for i in range(0, 100_000, 250)} | {i + 3 for i in range(0, 100_000, 1000)}
    cost = lambda pooled, i: (SLOWER * 1.5 if i in outliers else POOL) if pooled else ONE  # noqa: E731
    assert all(simulate(cost, 100_000))


def test_two_slow_products_in_a_row_cost_a_short_spell_on_one_thread() -> None:
    """Two pooled products in a row over SLOWER x the fastest (the process was descheduled for
    a while): PROBE_WAIT products on one thread, then the probe wins and the pool is back."""
    slow = {50, 51}
    chosen = simulate(
        lambda pooled, i: (SLOWER * 1.5 if i in slow else POOL) if pooled else ONE, 200
    )
    assert chosen[:52] == [True] * 52
    assert chosen[52 : 52 + PROBE_WAIT] == [False] * PROBE_WAIT
    assert all(chosen[52 + PROBE_WAIT :])


def test_a_machine_slower_for_good_is_followed() -> None:
    """Pooled times that drift up slowly (1.5x over the run, never a jump) keep the pool."""
    assert all(simulate(lambda pooled, i: POOL * (1 + i / 10_000), 5000))


def play(owner: Owner, clock: Clock, steps: int, cost: Callable[[str, bool, int], float]) -> list:
    """Decode-like steps of three shapes ("qkv", "proj", "head"); cost(shape, pooled, step).
    The list of (step, shape, pooled) of every product."""
    seen = []
    for i in range(steps):
        for key in ("qkv", "proj", "head"):
            pooled = owner.pooled(key)
            seen.append((i, key, pooled))
            spent = cost(key, pooled, i)
            owner.run(key, lambda spent=spent: setattr(clock, "now", clock.now + spent), 2)
    return seen


def test_a_busy_machine_moves_every_shape_to_one_thread_together() -> None:
    """What slows the pool is the machine, not a shape: from step 20 every pooled product
    collapses; after the first two ("qkv", "proj") one thread runs every shape, "head" included,
    with no slow products of its own first."""
    clock = Clock()
    owner = Owner(clock)
    scale = {"qkv": 3.0, "proj": 1.0, "head": 10.0}

    def cost(key: str, pooled: bool, i: int) -> float:
        return scale[key] * ((COLLAPSED if i >= 20 else POOL) if pooled else ONE)

    seen = play(owner, clock, 30, cost)
    assert [pooled for i, _, pooled in seen if i == 20] == [True, True, False]
    later = [pooled for i, _, pooled in seen if i > 20]
    assert later.index(True) == PROBE_WAIT - 1 and sum(later) == 1  # only the first probe


def test_each_shape_is_judged_against_its_own_times() -> None:
    """Shapes 10x apart in cost on an idle machine: the big one is not slow against the small
    one's time, nothing leaves the pool."""
    clock = Clock()
    owner = Owner(clock)
    scale = {"qkv": 3.0, "proj": 1.0, "head": 10.0}
    seen = play(owner, clock, 500, lambda key, pooled, i: scale[key] * (POOL if pooled else ONE))
    assert all(pooled for _, _, pooled in seen)


def test_a_probe_waits_for_a_shape_whose_one_thread_time_is_known() -> None:
    """After one thread takes over, the one-thread times of the earlier spell are forgotten; a
    probe is judged against the current one: it runs only on a shape timed on one thread since."""
    clock = Clock()
    owner = Owner(clock)
    owner.record("a", True, POOL)
    owner.record("b", True, POOL)
    owner.record("a", True, COLLAPSED)
    owner.record("a", True, COLLAPSED)  # one thread takes over
    assert not owner.on_pool
    for _ in range(PROBE_WAIT):
        owner.record("a", False, ONE)  # "b" is never timed on one thread in this spell
    assert owner.pooled("a") and not owner.pooled("b")


def test_a_pool_that_held_long_starts_the_wait_short_again() -> None:
    """Backoff doubles only while probes lose or the pool loses again within HOLD products."""
    owner = Owner(Clock())

    def collapse() -> None:
        owner.record("k", True, COLLAPSED)
        owner.record("k", True, COLLAPSED)

    owner.record("k", True, POOL)
    collapse()
    assert owner.wait == PROBE_WAIT
    for _ in range(PROBE_WAIT):
        owner.record("k", False, ONE)
    owner.record("k", True, POOL)  # the probe wins
    assert owner.on_pool
    collapse()  # ... and loses again at once: the wait doubles
    assert owner.wait == 2 * PROBE_WAIT
    for _ in range(2 * PROBE_WAIT):
        owner.record("k", False, ONE)
    owner.record("k", True, POOL)
    for _ in range(HOLD):
        owner.record("k", True, POOL)
    collapse()  # after HOLD usual products: short again
    assert owner.wait == PROBE_WAIT


def test_one_thread_asked_runs_on_one_thread_and_learns_nothing() -> None:
    owner = Owner(Clock())
    ran = []
    owner.run("k", lambda: ran.append(1), threads=1)
    assert ran == [1] and owner.times == {}


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
    assert ran == [1, 1] and list(owner.times) == (["k"] if threads == 2 else [])
