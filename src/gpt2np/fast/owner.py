"""Who runs the products of a few rows (a decode step's linear maps and head): OpenBLAS's own
threads while they are fast, one thread when another process holds a core.

Measured on 2 cores (docs/benchmarks.md). OpenBLAS's pool spins in C between products, so a
one-row product starts on every core at once: on an idle machine that decodes 124M at ~37
tokens/s against ~26 on one thread, and no Python hand-over comes close (a sleeping gpt2np worker
wakes ~222 µs after it is handed a part that takes ~0.1 ms). But a pooled product ends when its
slowest share ends: beside one CPU-bound process the share whose core that process holds waits
for the scheduler, and decode fell to ~1.5-1.9 tokens/s. One thread is never that slow.

So :class:`Owner` chooses per **pass**: the few-row products from the first one to the head that
ends a forward pass (a decode step: 4 per block, then the head), judged under the first
product's shape. Choosing per pass rather than per product costs a decode step two clock reads
a product, and a product that is slow by chance (an interrupt) is lost in its pass's total
instead of moving its shape to one thread:

* **the pool** (OpenBLAS at :func:`gpt2np.fast.threads.threads` threads) owns the passes while
  their products take at most ``SLOWER`` × the fastest recent pass's. ``SLOWER`` is 2: on an
  idle machine one thread takes ~1.5× the pool's time, so a pooled pass twice as slow as usual
  is slower than one thread would have been. A pooled pass that goes over that in the middle
  runs the rest of its products on one thread (it has lost already);
* **one thread** (OpenBLAS at 1) after a pass the pool lost. Every ``wait`` passes one pass tries
  the pool again (a probe), on one thread again as soon as it has spent the fastest recent
  one-thread pass's time; if the probe beats that, the pool owns the passes again, else ``wait``
  doubles, up to ``MAX_WAIT``, so that a machine that stays busy pays one slow pass in ~1000. A
  probe can win by luck on a busy machine (the other process is off its core for a moment);
  when the pool then loses again within ``HOLD`` passes, the wait still doubles instead of
  starting again at ``PROBE_WAIT``.

"The fastest recent" time is a running minimum that lets go of an old minimum by ``DRIFT`` (1 %)
a pass, so a machine that got slower for good is followed. Only OpenBLAS's count changes
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
from typing import Callable, Optional

from . import threads
from .blas import run_at

__all__ = [
    "DRIFT", "HOLD", "MAX_WAIT", "OWNER", "PROBE_WAIT", "SLOWER", "Owner", "end_pass", "few_rows",
]  # fmt: skip

SLOWER = 2.0  # a pooled pass this many times the fastest recent one: one thread takes over
PROBE_WAIT = 16  # one-thread passes before the first probe of the pool
MAX_WAIT = 1024  # ... and at most this many between probes while the pool stays slow
DRIFT = 1.01  # the fastest recent time lets go of an old minimum by 1 % a pass
HOLD = 64  # a pool that loses again sooner than this after a won probe had won by luck


@dataclass
class _Passes:
    """What :class:`Owner` knows of the passes that start with one product shape."""

    pooled: bool = True  # the pool owns them (else one thread)
    best_pool: float = math.inf  # fastest recent pooled pass: seconds of its products
    best_one: float = math.inf  # fastest recent one-thread pass
    wait: int = PROBE_WAIT  # one-thread passes until the next probe
    backoff: int = PROBE_WAIT  # the wait after a probe that lost
    held: int = HOLD  # pooled passes since the pool last took these over


class Owner:
    """Runs each few-row product on the pool or on one thread, as its pass was given (the
    module docstring says how)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.passes: dict[Hashable, _Passes] = {}
        self.current: Optional[_Passes] = None  # the open pass's record; None between passes
        self.started_on_pool = True  # the open pass started on the pool (a probe included)
        self.on_pool = True  # its next product runs on the pool
        self.limit = math.inf  # ... until its products have taken this long
        self.spent = 0.0  # seconds its products have taken

    def run(self, key: Hashable, product: Callable[[], object], threads: int, last: bool) -> None:
        """``product()`` (the product with OpenBLAS at the count it is run at) as part of the
        open pass, or of a new one judged under ``key``; ``last``: the pass ends with it."""
        if threads <= 1:
            run_at(1, product)
        else:
            if self.current is None:
                self.start(key)
            start = self.clock()
            run_at(threads if self.on_pool else 1, product)
            self.spent += self.clock() - start
            if self.on_pool and self.spent > self.limit:
                self.on_pool = False  # the pool has lost this pass: one thread for the rest
        if last:
            self.end()

    def start(self, key: Hashable) -> None:
        """Open a pass of the passes under ``key``: on the pool, or on one thread."""
        s = self.current = self.passes.setdefault(key, _Passes())
        self.started_on_pool = self.on_pool = s.pooled or s.wait <= 0
        self.limit = SLOWER * s.best_pool if s.pooled else s.best_one
        self.spent = 0.0

    def end(self) -> None:
        """Close the open pass (if one is open) and learn from the time its products took."""
        s, cost, pooled = self.current, self.spent, self.started_on_pool
        self.current = None
        if s is None:
            return
        lost = pooled and not self.on_pool  # went over its limit and finished on one thread
        if pooled and not lost:
            s.best_pool = min(cost, s.best_pool * DRIFT)
            s.held += 1
        elif not pooled:
            s.best_one = min(cost, s.best_one * DRIFT)
            s.wait -= 1
        if s.pooled and (lost or cost > SLOWER * s.best_pool):  # another process holds a core
            # a pool that held only briefly won its probe by luck: keep backing off
            s.backoff = PROBE_WAIT if s.held >= HOLD else min(2 * s.backoff, MAX_WAIT)
            s.pooled, s.wait = False, s.backoff
            s.best_one = math.inf  # one thread's speed now, not from an earlier spell
        elif not s.pooled and pooled:  # a probe
            if not lost and cost < s.best_one:
                s.pooled, s.held = True, 0
            else:
                s.backoff = min(2 * s.backoff, MAX_WAIT)
                s.wait = s.backoff


#: The one owner the fast kernels consult (several models in one process share what it learns
#: per pass shape, which is what they share: the machine).
OWNER = Owner()


def few_rows(
    key: Hashable, product: Callable[[], object], threaded: bool = True, last: bool = False
) -> None:
    """``product()`` with OpenBLAS's count chosen by :data:`OWNER` for gpt2np's thread count
    (one thread when not ``threaded``: a product too small to share); ``last`` for the head,
    which ends a forward pass."""
    OWNER.run(key, product, threads.threads() if threaded else 1, last)


def end_pass() -> None:
    """The head of many rows (not a few-row product) ends the open pass all the same."""
    OWNER.end()
