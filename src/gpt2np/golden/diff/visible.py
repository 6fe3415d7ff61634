"""Which elements of a tensor are compared: not the masked scores, not the padding.

``h{i}.attn.scores`` holds q·kᵀ/√Dh *before* the mask, for every key; a port may well write its
scores after masking, with whatever masked value it uses (-1e10 as OpenAI's graph, -inf, the
dtype's lowest value, 0). So only the visible entries are compared: query t (at position
T_past + t) and key s with s <= T_past + t. ``attn.probs`` is compared everywhere: a masked
probability must be 0 whatever the convention.

In a left-padded batch (the manifest's ``pad``), row b's first ``pad[b]`` positions are
padding: the queries there, the keys there, the past's positions there and the ids there are
meaningless and not compared.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ..trace import tensor_axes

__all__ = ["axes_of", "chunk_size", "visible"]

#: Axes of the tensors a golden file holds beside the trace's own (see golden.dump).
_EXTRA_AXES = {
    "ids": "B T",
    "targets": "B T",
    "prefix_ids": "B P",
    "past": "B L 2 H P Dh",
    "wpe.rows": "S D",
    "loss": "B T",
    "loss.mean": "",
}
_TRACE_AXES = {re.sub(r"^h0\.", "h*.", k): v for k, v in tensor_axes(1).items()}


def axes_of(name: str, recorded: Optional[str], ndim: int) -> Optional[list[str]]:
    """The tensor's axes (``["B", "H", "T", "S"]``): as the golden file records them, else as
    gpt2np names them; None when unknown or not matching ``ndim``."""
    axes = recorded
    if axes is None:
        axes = _EXTRA_AXES.get(name, _TRACE_AXES.get(re.sub(r"^h\d+\.", "h*.", name)))
    if axes is None or len(axes.split()) != ndim:
        return None
    return axes.split()


def is_scores(name: str) -> bool:
    return name == "attn.scores" or name.endswith(".attn.scores")


def chunk_size(shape: tuple[int, ...], target: int) -> int:
    """About ``target`` elements, in whole rows of the last axis when a row is shorter (so that
    the mask of a chunk is built from whole rows)."""
    last = shape[-1] if shape and shape[-1] else 1
    return target if last >= target else (target // last) * last


def visible(
    name: str,
    axes: Optional[list[str]],
    shape: tuple[int, ...],
    T_past: Optional[int],
    pad: Optional[np.ndarray],
    start: int,
    stop: int,
    causal: bool = True,
) -> Optional[np.ndarray]:
    """bool [stop - start]: which of the flat elements start … stop-1 (whole rows of the last
    axis) are compared, or None for all of them. ``causal=False`` leaves the scores' masked
    keys in: what is left out is then the padding alone."""
    if axes is None or not shape:
        return None
    scores = is_scores(name) and "S" in axes and "T" in axes
    if pad is None and not scores:
        return None
    if T_past is None:  # a golden without a manifest: a scores tensor says it, S - T
        T_past = shape[axes.index("S")] - shape[axes.index("T")] if scores else 0
    last = shape[-1]
    rows = np.arange(start // last, -(-stop // last))
    lead = np.unravel_index(rows, shape[:-1]) if len(shape) > 1 else ()

    def coord(axis: str) -> Optional[np.ndarray]:
        if axis == axes[-1]:
            return np.arange(last)[None, :]
        if axis in axes[:-1]:
            return lead[axes.index(axis)][:, None]
        return None

    b, t, s, p = coord("B"), coord("T"), coord("S"), coord("P")
    first = 0 if pad is None or b is None else pad[b]  # each row's first real position
    mask = np.ones((len(rows), last), bool)
    if t is not None:
        mask &= T_past + t >= first
    if p is not None:
        mask &= p >= first
    if scores and s is not None and t is not None:  # (scores has both axes)
        mask &= s >= first
        if causal:
            mask &= s <= T_past + t
    return mask.reshape(-1)[start - rows[0] * last : stop - rows[0] * last]
