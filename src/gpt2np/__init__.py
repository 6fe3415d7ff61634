"""gpt2np: a pure-NumPy reference implementation of GPT-2 inference.

>>> import gpt2np
>>> gpt2np.generate("Alan Turing theorized", max_new_tokens=20, temperature=0)

The forward pass reads like the paper and sits at the top of the package: ``layers``
(layernorm, gelu, softmax, linear), ``attention``, ``block``, ``model`` (:func:`forward`). The
rest is a folder per layer: ``fast/``, ``tokenizer/``, ``checkpoint/``, ``sources/``,
``generation/``, ``scoring/``, ``golden/``, ``cli/`` (docs/architecture.md).
"""

from __future__ import annotations

from ._version import __version__
from .api import generate, load, save
from .errors import CheckpointError, DownloadError
from .generation.completion import Completion
from .golden import dump
from .golden.diff import CompareReport, compare
from .golden.trace import Trace, trace
from .gpt2 import GPT2
from .hparams import HPARAMS, MODEL_NAMES, HParams
from .model import forward
from .params import init_params
from .runtime import KVCache
from .scoring.logprobs import Score
from .sources.openai import download
from .tokenizer import Tokenizer

__all__ = [
    "GPT2",
    "HPARAMS",
    "MODEL_NAMES",
    "CheckpointError",
    "CompareReport",
    "Completion",
    "DownloadError",
    "HParams",
    "KVCache",
    "Score",
    "Tokenizer",
    "Trace",
    "__version__",
    "compare",
    "download",
    "dump",
    "forward",
    "generate",
    "init_params",
    "load",
    "save",
    "trace",
]
