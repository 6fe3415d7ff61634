"""The fast kernels, bundled: ``FAST`` is a :class:`gpt2np.layers.Kernels` of faster twins of
the clear kernels in :data:`gpt2np.layers.CLEAR`, each tested equal to its twin
(tests/fast/test_kernels.py, tests/fast/test_attention.py). Plug either into the one composition,
``gpt2np.model.forward(..., kernels=FAST)``; :class:`gpt2np.GPT2` uses FAST unless ``fast=False``.

=========  =======================================  =========================================
kernel     clear twin (gpt2np.layers)               fast (gpt2np.fast)
=========  =======================================  =========================================
attend     attend                                   attention.attend_tiled: tiles, heads
                                                    shared among threads
act        activation                               gelu.activation_rows: GELU in place
norm       layernorm                                layernorm.layernorm_rows: rows, threads
head       head                                     head.head_parts: vocabulary (or row)
                                                    parts among threads
linear     linear                                   linear.linear_parts: column (or row)
                                                    parts among threads
=========  =======================================  =========================================

The threaded kernels hold OpenBLAS at one thread while they run (:mod:`gpt2np.fast.blas`), so
that gpt2np's threads are the one owner of the cores.
"""

from __future__ import annotations

from ..layers import CLEAR, Kernels
from .attention import attend_tiled
from .gelu import activation_rows
from .head import head_parts
from .layernorm import layernorm_rows
from .linear import linear_parts

__all__ = ["CLEAR", "FAST", "Kernels"]

#: The fast kernels.
FAST = Kernels(attend_tiled, activation_rows, layernorm_rows, head_parts, linear_parts)
