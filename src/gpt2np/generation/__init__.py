"""Generation: from a prompt to new tokens, one folder, one concern per module.

Modules: ``loop`` (:func:`generate`: prefill, then one position per step), ``options`` (every
generation option, defined once: name, default, check, help), ``sampling`` (greedy,
temperature, top-k, top-p), ``processors`` (the rules that change a row's logits), ``beam``
(beam search), ``continuation`` (what one continuation collects as it goes), ``completion``
(:class:`Completion`, the result with log-probs).
"""

from __future__ import annotations

from .completion import Completion
from .loop import generate

__all__ = ["Completion", "generate"]
