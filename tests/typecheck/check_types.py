"""The types a type checker infers for ``generate`` and ``score``, checked twice: by mypy
(``mypy tests/typecheck/check_types.py``, .ci/run's typecheck tier: each ``assert_type`` fails
when the inferred type is not the one written) and at run time
(tests/generation/test_results.py calls every function here with a model, and :func:`check`
holds each value to the same type). So a declared type is both what mypy infers and what the
call returns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

import numpy as np

import gpt2np
from gpt2np import GPT2, Completion, Score

if TYPE_CHECKING:
    from typing_extensions import assert_type
else:

    def assert_type(value, _type):  # at run time typing's assert_type returns the value too
        return value


def check(value: object, expected: Any) -> None:
    """``value`` is of type ``expected``: a class, list[X], Iterator[X] (consumed, at least one
    piece), a Union, or Any; every list and iterator must hold something, so that their items
    are checked."""
    assert holds(value, expected), f"{value!r} is not a {expected}"


def holds(value: object, expected: Any) -> bool:
    origin, args = get_origin(expected), get_args(expected)
    if expected is Any:
        return True
    if origin is Union:
        return any(holds(value, a) for a in args)
    if origin in (list, Iterator):
        kind = list if origin is list else Iterator
        items = list(value) if isinstance(value, kind) else []
        return bool(items) and all(holds(v, args[0]) for v in items)
    return isinstance(value, expected)


IDS = [15496, 995]  # "Hello world"


def generate_method(m: GPT2) -> None:
    """Every overload of GPT2.generate: a prompt's kind x logprobs x stream, and the rest Any."""
    check(assert_type(m.generate("Hi", 3, temperature=0), str), str)
    check(assert_type(m.generate(None, 3, temperature=0), str), str)
    check(assert_type(m.generate(max_new_tokens=3, temperature=0, echo=True), str), str)
    check(assert_type(m.generate(IDS, 3, temperature=0), list[int]), list[int])
    check(assert_type(m.generate(["Hi", "Yo"], 3, temperature=0), list[str]), list[str])
    check(assert_type(m.generate(("Hi", "Yo"), 3, temperature=0), list[str]), list[str])
    check(assert_type(m.generate([IDS, [11]], 3, temperature=0), list[list[int]]),
          list[list[int]])  # fmt: skip
    check(assert_type(m.generate("Hi", 3, temperature=0, stream=True), Iterator[str]),
          Iterator[str])  # fmt: skip
    check(assert_type(m.generate(IDS, 3, temperature=0, stream=True), Iterator[list[int]]),
          Iterator[list[int]])  # fmt: skip
    check(assert_type(m.generate(["Hi", "Yo"], 3, temperature=0, stream=True),
                      Iterator[list[str]]), Iterator[list[str]])  # fmt: skip
    check(assert_type(m.generate([IDS, [11]], 3, temperature=0, stream=True),
                      Iterator[list[list[int]]]), Iterator[list[list[int]]])  # fmt: skip
    check(assert_type(m.generate("Hi", 3, temperature=0, logprobs=2), Completion), Completion)
    check(assert_type(m.generate(IDS, 3, logprobs=0), Completion), Completion)
    check(assert_type(m.generate(["Hi", "Yo"], 3, logprobs=1), list[Completion]),
          list[Completion])  # fmt: skip
    check(assert_type(m.generate([IDS, [11]], 3, logprobs=1), list[Completion]),
          list[Completion])  # fmt: skip
    check(assert_type(m.generate("Hi", 3, logprobs=1, stream=True), Iterator[Completion]),
          Iterator[Completion])  # fmt: skip
    check(assert_type(m.generate([IDS, [11]], 3, logprobs=1, stream=True),
                      Iterator[list[Completion]]), Iterator[list[Completion]])  # fmt: skip
    # what the arguments do not decide: n samples, an array prompt
    check(assert_type(m.generate("Hi", 3, n=2, seed=1), Any), list[str])
    check(assert_type(m.generate("Hi", 3, num_return_sequences=2, seed=1), Any), list[str])
    check(assert_type(m.generate(np.array(IDS), 3, temperature=0), Any), list[int])
    check(assert_type(m.generate(np.array([IDS]), 3, temperature=0), Any), list[list[int]])


def generate_function(m: GPT2) -> None:
    """gpt2np.generate: the same overloads (model= and dtype= go with the options)."""
    check(assert_type(gpt2np.generate("Hi", 3, model=m, temperature=0), str), str)
    check(assert_type(gpt2np.generate(IDS, 3, model=m, temperature=0), list[int]), list[int])
    check(assert_type(gpt2np.generate(["Hi", "Yo"], 3, model=m, temperature=0), list[str]),
          list[str])  # fmt: skip
    check(assert_type(gpt2np.generate("Hi", 3, model=m, stream=True), Iterator[str]),
          Iterator[str])  # fmt: skip
    check(assert_type(gpt2np.generate("Hi", 3, model=m, logprobs=1), Completion), Completion)
    check(assert_type(gpt2np.generate(["Hi", "Yo"], 3, model=m, logprobs=1), list[Completion]),
          list[Completion])  # fmt: skip
    check(assert_type(gpt2np.generate("Hi", 3, model=m, n=2, seed=1), Any), list[str])


def score(m: GPT2) -> None:
    """GPT2.score: one text or id row gives a Score, a batch a list of them."""
    check(assert_type(m.score("Hello world, again"), Score), Score)
    check(assert_type(m.score([15496, 995, 11]), Score), Score)
    check(assert_type(m.score(["Hello world", "Good day"]), list[Score]), list[Score])
    check(assert_type(m.score([[15496, 995], [11, 13]]), list[Score]), list[Score])
    check(assert_type(m.score(np.array([[15496, 995, 11]])), Union[Score, list[Score]]),
          list[Score])  # fmt: skip


def hf_generate(m: GPT2) -> None:
    """model.hf.generate: an int64 array, or HF's output object with return_dict_in_generate."""
    from gpt2np.generation.hf import HFGenerateOutput

    check(assert_type(m.hf.generate([IDS], max_new_tokens=2), np.ndarray), np.ndarray)
    out = m.hf.generate([IDS], max_new_tokens=2, return_dict_in_generate=True)
    check(assert_type(out, HFGenerateOutput), HFGenerateOutput)
    check(assert_type(out.sequences, np.ndarray), np.ndarray)
