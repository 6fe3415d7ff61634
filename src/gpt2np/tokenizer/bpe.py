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
costs O(n²). :func:`bpe_fast` is its twin on token ids, O(n log n), tested equal to it; the
tokenizer uses the fast one. It takes one of three routes by the piece's length: a list scan for
a word, a heap of pairs for a longer piece, and for a long one (a page of text with no space,
megabytes of CJK) :func:`bpe_rounds`, which holds the piece in NumPy arrays and does each round
of merges as a few array operations. :func:`bpe_many` merges many short pieces at once (a text
in a language whose words the cache has not seen yet): one merge of every piece per round. The
files themselves are read and checked in :mod:`gpt2np.tokenizer.vocab`.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import regex

__all__ = [
    "PATTERN",
    "MergeTable",
    "bpe",
    "bpe_fast",
    "bpe_many",
    "bpe_rounds",
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
# optional space): the same pieces (tests/tokenizer/test_bpe.py checks), found ~15% faster. It is
# case-sensitive: "'S" is not a contraction but "'" (punctuation) followed by "S" (a word).
# \s+(?!\S) leaves the last space of a run to join the next word: "a  b" is "a", " ", " b".
PATTERN = regex.compile(
    r"""'(?:[sdmt]|ll|ve|re)| ?(?:\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+)|\s+(?!\S)|\s+"""
)

# The same pattern for ASCII text, where \p{L} is A-Z a-z, \p{N} is 0-9 and \s is these six
# characters (tests/tokenizer/test_bpe.py checks all 128 against the regex module): the standard
# library's re runs it about twice as fast as regex runs PATTERN.
_ASCII_SPACE = " \t\n\x0b\x0c\r"
ASCII_SPACE = _ASCII_SPACE  # the characters \s matches in ASCII text, for callers
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
    key hashes faster than a tuple); ``merged[rank]`` is the id of the token the pair makes;
    ``arrays`` is the same in NumPy arrays, for :func:`bpe_rounds`.
    """

    ranks: dict[int, int]
    merged: list[int]
    width: int
    arrays: PairArrays

    @classmethod
    def build(cls, merges: list[Pair], encoder: dict[str, int]) -> MergeTable:
        """From the merges (rank order) and token -> id; every symbol must be a token."""
        width = max(encoder.values()) + 1
        ranks = {
            encoder[left] * width + encoder[right]: r for r, (left, right) in enumerate(merges)
        }
        merged = [encoder[left + right] for left, right in merges]
        return cls(ranks, merged, width, PairArrays.build(ranks, merged, width))


#: What :class:`PairArrays` answers for a pair that no merge lists.
NO_RANK = np.iinfo(np.int32).max


class PairArrays(NamedTuple):
    """The merge table as arrays: rank r merges ``first[r]`` and ``second[r]`` into
    ``merged[r]``, and :meth:`rank` finds the ranks of many pairs at once in a hash table
    (open addressing, linear probing) of pair keys ``left * width + right``."""

    first: np.ndarray  # int64 [K]
    second: np.ndarray  # int64 [K]
    merged: np.ndarray  # int64 [K]
    width: int
    keys: np.ndarray  # int64 [slots]: a pair's key, or -1 for an empty slot
    slot_ranks: np.ndarray  # int32 [slots]
    shift: int  # a key's first slot is the top bits of key * _GOLDEN: (key * _GOLDEN) >> shift

    @classmethod
    def build(cls, ranks: dict[int, int], merged: list[int], width: int) -> PairArrays:
        K = len(merged)
        key = np.fromiter(ranks, np.int64, len(ranks))
        rank = np.fromiter(ranks.values(), np.int64, len(ranks))
        first, second = np.zeros(K, np.int64), np.zeros(K, np.int64)
        first[rank], second[rank] = key // width, key % width
        bits = max(4, int(2 * len(key)).bit_length())  # at most half full
        shift = 64 - bits
        home = _home(key, shift)
        order = np.argsort(home, kind="stable")
        # Linear probing without wrapping around: in order of first slot, each key takes the
        # first free slot at or after its own, i.e. slot_i = max(home_i, slot_{i-1} + 1).
        n = np.arange(len(key))
        slot = np.maximum.accumulate(home[order] - n) + n if len(key) else n
        keys = np.full((1 << bits) + len(key) + 1, -1, np.int64)  # room to run past the end
        slot_ranks = np.full(len(keys), NO_RANK, np.int32)
        keys[slot], slot_ranks[slot] = key[order], rank[order]
        return cls(first, second, np.asarray(merged, np.int64), width, keys, slot_ranks, shift)

    def rank(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The ranks of the pairs (left[i], right[i]), NO_RANK where there is none.  -> int32"""
        key = left.astype(np.int64) * self.width + right
        slot = _home(key, self.shift)
        out = np.full(len(key), NO_RANK, np.int32)
        todo = np.arange(len(key))
        while len(todo):
            found = self.keys[slot]
            hit = found == key
            out[todo[hit]] = self.slot_ranks[slot[hit]]
            going = ~hit & (found != -1)  # neither this key nor an empty slot: probe on
            todo, key, slot = todo[going], key[going], slot[going] + 1
        return out


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: spreads nearby keys apart


