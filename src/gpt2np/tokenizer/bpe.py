"""GPT-2's byte-level BPE as a short algorithm, and a fast twin of its merge loop.

Text becomes token ids in three steps (Radford et al. 2019, sec. 2.2; OpenAI's
``src/encoder.py`` in github.com/openai/gpt-2 is the reference this restates):

1. **Pre-tokenise.** :data:`PATTERN` cuts the text into pieces: a word with its one leading
   space, a run of digits, a run of punctuation, a run of whitespace. BPE never merges across
   pieces, so " dog" is always the same tokens wherever it appears.
2. **Bytes to symbols.** A piece's UTF-8 bytes are mapped one-to-one onto 256 printable unicode
   characters (:func:`bytes_to_unicode`), the alphabet ``encoder.json`` and ``vocab.bpe`` are
   written in. Any string has a UTF-8 encoding, so nothing is ever "unknown".
3. **Merge.** :func:`bpe` repeatedly joins the adjacent pair of symbols that comes first in
   ``vocab.bpe`` (the lowest *rank*), until no adjacent pair is listed. Each final symbol is a
   key of ``encoder.json``, whose value is the token id.

:func:`bpe` is the clear version: it rescans every pair after each merge, so a piece of n bytes
costs O(n²). :func:`bpe_fast` is its twin on token ids with a priority queue of pairs,
O(n log n), tested equal to it; the tokenizer uses the fast one. The files themselves are read
and checked in :mod:`gpt2np.tokenizer.vocab`.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from typing import NamedTuple

import regex

__all__ = [
    "PATTERN",
    "MergeTable",
    "bpe",
    "bpe_fast",
    "bytes_to_unicode",
    "last_cut",
    "merge_pair",
    "pretokenize",
    "split_text",
]

Pair = tuple[str, str]

# OpenAI's pre-tokenisation pattern (src/encoder.py), which reads
#     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# here with the shared prefixes factored out (the apostrophe, as tiktoken writes it, and the
# optional space): the same pieces (tests/test_bpe.py checks), found ~15% faster. It is
# case-sensitive: "'S" is not a contraction but "'" (punctuation) followed by "S" (a word).
# \s+(?!\S) leaves the last space of a run to join the next word: "a  b" is "a", " ", " b".
PATTERN = regex.compile(
    r"""'(?:[sdmt]|ll|ve|re)| ?(?:\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+)|\s+(?!\S)|\s+"""
)

# The same pattern for ASCII text, where \p{L} is A-Z a-z, \p{N} is 0-9 and \s is these six
# characters (tests/test_bpe.py checks all 128 against the regex module): the standard library's
# re runs it about twice as fast as regex runs PATTERN.
_ASCII_SPACE = " \t\n\x0b\x0c\r"
_ASCII_PATTERN = re.compile(
    rf"""'(?:[sdmt]|ll|ve|re)| ?(?:[A-Za-z]+|[0-9]+|[^{_ASCII_SPACE}A-Za-z0-9]+)"""
    rf"""|[{_ASCII_SPACE}]+(?![^{_ASCII_SPACE}])|[{_ASCII_SPACE}]+"""
)


def pretokenize(text: str) -> list[str]:
    """``PATTERN.findall(text)``: the pieces BPE encodes one by one."""
    return (_ASCII_PATTERN if text.isascii() else PATTERN).findall(text)


def bytes_to_unicode() -> dict[int, str]:
    """The reversible map byte -> printable character that ``encoder.json`` is written in.

    The 188 bytes that are already printable, non-space latin-1 characters map to themselves
    ("!".."~", "¡".."¬", "®".."ÿ"); the other 68 (control codes, space, DEL, NBSP, soft hyphen)
    map, in byte order, to U+0100, U+0101, ... — so the space byte 0x20 becomes "Ġ" (U+0120).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in printable}
    others = (b for b in range(256) if b not in table)
    table.update({b: chr(256 + n) for n, b in enumerate(others)})
    return dict(sorted(table.items()))


def merge_pair(symbols: list[str], pair: Pair) -> list[str]:
    """Replace every occurrence of ``pair`` in ``symbols``, scanning left to right.

    Occurrences cannot overlap: in ["a", "a", "a"] merging ("a", "a") gives ["aa", "a"].
    """
    first, second = pair
    merged: list[str] = []
    i = 0
    while i < len(symbols):
        if symbols[i] == first and i + 1 < len(symbols) and symbols[i + 1] == second:
            merged.append(first + second)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def bpe(symbols: list[str], ranks: dict[Pair, int]) -> list[str]:
    """Merge adjacent symbols, lowest rank first, until no adjacent pair has a rank.

    ``symbols`` are one piece's bytes as characters of :func:`bytes_to_unicode`; ``ranks`` maps
    a pair to its line number in ``vocab.bpe``. Each pass merges every occurrence of the best
    pair, exactly as OpenAI's encoder.py does.
    """
    while len(symbols) > 1:
        mergeable = {pair for pair in zip(symbols, symbols[1:]) if pair in ranks}
        if not mergeable:
            break
        symbols = merge_pair(symbols, min(mergeable, key=ranks.__getitem__))
    return symbols


class MergeTable(NamedTuple):
    """``vocab.bpe`` in integers, for :func:`bpe_fast`.

    ``ranks[left * width + right]`` is the rank of the pair of token ids (left, right) (one int
    key hashes faster than a tuple); ``merged[rank]`` is the id of the token the pair makes.
    """

    ranks: dict[int, int]
    merged: list[int]
    width: int

    @classmethod
    def build(cls, merges: list[Pair], encoder: dict[str, int]) -> MergeTable:
        """From the merges (rank order) and token -> id; every symbol must be a token."""
        width = max(encoder.values()) + 1
        ranks = {
            encoder[left] * width + encoder[right]: r for r, (left, right) in enumerate(merges)
        }
        return cls(ranks, [encoder[left + right] for left, right in merges], width)


def bpe_fast(ids: list[int], table: MergeTable) -> list[int]:
    """:func:`bpe` on token ids: the same merges in the same order, in O(n log n).

    ``ids`` are one piece's byte tokens; the list is consumed. Short pieces (most words) take a
    list scan whose steps run in C; longer ones a heap, so no piece costs O(n²).
    """
    if len(ids) <= SHORT_PIECE:
        return _bpe_scan(ids, table)
    return _bpe_heap(ids, table)


#: Pieces of up to this many bytes are merged by a list scan, longer ones with a heap.
SHORT_PIECE = 32
_NO_RANK = 1 << 62


def _bpe_scan(ids: list[int], table: MergeTable) -> list[int]:
    """:func:`bpe` with each adjacent pair's rank kept in a list, updated at each merge."""
    ranks, merged, width = table
    get = ranks.get
    pair_ranks = [get(ids[i] * width + ids[i + 1], _NO_RANK) for i in range(len(ids) - 1)]
    while pair_ranks:
        best = min(pair_ranks)
        if best == _NO_RANK:
            break
        joined = merged[best]
        while best in pair_ranks:  # every occurrence, leftmost first (a merge makes no new one)
            i = pair_ranks.index(best)
            ids[i : i + 2] = [joined]
            del pair_ranks[i]
            if i < len(pair_ranks):
                pair_ranks[i] = get(joined * width + ids[i + 1], _NO_RANK)
            if i:
                pair_ranks[i - 1] = get(ids[i - 1] * width + joined, _NO_RANK)
    return ids


