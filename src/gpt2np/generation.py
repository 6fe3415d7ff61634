"""Autoregressive generation: prefill the prompt once, then one position per row per step.

    cache = model.new_cache(B, max_len, pad)            preallocated [L, B, 2, H, max_len, Dh]
    logits = model.forward_cached(prompt, cache, last_only=True)          one pass, [B, 1, V]
    repeat: id = sample(logits); logits = model.forward_cached(id, cache, last_only=True)

Each decode step runs one new position per row through the model and writes its keys and
values into the cache in place (no concatenation), and the head is applied to the last position
only. A batch of prompts of different lengths is left-padded: the cache's ``pad`` masks the
padding and starts each row's positions at 0 after it, so every row gives what its prompt gives
alone. A row that ends (``<|endoftext|>`` or a stop string) stops producing output while the
others go on; the batch ends when every row has ended or after ``max_new_tokens`` steps.

Context. GPT-2 attends to at most ``n_ctx`` positions (1024). ``context="error"`` (default)
refuses a prompt whose length plus ``max_new_tokens`` exceeds ``n_ctx``. ``context="slide"``
keeps only the last ``n_ctx`` tokens: a longer prompt is cut to its end, and once the cache is
full every further token costs a fresh prefill of the whole ``n_ctx`` window (positions shift,
so cached keys cannot be reused): about ``n_ctx`` times the cost of a cached step.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from .progress import show_progress, tqdm
from .sampling import check_sampling_args, sample

if TYPE_CHECKING:
    from .gpt2 import GPT2

__all__ = ["CONTEXT_MODES", "check_args", "generate"]

#: Values of ``context=``: "error" refuses to exceed n_ctx, "slide" keeps the last n_ctx tokens.
CONTEXT_MODES = ("error", "slide")


def generate(
    prompt: Union[str, Sequence[str], Sequence[int], np.ndarray, Sequence[Sequence[int]]],
    model: GPT2,
    *,
    max_new_tokens: int = 50,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: Union[int, np.random.Generator, None] = None,
    stop: Union[str, Sequence[str], None] = None,
    stream: bool = False,
    context: str = "error",
    progress: Optional[bool] = None,
) -> Any:
    """Continue ``prompt`` with up to ``max_new_tokens`` tokens.

    prompt: a ``str`` (returns the continuation ``str``; ``<|endoftext|>`` in it is encoded as
        the special token); token ids, a list or 1-D array of ints (returns the list of new
        ids); a list of ``str`` or of id lists (a batch, returns one result per prompt; the
        prompts may differ in length).
    model: a :class:`gpt2np.GPT2` (``gpt2np.generate`` also takes a name or a directory).
    temperature: 0 is greedy (argmax); otherwise logits / temperature before sampling.
    top_k, top_p: OpenAI's top-k and nucleus filters (see :mod:`gpt2np.sampling`); 0 and 1.0
        are off. seed: an int makes the result identical run to run; every row of a batch uses
        its own generator seeded with it, so a row equals its prompt generated alone. A numpy
        ``Generator`` is used as it is and advanced, shared by all rows (rows of a batch then
        differ from their prompts alone). None: fresh OS entropy.
    stop: a string or strings; the first occurrence ends that row, and it and anything after it
        are not returned. ``<|endoftext|>`` always ends a row and is not returned (nor its id).
    stream: return an iterator of pieces as they are produced (``str`` pieces, never half a
        UTF-8 character, or lists of ids; for a batch, a list with one piece per row); joined,
        they equal the non-streamed result.
    context: "error" (ValueError when prompt + max_new_tokens > n_ctx) or "slide" (keep the
        last n_ctx tokens; see the module docstring for the cost).
    progress: without ``stream``, a bar over the tokens while a generation lasts longer than
        a second (:mod:`gpt2np.progress`: None shows it on a terminal or in a notebook).
    """
    is_text, is_batch, prompts, stops = check_args(
        prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
        top_p=top_p, seed=seed, stop=stop, stream=stream, context=context,
    )  # fmt: skip
    show = show_progress(progress)  # a TypeError for a bad value before any work
    rows = [_encode(model, p) if is_text else _check_row(model, p) for p in prompts]
    longest = max(len(r) for r in rows)
    if context == "error" and longest + max_new_tokens > model.hparams.n_ctx:
        raise ValueError(
            f"prompt of {longest} tokens + max_new_tokens={max_new_tokens} exceeds the model's "
            f"context n_ctx={model.hparams.n_ctx}; shorten them or pass context='slide' "
            "(--context slide on the command line)"
        )
    eot = model.eot_token
    states = [_TextRow(model.tokenizer, stops, eot) if is_text else _IdRow(eot) for _ in rows]
    rngs = _row_generators(seed, len(rows))
    steps = _steps(model, rows, states, max_new_tokens, (temperature, top_k, top_p), rngs)
    if stream:
        return _stream(steps, is_batch)
    bar = tqdm(total=max_new_tokens, desc="generating", unit="token", delay=1.0, leave=False,
               disable=not show)  # fmt: skip
    with bar:
        for _ in steps:
            bar.update()
    results = [s.result() for s in states]
    return results if is_batch else results[0]


def check_args(
    prompt: Any,
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: Any,
    stop: Any,
    stream: bool,
    context: str,
) -> tuple[bool, bool, list[Any], tuple[str, ...]]:
    """Every check of :func:`generate`'s arguments that needs no model (so that
    ``gpt2np.generate`` can make them before loading one).

    -> (is_text, is_batch, prompts, stop strings), or ValueError/TypeError naming the argument.
    """
    _check_int("max_new_tokens", max_new_tokens)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    check_sampling_args(temperature, top_k, top_p)
    _check_seed(seed)
    if context not in CONTEXT_MODES:
        raise ValueError(f"context must be one of {CONTEXT_MODES}, got {context!r}")
    is_text, is_batch, prompts = _split_prompt(prompt)
    return is_text, is_batch, prompts, _check_stop(stop, is_text)


def _steps(
    model: GPT2,
    rows: list[list[int]],
    states: list[Any],
    max_new_tokens: int,
    sampling: tuple[float, int, float],
    rngs: list[np.random.Generator],
) -> Iterator[list[Any]]:
    """Run the decode loop; after each step yield every row's new output piece."""
    if max_new_tokens == 0:
        return
    n_ctx = model.hparams.n_ctx
    seqs = [r[-n_ctx:] for r in rows]  # the whole sequence of each row, grown as we go
    longest = max(len(s) for s in seqs)
    # The last sampled token is never fed back, hence the - 1.
    logits, cache = _prefill(model, seqs, min(n_ctx, longest + max_new_tokens - 1))
    for step in range(max_new_tokens):
        live = [b for b, s in enumerate(states) if not s.done]
        new = sample(logits[live], [rngs[b] for b in live], *sampling)  # [len(live)]
        pieces = [states[b].empty for b in range(len(states))]
        for b, token in zip(live, new.tolist()):
            seqs[b].append(token)
            pieces[b] = states[b].push(token)
        if step == max_new_tokens - 1 or all(s.done for s in states):
            break
        yield pieces
        if cache.length == cache.max_len:  # only with context="slide": recompute the window
            logits, cache = _prefill(model, [s[-n_ctx:] for s in seqs], n_ctx)
        else:
            last = np.array([s[-1] for s in seqs], dtype=np.int64)[:, None]  # [B, 1]
            logits = model.forward_cached(last, cache, last_only=True)[:, 0]  # [B, V]
    for b, s in enumerate(states):  # flush what rows held back (partial UTF-8, stop prefixes)
        if not s.done:
            pieces[b] = pieces[b] + s.finish()
    yield pieces


