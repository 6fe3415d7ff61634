"""The :class:`GPT2` facade: a :class:`gpt2np.runtime.Runtime` with shortcuts on top.

What runs the model (weights, kernels, the KV cache, the checked forward pass) is the Runtime,
below generation, scoring and golden, which take one. Generation, scoring and tracing are
functions of their own modules; the methods here are shortcuts to them.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .generation.hf import HF
from .generation.loop import generate, new_tokens
from .generation.options import describe, signature
from .golden.trace import Names, Trace, trace
from .runtime import Runtime
from .scoring.logprobs import score

if TYPE_CHECKING:
    from .generation.results import Generate

__all__ = ["GPT2"]


class GPT2(Runtime):
    """A GPT-2 model: hyperparameters, parameters and (optionally) a tokenizer.

    ``GPT2(hparams, params, tokenizer=None, dtype=None, fast=True)``: everything that runs the
    model (the checked :meth:`forward`, :meth:`forward_cached` with :meth:`new_cache`,
    :meth:`astype`, :meth:`copy`, the kernels that ``fast`` picks) is
    :class:`gpt2np.runtime.Runtime`'s; what this class adds are shortcuts to the uses of a model
    (:meth:`generate`, :meth:`score`, :meth:`trace`).

    >>> model = GPT2(hparams, params)
    >>> logits, present = model.forward([[464, 3290]])   # [1, 2, V], [1, L, 2, H, 2, Dh]
    """

    # -- uses of the model: shortcuts to their modules ----------------------------------------

    if TYPE_CHECKING:  # the result's type from the arguments: str, list, Completion, Iterator
        generate: Generate  # (gpt2np.generation.results)
    else:

        def generate(self, prompt: Any = None, max_new_tokens: Optional[int] = None,
                     **options: Any) -> Any:  # fmt: skip
            """Continue ``prompt``: a str gives a str, ids the list of new ids, a list a list;
            None or "" an unconditional sample (:func:`gpt2np.generation.loop.generate`). The
            options, each defined once (:data:`gpt2np.generation.options.OPTIONS`), and where
            their defaults come from; HF's other names raise a TypeError saying what to do
            instead.
            """
            return generate(prompt, self, max_new_tokens=max_new_tokens, **options)

    generate.__signature__ = signature(  # type: ignore[attr-defined]  # for help() and IDEs
        list(inspect.signature(generate).parameters.values())[:-1]  # without **options
    )
    generate.__doc__ = (generate.__doc__ or "") + describe(" " * 12)

    @property
    def hf(self) -> HF:
        """HF transformers' calling conventions: ``model.hf.generate(input_ids,
        attention_mask=None, **kwargs)`` takes HF's arguments with HF's defaults (greedy,
        20 new tokens, ``top_k=50`` when sampling) and returns HF's outputs (the prompt
        and the new tokens, int64 [B, T + N]; ``.sequences``/``.scores``/``.logits`` with
        ``return_dict_in_generate=True``): :mod:`gpt2np.generation.hf`."""
        return HF(self)

    def default_max_new_tokens(self, prompt: Any) -> int:
        """What :meth:`generate` makes when not told: generation_config.json's max_new_tokens,
        or its max_length (which counts the prompt, as in HF) less the longest prompt's
        tokens, else 50."""
        return new_tokens(self, prompt)

    #: :func:`gpt2np.scoring.logprobs.score` as a method: ``model.score(text_or_ids, ...)``.
    score = score

    def trace(self, ids: Any, past: Optional[np.ndarray] = None, names: Names = None) -> Trace:
        """Every intermediate of the forward pass by name (docs/tracing.md): a
        :class:`gpt2np.golden.trace.Trace` mapping name -> ndarray in forward order, with
        ``.logits`` [B, T, V] and ``.present``. ``names``: glob(s) keeping only some."""
        return trace(self, ids, past=past, names=names)
