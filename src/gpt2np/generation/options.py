"""The arguments of :func:`gpt2np.generation.loop.generate`, checked before any model is touched.

``gpt2np.generate("hi", model="124M", top_p=2)`` must fail before 124M is downloaded, so every
check that needs no model lives here and returns an :class:`Options`; the few that need the
model (ids within its vocabulary, an ``<|endoftext|>`` to start an empty prompt from) are made
by the generation itself.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from .completion import LOGPROBS_MODES
from .processors import Penalties, check_penalties, check_real
from .sampling import check_sampling_args

__all__ = ["CONTEXT_MODES", "EARLY_STOPPING", "Options", "check_args"]

#: Values of ``context=``: "error" refuses to exceed n_ctx, "slide" keeps the last n_ctx tokens.
CONTEXT_MODES = ("error", "slide")
#: Values of ``early_stopping=`` for beam search, as in HF transformers.
EARLY_STOPPING = (True, False, "never")


@dataclass(frozen=True)
class Options:
    """Every argument of a generation but the prompt, checked; ``temperature`` resolved (None
    -> 1.0 when sampling, 0.0 for beam search), ``n`` merged with ``num_return_sequences``."""

    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: Any
    stops: tuple[str, ...]
    stream: bool
    context: str
    n: int
    logprobs: Union[int, None]
    logprobs_mode: str
    echo: bool
    penalties: Penalties
    num_beams: int
    length_penalty: float
    early_stopping: Union[bool, str]


def check_args(
    prompt: Any,
    *,
    max_new_tokens: Any = 50,
    temperature: Any = None,
    top_k: Any = 0,
    top_p: Any = 1.0,
    seed: Any = None,
    stop: Any = None,
    stream: Any = False,
    context: Any = "error",
    n: Any = 1,
    num_return_sequences: Any = None,
    logprobs: Any = None,
    logprobs_mode: Any = "processed",
    echo: Any = False,
    num_beams: Any = 1,
    length_penalty: Any = 1.0,
    early_stopping: Any = False,
    **penalties: Any,
) -> tuple[bool, bool, list[Any], Options]:
    """Every check of :func:`gpt2np.generation.loop.generate`'s arguments that needs no model.

    -> (is_text, is_batch, prompts, options), or ValueError/TypeError naming the argument.
    ``penalties``: the keyword arguments of :func:`gpt2np.generation.processors.check_penalties`.
    """
    _check_int("max_new_tokens", max_new_tokens)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    _check_int("num_beams", num_beams)
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1 (1 is no beam search), got {num_beams}")
    beams = num_beams > 1
    if beams:
        _check_deterministic(temperature, top_k, top_p, seed)
    t = (0.0 if beams else 1.0) if temperature is None else temperature
    check_sampling_args(t, top_k, top_p)
    _check_seed(seed)
    if context not in CONTEXT_MODES:
        raise ValueError(f"context must be one of {CONTEXT_MODES}, got {context!r}")
    n = _check_n(n, num_return_sequences)
    if beams and n > num_beams:
        raise ValueError(f"n (num_return_sequences) = {n} must be <= num_beams = {num_beams}")
    if not beams and n > 1 and t == 0:
        raise ValueError(
            f"n={n} with temperature=0 would give {n} identical greedy continuations; sample "
            "(temperature > 0) or use num_beams for the n best"
        )
    if logprobs is not None:
        _check_int("logprobs", logprobs)
        if logprobs < 0:
            raise ValueError(f"logprobs must be >= 0 (0: only the chosen tokens'), got {logprobs}")
    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode must be one of {LOGPROBS_MODES}, got {logprobs_mode!r}")
    for name, flag in (("echo", echo), ("stream", stream)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    _check_beam_args(length_penalty, early_stopping)
    is_text, is_batch, prompts = split_prompt(prompt)
    stops = _check_stop(stop, is_text)
    if stream and (beams or logprobs is not None):
        what = "beam search" if beams else "logprobs"
        raise ValueError(f"stream=True does not go with {what}: it needs the whole result first")
    if beams and (stops or context != "error"):
        what = "stop strings" if stops else "context='slide'"
        raise ValueError(f"beam search does not support {what}")
    options = Options(
        max_new_tokens=int(max_new_tokens), temperature=float(t), top_k=int(top_k),
        top_p=float(top_p), seed=seed, stops=stops, stream=bool(stream), context=context, n=n,
        logprobs=None if logprobs is None else int(logprobs), logprobs_mode=logprobs_mode,
        echo=bool(echo), penalties=check_penalties(**penalties), num_beams=int(num_beams),
        length_penalty=float(length_penalty), early_stopping=early_stopping,
    )  # fmt: skip
    return is_text, is_batch, prompts, options


def split_prompt(prompt: Any) -> tuple[bool, bool, list[Any]]:
    """-> (is_text, is_batch, prompts) or TypeError/ValueError for what cannot be a prompt.
    None is the empty text (an unconditional sample)."""
    if prompt is None:
        return True, False, [""]
    if isinstance(prompt, str):
        return True, False, [prompt]
    if isinstance(prompt, np.ndarray):
        if prompt.ndim == 2:
            if len(prompt) == 0:
                raise ValueError(f"prompt is an empty batch of ids, shape {prompt.shape}")
            return False, True, list(prompt)
        return False, False, [prompt]
    if not isinstance(prompt, (list, tuple)):
        raise TypeError(
            f"prompt must be a str, token ids, or a list of those; got {type(prompt).__name__}"
        )
    if len(prompt) == 0:
        raise ValueError(
            "prompt is an empty list (no prompts, or no ids?); for an unconditional sample pass "
            "None or an empty string"
        )
    if all(isinstance(p, str) for p in prompt):
        return True, True, list(prompt)
    if all(_is_int(p) for p in prompt):
        return False, False, [prompt]
    if all(isinstance(p, (list, tuple, np.ndarray)) for p in prompt):
        return False, True, list(prompt)
    raise TypeError("a batch prompt must be all str or all lists of token ids, not a mix")


def _check_deterministic(temperature: Any, top_k: Any, top_p: Any, seed: Any) -> None:
    """Beam search here is HF's deterministic one: the sampling arguments have no meaning
    (temperature=0, greedy beams, says what it does anyway)."""
    given = [name for name, is_set in (("temperature", temperature not in (None, 0)),
                                       ("top_k", top_k != 0), ("top_p", top_p != 1.0),
                                       ("seed", seed is not None)) if is_set]  # fmt: skip
    if given:
        raise ValueError(
            f"beam search (num_beams > 1) is deterministic; {', '.join(given)} apply to sampling "
            "(HF's beam sampling is not implemented)"
        )


def _check_n(n: Any, num_return_sequences: Any) -> int:
    _check_int("n", n)
    if num_return_sequences is not None:
        _check_int("num_return_sequences", num_return_sequences)
        if n != 1 and n != num_return_sequences:
            raise ValueError(
                f"n={n} and num_return_sequences={num_return_sequences} are the same thing "
                "(OpenAI's and HF's name); give one"
            )
        n = num_return_sequences
    if n < 1:
        raise ValueError(f"n (num_return_sequences) must be >= 1, got {n}")
    return int(n)


def _check_beam_args(length_penalty: Any, early_stopping: Any) -> None:
    check_real("length_penalty", length_penalty)
    if not (
        isinstance(early_stopping, bool)
        or (isinstance(early_stopping, str) and early_stopping == "never")
    ):
        raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")


def _check_stop(stop: Any, is_text: bool) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
        raise TypeError(f"stop must be a str or a list of str, got {stop!r}")
    if any(s == "" for s in stops):
        raise ValueError("stop strings must not be empty")
    if stops and not is_text:
        raise ValueError("stop strings need a text prompt (the prompt here is token ids)")
    return tuple(stops)


def _check_int(name: str, value: Any) -> None:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_seed(seed: Any) -> None:
    if seed is None or isinstance(seed, np.random.Generator):
        return
    if not _is_int(seed):
        raise TypeError(f"seed must be an int, a numpy Generator or None, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
