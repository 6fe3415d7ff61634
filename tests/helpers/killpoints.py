"""Kill a child process with SIGKILL at a chosen point of what it is doing, as the OOM killer or
a `kill -9` would, for the tests of what gpt2np leaves behind.

``run_and_kill(setup, action, point, nth)`` starts ``python -c``: it runs ``setup``, then wraps
the function ``point`` (``"os.replace"``, ``"os.fsync"``, ...) so that its ``nth`` call prints a
line and sleeps instead of returning, runs ``action``, and is killed with SIGKILL when that line
arrives. Several kills run at once with :func:`kill_all`. Each child is bounded by ``TIMEOUT``.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import sys
import time

TIMEOUT = 60.0  # seconds for a child to reach its kill point (it needs ~1 s)
READY = "about to return from the call where it is killed"

_CHILD = f"""
import importlib, os, sys, time
setup, action, point, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
exec(setup)
module, name = point.rsplit(".", 1)
owner = importlib.import_module(module)
real, calls = getattr(owner, name), []
def wrapped(*args, **kwargs):
    calls.append(1)
    if len(calls) == nth:
        print({READY!r}, flush=True)
        time.sleep(600)
    return real(*args, **kwargs)
setattr(owner, name, wrapped)
exec(action)
print("finished without reaching the kill point", flush=True)
"""


@dataclasses.dataclass
class Kill:
    """One child: what it runs, where it is killed."""

    setup: str
    action: str
    point: str
    nth: int = 1


def kill_all(kills: list[Kill]) -> None:
    """Run every kill's child at once; SIGKILL each when it reaches its point. Raises
    AssertionError naming a child that finished, failed or timed out instead."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, k.setup, k.action, k.point, str(k.nth)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in kills
    ]
    try:
        sel = selectors.DefaultSelector()
        for p in procs:
            sel.register(p.stdout, selectors.EVENT_READ, p)
        waiting, deadline = set(procs), time.monotonic() + TIMEOUT
        while waiting and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=deadline - time.monotonic()):
                p = key.data
                line = p.stdout.readline()
                sel.unregister(p.stdout)
                waiting.discard(p)
                if line.strip() != READY:
                    p.wait(TIMEOUT)
                    raise AssertionError(f"{_which(p, kills, procs)}: {line}{p.stderr.read()}")
                os.kill(p.pid, signal.SIGKILL)
        assert not waiting, [f"{_which(p, kills, procs)}: timed out" for p in waiting]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
    assert all(p.returncode == -signal.SIGKILL for p in procs)


def _which(p: subprocess.Popen, kills: list[Kill], procs: list[subprocess.Popen]) -> str:
    k = kills[procs.index(p)]
    return f"{k.action!r} killed at call {k.nth} of {k.point}"
