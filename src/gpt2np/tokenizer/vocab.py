"""The two files that define GPT-2's BPE, read with bounds and checked against each other.

``encoder.json`` (HF: ``vocab.json``) maps each token to its id; ``vocab.bpe`` (HF:
``merges.txt``) lists the merges, most frequent first. Each file is checked on its own, then
against the other: every merge's symbols and result are tokens, and every token but the special
one is a byte symbol or the result of some merge. GPT-2's ``encoder.json`` thus has exactly
256 + 50,000 + 1 entries, and a truncated ``vocab.bpe`` (fewer merges, so some tokens could never
be produced and the ids of many texts would change) is refused instead of loaded.

Reads are bounded: only regular files (a FIFO or ``/dev/zero`` would hang or fill memory), at
most :data:`MAX_FILE_BYTES`, and ``encoder.json``'s nesting is checked before ``json`` parses
it. Every failure is a :class:`~gpt2np.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib

from ..errors import CheckpointError
from ..support.bounded_read import json_depth, read_small_file
from .bpe import Pair, bytes_to_unicode

__all__ = [
    "ENDOFTEXT",
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "check_pair",
    "parse_encoder",
    "parse_merges",
    "parse_pinned",
    "parse_vocabulary",
    "read_file",
    "read_vocabulary",
]

ENDOFTEXT = "<|endoftext|>"

#: Largest vocabulary file read. GPT-2's are 1.0 MB and 0.46 MB; a 200,000-token BPE's are ~10 MB.
MAX_FILE_BYTES = 64 << 20
#: Deepest JSON nesting parsed. A vocabulary is one flat object (depth 1); the cap keeps a
#: hostile file of nested brackets from exhausting ``json``'s recursion.
MAX_JSON_DEPTH = 100


def read_file(path: pathlib.Path, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` (default :data:`MAX_FILE_BYTES`) bytes;
    else a CheckpointError naming it (:func:`gpt2np.support.bounded_read.read_small_file`: opened
    without
    blocking, its type checked on the open descriptor, never read past the cap)."""
    return read_small_file(path, MAX_FILE_BYTES if limit is None else limit)


def too_deep(data: bytes) -> bool:
    """Whether brackets outside strings nest deeper than :data:`MAX_JSON_DEPTH` in ``data``."""
    return json_depth(data) > MAX_JSON_DEPTH


def parse_encoder(data: bytes, name: str) -> dict[str, int]:
    """``encoder.json`` (or HF's ``vocab.json``): a JSON object token -> id, ids 0 … n-1.

    Checked: nesting within :data:`MAX_JSON_DEPTH`; valid JSON; str keys and int values; every
    id in 0 … n-1 exactly once; a token for each of the 256 bytes (else some text could not be
    encoded); ``<|endoftext|>``. ``name`` (the file's path) goes into every error message.
    """
    if too_deep(data):
        raise CheckpointError(
            f"{name}: JSON nested more than {MAX_JSON_DEPTH} deep; a vocabulary is one flat object"
        )
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
        if token != ENDOFTEXT and not alphabet.issuperset(token):
            raise CheckpointError(f"{name}: token {token!r} is not written in the byte alphabet")
    if ENDOFTEXT not in encoder:
        raise CheckpointError(f"{name}: no {ENDOFTEXT!r} token")
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
    merges: list[Pair] = []
    for lineno, line in enumerate(lines[start:], start=start + 1):
        fields = line.rstrip("\r").split(" ")
        if len(fields) != 2 or not all(fields):
            raise CheckpointError(f"{name}, line {lineno}: expected two symbols, got {line!r}")
        merges.append((fields[0], fields[1]))
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


def check_pair(
    encoder: dict[str, int], merges: list[Pair], encoder_name: str, merges_name: str
) -> None:
    """Every token but ``<|endoftext|>`` is a byte symbol or some merge's result.

    :func:`parse_merges` has checked the converse (every merge makes a token); together the
    tokens are exactly the bytes, the merges' results and the special token — for GPT-2,
    256 + 50,000 + 1. A token no merge makes could never be produced: its file and the merges
    file are not one vocabulary, and ids would silently differ from the model's.
    """
    made = set(bytes_to_unicode().values()).union(left + right for left, right in merges)
    unmade = [t for t in encoder if t != ENDOFTEXT and t not in made]
    if unmade:
        first = min(unmade, key=encoder.__getitem__)
        raise CheckpointError(
            f"{merges_name} has {len(merges):,} merges, but {encoder_name} has {len(encoder):,} "
            f"tokens, so 256 bytes + {ENDOFTEXT} + {len(encoder) - 257:,} made by merges: "
            f"{len(unmade):,} tokens, such as {first!r} (id {encoder[first]}), are made by no "
            f"merge. {merges_name} looks truncated, or the two files are not one vocabulary"
        )


def read_vocabulary(
    encoder_path: pathlib.Path,
    merges_path: pathlib.Path,
    pins: tuple[str, str] | None = None,
) -> tuple[dict[str, int], list[Pair], tuple[str, str]]:
    """Read, parse and cross-check the pair of files: (encoder, merges, their SHA-256 digests).

    ``pins``: the digests the files must have (checked before parsing, so a damaged bundled
    file says so). With one of the two files missing, the error names both.
    """
    exists = os.path.exists(encoder_path), os.path.exists(merges_path)
    if not all(exists):
        if any(exists):
            found, missing = (
                (encoder_path, merges_path) if exists[0] else (merges_path, encoder_path)
            )
            raise CheckpointError(
                f"{missing} is missing but {found} is there: a vocabulary needs both"
            )
        raise CheckpointError(
            f"{encoder_path} and {merges_path} are missing: a vocabulary needs both"
        )
    datas = read_file(encoder_path), read_file(merges_path)
    digests = hashlib.sha256(datas[0]).hexdigest(), hashlib.sha256(datas[1]).hexdigest()
    for path, digest, pin in zip((encoder_path, merges_path), digests, pins or ()):
        if digest != pin:
            raise CheckpointError(
                f"{path}: SHA-256 is {digest}, expected {pin}; the bundled GPT-2 vocabulary is "
                "damaged (reinstall gpt2np)"
            )
    if (
        pins
    ):  # the pinned files, which pass every check (tests/tokenizer/test_tokenizer.py): parse only
        return (*parse_pinned(*datas), digests)
    encoder, merges = parse_vocabulary(datas[0], datas[1], str(encoder_path), str(merges_path))
    return encoder, merges, digests


def parse_pinned(encoder_data: bytes, merges_data: bytes) -> tuple[dict[str, int], list[Pair]]:
    """Parse files whose SHA-256 matched the pins, without :func:`parse_vocabulary`'s checks:
    those bytes are known to pass them (a test checks that both parses agree), and the checks
    cost more than the parse (half of ``Tokenizer()``'s time)."""
    encoder = json.loads(encoder_data.decode("utf-8"))
    lines = merges_data.decode("utf-8").rstrip("\n").split("\n")[1:]  # after "#version"
    pairs = (line.split(" ") for line in lines)
    return encoder, [(left, right) for left, right in pairs]


def parse_vocabulary(
    encoder_data: bytes, merges_data: bytes, encoder_name: str, merges_name: str
) -> tuple[dict[str, int], list[Pair]]:
    """Parse an encoder (JSON: token -> id) and its merges (one pair per line), and check each
    against the other; errors name the file they come from."""
    encoder = parse_encoder(encoder_data, encoder_name)
    merges = parse_merges(merges_data, merges_name, encoder)
    check_pair(encoder, merges, encoder_name, merges_name)
    return encoder, merges
