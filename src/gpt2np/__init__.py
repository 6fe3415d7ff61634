"""gpt2np: a pure-NumPy reference implementation of GPT-2 inference.

>>> import gpt2np
>>> gpt2np.generate("Alan Turing theorized", max_new_tokens=20, temperature=0)

The forward pass reads like the paper: ``layers`` (layernorm, gelu, softmax, linear),
``attention``, ``block``, ``model`` (:func:`forward`). docs/architecture.md shows how the
modules are layered; README.md and docs/ give the whole tour.
"""

from __future__ import annotations

from ._version import __version__
from .api import generate, load, save
from .completion import Completion
from .diff import CompareReport, compare
from .download import download
from .errors import CheckpointError, DownloadError
from .golden import dump
from .gpt2 import GPT2
from .hparams import HPARAMS, MODEL_NAMES, HParams
from .kvcache import KVCache
from .model import forward
from .params import init_params
from .scoring import Score
from .tokenizer import Tokenizer
from .trace import Trace  # also binds gpt2np.trace: the module, callable as gpt2np.trace(...)

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