def _home(key: np.ndarray, shift: int) -> np.ndarray:
    """A key's first slot in a table of 2^(64 - shift) slots (Fibonacci hashing)."""
    with np.errstate(over="ignore"):
        return ((key.astype(np.uint64) * _GOLDEN) >> np.uint64(shift)).astype(np.int64)


def bpe_fast(ids: list[int], table: MergeTable) -> list[int]:
    """:func:`bpe` on token ids: the same merges in the same order, in O(n log n).

    ``ids`` are one piece's byte tokens; the list is consumed. Short pieces (most words) take a
    list scan whose steps run in C; longer ones a heap, so no piece costs O(n²); long ones
    :func:`bpe_rounds`.
    """
    if len(ids) <= SHORT_PIECE:
        return _bpe_scan(ids, table)
    if len(ids) < LONG_PIECE:
        return _bpe_heap(ids, table)
    merged: list[int] = bpe_rounds(np.asarray(ids, np.int64), table).tolist()
    return merged


#: Pieces of up to SHORT_PIECE bytes are merged by a list scan, shorter than LONG_PIECE with a
#: heap, longer ones in arrays by :func:`bpe_rounds` (where it became the faster, measured).
SHORT_PIECE, LONG_PIECE = 32, 1 << 16
_NO_RANK = 1 << 62


def _bpe_scan(ids: list[int], table: MergeTable) -> list[int]:
    """:func:`bpe` with each adjacent pair's rank kept in a list, updated at each merge."""
    ranks, merged, width, _ = table
    get = ranks.get
    pair_ranks = [get(ids[i] * width + ids[i + 1], _NO_RANK) for i in range(len(ids) - 1)]
    while pair_ranks:
        best = min(pair_ranks)
        if best == _NO_RANK:
            break
        joined = merged[best]
        i = pair_ranks.index(best)
        while True:  # every occurrence, leftmost first (a merge makes no new one before it)
            ids[i] = joined
            del ids[i + 1], pair_ranks[i]
            if i < len(pair_ranks):
                pair_ranks[i] = get(joined * width + ids[i + 1], _NO_RANK)
            if i:
                pair_ranks[i - 1] = get(ids[i - 1] * width + joined, _NO_RANK)
            try:
                i = pair_ranks.index(best, i + 1)
            except ValueError:
                break
    return ids


def _bpe_heap(ids: list[int], table: MergeTable) -> list[int]:
    """:func:`bpe` with the adjacent pairs in a heap keyed by (rank, position).

    The symbols form a linked list over their starting positions, so a merge touches only its
    neighbours; an entry whose pair has changed since it was pushed is skipped when it comes up.
    A round merges every occurrence of the lowest-ranked pair, left to right; a pair it makes
    that ranks lower still waits for the round's end, when :func:`bpe` would first see it.
    """
    n = len(ids)
    ranks, merged, width, _ = table
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