def _prefill(model: GPT2, seqs: list[list[int]], max_len: int) -> tuple[np.ndarray, Any]:
    """Left-pad the rows, run them through a new cache in one pass.  -> (logits [B, V], cache)"""
    lengths = np.array([len(s) for s in seqs])
    T = int(lengths.max())
    ids = np.zeros((len(seqs), T), dtype=np.int64)  # the padding id is masked, any id will do
    for b, s in enumerate(seqs):
        ids[b, T - len(s) :] = s
    cache = model.new_cache(len(seqs), max(max_len, T), pad=T - lengths)
    return model.forward_cached(ids, cache, last_only=True)[:, 0], cache


def _stream(steps: Iterator[list[Any]], is_batch: bool) -> Iterator[Any]:
    for pieces in steps:
        if is_batch:
            if any(pieces):
                yield pieces
        elif pieces[0]:
            yield pieces[0]


class _IdRow:
    """One row of an id prompt: collects the new ids until <|endoftext|>."""

    def __init__(self, eot: Optional[int]) -> None:
        self.eot, self.ids, self.done = eot, [], False

    @property
    def empty(self) -> list[int]:
        return []

    def push(self, token: int) -> list[int]:
        if token == self.eot:
            self.done = True
            return []
        self.ids.append(token)
        return [token]

    def finish(self) -> list[int]:
        self.done = True
        return []

    def result(self) -> list[int]:
        return self.ids


