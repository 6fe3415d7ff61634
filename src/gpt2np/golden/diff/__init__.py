"""Diff a port's tensors against a golden file, in forward order; name the first divergence and
where its error is born.

An element passes when ``|port - golden| <= atol + rtol * |golden|`` (NumPy's ``isclose``
convention, with the golden file as the reference); NaN passes only where the golden value is
NaN too. A tensor diverges when any compared element fails, or its shape or dtype cannot stand
for the golden one. Masked attention scores and left padding are not compared
(:mod:`gpt2np.golden.diff.visible`). Missing tensors (a port rarely dumps everything) and extra ones
are reported; with ``strict`` a missing tensor fails the comparison as well, and so do manifests
that disagree on the weights or the inputs unless allowed. See docs/golden-files.md.

Modules: ``tolerance`` (the presets by precision), ``visible`` (which elements count),
``engine`` (:func:`compare`, streaming both sides), ``hints`` (what a failing tensor equals
instead), ``report`` (:class:`CompareReport`: the table and the JSON).
"""

from __future__ import annotations

from .engine import compare
from .report import CompareReport, TensorDiff
from .tolerance import DEFAULT_ATOL, DEFAULT_PRECISION, DEFAULT_RTOL, PRECISIONS

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_PRECISION",
    "DEFAULT_RTOL",
    "PRECISIONS",
    "CompareReport",
    "TensorDiff",
    "compare",
]
