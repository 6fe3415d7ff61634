"""What runs a model, below the uses of it: :class:`Runtime` holds a model's weights,
hyperparameters and tokenizer, picks the kernels, makes the in-place :class:`KVCache` and checks
every argument before the forward pass (``engine``, ``kvcache``, ``checks``).

Generation, scoring and golden take a Runtime; :class:`gpt2np.GPT2` is a Runtime with shortcuts
to them on top, so nothing below the facade imports it.
"""

from __future__ import annotations

from .engine import Runtime
from .kvcache import CacheLayer, KVCache

__all__ = ["CacheLayer", "KVCache", "Runtime"]