def _bpe_heap(ids: list[int], table: MergeTable) -> list[int]:
    """:func:`bpe` with the adjacent pairs in a heap keyed by (rank, position).

    The symbols form a linked list over their starting positions, so a merge touches only its
    neighbours; an entry whose pair has changed since it was pushed is skipped when it comes up.
    A round merges every occurrence of the lowest-ranked pair, left to right; a pair it makes
    that ranks lower still waits for the round's end, when :func:`bpe` would first see it.
    """
    n = len(ids)
    ranks, merged, width = table
    get = ranks.get
    after = list(range(1, n + 1))  # position of the next symbol (n: none)
    before = list(range(-1, n - 1))  # position of the previous symbol (-1: none)
    # key = rank * n + position: one int orders by rank, then left to right, and compares fast.
    heap = [r * n + p for p in range(n - 1) if (r := get(ids[p] * width + ids[p + 1])) is not None]
    heapq.heapify(heap)
    waiting: list[int] = []
    this_round = -1
    while heap or waiting:
        if waiting and (not heap or heap[0] // n != this_round):
            for key in waiting:
                heapq.heappush(heap, key)
            waiting.clear()
        rank, p = divmod(heapq.heappop(heap), n)
        q = after[p]
        if q == n or get(ids[p] * width + ids[q]) != rank:
            continue  # stale: the pair at p is no longer this one
        this_round = rank
        ids[p], ids[q] = merged[rank], -1  # q is merged into p
        after[p] = r_pos = after[q]
        new_pairs = []
        if r_pos < n:
            before[r_pos] = p
            new_pairs.append((p, r_pos))
        if before[p] >= 0:
            new_pairs.append((before[p], p))
        for left, right in new_pairs:
            r = get(ids[left] * width + ids[right])
            if r is None:
                continue
            if r > rank:
                heapq.heappush(heap, r * n + left)
            else:  # ranks below this round: bpe would see it on its next pass
                waiting.append(r * n + left)
    out, p = [], 0
    while p < n:
        out.append(ids[p])
        p = after[p]
    return out


# Where PATTERN always cuts: between a non-space character and a space character (\s, as
# PATTERN reads it). No piece holds both, since a space can only open a piece, and no attempt to
# match before the cut looks past it: letter, digit and punctuation runs stop at the space as
# they would at the end of the text, contractions are all non-space, and a run of spaces cannot
# reach across the non-space. So pre-tokenising text[:p] and text[p:] apart gives the pieces of
# the whole text: long texts and streams are encoded in parts with identical ids.
_CUT = regex.compile(r"\S\s")
_LAST_CUT = regex.compile(r"(?r)\S\s")


def split_text(text: str, size: int) -> Iterator[str]:
    """``text`` in consecutive parts, each at least ``size`` characters (but the last) and cut
    only where :data:`PATTERN` always cuts. A text with no such place is one part."""
    start = 0
    while len(text) - start > size:
        found = _CUT.search(text, start + max(size, 1) - 1)
        if found is None:
            break
        yield text[start : found.start() + 1]
        start = found.start() + 1
    yield text[start:] if start else text


def last_cut(text: str, start: int = 0) -> int:
    """The last place in ``text[start:]`` where :data:`PATTERN` always cuts, or 0 if none."""
    found = _LAST_CUT.search(text, start)
    return found.start() + 1 if found else 0
