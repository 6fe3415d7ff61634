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
new tokens' keys and values as a result. It is the one composition of the forward pass: what
``GPT2.forward``, generation, scoring and tracing run. Two things plug into it without a second
copy of these lines: faster kernels (``kernels=gpt2np.fast.FAST``, each tested equal to its
clear twin in :mod:`gpt2np.layers`) and generation's in-place cache (a :class:`gpt2np.KVCache`
as ``past``). Arguments are not checked here: :class:`gpt2np.GPT2` checks them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .attention import Past
from .block import block
from .hparams import HParams
from .kernels import CLEAR, Kernels
from .layers import RECORD_NOTHING, Recorder, head

__all__ = ["Past", "attention_scale", "embed", "forward", "head", "head_weight",
    "past_shape", "positions_for"]  # fmt: skip


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


def forward(
    params: dict[str, Any],
    hparams: HParams,
    ids: np.ndarray,
    past: Past = None,
    record: Recorder = RECORD_NOTHING,
    *,
    kernels: Kernels = CLEAR,
    last_only: bool = False,
    logits: bool = True,
) -> tuple[np.ndarray, Any]:
    """GPT-2's forward pass exactly as OpenAI's graph computes it.

    ids int [B, T]; past: None, the earlier tokens' keys and values [B, L, 2, H, T_past, Dh] as
    OpenAI's graph takes them, or a :class:`gpt2np.KVCache` (generation's: it keeps them in one
    preallocated buffer and takes the new ones in place)
    ->  (logits [B, T, V], present [B, L, 2, H, T, Dh]: the new tokens' keys and values; with a
    KVCache as past, the cache itself, which now holds them after the earlier ones)

    ``kernels``: the functions doing the heavy work, :data:`gpt2np.kernels.CLEAR` (the equations
    as written) or ``gpt2np.fast.FAST``. ``last_only``: only the last position's logits
    [B, 1, V], what sampling needs. ``logits=False``: ln_f's output [B, T, D] instead of the
    logits, for a caller that applies the head itself (scoring does, a few rows at a time).
    ``record`` sees every intermediate under its name (:mod:`gpt2np.golden.trace`); it changes
    nothing.
    """
    T = ids.shape[1]
    cache = None if past is None or isinstance(past, np.ndarray) else past
    if cache is None:  # OpenAI's: T new positions after T_past, each block its own past
        T_past = 0 if past is None else past.shape[-2]
        positions = positions_for(T_past, T)  # [T]
        pasts = [None if past is None else past[:, i] for i in range(hparams.n_layer)]
    else:  # the in-place cache: each row counts positions from its first unpadded token
        positions, pasts = cache.positions(T), cache.layers(T)  # [B, T]; one slot per block
    x = embed(params["wte"], params["wpe"], ids, positions, record.scope("embed"))  # [B, T, D]
    presents = []
    eps, act = hparams.layer_norm_epsilon, hparams.activation_function
    for i, (block_params, past_i) in enumerate(zip(params["blocks"], pasts)):
        x, present = block(
            x, **block_params, n_head=hparams.n_head, past=past_i, record=record.scope(f"h{i}"),
            eps=eps, act=act, scale=attention_scale(hparams, i), kernels=kernels,
        )  # fmt: skip
        if cache is None:
            presents.append(present)  # [B, 2, H, T, Dh]
    if last_only:
        x = x[:, -1:]  # [B, 1, D]: ln_f and the head work position by position
    h = record("ln_f", kernels.norm(x, **params["ln_f"], eps=eps))  # [B, T, D]
    out = h if not logits else record("logits", kernels.head(h, head_weight(params, hparams)))
    return out, (np.stack(presents, axis=1) if cache is None else cache)  # [B, L, 2, H, T, Dh]
