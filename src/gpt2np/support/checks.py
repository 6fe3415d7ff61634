"""The checks every layer makes of a number it is handed: an integer, a real number.

One definition, so that ``max_new_tokens=2.0``, ``batch=True`` and ``--top-k 1.5`` are refused
with the same words everywhere: a ``TypeError`` when the value is not of the kind, a
``ValueError`` naming the bounds when it is out of them.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Optional

import numpy as np

__all__ = ["check_int", "check_real", "is_int"]


def is_int(value: Any) -> bool:
    """An integer: a Python int or a NumPy integer (anything with ``__index__``), not a bool
    (NumPy before 1.25 gives ``np.bool_`` an ``__index__``, deprecated)."""
    if isinstance(value, (bool, float, np.bool_)):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def check_int(
    name: str, value: Any, minimum: Optional[int] = None, maximum: Optional[int] = None
) -> int:
    """``value`` as an int: TypeError unless it is an integer (``int()`` would turn 5.7 into 5
    and True into 1 silently), ValueError unless ``minimum <= value <= maximum`` (a bound of
    None is no bound)."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    n = operator.index(value)
    if minimum is not None and maximum is not None and not minimum <= n <= maximum:
        raise ValueError(f"{name} must be in [{minimum}, {maximum}], got {n}")
    if minimum is not None and n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    if maximum is not None and n > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {n}")
    return n


def check_real(name: str, value: Any) -> float:
    """``value`` as a float: TypeError unless it is a real number (any ``numbers.Real``: a
    Fraction or a NumPy float too, not a bool), ValueError unless it is finite."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond float's range
        x = math.inf
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value}")
    return x
