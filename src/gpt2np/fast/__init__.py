"""The faster kernels, each beside its clear twin and tested equal to it, and the in-place KV
cache: what :func:`gpt2np.model.forward` runs when a :class:`Kernels` other than ``CLEAR`` or
a :class:`KVCache` is plugged into it.

Modules: ``kernels`` (the :class:`Kernels` bundle: ``FAST`` and ``CLEAR``), ``attention``
(tiled attention), ``layernorm`` (LayerNorm on rows), ``gelu`` (GELU in place), ``head`` (a small
batch's head), ``threads`` (the worker threads they share long inputs among), ``kvcache``
(generation's preallocated cache).
"""

from __future__ import annotations

from .kernels import CLEAR, FAST, Kernels
from .kvcache import KVCache

__all__ = ["CLEAR", "FAST", "KVCache", "Kernels"]
