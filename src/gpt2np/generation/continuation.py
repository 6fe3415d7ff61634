"""What one continuation collects while it is generated: its ids, its text (decoded as it
goes, without half UTF-8 characters, stop strings found and cut), its log-probs and why it
ended. :mod:`gpt2np.generation.loop` keeps one per continuation."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Generic, Optional, TypeVar

__all__ = ["IdRow", "Row", "TextRow"]

#: What a row hands out at each step: new ids (an id prompt's) or new text (a text prompt's).
Piece = TypeVar("Piece", list[int], str)


class Row(Generic[Piece]):
    """What every continuation collects: its new ids until an end id (``ends``, the ids of
    ``eos_token_id``: <|endoftext|> by default), their log-probs and alternatives, and why it
    ended. Each step hands out a ``Piece``."""

    def __init__(self, ends: Collection[int]) -> None:
        self.ends, self.done = frozenset(ends), False
        self.ids: list[int] = []
        self.finish_reason = "length"
        self.logprobs: list[float] = []
        self.tops: list[list[tuple[int, float]]] = []
        self.taken, self.reported = 0, False  # what take() handed out

    @property
    def empty(self) -> Piece:
        """A step's piece when the row produced nothing."""
        raise NotImplementedError

    def note(self, logprob: float, top: list[tuple[int, float]]) -> None:
        """Record the log-prob and alternatives of the token about to be pushed."""
        self.logprobs.append(logprob)
        self.tops.append(top)

    def push(self, token: int) -> Piece:
        """Take the next token; return what it adds to the output."""
        raise NotImplementedError

    def finish(self) -> Piece:
        """End the row; return what it still held back."""
        raise NotImplementedError

    def result(self) -> Piece:
        """The whole continuation."""
        raise NotImplementedError

    def halt(self, reason: str) -> Piece:
        """End the row after its last token (a stopping criterion, or max_time); return what it
        still held back."""
        piece = self.finish()
        if self.finish_reason == "length":  # a stop string found in what was held back wins
            self.finish_reason = reason
        return piece

    def take(self) -> tuple[list[int], list[float], list[list[tuple[int, float]]], Optional[str]]:
        """What was not handed out yet: the new ids, their log-probs and alternatives, and the
        finish reason once the row has ended (then None again)."""
        i, self.taken = self.taken, len(self.ids)
        reason = None
        if self.done and not self.reported:
            reason, self.reported = self.finish_reason, True
        return self.ids[i:], self.logprobs[i : self.taken], self.tops[i : self.taken], reason

    def _end(self, reason: str) -> None:
        self.done, self.finish_reason = True, reason
        del self.logprobs[len(self.ids) :], self.tops[len(self.ids) :]  # the end id's own


class IdRow(Row[list[int]]):
    """One continuation of an id prompt: collects the new ids until <|endoftext|>."""

    @property
    def empty(self) -> list[int]:
        return []

    def push(self, token: int) -> list[int]:
        if token in self.ends:
            self._end("eot")
            return []
        self.ids.append(token)
        return [token]

    def finish(self) -> list[int]:
        self.done = True
        return []

    def result(self) -> list[int]:
        return self.ids


class TextRow(Row[str]):
    """One continuation of a text prompt: decodes incrementally, finds stop strings, holds back
    text.

    ``pending`` is the decoded text not handed out yet: the tail that could still become the
    start of a stop string. Only it is searched, so a step costs the length of the new text
    plus the longest stop string, not of the whole continuation. The non-streamed result is
    computed from all ids with ``tokenizer.decode`` (see :meth:`result`), not from the stream.
    """

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], ends: Collection[int]) -> None:
        super().__init__(ends)
        self.tokenizer, self.stops = tokenizer, stops
        self.decoder = tokenizer.stream_decoder()
        self.pending = ""

    @property
    def empty(self) -> str:
        return ""

    def push(self, token: int) -> str:
        if token in self.ends:
            self._end("eot")
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
            self.done, self.finish_reason = True, "stop"
            end = cut
        elif final:
            end = len(self.pending)
        else:
            end = len(self.pending) - _holdback(self.pending, self.stops)
        piece, self.pending = self.pending[:end], self.pending[end:]
        return piece

    def result(self) -> str:
        text: str = self.tokenizer.decode(self.ids)
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
