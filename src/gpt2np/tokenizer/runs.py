"""BPE of one long piece of whitespace in bounded memory, for
:meth:`gpt2np.tokenizer.tokenizer.Tokenizer.encode_stream`.

A run of whitespace is one piece for the pre-tokeniser (``\\s+(?!\\S)``, or ``\\s+`` at the end
of the text), so in principle its ids depend on all of it: 200 MiB of spaces, or of ``"\\n "``,
cannot be encoded part by part the way text with words is. Two exact ways bound the memory.

**Cuts no token can span.** Every symbol BPE ever makes is a merge's token, whose bytes are a
contiguous stretch of the piece. Call a place between two characters of the piece *safe* when
no merge's token, split there into a non-empty head and tail, has a head that can end the
character before it and a tail that can start the character after it (:func:`unsafe_pairs`).
At a safe place, BPE of the piece is BPE of the part before it followed by BPE of the part
after it. Proof: no symbol can ever span the place, so the pair that straddles it never has
a rank; the sequence of symbols is always (symbols of the head) + (symbols of the tail), and
each step merges the lowest-ranked pair, the leftmost of equals (tiktoken), or every
occurrence of it from left to right (``encoder.py``): that pair lies in the head or in the
tail, and is the one the part alone would merge next (a lowest pair of the whole is a lowest
of its part; among equals, a leftmost of the whole in the tail means the head holds none of
that rank). So the whole's merges are the two parts' merges interleaved, and it stops when
both stop. Safety depends only on the two characters either side (the head and tail are
checked against whole characters, the rest of the token ignored, which can only call more
places unsafe), so a stream finds safe places with one regular expression
(:class:`SpaceCuts`). For GPT-2's vocabulary every change between two ASCII whitespace
characters is safe, and so is a space after a space: no token holds two of them but
``"\\n\\n"``. The unsafe places are inside a run of ``"\\n"``, before U+00A0 after a space, a
``"\\n"`` or U+00A0, before a space after U+00A0 (tokens ``" \\xa0"``, ``"\\xa0\\xa0"``,
``"\\n\\xa0"``, ...), and between a space and U+0085, U+1680, U+2000-U+200A, U+2028, U+2029,
U+202F or U+205F (tokens ``" \\xc2"``, ``" \\xe1"``, ``" \\xe2\\x80"``). A test checks this
table, and checks BPE's split at every safe place of random whitespace against tiktoken.

**Runs of one symbol.** A stretch with no safe place (``"\\n"`` repeated) is held as
``(symbol, count)`` runs: the piece is a handful of pairs, and GPT-2's BPE acts on runs as on
the symbols they stand for (:func:`bpe_runs`). Each round finds the pair of lowest rank, then
merges every occurrence of it from left to right (tiktoken's one-at-a-time merge of the
leftmost lowest pair gives the same symbols, since a merge's result only ever pairs at a
higher rank):

* a pair of one symbol ``(a, a)`` inside a run of ``c`` of them gives ``c // 2`` merged
  symbols, and one ``a`` left at the run's right end when ``c`` is odd;
* a pair ``(a, b)`` of two symbols meets where a run of ``a`` ends and one of ``b`` starts,
  and takes one symbol from each.

A run of one single-byte character, however long, stays a few runs through every round, so
its ids cost time and memory in the number of rounds, not in its length. A character of
several bytes is one symbol, the token it becomes alone, when that token is certain to form
before any of its bytes can merge with a neighbour's (:func:`whole_symbol`: U+00A0 after
``"\\n"`` or itself). Proof: merges apply in rank order (a merge's result only pairs at a
higher rank), its own merges all rank up to R, and no merge of rank R or lower pairs part of
it with what stands beside it, so each copy is that token once rank R is done, whatever
happened around it; and the token cannot merge before rank R either way. A stretch with no
safe place whose characters change often, or that holds characters of several bytes not
certain to be one symbol (U+00A0 after a space: bytes 20 C2 A0 20 C2 A0 ...), is a run per
byte; :class:`SpacePiece` refuses one of more than :data:`MAX_RUNS` runs (after
:data:`~gpt2np.tokenizer.tokenizer.READ_CHARS` characters held as text) rather than hold it.
For GPT-2 that is only a stretch of over 65,536 characters, all U+00A0 and single spaces with
a space before some U+00A0 (``"\\xa0 "`` repeated, as HTML's ``&nbsp; `` gives), perhaps
after newlines.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Callable, Optional

import regex

from .bpe import MergeTable

__all__ = [
    "MAX_RUNS",
    "PART_CHARS",
    "WHITESPACE",
    "SpaceCuts",
    "SpacePiece",
    "WhitespaceRunError",
    "bpe_runs",
    "describe",
    "expand",
    "unsafe_pairs",
    "whole_symbol",
]

#: (symbol id, how many in a row)
Runs = list[tuple[int, int]]

#: Every character the pre-tokeniser's ``\s`` matches (Unicode's White_Space; a test checks).
WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
#: The most runs of symbols a stretch of whitespace with no safe place may hold (about 100
#: bytes each); beyond it :class:`SpacePiece` raises ValueError.
MAX_RUNS = 1 << 14
#: Characters of whitespace encoded as one part, between safe places (BPE of a part holds
#: arrays of tens of bytes per byte).
PART_CHARS = 1 << 13


def unsafe_pairs(tokens: Iterable[bytes], chars: str = WHITESPACE) -> dict[str, frozenset[str]]:
    """For each character ``x`` of ``chars``, the characters ``y`` such that some token of
    ``tokens`` (the tokens merges make) might span the place between ``x`` and ``y``: split
    into a non-empty head and tail, the head agrees with the end of ``x``'s UTF-8 bytes and
    the tail with the start of ``y``'s. Every other place is safe (see the module docstring)."""
    code = {c: c.encode() for c in chars}
    alphabet = set(b"".join(code.values()))
    unsafe: dict[str, set[str]] = {c: set() for c in chars}
    for token in tokens:
        if len(token) < 2 or not alphabet.issuperset(token):  # cannot lie inside whitespace
            continue
        for k in range(1, len(token)):
            head, tail = token[:k], token[k:]
            xs = [x for x, b in code.items() if head[-len(b) :] == b[-len(head) :]]
            ys = [y for y, b in code.items() if tail[: len(b)] == b[: len(tail)]]
            for x in xs:
                unsafe[x].update(ys)
    return {c: frozenset(ys) for c, ys in unsafe.items()}


