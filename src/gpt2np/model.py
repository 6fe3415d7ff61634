"""The GPT-2 language model: embeddings, L blocks, final LayerNorm and the tied head.

    h_0 = wte[ids] + wpe[T_past + t]                        token + position embeddings
    h_l = block_l(h_{l-1})          for l = 1 … L           see block.py
    logits = ln_f(h_L) · wteᵀ                                the head shares wte ("tied")

Models of the GPT-2 family may differ from GPT-2 in a few settings of ``hparams``, each a plain
branch here or in the function it reaches: the LayerNorms' ε, the MLP's activation
(:func:`gpt2np.layers.activation`), the attention scale (:func:`attention_scale`), and a head of
its own, ``params["lm_head"]`` [V, D], instead of wte (:func:`head_weight`).

This follows OpenAI's ``src/model.py`` (``model()``, ``positions_for``, ``past_shape``):
:func:`forward` is a pure function, params in, arrays out, with the past as an argument and the
new tokens' keys and values as a result. Arguments are not checked here: :class:`gpt2np.GPT2`
checks them. Generation's in-place cache and the faster kernels sit beside this path
(:mod:`gpt2np.fast.kvcache`, :mod:`gpt2np.fast.kernels`) and are tested equal to it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .block import block
from .hparams import HParams
from .layers import RECORD_NOTHING, Recorder, layernorm

__all__ = [
    "attention_scale",
    "embed",
    "forward",
    "head",
    "head_weight",
    "past_shape",
    "positions_for",
]


def past_shape(hparams: HParams, batch: int, T_past: int) -> tuple[int, ...]:
    """The layout of ``past`` and ``present``: [B, L, 2, H, T, Dh] (2 = keys, values)."""
    return (batch, hparams.n_layer, 2, hparams.n_head, T_past, hparams.d_head)


def positions_for(T_past: int, T: int) -> np.ndarray:
    """OpenAI's positions_for: positions of T new tokens after T_past earlier ones. -> int [T]"""
    return T_past + np.arange(T)


def embed(
    wte: np.ndarray,
    wpe: np.ndarray,
    ids: np.ndarray,
    positions: np.ndarray,
    record: Recorder = RECORD_NOTHING,
) -> np.ndarray:
    """Token plus position embedding: wte[ids] + wpe[positions].

    ids [B, T], positions [B, T] or [T]  ->  [B, T, D]
    """
    tokens = record("tokens", wte[ids])  # [B, T, D]
    where = record("positions", np.broadcast_to(wpe[positions], tokens.shape))  # the same per row
    return record("sum", tokens + where)  # [B, T, D]


def attention_scale(hparams: HParams, layer: int) -> float:
    """What block ``layer`` (counted from 0) multiplies its attention scores q·kᵀ by.

    GPT-2: 1/√Dh. HF's ``scale_attn_weights=False`` drops that factor (1), and
    ``scale_attn_by_inverse_layer_idx=True`` divides further by layer + 1.
    """
    scale = 1.0 / math.sqrt(hparams.d_head) if hparams.scale_attn_weights else 1.0
    if hparams.scale_attn_by_inverse_layer_idx:
        scale /= layer + 1
    return scale


def head_weight(params: dict[str, Any], hparams: HParams) -> np.ndarray:
    """The output head's matrix [V, D]: wte itself when tied (GPT-2), else ``lm_head``."""
    w: np.ndarray = params["wte"] if hparams.tie_word_embeddings else params["lm_head"]
    return w


def head(h: np.ndarray, wte: np.ndarray) -> np.ndarray:
    """The output head: logits = h · wteᵀ.        [B, T, D] @ [D, V] -> [B, T, V]

    GPT-2 ties it to the token embedding; an untied model passes its ``lm_head`` [V, D] here.
    ``wte.T`` is a view, so no transposed copy of the embedding matrix is made; the leading axes
    are flattened so that wte is read once, not once per batch row.
    """
    logits: np.ndarray = h.reshape(-1, h.shape[-1]) @ wte.T  # [B*T, D] @ [D, V] -> [B*T, V]
    return logits.reshape(*h.shape[:-1], wte.shape[0])


def forward(
    params: dict[str, Any],
    hparams: HParams,
    ids: np.ndarray,
    past: np.ndarray | None = None,
    record: Recorder = RECORD_NOTHING,
) -> tuple[np.ndarray, np.ndarray]:
    """GPT-2's forward pass exactly as OpenAI's graph computes it.

    ids int [B, T]; past [B, L, 2, H, T_past, Dh] or None
    ->  (logits [B, T, V], present [B, L, 2, H, T, Dh], the new tokens' keys and values)

    ``record`` sees every intermediate under its name (:mod:`gpt2np.trace`); it changes nothing.
    """
    T_past = 0 if past is None else past.shape[-2]
    positions = positions_for(T_past, ids.shape[1])  # [T]
    x = embed(params["wte"], params["wpe"], ids, positions, record.scope("embed"))  # [B, T, D]
    presents = []
    eps, act = hparams.layer_norm_epsilon, hparams.activation_function
    for i, block_params in enumerate(params["blocks"]):
        past_i = None if past is None else past[:, i]  # [B, 2, H, T_past, Dh]
        x, present = block(
            x, **block_params, n_head=hparams.n_head, past=past_i, record=record.scope(f"h{i}"),
            eps=eps, act=act, scale=attention_scale(hparams, i),
        )  # fmt: skip
        presents.append(present)  # [B, 2, H, T, Dh]
    h = record("ln_f", layernorm(x, **params["ln_f"], eps=eps))  # [B, T, D]
    logits = record("logits", head(h, head_weight(params, hparams)))  # [B, T, D] -> [B, T, V]
    return logits, np.stack(presents, axis=1)  # [B, L, 2, H, T, Dh]
