"""Who runs a product of a few rows (a decode step's linear maps and head): OpenBLAS's own
threads while they are fast, one thread when another process holds a core.

Measured on 2 cores (docs/benchmarks.md). OpenBLAS's pool spins in C between products, so a
one-row product starts on every core at once: on an idle machine that decodes 124M at ~37
tokens/s against ~26 on one thread, and no Python hand-over comes close (a sleeping gpt2np worker
wakes ~222 µs after it is handed a part that takes ~0.1 ms). But a pooled product ends when its
slowest share ends: beside one CPU-bound process the share whose core that process holds waits
for the scheduler, and decode fell to ~1.5-1.9 tokens/s. One thread is never that slow.

So :class:`Owner` chooses, from the times it measures (per product shape, since shapes take
different times, but one choice for all of them: what slows the pool is the machine):

* **the pool** (OpenBLAS at :func:`gpt2np.fast.threads.threads` threads) runs the products while
  they take at most ``SLOWER`` × the fastest recent product of their shape. ``SLOWER`` is 2: on
  an idle machine one thread takes ~1.4× the pool's time, so a pooled product twice as slow as
  usual is slower than one thread would have been;
* **one thread** (OpenBLAS at 1) once slow pooled products come close together: each slow
  one counts 1, each usual one takes back ``FORGIVE`` (1/4), and one thread takes over at
  ``STRIKES`` (2): two slow products in a row, or three among five. One slow product alone is no
  sign: on an idle machine about one product in 250 takes over twice its usual time (an
  interrupt, a page fault), but two in a row came once in ~16,000 (measured, 124M decode,
  docs/benchmarks.md); beside a CPU-bound process nearly every pooled product is slow.
  Every ``wait`` one-thread products, one product tries the pool again (a probe); if the probe
  beats the fastest recent one-thread time of its shape, the pool runs the products again, else
  ``wait`` doubles, up to ``MAX_WAIT``, so that a machine that stays busy pays one slow product
  in ~1000. A probe can win by luck on a busy machine (the other process is off its core for a
  moment); when the pool then loses again within ``HOLD`` products, the wait still doubles
  instead of starting again at ``PROBE_WAIT``.

"The fastest recent" time is a running minimum that lets go of an old minimum by ``DRIFT`` (1 %)
a product, so a machine that got slower for good is followed. Only OpenBLAS's count changes
between the two; the product is the clear ``x · w`` either way. OpenBLAS rounds the linear maps
and products of two or more rows the same at any count, but not a one-row head (``wte · h``, a
matrix-vector product: 1 ulp apart at 2 threads and at 1, docs/benchmarks.md), so a batch-1
decode's logits can differ in the last bit with the choice. The clock is an argument: tests
drive :class:`Owner` with simulated timings. What it learns is not locked: two threads running
models at once may blur a choice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Callable

from . import threads
from .blas import held_at

__all__ = [
    "DRIFT",
    "FORGIVE",
    "HOLD",
    "MAX_WAIT",
    "OWNER",
    "PROBE_WAIT",
    "SLOWER",
    "STRIKES",
    "Owner",
]

SLOWER = 2.0  # a pooled product this many times the fastest recent one of its shape is slow
STRIKES = 2.0  # slow pooled products close together (see FORGIVE): one thread takes over
FORGIVE = 0.25  # what a usual pooled product takes back from the count of slow ones
PROBE_WAIT = 16  # one-thread products before the first probe of the pool
MAX_WAIT = 1024  # ... and at most this many between probes while the pool stays slow
DRIFT = 1.01  # the fastest recent time lets go of an old minimum by 1 % a product
HOLD = 64  # a pool that loses again sooner than this after a won probe had won by luck


@dataclass
class _Times:
    """The fastest recent products of one shape, seconds."""

    pool: float = math.inf  # on the pool
    one: float = math.inf  # on one thread, since one thread last took over


class Owner:
    """Runs ``product()`` (the product with OpenBLAS at the count set around it) on the pool or
    on one thread, as the module docstring says; ``key`` names the product's shape."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.times: dict[Hashable, _Times] = {}
        self.on_pool = True  # the pool runs the products (else one thread, but for probes)
        self.strikes = 0.0  # slow pooled products, less FORGIVE for each usual one since
        self.wait = PROBE_WAIT  # one-thread products until the next probe
        self.backoff = PROBE_WAIT  # the wait after a probe that lost
        self.held = HOLD  # pooled products since the pool last took over

    def pooled(self, key: Hashable) -> bool:
        """Whether the next product of this shape runs on the pool (a probe included: it waits
        for a shape whose one-thread time is known, to be judged against it)."""
        if self.on_pool:
            return True
        times = self.times.get(key)
        return self.wait <= 0 and times is not None and times.one < math.inf

    def run(self, key: Hashable, product: Callable[[], object], threads: int) -> None:
        if threads <= 1:
            with held_at(1):
                product()
            return
        pooled = self.pooled(key)
        with held_at(threads if pooled else 1):
            start = self.clock()
            product()
            cost = self.clock() - start
        self.record(key, pooled, cost)

    def record(self, key: Hashable, pooled: bool, cost: float) -> None:
        """Learn from one product of shape ``key`` that took ``cost`` seconds, pooled or not."""
        t = self.times.setdefault(key, _Times())
        slow = pooled and cost > SLOWER * t.pool
        if pooled:
            t.pool = min(cost, t.pool * DRIFT)
        else:
            t.one = min(cost, t.one * DRIFT)
            self.wait -= 1
        if self.on_pool:
            self.held += 1
            self.strikes = self.strikes + 1 if slow else max(self.strikes - FORGIVE, 0.0)
            if self.strikes >= STRIKES:  # another process holds a core: one thread takes over
                # a pool that held only briefly won its probe by luck: keep backing off
                self.backoff = PROBE_WAIT if self.held >= HOLD else min(2 * self.backoff, MAX_WAIT)
                self.on_pool, self.wait, self.strikes = False, self.backoff, 0.0
                for other in self.times.values():  # one thread's speed now, not an earlier spell's
                    other.one = math.inf
        elif pooled:  # a probe
            if cost < t.one:
                self.on_pool, self.held = True, 0
            else:
                self.backoff = min(2 * self.backoff, MAX_WAIT)
                self.wait = self.backoff


#: The one owner the fast kernels consult (several models in one process share what it learns
#: per shape, which is what they share: the machine).
OWNER = Owner()


def few_rows(key: Hashable, product: Callable[[], object], threaded: bool = True) -> None:
    """``product()`` with OpenBLAS's count chosen by :data:`OWNER` for gpt2np's thread count
    (one thread when not ``threaded``: a product too small to share)."""
    OWNER.run(key, product, threads.threads() if threaded else 1)