def bpe_rounds(ids: np.ndarray, table: MergeTable) -> np.ndarray:
    """:func:`bpe` on a long piece held in arrays, each round of merges a few array operations.
                                                                    int [n] -> int64 [m]

    The symbols form a linked list over their starting positions (``after``, ``before``; a
    merged-away position holds -1). The pairs seen so far wait under their rank (``waiting[r]``:
    arrays of the positions where pair r was seen; some are stale by the time r comes), with a
    heap of the ranks that have any. A round takes the lowest rank, keeps the positions where
    that pair still is, in order, merges them all at once (in a run of one symbol, (a, a) pairs
    every other one from the left, as :func:`merge_pair` does) and files the pairs the merges
    make under their ranks: as :func:`bpe`, it sees them from the next round on. Memory is a
    few arrays of n numbers; no Python object per byte.
    """
    arrays = table.arrays
    n = len(ids)
    index: type = np.int32 if n < 1 << 30 else np.int64  # positions: 4 bytes when they fit
    sym: np.ndarray = np.empty(n + 1, np.int32 if arrays.width < 1 << 31 else np.int64)
    sym[:n], sym[n] = ids, -2  # position n: past the end, a symbol no pair has
    if n < 2:
        return sym[:n].astype(np.int64)
    waiting = _first_pairs(sym[:n], arrays, index)
    heap = sorted(waiting)
    after: np.ndarray = np.arange(1, n + 2, dtype=index)
    before: np.ndarray = np.arange(-1, n, dtype=index)
    after[n] = n  # before[n]: scratch
    while heap:
        rank = heapq.heappop(heap)
        p = _to_merge(waiting.pop(rank), arrays.first[rank], arrays.second[rank], sym, after)
        if len(p):
            q = after[p]  # merged into p
            sym[p], sym[q] = arrays.merged[rank], -1
            after[p] = after[q]
            before[after[q]] = p
            _file_new_pairs(p, sym, after, before, arrays, waiting, heap)
    return sym[:n][sym[:n] >= 0].astype(np.int64)


def bpe_many(
    data: bytes,
    lengths: np.ndarray,
    table: MergeTable,
    byte_ids: np.ndarray,
    byte_ranks: np.ndarray,
    tail_pieces: int = 32,
) -> list[list[int]]:
    """:func:`bpe` of many pieces at once, as token ids: ``data`` is their UTF-8 bytes back to
    back, ``lengths`` [P] how many bytes each has; returns each piece's ids, in order.

    Each round makes, in every piece at once, the merge :func:`bpe` makes next there: the
    lowest rank among the piece's adjacent pairs (a segment minimum of ``rank``, where
    ``rank[i]`` is the rank of symbols i and i + 1, none across pieces), at every occurrence,
    left to right (in a run of one symbol, (a, a) pairs every other one from the left, as
    :func:`merge_pair` does). Only the pairs next to a merge change, so only they are looked
    up again. A piece with no ranked pair left is done and leaves the arrays. A round is a few
    array operations, and there are as many rounds as the most merges a piece needs; the last
    ``tail_pieces`` are finished one by one by :func:`bpe_fast` (a round of array operations
    costs more than a few pieces' next merges in Python) (BPE's next merge depends
    on a piece's symbols alone, so it continues from wherever the rounds left them).

    ``byte_ids`` [256] is each byte's token id, ``byte_ranks`` [256, 256] the rank of each pair
    of bytes (NO_RANK for none): the first round's lookups, as one gather.
    """
    arrays = table.arrays
    out: list[list[int]] = [[] for _ in range(len(lengths))]
    raw = np.frombuffer(data, np.uint8)
    lengths = np.asarray(lengths, np.int64)
    piece = np.flatnonzero(lengths)  # [S]: the piece each segment holds (an empty one: no ids)
    seg_len = lengths[piece]  # [S]
    if not len(piece):
        return out
    ends = np.cumsum(seg_len)
    sym = byte_ids[raw]  # [n] int32: the symbols of every piece, back to back
    rank = np.empty(len(raw), np.int32)  # [n]: the rank of the pair that starts at each symbol
    rank[:-1] = byte_ranks[raw[:-1], raw[1:]]
    rank[ends - 1] = NO_RANK  # a piece's last symbol starts no pair
    seg = np.repeat(np.arange(len(piece), dtype=np.int32), seg_len)  # [n]: its segment
    while True:
        least = np.minimum.reduceat(rank, ends - seg_len)  # [S]: the merge each piece makes next
        done = least == NO_RANK
        tail = len(piece) - int(done.sum()) <= tail_pieces
        if done.any() or tail:
            leave = done | tail  # [S]: the segments that leave the arrays now
            flat, lens = sym[leave[seg]].tolist(), seg_len[leave].tolist()
            for j, ids, merged in zip(piece[leave].tolist(), _cut(flat, lens), done[leave]):
                out[j] = ids if merged else bpe_fast(ids, table)
            if tail:
                return out
            live = ~done
            stay = live[seg]
            sym, rank = sym[stay], rank[stay]
            seg_len, piece, least = seg_len[live], piece[live], least[live]
            ends = np.cumsum(seg_len)
            seg = np.repeat(np.arange(len(piece), dtype=np.int32), seg_len)
        at = _merge_places(np.flatnonzero(rank == least[seg]))
        sym[at] = arrays.merged[rank[at]]
        stay = np.ones(len(sym), bool)
        stay[at + 1] = False  # the right symbol of each merged pair goes
        seg_len = seg_len - np.bincount(seg[at], minlength=len(seg_len))
        sym, rank, seg = sym[stay], rank[stay], seg[stay]
        ends = np.cumsum(seg_len)
        new = at - np.arange(len(at))  # where the merged symbols are now
        touched = np.concatenate([new[new > 0] - 1, new])  # the pairs each is in
        inside = touched < ends[seg[touched]] - 1  # a pair starting at a piece's end: none
        rank[touched[~inside]] = NO_RANK
        touched = touched[inside]
        rank[touched] = arrays.rank(sym[touched], sym[touched + 1])


