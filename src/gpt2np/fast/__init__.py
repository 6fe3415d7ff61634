"""The faster kernels, each beside its clear twin and tested equal to it: what
:func:`gpt2np.model.forward` runs when ``FAST`` rather than :data:`gpt2np.kernels.CLEAR` is
plugged into it. (The in-place KV cache is no kernel: it is :mod:`gpt2np.runtime.kvcache`.)

Modules: ``kernels`` (``FAST``, a :class:`gpt2np.kernels.Kernels` bundle), ``attention`` (tiled
attention), ``layernorm`` (LayerNorm on rows), ``gelu`` (GELU in place), ``head`` (the head's
product in parts), ``linear`` (the affine maps' products in parts), ``threads`` (the worker
threads they share long inputs among), ``blas`` (OpenBLAS held at one thread while they run).
"""

from __future__ import annotations

from .kernels import CLEAR, FAST, Kernels

__all__ = ["CLEAR", "FAST", "Kernels"]
