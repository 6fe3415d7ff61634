"""Every intermediate of GPT-2's forward pass, under a stable name: the teaching view.

``gpt2np.trace(model, ids)`` is :func:`trace` here, re-exported at the top of the package.

:func:`trace` runs :func:`gpt2np.model.forward` itself, the clear reference path, with a
:class:`gpt2np.layers.Recorder` that keeps what the functions of the forward pass name as they
compute it (``record("probs", ...)`` in :func:`gpt2np.attention.attend`, scoped ``h3.attn.``).
There is no second copy of the maths to drift from the first; a plain forward pass records
nothing and pays one function call per intermediate for it.

Names follow the checkpoint (``h{i}``, ``ln_1``, ``attn``, ``c_attn``, ``c_proj``, ``mlp``,
``c_fc``, ``ln_f``) and the paper. In forward order, with B batch, T new tokens, T_past cached
tokens, S = T_past + T keys, D = n_embd, H = n_head, Dh = D / H, V = n_vocab::

    embed.tokens      [B, T, D]     wte[ids]
    embed.positions   [B, T, D]     wpe[T_past + t] (the same for every row of the batch)
    embed.sum         [B, T, D]     x_0 = embed.tokens + embed.positions
    h{i}.ln_1         [B, T, D]     layernorm(x, ln_1)
    h{i}.attn.qkv     [B, T, 3D]    ln_1 · W_c_attn + b          (q, k, v side by side)
    h{i}.attn.q       [B, H, T, Dh] the queries of the new tokens
    h{i}.attn.k       [B, H, T, Dh] the keys of the new tokens    (= present[:, i, 0])
    h{i}.attn.v       [B, H, T, Dh] the values of the new tokens  (= present[:, i, 1])
    h{i}.attn.scores  [B, H, T, S]  q · kᵀ / √Dh over past and new keys, before the mask
    h{i}.attn.probs   [B, H, T, S]  softmax(scores with masked keys set to -1e10)
    h{i}.attn.merged  [B, T, D]     the heads' probs · v, concatenated
    h{i}.attn.c_proj  [B, T, D]     merged · W_c_proj + b         (the attention sub-block's output)
    h{i}.resid_mid    [B, T, D]     x + attn.c_proj               (the residual stream mid-block)
    h{i}.ln_2         [B, T, D]     layernorm(resid_mid, ln_2)
    h{i}.mlp.c_fc     [B, T, 4D]    ln_2 · W_c_fc + b
    h{i}.mlp.gelu     [B, T, 4D]    gelu(mlp.c_fc)
    h{i}.mlp.c_proj   [B, T, D]     mlp.gelu · W_c_proj + b       (the MLP sub-block's output)
    h{i}.out          [B, T, D]     resid_mid + mlp.c_proj        (the block's output, x_{i+1})
    ln_f              [B, T, D]     layernorm(h{L-1}.out, ln_f)
    logits            [B, T, V]     ln_f · wteᵀ

Every tensor keeps the batch axis, also for 1-D ids. With a ``past``, ``attn.k``/``attn.v`` are
the new tokens' keys and values only (what ``present`` holds); the keys the scores use are
``past[:, i, 0]`` followed by ``attn.k``, which is why ``scores`` and ``probs`` have S columns.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np

from ..hparams import HParams
from ..layers import Recorder
from ..model import forward
from ..support.html import table

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = [
    "Trace",
    "selected_names",
    "tensor_axes",
    "tensor_names",
    "tensor_shapes",
    "trace",
    "trace_each",
]

Names = Union[str, Iterable[str], None]

# One block's tensors in forward order, with their shapes in the symbols of the module docstring.
_BLOCK_TENSORS = (
    ("ln_1", "B T D"),
    ("attn.qkv", "B T 3D"),
    ("attn.q", "B H T Dh"),
    ("attn.k", "B H T Dh"),
    ("attn.v", "B H T Dh"),
    ("attn.scores", "B H T S"),
    ("attn.probs", "B H T S"),
    ("attn.merged", "B T D"),
    ("attn.c_proj", "B T D"),
    ("resid_mid", "B T D"),
    ("ln_2", "B T D"),
    ("mlp.c_fc", "B T 4D"),
    ("mlp.gelu", "B T 4D"),
    ("mlp.c_proj", "B T D"),
    ("out", "B T D"),
)
_EMBED_TENSORS = (("embed.tokens", "B T D"), ("embed.positions", "B T D"), ("embed.sum", "B T D"))
_FINAL_TENSORS = (("ln_f", "B T D"), ("logits", "B T V"))


def _symbolic_shapes(n_layer: int) -> dict[str, str]:
    shapes = dict(_EMBED_TENSORS)
    for i in range(n_layer):
        shapes.update((f"h{i}.{name}", shape) for name, shape in _BLOCK_TENSORS)
    shapes.update(_FINAL_TENSORS)
    return shapes


def tensor_names(n_layer: int) -> list[str]:
    """Every traced name in forward order: embed.*, then h0.* … h{L-1}.*, then ln_f, logits."""
    return list(_symbolic_shapes(n_layer))


def tensor_axes(n_layer: int) -> dict[str, str]:
    """Every traced name in forward order with its axes, e.g. ``"h0.attn.scores": "B H T S"``
    (the symbols of the module docstring; golden files record them per tensor)."""
    return _symbolic_shapes(n_layer)


def tensor_shapes(
    hparams: HParams, batch: int, T: int, T_past: int = 0
) -> dict[str, tuple[int, ...]]:
    """The shape of every traced tensor, in forward order, for ``batch`` rows of ``T`` new tokens
    after ``T_past`` cached ones."""
    D = hparams.n_embd
    sizes = {"B": batch, "T": T, "S": T_past + T, "D": D, "3D": 3 * D, "4D": 4 * D}
    sizes.update({"H": hparams.n_head, "Dh": hparams.d_head, "V": hparams.n_vocab})
    return {
        name: tuple(sizes[s] for s in shape.split())
        for name, shape in _symbolic_shapes(hparams.n_layer).items()
    }


class Trace(Mapping[str, np.ndarray]):
    """The traced intermediates: an ordered, read-only mapping name -> ndarray in forward order.

    ``.logits`` [B, T, V] and ``.present`` [B, L, 2, H, T, Dh] are always there (equal to what
    ``model.forward`` returns for 2-D ids), even when ``names`` kept only a few tensors;
    ``.ids`` is the int64 [B, T] input and ``.T_past`` the length of the past it continued.
    """

    def __init__(
        self,
        tensors: dict[str, np.ndarray],
        logits: np.ndarray,
        present: np.ndarray,
        ids: np.ndarray,
        T_past: int = 0,
    ) -> None:
        self._tensors = tensors
        self.logits = logits
        self.present = present
        self.ids = ids
        self.T_past = T_past

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(
                f"no tensor {name!r} in this trace (it holds {len(self)}: "
                f"{_preview(list(self._tensors))}); see gpt2np.golden.trace.tensor_names"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """{name: shape} in forward order."""
        return {name: a.shape for name, a in self._tensors.items()}

    def __repr__(self) -> str:
        return f"Trace({len(self)} tensors, ids {list(self.ids.shape)}, T_past {self.T_past})"

    def _repr_html_(self) -> str:
        """Jupyter shows a table: each tensor's name, shape and dtype (the first 20)."""
        rows = ((name, list(a.shape), a.dtype) for name, a in self._tensors.items())
        return table(repr(self), ["name", "shape", "dtype"], rows, len(self))


