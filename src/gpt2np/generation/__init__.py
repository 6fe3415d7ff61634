"""Generation: from a prompt to new tokens, one folder, one concern per module.

Modules: ``loop`` (:func:`generate`: prefill, then one position per step), ``options`` (every
generation option, defined once: name, default, check, help), ``sampling`` (greedy,
temperature and the filters: top-k, top-p, min-p, typical, epsilon, eta), ``processors`` (the
rules that change a row's logits, and :func:`batched` for your own of the whole batch),
``beam`` (beam search), ``continuation`` (what one continuation collects as it goes),
``completion`` (:class:`Completion`, the result with log-probs), ``results`` (what
``generate`` returns, as a type checker infers it from the arguments).
"""

from __future__ import annotations

from .completion import Completion
from .loop import generate
from .processors import batched

__all__ = ["Completion", "batched", "generate"]