def whole_symbol(
    char: str,
    alphabet: Iterable[str],
    lefts: Iterable[str],
    rights: Iterable[str],
    table: MergeTable,
    token_bytes: list[bytes],
    byte_ids: list[int],
) -> Optional[int]:
    """The token a character of several bytes always becomes inside a stretch of whitespace
    made of ``alphabet``, before any of its bytes can merge with a neighbour's; None when that
    is not certain. Then the stretch may hold it as one symbol (see the module docstring).

    The character alone must become one token T, by merges of ranks up to R; and no merge of
    rank R or lower may pair a proper head of its bytes with a token of the alphabet's bytes
    on its left ending as a character of ``lefts`` (those seen just before it) ends, or a
    proper tail with one on its right starting as a character of ``rights`` starts. U+00A0
    (C2 A0) is such a character after ``"\\n"`` or itself, not after a space (``" \\xc2"``
    ranks before ``"\\xc2\\xa0"``)."""
    code = char.encode()
    symbols = [byte_ids[b] for b in code]
    top = -1
    while len(symbols) > 1:  # BPE of the character alone, keeping the highest rank used
        found = [
            (rank, i)
            for i, (a, b) in enumerate(zip(symbols, symbols[1:]))
            if (rank := table.ranks.get(a * table.width + b)) is not None
        ]
        if not found:
            return None
        rank, i = min(found)
        top = max(top, rank)
        symbols[i : i + 2] = [table.merged[rank]]
    around = set(b"".join(c.encode() for c in alphabet))
    ends = {c.encode()[-1] for c in lefts}
    starts = {c.encode()[0] for c in rights}
    heads = {code[:k] for k in range(1, len(code))}
    tails = {code[k:] for k in range(1, len(code))}
    first, second = table.arrays.first, table.arrays.second
    for rank in range(top + 1):
        left, right = token_bytes[int(first[rank])], token_bytes[int(second[rank])]
        if (right in heads and left[-1] in ends and around.issuperset(left)) or (
            left in tails and right[0] in starts and around.issuperset(right)
        ):
            return None
    return symbols[0]


class SpaceCuts:
    """The safe places of whitespace text, found by a regular expression: ``last(text)`` is
    the last (``first``, the first) index ``start < i < end`` such that the place between
    ``text[i - 1]`` and ``text[i]`` is safe, or 0 when there is none. ``text`` holds only
    characters of :data:`WHITESPACE`."""

    def __init__(self, unsafe: dict[str, frozenset[str]]) -> None:
        self.unsafe = unsafe
        groups: dict[frozenset[str], list[str]] = {}
        for x, ys in unsafe.items():
            groups.setdefault(ys, []).append(x)
        alternatives = []
        for ys, xs in groups.items():
            after = f"[^{_class(ys)}]" if ys else "."
            alternatives.append(f"[{_class(xs)}](?={after})")
        pattern = "|".join(alternatives)
        self._first = regex.compile(pattern, regex.DOTALL)
        self._last = regex.compile(pattern, regex.DOTALL | regex.REVERSE)

    def first(self, text: str, start: int = 0, end: Optional[int] = None) -> int:
        found = self._first.search(text, start, len(text) if end is None else end)
        return found.end() if found else 0

    def last(self, text: str, start: int = 0, end: Optional[int] = None) -> int:
        found = self._last.search(text, start, len(text) if end is None else end)
        return found.end() if found else 0


