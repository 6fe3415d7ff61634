"""The parameter tree: its layout, a shape check, casting, and random weights for tests.

``params`` mirrors the names in OpenAI's checkpoint (``model/h0/attn/c_attn/w`` becomes
``params["blocks"][0]["attn"]["c_attn"]["w"]``) with the leading 1 of the conv1d weights
squeezed away, so every weight is ``[n_in, n_out]``::

    {"wte": [V, D], "wpe": [n_ctx, D],
     "blocks": [{"ln_1": {"g": [D], "b": [D]},
                 "attn": {"c_attn": {"w": [D, 3D], "b": [3D]}, "c_proj": {"w": [D, D], "b": [D]}},
                 "ln_2": {"g": [D], "b": [D]},
                 "mlp": {"c_fc": {"w": [D, 4D], "b": [4D]}, "c_proj": {"w": [4D, D], "b": [D]}}},
                ... n_layer of them],
     "ln_f": {"g": [D], "b": [D]}}

The MLP's hidden width 4D is ``hparams.d_ff`` (HF's ``n_inner`` when set), and a model whose
head is not tied to wte (``tie_word_embeddings=False``) has one more tensor, ``"lm_head"``
[V, D], laid out like wte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from .hparams import HParams

__all__ = ["cast_params", "check_params", "expected_shapes", "flatten", "init_params", "unflatten"]

Params = dict[str, Any]


def expected_shapes(hparams: HParams) -> dict[str, tuple[int, ...]]:
    """Every tensor's flat name (``blocks.0.attn.c_attn.w``) and shape for these hparams, in
    forward order (``lm_head`` last, when the head is untied)."""
    V, C, D, L, F = hparams.n_vocab, hparams.n_ctx, hparams.n_embd, hparams.n_layer, hparams.d_ff
    shapes: dict[str, tuple[int, ...]] = {"wte": (V, D), "wpe": (C, D)}
    for i in range(L):
        p = f"blocks.{i}."
        shapes.update(
            {
                p + "ln_1.g": (D,), p + "ln_1.b": (D,),
                p + "attn.c_attn.w": (D, 3 * D), p + "attn.c_attn.b": (3 * D,),
                p + "attn.c_proj.w": (D, D), p + "attn.c_proj.b": (D,),
                p + "ln_2.g": (D,), p + "ln_2.b": (D,),
                p + "mlp.c_fc.w": (D, F), p + "mlp.c_fc.b": (F,),
                p + "mlp.c_proj.w": (F, D), p + "mlp.c_proj.b": (D,),
            }
        )  # fmt: skip
    shapes.update({"ln_f.g": (D,), "ln_f.b": (D,)})
    if not hparams.tie_word_embeddings:
        shapes["lm_head"] = (V, D)
    return shapes


def flatten(params: Params) -> dict[str, np.ndarray]:
    """Nested params -> {"wte": ..., "blocks.0.ln_1.g": ..., ...} in forward order."""
    return dict(_walk(params, ""))


def _walk(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{prefix}{key}.")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _walk(value, f"{prefix}{i}.")
    else:
        yield prefix[:-1], node


def unflatten(flat: dict[str, np.ndarray], hparams: HParams) -> Params:
    """{"blocks.0.ln_1.g": ...} -> nested params; raises ValueError naming a missing tensor."""
    params: Params = {}
    for name, shape in expected_shapes(hparams).items():  # forward order: wte, wpe, blocks, ln_f
        if name not in flat:
            raise ValueError(f"flat params lack tensor {name} {list(shape)}")
        parts = name.split(".")
        node: Any = params
        if parts[0] == "blocks":
            blocks = params.setdefault("blocks", [{} for _ in range(hparams.n_layer)])
            node = blocks[int(parts[1])]
            parts = parts[2:]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = flat[name]
    return params


def check_params(params: Params, hparams: HParams) -> None:
    """Raise ValueError naming the first tensor that is missing, misshapen, not floating, or
    not used by these hparams (an ``lm_head`` beside a tied head would be silently ignored)."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    blocks = params.get("blocks")
    if not isinstance(blocks, (list, tuple)) or len(blocks) != hparams.n_layer:
        n = len(blocks) if isinstance(blocks, (list, tuple)) else "no"
        raise ValueError(f"params has {n} blocks, hparams.n_layer is {hparams.n_layer}")
    flat, shapes = flatten(params), expected_shapes(hparams)
    for name, shape in shapes.items():
        if name not in flat:
            raise ValueError(f"params is missing tensor {name} {list(shape)}")
        a = flat[name]
        if not isinstance(a, np.ndarray):
            raise TypeError(f"params tensor {name} is a {type(a).__name__}, not a numpy array")
        if a.shape != shape:
            raise ValueError(
                f"params tensor {name} has shape {list(a.shape)}, expected {list(shape)}"
            )
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"params tensor {name} has dtype {a.dtype}, expected a float type")
    unused = [name for name in flat if name not in shapes]
    if unused:
        why = " (the hparams tie the head to wte)" if unused[0] == "lm_head" else ""
        raise ValueError(f"params has tensor {unused[0]}, which these hparams do not use{why}")


def map_params(fn: Callable[[np.ndarray], np.ndarray], params: Params) -> Params:
    """Apply ``fn`` to every tensor, keeping the nesting."""
    mapped: Params = _map_tree(fn, params)
    return mapped


def _map_tree(fn: Callable[[np.ndarray], np.ndarray], node: Any) -> Any:
    """A dict, a list (the blocks) or a tensor, with ``fn`` applied to every tensor in it."""
    if isinstance(node, dict):
        return {k: _map_tree(fn, v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_map_tree(fn, v) for v in node]
    return fn(node)


def cast_params(params: Params, dtype: np.dtype | type) -> Params:
    """Every tensor as ``dtype``; tensors already of that dtype are shared, not copied."""
    dtype = np.dtype(dtype)
    return map_params(lambda a: np.asarray(a, dtype=dtype), params)


def init_params(
    hparams: HParams, seed: int = 0, dtype: np.dtype | type = np.float32, std: float = 0.02
) -> Params:
    """Random (untrained) parameters of the right shapes, for tests, examples and benchmarks.

    Weights and biases ~ N(0, std²); LayerNorm gains ~ 1 + N(0, 0.1²). Biases and gains are
    random rather than 0 and 1 so that tests exercise every tensor.
    """
    rng = np.random.default_rng(seed)
    flat = {}
    for name, shape in expected_shapes(hparams).items():
        if name.endswith(".g"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            a = std * rng.standard_normal(shape)
        flat[name] = a.astype(dtype)
    return unflatten(flat, hparams)
