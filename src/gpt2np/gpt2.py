"""The :class:`GPT2` facade: a :class:`gpt2np.runtime.Runtime` with shortcuts on top.

What runs the model (weights, kernels, the KV cache, the checked forward pass) is the Runtime,
below generation, scoring and golden, which take one. Generation, scoring and tracing are
functions of their own modules; the methods here are shortcuts to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union, overload

import numpy as np

from .generation.loop import generate, new_tokens
from .generation.options import describe
from .golden.trace import Names, Trace, trace
from .runtime import Runtime
from .scoring.logprobs import Scorable, Score, score

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

    def generate(
        self,
        prompt: Any = None,
        max_new_tokens: Optional[int] = None,
        *,
        max_length: Optional[int] = None,
        min_new_tokens: Optional[int] = None,
        eos_token_id: Union[int, Sequence[int], None] = None,
        stop: Union[str, Sequence[str], None] = None,
        stopping_criteria: Any = None,
        max_time: Optional[float] = None,
        context: str = "error",
        do_sample: Optional[bool] = None,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        top_p_rule: str = "hf",
        min_p: Optional[float] = None,
        typical_p: Optional[float] = None,
        epsilon_cutoff: Optional[float] = None,
        eta_cutoff: Optional[float] = None,
        min_tokens_to_keep: int = 1,
        seed: Union[int, np.random.Generator, None] = None,
        n: int = 1,
        num_return_sequences: Optional[int] = None,
        repetition_penalty: Optional[float] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        no_repeat_ngram_size: Optional[int] = None,
        bad_words_ids: Optional[Sequence[Any]] = None,
        suppress_tokens: Optional[Sequence[int]] = None,
        sequence_bias: Any = None,
        forced_eos_token_id: Union[int, Sequence[int], None] = None,
        exponential_decay_length_penalty: Optional[tuple[int, float]] = None,
        logits_processors: Any = None,
        num_beams: Optional[int] = None,
        length_penalty: Optional[float] = None,
        early_stopping: Union[bool, str, None] = None,
        logprobs: Optional[int] = None,
        logprobs_mode: str = "processed",
        echo: bool = False,
        stream: bool = False,
        pad_token_id: Optional[int] = None,
        progress: Optional[bool] = None,
        **unsupported: Any,
    ) -> Any:
        """Continue ``prompt``: a str gives a str, ids the list of new ids, a list a list; None
        or "" an unconditional sample (:func:`gpt2np.generation.loop.generate`). The options,
        each defined once (:data:`gpt2np.generation.options.OPTIONS`), and where their defaults
        come from; HF's other names raise a TypeError saying what to do instead.
        """
        return generate(
            prompt, self, max_new_tokens=max_new_tokens, max_length=max_length,
            min_new_tokens=min_new_tokens, eos_token_id=eos_token_id, stop=stop,
            stopping_criteria=stopping_criteria, max_time=max_time, context=context,
            do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
            top_p_rule=top_p_rule, min_p=min_p, typical_p=typical_p,
            epsilon_cutoff=epsilon_cutoff, eta_cutoff=eta_cutoff,
            min_tokens_to_keep=min_tokens_to_keep, seed=seed, n=n,
            num_return_sequences=num_return_sequences, repetition_penalty=repetition_penalty,
            presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size, bad_words_ids=bad_words_ids,
            suppress_tokens=suppress_tokens, sequence_bias=sequence_bias,
            forced_eos_token_id=forced_eos_token_id,
            exponential_decay_length_penalty=exponential_decay_length_penalty,
            logits_processors=logits_processors, num_beams=num_beams,
            length_penalty=length_penalty, early_stopping=early_stopping, logprobs=logprobs,
            logprobs_mode=logprobs_mode, echo=echo, stream=stream, pad_token_id=pad_token_id,
            progress=progress, **unsupported,
        )  # fmt: skip

    generate.__doc__ = (generate.__doc__ or "") + describe(" " * 8)

    def default_max_new_tokens(self, prompt: Any) -> int:
        """What :meth:`generate` makes when not told: generation_config.json's max_new_tokens,
        or its max_length (which counts the prompt, as in HF) less the longest prompt's
        tokens, else 50."""
        return new_tokens(self, prompt)

    @overload
    def score(  # type: ignore[overload-overlap]  # a str is a Sequence[str] too, but one text
        self,
        text_or_ids: Union[str, Sequence[int]],
        stride: Optional[int] = None,
        max_len: Optional[int] = None,
        *,
        progress: Optional[bool] = None,
        batch_size: Optional[int] = None,
    ) -> Score: ...
    @overload
    def score(
        self,
        text_or_ids: Union[Sequence[str], Sequence[Sequence[int]]],
        stride: Optional[int] = None,
        max_len: Optional[int] = None,
        *,
        progress: Optional[bool] = None,
        batch_size: Optional[int] = None,
    ) -> list[Score]: ...
    @overload
    def score(
        self,
        text_or_ids: Scorable,  # a 2-D array is a batch, a 1-D one one row
        stride: Optional[int] = None,
        max_len: Optional[int] = None,
        *,
        progress: Optional[bool] = None,
        batch_size: Optional[int] = None,
    ) -> Union[Score, list[Score]]: ...
    def score(
        self,
        text_or_ids: Scorable,
        stride: Optional[int] = None,
        max_len: Optional[int] = None,
        *,
        progress: Optional[bool] = None,
        batch_size: Optional[int] = None,
    ) -> Union[Score, list[Score]]:
        """Per-token log-probabilities (natural log), NLL and perplexity of a text or 1-D ids,
        with a strided sliding window of ``max_len`` (default n_ctx) tokens moving by ``stride``
        (default max_len // 2) for long inputs. Returns a :class:`gpt2np.Score` (ids,
        token_logprobs, context_len, nll, perplexity, n_tokens); the first token is not scored.
        A list of texts or of id lists is a batch and gives a list of Scores. ``progress``: a
        bar over the windows (None: on a terminal or in a notebook); ``batch_size``: windows per
        forward pass. See :func:`gpt2np.scoring.logprobs.score`."""
        return score(
            self, text_or_ids, stride=stride, max_len=max_len, progress=progress,
            batch_size=batch_size,
        )  # fmt: skip

    def trace(self, ids: Any, past: Optional[np.ndarray] = None, names: Names = None) -> Trace:
        """Every intermediate of the forward pass by name (docs/tracing.md): a
        :class:`gpt2np.golden.trace.Trace` mapping name -> ndarray in forward order, with
        ``.logits`` [B, T, V] and ``.present``. ``names``: glob(s) keeping only some."""
        return trace(self, ids, past=past, names=names)