def _cut(flat: list[int], lengths: list[int]) -> Iterator[list[int]]:
    """``flat`` cut into consecutive lists of ``lengths``."""
    first = 0
    for n in lengths:
        yield flat[first : first + n]
        first += n


def _merge_places(at: np.ndarray) -> np.ndarray:
    """Of the ascending places ``at`` where each piece's lowest-ranked pair starts, those that
    merge: all, but in a run of one symbol (a, a at i, i + 1, …) every other one from the left,
    as :func:`merge_pair` does (only a pair (a, a) can start right after itself)."""
    if len(at) < 2:
        return at
    follows = at[1:] == at[:-1] + 1
    if not follows.any():
        return at
    i = np.arange(len(at))
    run_start = np.maximum.accumulate(np.where(np.r_[False, follows], 0, i))
    merging: np.ndarray = at[(i - run_start) % 2 == 0]
    return merging


def _first_pairs(sym: np.ndarray, arrays: PairArrays, index: type) -> dict[int, list[np.ndarray]]:
    """rank -> [positions of that pair in sym, ascending] for the pairs of the initial symbols:
    the ranks of the few distinct pairs of distinct symbols (bytes) looked up once."""
    if sym.min() >= 0 and sym.max() < 1 << 16:  # counting instead of sorting n numbers
        present = np.flatnonzero(np.bincount(sym))
        number = np.zeros(int(present[-1]) + 1, np.int64)
        number[present] = np.arange(len(present))
        inverse = number[sym]
    else:
        present, inverse = np.unique(sym, return_inverse=True)
    u = len(present)
    dense = arrays.rank(np.repeat(present, u), np.tile(present, u)).reshape(u, u)
    ranks = dense[inverse[:-1], inverse[1:]]  # [n - 1]
    del inverse
    positions: np.ndarray = np.flatnonzero(ranks != NO_RANK).astype(index)
    ranks = ranks[positions]
    if not len(ranks) or ranks.min() == ranks.max():  # one pair everywhere ("aaaa…")
        return {int(ranks[0]): [positions]} if len(ranks) else {}
    if len(arrays.merged) < 1 << 16:  # NumPy sorts 16-bit numbers by radix: O(n)
        order = np.argsort(ranks.astype(np.uint16), kind="stable")
    else:
        order = np.argsort(ranks, kind="stable")
    return _by_rank(ranks[order], positions[order])


