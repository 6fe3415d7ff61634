"""Who runs a product of a few rows (a decode step's linear maps and head): OpenBLAS's own
threads while they are fast, one thread when another process holds a core.

Measured on 2 cores (docs/benchmarks.md). OpenBLAS's pool spins in C between products, so a
one-row product starts on every core at once: on an idle machine that decodes 124M at ~37
tokens/s against ~26 on one thread, and no Python hand-over comes close (a sleeping gpt2np worker
wakes ~222 µs after it is handed a part that takes ~0.1 ms). But a pooled product ends when its
slowest share ends: beside one CPU-bound process the share whose core that process holds waits
for the scheduler, and decode fell to ~1.5-1.9 tokens/s. One thread is never that slow.

So :class:`Owner` chooses per product shape, from the times it measures:

* **the pool** (OpenBLAS at :func:`gpt2np.fast.threads.threads` threads) owns the shape while its
  products take at most ``SLOWER`` × the fastest recent one. ``SLOWER`` is 2: on an idle machine
  one thread takes ~1.4× the pool's time, so a pooled product twice as slow as usual is slower
  than one thread would have been;
* **one thread** (OpenBLAS at 1) after a product that took longer. Every ``wait`` products one
  product tries the pool again (a probe); if the probe beats the fastest recent one-thread time,
  the pool owns the shape again, else ``wait`` doubles, up to ``MAX_WAIT``, so that a machine
  that stays busy pays one slow product in ~1000. A probe can win by luck on a busy machine
  (the other process is off its core for a moment); when the pool then loses again within
  ``HOLD`` products, the wait still doubles instead of starting again at ``PROBE_WAIT``.

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

__all__ = ["DRIFT", "HOLD", "MAX_WAIT", "OWNER", "PROBE_WAIT", "SLOWER", "Owner"]

SLOWER = 2.0  # a pooled product this many times the fastest recent one: one thread takes over
PROBE_WAIT = 16  # one-thread products before the first probe of the pool
MAX_WAIT = 1024  # ... and at most this many between probes while the pool stays slow
DRIFT = 1.01  # the fastest recent time lets go of an old minimum by 1 % a product
HOLD = 64  # a pool that loses again sooner than this after a won probe had won by luck


@dataclass
class _Shape:
    """What :class:`Owner` knows of one product shape."""

    pooled: bool = True  # the pool owns it (else one thread)
    best_pool: float = math.inf  # fastest recent pooled product, seconds
    best_one: float = math.inf  # fastest recent one-thread product
    wait: int = PROBE_WAIT  # one-thread products until the next probe
    backoff: int = PROBE_WAIT  # the wait after a probe that lost
    held: int = HOLD  # pooled products since the pool last took the shape over


class Owner:
    """Runs ``product(n)`` (the product with OpenBLAS at ``n`` threads) on the pool or on one
    thread, per shape ``key``, as the module docstring says."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.shapes: dict[Hashable, _Shape] = {}

    def pooled(self, key: Hashable) -> bool:
        """Whether the next product of this shape runs on the pool (a probe included)."""
        s = self.shapes.get(key)
        return s is None or s.pooled or s.wait <= 0

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
        """Learn from one product of ``cost`` seconds, on the pool or not."""
        s = self.shapes.setdefault(key, _Shape())
        if pooled:
            s.best_pool = min(cost, s.best_pool * DRIFT)
            s.held += 1
        else:
            s.best_one = min(cost, s.best_one * DRIFT)
            s.wait -= 1
        if s.pooled and cost > SLOWER * s.best_pool:  # another process holds a core
            # a pool that held only briefly won its probe by luck: keep backing off
            s.backoff = PROBE_WAIT if s.held >= HOLD else min(2 * s.backoff, MAX_WAIT)
            s.pooled, s.wait = False, s.backoff
            s.best_one = math.inf  # one thread's speed now, not from an earlier spell
        elif not s.pooled and pooled:  # a probe
            if cost < s.best_one:
                s.pooled, s.held = True, 0
            else:
                s.backoff = min(2 * s.backoff, MAX_WAIT)
                s.wait = s.backoff


#: The one owner the fast kernels consult (several models in one process share what it learns
#: per shape, which is what they share: the machine).
OWNER = Owner()


def few_rows(key: Hashable, product: Callable[[], object], threaded: bool = True) -> None:
    """``product()`` with OpenBLAS's count chosen by :data:`OWNER` for gpt2np's thread count
    (one thread when not ``threaded``: a product too small to share)."""
    OWNER.run(key, product, threads.threads() if threaded else 1)
