"""How likely the model finds a text: per-token log-probabilities, NLL and perplexity.

Modules: ``score`` (:func:`score`: one text or a batch, windowed for long inputs).
"""

from __future__ import annotations

from .logprobs import Score, score, windows

__all__ = ["Score", "score", "windows"]
