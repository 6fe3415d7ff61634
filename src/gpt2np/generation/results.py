"""What ``generate`` returns, as a type checker sees it: :class:`Generate`, its overloads.

The result's type follows from the arguments (:func:`gpt2np.generation.loop.generate`):

    prompt                      plain          logprobs=k          stream=True (pieces of either)
    None or str                 str            Completion          Iterator[str] / [Completion]
    ids: a list of ints         list[int]      Completion          Iterator[list[int]] / [...]
    a batch: list of str        list[str]      list[Completion]    Iterator[list[str]] / [...]
    a batch: lists of ids       list[list[int]]  list[Completion]  Iterator[list[list[int]]] / ...

With ``n`` (or ``num_return_sequences``) other than a literal 1, or a prompt whose kind the
type does not say (an ndarray: 1-D is ids, 2-D a batch), ``stream`` or ``logprobs`` not known
when checking, the result is ``Any``. One thing no type can see: a model whose
generation_config.json sets ``num_return_sequences`` > 1 returns a list of that many per prompt
even when the call says nothing (OpenAI's release and HF's GPT-2 files set none).

Only the options that decide the type are named here (with the defaults of
:data:`gpt2np.generation.options.OPTIONS`, tests/generation/test_results.py checks that); the
others pass through ``**options``, and the runtime signature (``help()``) lists all of them.
:meth:`gpt2np.GPT2.generate` is a :class:`Generate`; so is :func:`gpt2np.generate`, whose
``model=`` and ``dtype=`` go with the options.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal, Optional, Protocol, Union, overload

from .completion import Completion
from .loop import Prompt

__all__ = ["Generate", "IdsBatch", "TextBatch"]

#: A batch of text prompts (a list, not any Sequence: a str is a Sequence of str too).
TextBatch = Union[list[str], tuple[str, ...]]
#: A batch of id prompts.
IdsBatch = Sequence[Sequence[int]]


class Generate(Protocol):
    """``generate(prompt=None, max_new_tokens=None, **options)`` with its result's type."""

    @overload
    def __call__(self, prompt: Optional[str] = None, max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[False] = False, **options: Any) -> str: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Optional[str] = None, max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[True], **options: Any) -> Iterator[str]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Sequence[int], max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[False] = False, **options: Any) -> list[int]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Sequence[int], max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[True], **options: Any) -> Iterator[list[int]]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: TextBatch, max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[False] = False, **options: Any) -> list[str]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: TextBatch, max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[True], **options: Any) -> Iterator[list[str]]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: IdsBatch, max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[False] = False,
                 **options: Any) -> list[list[int]]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: IdsBatch, max_new_tokens: Optional[int] = None, *,
                 n: Literal[1] = 1, num_return_sequences: None = None, logprobs: None = None,
                 stream: Literal[True],
                 **options: Any) -> Iterator[list[list[int]]]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Union[str, Sequence[int], None] = None,
                 max_new_tokens: Optional[int] = None, *, n: Literal[1] = 1,
                 num_return_sequences: None = None, logprobs: int,
                 stream: Literal[False] = False, **options: Any) -> Completion: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Union[str, Sequence[int], None] = None,
                 max_new_tokens: Optional[int] = None, *, n: Literal[1] = 1,
                 num_return_sequences: None = None, logprobs: int,
                 stream: Literal[True], **options: Any) -> Iterator[Completion]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Union[TextBatch, IdsBatch], max_new_tokens: Optional[int] = None,
                 *, n: Literal[1] = 1, num_return_sequences: None = None, logprobs: int,
                 stream: Literal[False] = False,
                 **options: Any) -> list[Completion]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Union[TextBatch, IdsBatch], max_new_tokens: Optional[int] = None,
                 *, n: Literal[1] = 1, num_return_sequences: None = None, logprobs: int,
                 stream: Literal[True],
                 **options: Any) -> Iterator[list[Completion]]: ...  # fmt: skip
    @overload
    def __call__(self, prompt: Prompt = None, max_new_tokens: Optional[int] = None, *,
                 n: int = 1, num_return_sequences: Optional[int] = None,
                 logprobs: Optional[int] = None, stream: bool = False,
                 **options: Any) -> Any: ...  # fmt: skip