def _by_rank(ranks: np.ndarray, positions: np.ndarray) -> dict[int, list[np.ndarray]]:
    """Positions grouped by their rank, for ranks sorted (and positions ascending in each)."""
    edges = [0, *(np.flatnonzero(ranks[1:] != ranks[:-1]) + 1).tolist(), len(ranks)]
    return {int(ranks[a]): [positions[a:z]] for a, z in zip(edges[:-1], edges[1:]) if z > a}


def _to_merge(
    found: list[np.ndarray], first: int, second: int, sym: np.ndarray, after: np.ndarray
) -> np.ndarray:
    """Of the positions where pair (first, second) was filed, those where it still is and that
    :func:`merge_pair` merges, ascending: in a run of one symbol (aaaa: the pair (a, a) at 0,
    1, 2) every other one from the left. FILE_CHUNK positions at a time, the run carried over.
    """
    p = found[0] if len(found) == 1 else np.concatenate(found)
    if len(p) > 1 and (p[1:] < p[:-1]).any():
        p = np.sort(p, kind="stable")  # a merge of the sorted runs filed by earlier rounds
    kept, last, last_kept = [], -1, False  # the last place the pair was, and if it merges
    for c0 in range(0, len(p), FILE_CHUNK):
        c = p[c0 : c0 + FILE_CHUNK]
        c = c[(sym[c] == first) & (sym[after[c]] == second)]
        c = c[np.concatenate([[c[0] != last], c[1:] != c[:-1]])] if len(c) else c  # filed twice
        if not len(c):
            continue
        if first == second:
            follows = np.empty(len(c), bool)  # the pair is the run's next after the one before
            follows[0], follows[1:] = c[0] == after[last], c[1:] == after[c[:-1]]
            i = np.arange(len(c))
            run_start = np.where(follows, -2, i)  # -2: not a start; the maximum carries the last
            run_start[0] = -1 if follows[0] and last_kept else 0
            merges = (i - np.maximum.accumulate(run_start)) % 2 == 0
            last, last_kept = int(c[-1]), bool(merges[-1])
            c = c[merges]
        else:
            last = int(c[-1])
        kept.append(c)
    return np.concatenate(kept) if kept else p[:0]


def _file_new_pairs(
    p: np.ndarray,
    sym: np.ndarray,
    after: np.ndarray,
    before: np.ndarray,
    arrays: PairArrays,
    waiting: dict[int, list[np.ndarray]],
    heap: list[int],
) -> None:
    """File the pairs that the symbols just made at positions p form with their neighbours,
    FILE_CHUNK merges at a time (so that a round of millions of merges needs no more memory
    than a few arrays of that size). A pair of two new symbols is filed twice; the round that
    takes it drops the second."""
    n = len(sym) - 1
    for c0 in range(0, len(p), FILE_CHUNK):
        chunk = p[c0 : c0 + FILE_CHUNK]
        left = before[chunk]
        at = np.concatenate([left[left >= 0], chunk[after[chunk] < n]])  # where each pair starts
        ranks = arrays.rank(sym[at], sym[after[at]])
        at, ranks = at[ranks != NO_RANK], ranks[ranks != NO_RANK]
        if not len(at):
            continue
        if ranks.min() == ranks.max():  # often, in the long rounds: one new pair everywhere
            groups = {int(ranks[0]): [at]}
        else:
            order = np.argsort(ranks, kind="stable")
            groups = _by_rank(ranks[order], at[order])
        for rank, positions in groups.items():
            if rank in waiting:
                waiting[rank].extend(positions)
            else:
                waiting[rank] = positions
                heapq.heappush(heap, rank)


#: Merges whose new pairs :func:`bpe_rounds` looks up at a time.
FILE_CHUNK = 1 << 18


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