def trace(
    model: Runtime, ids: Any, past: Optional[np.ndarray] = None, names: Names = None
) -> Trace:
    """Run ``model``'s forward pass on ``ids`` and return every intermediate by name.

    ids: integers [B, T] or [T]; past: an earlier ``present`` [B, L, 2, H, T_past, Dh] or None
    (checked exactly as :meth:`GPT2.forward` checks them). names: None for every tensor, or one
    glob or a list of globs (``fnmatch``, e.g. ``"h11.*"``, ``"*.attn.probs"``, ``"logits"``)
    to keep only the matching tensors and save memory; a glob that matches no name is an error.

    This is the clear path whatever ``model.fast`` says: its logits and present are those of
    :func:`gpt2np.forward` (and of ``GPT2(..., fast=False).forward``) bit for bit, and the
    default fast kernels' to float rounding.
    """
    tensors: dict[str, np.ndarray] = {}
    t = trace_each(model, ids, tensors.__setitem__, past=past, names=names)
    return Trace(tensors, t.logits, t.present, t.ids, t.T_past)


def trace_each(
    model: Runtime,
    ids: Any,
    emit: Callable[[str, np.ndarray], Any],
    past: Optional[np.ndarray] = None,
    names: Names = None,
) -> Trace:
    """:func:`trace`, handing each selected tensor to ``emit(name, array)`` the moment it is
    computed and keeping none of them: what :func:`gpt2np.golden.dump` streams to disk, so that
    memory holds one layer's intermediates rather than all of them.

    Returns a :class:`Trace` with no tensors: its ``.logits``, ``.present``, ``.ids`` and
    ``.T_past``. ``emit`` must not modify the array (the forward pass goes on using it).
    """
    ids, past = model.check_forward_args(ids, past)
    record = _Keep(_select(names, model.hparams.n_layer), emit)
    logits, present = forward(model.params, model.hparams, ids, past, record)
    T_past = 0 if past is None else past.shape[-2]
    return Trace({}, logits, present, ids, T_past)


class _Keep(Recorder):
    """A recorder that hands the tensors whose full names were selected to ``emit``."""

    def __init__(
        self, keep: set[str], emit: Callable[[str, np.ndarray], Any], prefix: str = ""
    ) -> None:
        self.keep, self.emit, self.prefix = keep, emit, prefix

    def __call__(self, name: str, x: np.ndarray) -> np.ndarray:
        if self.prefix + name in self.keep:
            self.emit(self.prefix + name, x)
        return x

    def scope(self, name: str) -> _Keep:
        return _Keep(self.keep, self.emit, f"{self.prefix}{name}.")


def selected_names(names: Names, n_layer: int) -> list[str]:
    """The traced names that the globs ``names`` select (every one for None), in forward order;
    ValueError for a glob that matches nothing, TypeError for one that is not a str."""
    keep = _select(names, n_layer)
    return [name for name in tensor_names(n_layer) if name in keep]


def _select(names: Names, n_layer: int) -> set[str]:
    """The set of traced names matching the globs in ``names`` (all of them for None)."""
    every = tensor_names(n_layer)
    if names is None:
        return set(every)
    patterns = [names] if isinstance(names, str) else list(names)
    keep: set[str] = set()
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"names must be glob strings, got {pattern!r}")
        matched = [name for name in every if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise ValueError(
                f"names pattern {pattern!r} matches no traced tensor; names look like "
                f"{_preview(every)}"
            )
        keep.update(matched)
    return keep


def _preview(names: list[str], n: int = 6) -> str:
    shown = ", ".join(names[:n])
    return shown + (f", … ({len(names) - n} more)" if len(names) > n else "")
