"""The one check of an allocation whose size comes from an input, made before allocating.

A number read from a file or an argument (``num_beams`` in generation_config.json, a ``.npy``
header's shape, ``--vocab``) decides how much memory a command takes. :func:`check_bytes` is
called with the product (rows × positions × vocabulary × itemsize ...) computed in Python ints,
so that no overflow hides a huge size, and refuses it with one line naming where the number
came from when it exceeds :func:`memory_cap` (physical memory, or the address-space limit
when lower): a :class:`~gpt2np.CheckpointError` when a file said so (``source``), else a
ValueError.
"""

from __future__ import annotations

import math
import os
from typing import Optional

from ..errors import CheckpointError

__all__ = ["check_bytes", "check_elements", "memory_cap", "show_bytes"]

#: The cap when the machine does not say how much memory it has (1 TiB).
FALLBACK_CAP = 1 << 40


def memory_cap() -> int:
    """The most bytes one allocation sized from an input may take: the machine's physical
    memory (``os.sysconf``, else :data:`FALLBACK_CAP`), or the process's address-space limit
    (``ulimit -v``, ``prlimit --as``) when that is lower."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        cap = pages * size if pages > 0 and size > 0 else FALLBACK_CAP
    except (AttributeError, ValueError, OSError):
        cap = FALLBACK_CAP
    try:
        import resource
    except ImportError:  # Windows
        return cap
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    return cap if limit == resource.RLIM_INFINITY or limit <= 0 else min(cap, limit)


def show_bytes(n: int) -> str:
    """``n`` bytes for people: '4.8 GiB'."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            x = n / (1 << shift)
            return f"{x:.3g} {unit}" if x < 1000 else f"{x:,.0f} {unit}"
    return f"{n} bytes"


def check_bytes(nbytes: int, what: str, source: Optional[str] = None) -> int:
    """``nbytes`` when it is at most :func:`memory_cap`; else a CheckpointError (``source``:
    the file that said so) or a ValueError, one line: '{source}: {what} needs 187 GiB, more
    than this process's memory (23 GiB)'. ``what`` names the key or the argument."""
    cap = memory_cap()
    if nbytes > cap:
        where = f"{source}: " if source else ""
        message = f"{where}{what} needs {show_bytes(nbytes)}, more than this process's memory "
        message += f"({show_bytes(cap)})"
        raise CheckpointError(message) if source else ValueError(message)
    return nbytes


def check_elements(
    shape: tuple[int, ...], itemsize: int, what: str, source: Optional[str] = None, copies: int = 1
) -> int:
    """:func:`check_bytes` of ``copies`` arrays of ``shape`` and ``itemsize``; the bytes."""
    return check_bytes(math.prod(shape) * itemsize * copies, what, source)