def _class(chars: Iterable[str]) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in sorted(chars))  # whitespace is in the BMP


class WhitespaceRunError(ValueError):
    """:class:`SpacePiece`'s refusal: a piece of whitespace ``chars`` characters long so far,
    with over ``window`` in a row made of ``held`` (characters) and no safe place among them,
    which would take more than :data:`MAX_RUNS` runs to hold."""

    def __init__(self, chars: int, window: int, held: list[str]) -> None:
        self.chars, self.window, self.held = chars, window, held
        super().__init__(
            f"the text holds a run of {chars:,}+ whitespace characters in which over "
            f"{window:,} in a row ({describe(held)}) have no place where a token boundary is "
            f"certain; encode_stream would hold them as over {MAX_RUNS:,} runs of bytes, so it "
            "refuses them (encode() takes the text whole)"
        )


def describe(chars: Iterable[str]) -> str:
    """``"U+0020 SPACE, U+00A0 NO-BREAK SPACE"``: whitespace characters named."""
    return ", ".join(f"U+{ord(c):04X} {_CONTROLS.get(c) or unicodedata.name(c, '')}" for c in chars)


_CONTROLS = {"\t": "TAB", "\n": "LINE FEED", "\x0b": "LINE TABULATION", "\x0c": "FORM FEED",
             "\r": "CARRIAGE RETURN", "\x85": "NEXT LINE"}  # fmt: skip


class SpacePiece:
    """One piece of whitespace that arrives in parts (:meth:`add`), encoded in bounded memory:
    text up to the last safe place is encoded by ``encode`` (BPE of one piece) as it comes,
    and a stretch with no safe place longer than ``window`` characters is held as runs of one
    character and encoded by :func:`bpe_runs` when it ends. Memory: about two windows of text,
    or :data:`MAX_RUNS` runs."""

    def __init__(
        self,
        cuts: SpaceCuts,
        encode: Callable[[str], list[int]],
        table: MergeTable,
        byte_ids: list[int],
        window: int,
        whole: Callable[[str, frozenset[str], frozenset[tuple[str, str]]], Optional[int]],
    ) -> None:
        self._cuts, self._encode, self._table, self._byte_ids = cuts, encode, table, byte_ids
        self._whole = whole  # whole_symbol for this vocabulary
        self._window = max(window, 1)
        self._text = ""  # since the last safe place, while it is short
        self._runs: Optional[list[tuple[str, int]]] = None  # else the stretch, as (char, n)
        self._n_runs = 0  # runs of symbols ``_runs`` stands for
        self._alphabet: frozenset[str] = frozenset()  # the characters of ``_runs``
        self._pairs: frozenset[tuple[str, str]] = frozenset()  # and which follows which
        self.chars = 0  # characters of the piece so far

    def add(self, text: str) -> Iterator[list[int]]:
        """Take more of the piece (whitespace only); yield the ids of what is settled."""
        for start in range(0, len(text), self._window):
            yield from self._add(text[start : start + self._window])

    def _add(self, text: str) -> Iterator[list[int]]:
        self.chars += len(text)
        if self._runs is not None:  # a stretch with no safe place: does it end here?
            at = self._cuts.first(self._runs[-1][0] + text) - 1
            if at < 0:
                self._extend(text)
                return
            self._extend(text[:at])
            yield from expand(bpe_runs(self._symbols(self._runs), self._table), self._window)
            self._runs, self._n_runs, text = None, 0, text[at:]
            self._alphabet, self._pairs = frozenset(), frozenset()
        self._text += text
        if len(self._text) <= self._window:
            return
        cut = self._cuts.last(self._text)
        if cut:
            yield from self._emit(self._text, cut)
            self._text = self._text[cut:]
        if len(self._text) > self._window:  # no safe place in a window: held as runs
            self._runs, text, self._text = [], self._text, ""
            self._extend(text)

    def _emit(self, text: str, end: int) -> Iterator[list[int]]:
        """The ids of ``text[:end]`` (which ends at a safe place or the piece's end), encoded
        a part of about :data:`PART_CHARS` characters at a time, cut at safe places."""
        start = 0
        while start < end:
            cut = end
            if end - start > PART_CHARS:
                mid = start + PART_CHARS
                cut = self._cuts.last(text, start, mid) or self._cuts.first(text, mid - 1, end)
                cut = cut or end
            ids = self._encode(text[start:cut])
            if ids:
                yield ids
            start = cut

    def _extend(self, text: str) -> None:
        assert self._runs is not None
        runs = self._runs
        for char, group in itertools.groupby(text):
            count = sum(1 for _ in group)
            before = runs[-1][0] if runs else char
            pairs = {(before, char)} if runs else set()
            pairs |= {(char, char)} if count > 1 else set()
            if char not in self._alphabet or not pairs <= self._pairs:  # which characters are
                self._alphabet |= {char}  # one symbol may change
                self._pairs |= pairs
                self._n_runs = sum(self._cost(c, n) for c, n in runs)
            if runs and runs[-1][0] == char:
                runs[-1] = (char, runs[-1][1] + count)
                self._n_runs += self._cost(char, count) - self._cost(char, 0)
            else:
                runs.append((char, count))
                self._n_runs += self._cost(char, count)
            if self._n_runs > MAX_RUNS:
                raise WhitespaceRunError(self.chars, self._window, sorted(self._alphabet))

    def _cost(self, char: str, count: int) -> int:
        """The runs of symbols a run of ``count`` ``char`` (count 0: one more of them) takes:
        one, unless it is held as its bytes."""
        width = len(char.encode())
        if width == 1 or self._whole(char, self._alphabet, self._pairs) is not None:
            return 1
        return width * count

    def close(self, whole: bool) -> tuple[Iterator[list[int]], str]:
        """(the ids of the rest of the piece, the character left over): the piece whole when
        the text (or a part between special tokens) ends with it; else the piece but its last
        character, which the pre-tokeniser puts in the next piece (returned)."""
        if self._runs is None:
            text, last = (self._text, "") if whole else (self._text[:-1], self._text[-1:])
            return self._emit(text, len(text)), last
        runs = list(self._runs)
        last = ""
        if not whole:
            char, count = runs[-1]
            runs[-1], last = (char, count - 1), char
        symbols = self._symbols(runs)
        return expand(bpe_runs(symbols, self._table), self._window), last

    def _symbols(self, runs: list[tuple[str, int]]) -> Runs:
        symbols: Runs = []
        for char, count in runs:
            code = char.encode()
            whole = self._whole(char, self._alphabet, self._pairs) if len(code) > 1 else None
            if len(code) == 1:
                symbols.append((self._byte_ids[code[0]], count))
            elif whole is not None:
                symbols.append((whole, count))
            else:
                symbols += [(self._byte_ids[b], 1) for b in code] * count
        return symbols


