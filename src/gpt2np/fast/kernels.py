"""The fast kernels, bundled: ``FAST`` is a :class:`gpt2np.kernels.Kernels` of faster twins of
the clear kernels in :data:`gpt2np.kernels.CLEAR`, each tested equal to its twin
(tests/fast/test_kernels.py, tests/fast/test_attention.py). Plug either into the one composition,
``gpt2np.model.forward(..., kernels=FAST)``; :class:`gpt2np.GPT2` uses FAST unless ``fast=False``.

=========  =======================================  =========================================
kernel     clear twin (gpt2np)                      fast (gpt2np.fast)
=========  =======================================  =========================================
attend     attention.attend                         attention.attend_tiled: tiles, heads
                                                    shared among threads
act        layers.activation                        gelu.activation_rows: GELU in place
norm       layers.layernorm                         layernorm.layernorm_rows: rows, threads
head       layers.head                              head.head_parts: few rows on OpenBLAS's
                                                    threads or one (owner), many in parts
linear     layers.linear                            linear.linear_parts: few rows on OpenBLAS's
                                                    threads or one (owner), many in parts
=========  =======================================  =========================================

The threaded kernels hold OpenBLAS at one thread while they run (:mod:`gpt2np.fast.blas`), so
that gpt2np's threads are the one owner of the cores.
"""

from __future__ import annotations

from ..kernels import CLEAR, Kernels
from .attention import attend_tiled
from .gelu import activation_rows
from .head import head_parts
from .layernorm import layernorm_rows
from .linear import linear_parts

__all__ = ["CLEAR", "FAST", "Kernels"]

#: The fast kernels.
FAST = Kernels(attend_tiled, activation_rows, layernorm_rows, head_parts, linear_parts)
