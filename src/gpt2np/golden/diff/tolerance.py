"""Tolerance presets by the precision a port computes in.

An element passes when ``|port - golden| <= atol + rtol * |golden|`` (NumPy's ``isclose``
convention, the golden file as the reference). Each preset is the tightest pair that a correct
port of that precision passes with a margin, measured against a float64 golden file by
``scripts/measure_tolerances.py`` with an independent port (tests/helpers/toyport.py) on 124M-shaped
random weights; docs/golden-files.md has the table of which injected bug each preset catches
and where it reports it.
"""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["DEFAULT_ATOL", "DEFAULT_PRECISION", "DEFAULT_RTOL", "PRECISIONS", "tolerance"]

#: precision -> (rtol, atol)
PRECISIONS: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-10),
    "float32": (2e-5, 2e-5),
    "tf32": (1e-2, 1e-2),
    "float16": (2e-2, 2e-2),
    "bfloat16": (0.15, 0.15),
}
DEFAULT_PRECISION = "float32"
DEFAULT_RTOL, DEFAULT_ATOL = PRECISIONS[DEFAULT_PRECISION]


def tolerance(
    precision: Optional[str] = None, rtol: Optional[float] = None, atol: Optional[float] = None
) -> tuple[str, float, float]:
    """(precision, rtol, atol): the preset's pair, with ``rtol``/``atol`` overriding it when
    given. ValueError for an unknown preset or a tolerance that is negative or not finite."""
    precision = DEFAULT_PRECISION if precision is None else precision
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    preset_rtol, preset_atol = PRECISIONS[precision]
    rtol = preset_rtol if rtol is None else rtol
    atol = preset_atol if atol is None else atol
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {value!r}")
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a non-negative number, got {value}")
    return precision, float(rtol), float(atol)
