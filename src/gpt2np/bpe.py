"""GPT-2's byte-level BPE as a short algorithm, and the two files that define it.

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

The file readers check structure and raise :class:`~gpt2np.errors.CheckpointError` naming the
file, so a damaged vocabulary fails at load instead of with a ``KeyError`` mid-encode.
"""

from __future__ import annotations

import collections
import json
import pathlib

import regex

from .errors import CheckpointError

__all__ = [
    "PATTERN",
    "bpe",
    "bytes_to_unicode",
    "merge_pair",
    "parse_encoder",
    "parse_merges",
    "read_file",
]

Pair = tuple[str, str]

# OpenAI's pre-tokenisation pattern, verbatim. It is case-sensitive: "'S" is not a contraction
# but "'" (punctuation) followed by "S" (a word). \s+(?!\S) leaves the last space of a run to
# join the next word, so "a  b" splits as "a", " ", " b".
PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


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


def parse_encoder(data: bytes, name: str) -> dict[str, int]:
    """``encoder.json`` (or HF's ``vocab.json``): a JSON object token -> id, ids 0 … n-1.

    Checked: valid JSON; str keys and int values; every id in 0 … n-1 exactly once; a token
    for each of the 256 bytes (else some text could not be encoded); ``<|endoftext|>``.
    ``name`` (the file's path) goes into every error message.
    """
    try:
        encoder = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{name}: not a valid JSON vocabulary ({e})") from None
    if not isinstance(encoder, dict) or not encoder:
        raise CheckpointError(f"{name}: expected a JSON object mapping token -> id")
    for token, i in encoder.items():
        if type(i) is not int:
            raise CheckpointError(f"{name}: token {token!r} has id {i!r}, not an integer")
    counts = collections.Counter(encoder.values())
    n = len(encoder)
    bad = next((i for i, c in counts.items() if c > 1 or not 0 <= i < n), None)
    if bad is not None:  # n distinct ids in [0, n) are exactly 0 … n-1
        raise CheckpointError(f"{name}: ids must be 0 … {n - 1}, each once; id {bad} is not")
    alphabet = set(bytes_to_unicode().values())
    missing = sorted(alphabet - encoder.keys())
    if missing:
        raise CheckpointError(f"{name}: no token for the byte symbol(s) {missing[:5]}")
    for token in encoder:
        if token != "<|endoftext|>" and not alphabet.issuperset(token):
            raise CheckpointError(f"{name}: token {token!r} is not written in the byte alphabet")
    if "<|endoftext|>" not in encoder:
        raise CheckpointError(f"{name}: no '<|endoftext|>' token")
    return encoder


def parse_merges(data: bytes, name: str, encoder: dict[str, int]) -> list[Pair]:
    """``vocab.bpe`` (or HF's ``merges.txt``): a ``#version`` line, then one "left right" pair
    per line, most frequent first (line order is the rank).

    Checked: UTF-8; exactly two space-separated symbols per line; no pair twice; both symbols
    and their concatenation are tokens of ``encoder`` (else BPE could produce a symbol with no
    id). ``name`` (the file's path) goes into every error message.
    """
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{name}: not UTF-8 text ({e})") from None
    start = 1 if lines[0].startswith("#") else 0
    while lines and lines[-1].strip("\r") == "":
        lines.pop()
    merges = [tuple(line.rstrip("\r").split(" ")) for line in lines[start:]]
    for lineno, pair in enumerate(merges, start=start + 1):
        if len(pair) != 2 or not all(pair):
            raise CheckpointError(
                f"{name}, line {lineno}: expected two symbols, got {lines[lineno - 1]!r}"
            )
    merged = [left + right for left, right in merges]
    symbols = {s for pair in merges for s in pair}.union(merged)
    if not symbols <= encoder.keys():
        for lineno, (pair, joined) in enumerate(zip(merges, merged), start=start + 1):
            unknown = [s for s in (*pair, joined) if s not in encoder]
            if unknown:
                raise CheckpointError(
                    f"{name}, line {lineno}: symbol {unknown[0]!r} is not a token of the vocabulary"
                )
    if len(set(merges)) != len(merges):
        seen = set()
        for lineno, pair in enumerate(merges, start=start + 1):
            if pair in seen:
                raise CheckpointError(
                    f"{name}, line {lineno}: pair {' '.join(pair)!r} is listed twice"
                )
            seen.add(pair)
    return merges


def read_file(path: pathlib.Path) -> bytes:
    """The bytes of a vocabulary file; a missing or unreadable one is a CheckpointError."""
    try:
        return path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read vocabulary file ({e.strerror or e})") from None
