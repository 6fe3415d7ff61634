"""How likely the model finds a text: per-token log-probabilities, NLL and perplexity, of one
text, a batch, or a whole corpus.

Modules: ``logprobs`` (:func:`score`: one text or a batch, windowed for long inputs),
``corpus`` (:func:`score_corpus`: a file of documents, one record per line, resumable, in one
process or several), ``records`` (what a line and its record are), ``resume`` (the output file
and its fingerprint), ``workers`` (the worker processes), ``dask`` (:func:`score_bag`: the
same records from a Dask bag, on a cluster).
"""

from __future__ import annotations

from .corpus import CorpusSummary, score_corpus
from .dask import score_bag
from .logprobs import Score, score, windows

__all__ = ["CorpusSummary", "Score", "score", "score_bag", "score_corpus", "windows"]
