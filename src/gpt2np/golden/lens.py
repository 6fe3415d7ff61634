"""The logit lens: what the model would predict if it stopped after each block.

GPT-2 reads out its prediction once, at the end: ``logits = ln_f(x_L) · wteᵀ``. The residual
stream ``x_l`` has the same width D after every block, so the same read-out can be applied to
each of them (nostalgebraist, "interpreting GPT: the logit lens", 2020)::

    lens_l = layernorm(x_l, ln_f) · wteᵀ      x_0 = embed.sum, x_{i+1} = h{i}.out

and the layers where the final prediction first appears can be read off a table of top tokens.
This is built on a :class:`gpt2np.golden.trace.Trace`: the residual stream is what the forward pass
recorded, and the read-out is the model's own ``layernorm`` and ``head``, so the last row is
the model's logits; nothing of the forward pass is computed a second time.

>>> t = gpt2np.trace(model, ids)
>>> lens = logit_lens(model, t)                       # {"embed": [B, V], "h0": [B, V], ...}
>>> top_tokens(lens["h5"][0], model.tokenizer, k=3)   # [(id, text, probability), ...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ..generation.sampling import probabilities
from ..layers import layernorm
from ..model import head
from .trace import Trace

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["logit_lens", "residual_names", "top_tokens"]


def residual_names(n_layer: int) -> dict[str, str]:
    """{lens row: traced tensor} for the residual stream: "embed" -> "embed.sum", then
    "h{i}" -> "h{i}.out" (the stream after block i), in forward order."""
    return {"embed": "embed.sum", **{f"h{i}": f"h{i}.out" for i in range(n_layer)}}


def logit_lens(model: Runtime, t: Trace, position: Optional[int] = -1) -> dict[str, np.ndarray]:
    """ln_f and the tied head applied to the residual stream after the embedding and after
    each block: {"embed": logits, "h0": logits, …, "h{L-1}": logits}, in forward order.

    t: a trace of ``model`` holding ``embed.sum`` and every ``h{i}.out`` (any full trace, or
    ``trace(model, ids, names=["embed.sum", "h*.out"])``). position: the position to read,
    -1 (the last, default) or any index of T, giving logits [B, V]; None reads every position,
    giving [B, T, V] (V floats per position and layer: mind the memory on long prompts).
    The row "h{L-1}" is ``t.logits``: bit for bit with ``position=None``, to float rounding for
    one position (BLAS may sum a one-row product in another order).
    """
    if not isinstance(t, Trace):
        raise TypeError(f"logit_lens takes a Trace (gpt2np.trace(model, ids)), got {type(t)}")
    names = residual_names(model.hparams.n_layer)
    missing = [name for name in names.values() if name not in t]
    if missing:
        raise ValueError(
            f"this trace lacks {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''}; "
            "trace with names=None, or names=['embed.sum', 'h*.out']"
        )
    T = t.ids.shape[1]
    if position is not None and not -T <= position < T:
        raise ValueError(f"position {position} is outside the trace's {T} positions")
    where = slice(None) if position is None else position
    ln_f, wte = model.params["ln_f"], model.params["wte"]
    return {row: head(layernorm(t[name][:, where], **ln_f), wte) for row, name in names.items()}


def top_tokens(logits: Any, tokenizer: Any, k: int = 5) -> list[tuple[int, str, float]]:
    """The ``k`` most likely next tokens of one row of logits [V], most likely first, as
    (id, text, probability) with the softmax of the whole row (in float64)."""
    logits = np.asarray(logits)
    if logits.ndim != 1:
        raise ValueError(f"top_tokens takes one row of logits [V], got shape {logits.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    probs = probabilities(logits)
    best = np.argsort(-probs, kind="stable")[:k]
    return [(int(i), tokenizer.decode([int(i)]), float(probs[i])) for i in best]