def bpe_runs(runs: Runs, table: MergeTable) -> Runs:
    """The BPE of the symbol sequence ``runs`` stands for, as runs of token ids."""
    runs = _normal(runs)
    ranks, width = table.ranks, table.width
    while True:
        best = None
        for i, (a, count) in enumerate(runs):
            pairs = [a * width + a] if count > 1 else []
            if i + 1 < len(runs):
                pairs.append(a * width + runs[i + 1][0])
            for rank in map(ranks.get, pairs):
                if rank is not None and (best is None or rank < best):
                    best = rank
        if best is None:
            return runs
        first, second = int(table.arrays.first[best]), int(table.arrays.second[best])
        runs = _normal(_merge(runs, first, second, table.merged[best]))


def _merge(runs: Runs, a: int, b: int, merged: int) -> Runs:
    """Every (a, b) of ``runs`` merged into ``merged``, from left to right."""
    out: Runs = []
    todo = list(runs)
    for i, (symbol, count) in enumerate(todo):
        if a == b == symbol:
            out += [(merged, count // 2), (a, count % 2)]
        elif symbol == a and i + 1 < len(todo) and todo[i + 1][0] == b and count:
            out += [(a, count - 1), (merged, 1)]
            todo[i + 1] = (b, todo[i + 1][1] - 1)
        else:
            out.append((symbol, count))
    return out


def _normal(runs: Runs) -> Runs:
    """No empty runs, and no two neighbours of one symbol."""
    out: Runs = []
    for symbol, count in runs:
        if count == 0:
            continue
        if out and out[-1][0] == symbol:
            out[-1] = (symbol, out[-1][1] + count)
        else:
            out.append((symbol, count))
    return out


def expand(runs: Runs, batch: int) -> Iterator[list[int]]:
    """The ids ``runs`` stands for, ``batch`` or so at a time."""
    ids: list[int] = []
    for symbol, count in runs:
        while count:
            take = min(count, batch - len(ids))
            ids += [symbol] * take
            count -= take
            if len(ids) >= batch:
                yield ids
                ids = []
    if ids:
        yield ids