class _TextRow:
    """One row of a text prompt: decodes incrementally, finds stop strings, holds back text.

    ``pending`` is the decoded text not handed out yet: the tail that could still become the
    start of a stop string. Only it is searched, so a step costs the length of the new text
    plus the longest stop string, not of the whole continuation. The non-streamed result is
    computed from all ids with ``tokenizer.decode`` (see :meth:`result`), not from the stream.
    """

    empty = ""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], eot: Optional[int]) -> None:
        self.tokenizer, self.stops, self.eot = tokenizer, stops, eot
        self.decoder = tokenizer.stream_decoder()
        self.ids: list[int] = []
        self.pending, self.done = "", False

    def push(self, token: int) -> str:
        if token == self.eot:
            return self.finish()
        self.ids.append(token)
        self.pending += self.decoder.feed(token)
        return self._advance(final=False)

    def finish(self) -> str:
        self.done = True
        self.pending += self.decoder.flush()
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        cut = _first_stop(self.pending, self.stops)
        if cut is not None:
            self.done = True
            end = cut
        elif final:
            end = len(self.pending)
        else:
            end = len(self.pending) - _holdback(self.pending, self.stops)
        piece, self.pending = self.pending[:end], self.pending[end:]
        return piece

    def result(self) -> str:
        text = self.tokenizer.decode(self.ids)
        cut = _first_stop(text, self.stops)
        return text if cut is None else text[:cut]


def _first_stop(text: str, stops: tuple[str, ...]) -> Optional[int]:
    """Index of the earliest occurrence of any stop string in ``text``, or None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def _holdback(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that a stop string starts with."""
    longest = min(len(text), max((len(s) for s in stops), default=1) - 1)
    for n in range(longest, 0, -1):
        if any(s.startswith(text[-n:]) for s in stops):
            return n
    return 0


def _split_prompt(prompt: Any) -> tuple[bool, bool, list[Any]]:
    """-> (is_text, is_batch, prompts) or TypeError/ValueError for what cannot be a prompt."""
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
        raise ValueError("prompt is empty; give text, token ids, or a list of prompts")
    if all(isinstance(p, str) for p in prompt):
        return True, True, list(prompt)
    if all(_is_int(p) for p in prompt):
        return False, False, [prompt]
    if all(isinstance(p, (list, tuple, np.ndarray)) for p in prompt):
        return False, True, list(prompt)
    raise TypeError("a batch prompt must be all str or all lists of token ids, not a mix")


def _encode(model: GPT2, text: str) -> list[int]:
    if not text:
        raise ValueError("prompt is the empty string; give at least one character")
    return list(model.tokenizer.encode(text, allowed_special={"<|endoftext|>"}))


def _check_row(model: GPT2, ids: Any) -> list[int]:
    if isinstance(ids, str) or (isinstance(ids, np.ndarray) and ids.ndim != 1):
        raise TypeError("each prompt of a batch of ids must be a 1-D sequence of ints")
    if len(ids) == 0:
        raise ValueError("prompt ids are empty; give at least one token id")
    return model.check_ids(ids)[0].tolist()


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


def _row_generators(seed: Any, batch: int) -> list[np.random.Generator]:
    """One Generator per row: the same seed for each (so a row equals its prompt alone); a
    Generator passed in is shared; None gives every row fresh OS entropy."""
    if isinstance(seed, np.random.Generator):
        return [seed] * batch
    return [np.random.default_rng(seed) for _ in range(batch)]


def _check_seed(seed: Any) -> None:
    if seed is None or isinstance(seed, np.random.Generator):
        return
    if not _is_int(seed):
        raise TypeError(f"seed must be an int, a numpy Generator or None, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
