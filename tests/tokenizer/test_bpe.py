"""gpt2np.tokenizer.bpe: the fast merge equals the clear one; the pattern and its cut points.

The clear :func:`bpe.bpe` is checked against tiktoken in tests/tokenizer/test_tokenizer.py (fixture
and oracle tier); here the fast twin is checked against the clear one on arbitrary merge tables
(ranks in any order, pairs whose parts are made only by later merges, repeated symbols that
tie), on GPT-2's own table, and on long adversarial pieces.
"""

from __future__ import annotations

import json
import pathlib
import random

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpt2np.tokenizer import bpe

DATA = pathlib.Path(__file__).resolve().parent.parent.parent / "src" / "gpt2np" / "data"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rounds(ids: list[int], table) -> list[int]:
    """bpe_rounds on any piece, however short (bpe_fast sends it only long ones)."""
    merged: list[int] = bpe.bpe_rounds(np.asarray(ids, np.int64), table).tolist()
    return merged


FAST_KINDS = [bpe.bpe_fast, bpe._bpe_scan, bpe._bpe_heap, rounds]

# OpenAI's pattern as written in src/encoder.py; bpe.PATTERN is the same with prefixes factored.
OPENAI_PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


@st.composite
def merge_tables(draw):
    """Random merges over the symbols a, b, c: each pair drawn from the symbols made so far,
    then the ranks shuffled, so a pair may rank before the merge that makes its parts."""
    symbols = ["a", "b", "c"]
    merges: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(0, 14))):
        pair = (draw(st.sampled_from(symbols)), draw(st.sampled_from(symbols)))
        if pair not in merges:
            merges.append(pair)
            if pair[0] + pair[1] not in symbols:
                symbols.append(pair[0] + pair[1])
    order = draw(st.permutations(range(len(merges))))
    merges = [merges[i] for i in order]
    encoder = {s: i for i, s in enumerate(symbols)}
    return merges, encoder


def both(symbols: list[str], merges, encoder) -> tuple[list[int], dict]:
    clear = bpe.bpe(list(symbols), {pair: r for r, pair in enumerate(merges)})
    table = bpe.MergeTable.build(merges, encoder)
    fast = {f.__name__: f([encoder[s] for s in symbols], table) for f in FAST_KINDS}
    return [encoder[s] for s in clear], fast


@SETTINGS
@given(merge_tables(), st.lists(st.sampled_from("abc"), max_size=80))
def test_fast_equals_clear_on_any_merge_table(table, symbols) -> None:
    merges, encoder = table
    expected, fast = both(symbols, merges, encoder)
    assert fast == dict.fromkeys(fast, expected)


@SETTINGS
@given(merge_tables(), st.sampled_from(["a", "ab", "abc", "aab", "cba"]), st.integers(1, 400))
def test_fast_equals_clear_on_long_repeats(table, unit, times) -> None:
    """Repeats tie many equal pairs (aaaa: which a-a first?) and make the heap's rounds long."""
    merges, encoder = table
    expected, fast = both(list(unit * times), merges, encoder)
    assert fast == dict.fromkeys(fast, expected)


def test_rounds_see_new_pairs_only_after_merging_every_occurrence() -> None:
    """("a", "b") first, everywhere; ("ab", "a") ranks lower but exists only after the round."""
    merges = [("ab", "a"), ("a", "b")]
    encoder = {"a": 0, "b": 1, "c": 2, "ab": 3, "aba": 4}
    assert bpe.bpe(list("abab"), dict(zip(merges, range(2)))) == ["ab", "ab"]
    expected, fast = both(list("abab"), merges, encoder)
    assert expected == [3, 3] and fast == dict.fromkeys(fast, expected)


@pytest.fixture(scope="module")
def gpt2():
    encoder = json.loads((DATA / "encoder.json").read_text(encoding="utf-8"))
    lines = (DATA / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:-1]
    merges = [tuple(line.split(" ")) for line in lines]
    ranks = {pair: r for r, pair in enumerate(merges)}
    return encoder, ranks, bpe.MergeTable.build(merges, encoder)


def gpt2_both(gpt2, text: str | bytes):
    encoder, ranks, table = gpt2
    data = text.encode("utf-8") if isinstance(text, str) else text
    symbols = [bpe.bytes_to_unicode()[b] for b in data]
    expected = [encoder[s] for s in bpe.bpe(symbols, ranks)]
    return expected, {f.__name__: f([encoder[s] for s in symbols], table) for f in FAST_KINDS}


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=150) | st.binary(max_size=300))
def test_fast_equals_clear_on_gpt2(gpt2, text) -> None:
    expected, fast = gpt2_both(gpt2, text)
    assert fast == dict.fromkeys(fast, expected)


@pytest.mark.parametrize(
    "text",
    [
        "".join(chr(random.Random(0).randint(0x4E00, 0x9FFF)) for _ in range(300)),  # CJK
        "東京は日本の首都です。" * 30,
        "a" * 700,
        " " * 700,
        "0" * 700,
        "\U0001f600" * 150,
        bytes(range(256)) * 2,
        b"\xff\xfe" * 300,
    ],
)
def test_fast_equals_clear_on_long_gpt2_pieces(gpt2, text) -> None:
    expected, fast = gpt2_both(gpt2, text)
    assert fast == dict.fromkeys(fast, expected)


# -- the pattern and where it always cuts ----------------------------------------------------

TRICKY = st.sampled_from(list(" \t\n\r\x0b\x1c\u00a0\u2003\u3000'sStTdDmMlLvVeErR09!.,-😀é東"))
TEXT = st.text(alphabet=st.one_of(st.characters(exclude_categories=("Cs",)), TRICKY))


@SETTINGS
@given(TEXT)
def test_pattern_is_openais(text: str) -> None:
    assert bpe.PATTERN.findall(text) == OPENAI_PATTERN.findall(text)


@SETTINGS
@given(TEXT, st.integers(0, 30))
def test_split_text_cuts_only_where_the_pattern_cuts(text: str, size: int) -> None:
    parts = list(bpe.split_text(text, size))
    assert "".join(parts) == text
    assert all(len(part) >= size for part in parts[:-1])
    assert [p for part in parts for p in bpe.PATTERN.findall(part)] == bpe.PATTERN.findall(text)


@SETTINGS
@given(TEXT, st.data())
def test_last_cut_is_the_last_safe_place(text: str, data) -> None:
    start = data.draw(st.integers(0, len(text)))
    cut = bpe.last_cut(text, start)
    pieces = bpe.PATTERN.findall(text)
    if cut:
        assert start < cut < len(text)
        assert bpe.PATTERN.findall(text[:cut]) + bpe.PATTERN.findall(text[cut:]) == pieces
        assert bpe.last_cut(text, cut) == 0  # nothing later
    else:
        assume(len(text) > start + 1)
        assert not regex.search(r"\S\s", text[max(start, 0) :])


def test_cut_points_on_examples() -> None:
    assert list(bpe.split_text("ab cd ef", 1)) == ["ab", " cd", " ef"]
    assert list(bpe.split_text("abcdef", 1)) == ["abcdef"]  # nowhere to cut
    assert list(bpe.split_text("a\u3000b", 1)) == ["a", "\u3000b"]  # any \s, not just " "
    assert list(bpe.split_text("", 5)) == [""]
    assert bpe.last_cut("ab cd  ") == 5 and bpe.last_cut("abc") == 0


def test_the_ascii_pattern_reads_ascii_as_the_pattern_does() -> None:
    """Character classes first, then the pattern on every ASCII text hypothesis finds."""
    for c in map(chr, range(128)):
        assert (c in bpe._ASCII_SPACE) == bool(regex.match(r"\s", c)), hex(ord(c))
        assert c.isascii() and bool(regex.match(r"\p{L}", c)) == (c.isalpha()), hex(ord(c))
        assert bool(regex.match(r"\p{N}", c)) == (c in "0123456789"), hex(ord(c))


@SETTINGS
@given(
    st.text(alphabet=st.characters(max_codepoint=127))
    | st.text(alphabet=" \t\n\x0b\x0c\r\x1c\x1f'sdmtlvre0aA!")
)
def test_pretokenize_is_the_pattern(text: str) -> None:
    assert text.isascii()
    assert bpe.pretokenize(text) == OPENAI_PATTERN.findall(text) == bpe.PATTERN.findall(text)
    assert bpe.pretokenize(text + "é") == OPENAI_PATTERN.findall(text + "é")


@SETTINGS
@given(merge_tables(), st.sampled_from(["a", "ab", "aab", "cba"]), st.integers(1, 200))
def test_rounds_equal_clear_when_each_round_is_cut_in_chunks(table, unit, times) -> None:
    """bpe_rounds cuts a round into chunks (a run of one symbol carried from chunk to chunk):
    with chunks of 3 positions, every cut falls inside some run."""
    merges, encoder = table
    symbols = list(unit * times)
    expected = [encoder[s] for s in bpe.bpe(symbols, {p: r for r, p in enumerate(merges)})]
    previous = bpe.FILE_CHUNK
    bpe.FILE_CHUNK = 3
    try:
        assert rounds([encoder[s] for s in symbols], bpe.MergeTable.build(merges, encoder)) == (
            expected
        )
    finally:
        bpe.FILE_CHUNK = previous


def test_pair_arrays_find_every_rank_and_no_other(gpt2) -> None:
    """The hash table of pairs answers every pair of vocab.bpe with its rank and NO_RANK for
    pairs it does not list (also pairs whose keys share a first slot)."""
    _, _, table = gpt2
    keys = np.fromiter(table.ranks, np.int64)
    left, right = keys // table.width, keys % table.width
    assert (table.arrays.rank(left, right) == np.fromiter(table.ranks.values(), np.int64)).all()
    absent = np.arange(5000) * 7919 % (table.width * table.width)
    absent = absent[~np.isin(absent, keys)]
    got = table.arrays.rank(absent // table.width, absent % table.width)
    assert (got == bpe.NO_RANK).all()


@pytest.mark.parametrize("how", ["encode_ordinary", "encode_stream"])
@pytest.mark.parametrize("kind", ["a", "cjk", "letters"])
def test_a_long_piece_is_merged_in_arrays_with_bounded_memory(gpt2, kind, how) -> None:
    """A piece of 1 MiB (one word with no space, as a single-piece text has) is merged by
    bpe_rounds in arrays: what Python allocates meanwhile stays a small multiple of the piece
    (the heap, with Python ints per byte, took 93-132 bytes per byte), and the ids equal the
    heap's. The same holds for encode_stream fed the piece in 64 KiB chunks (a file read in
    blocks), which holds the piece back until its end."""
    import tracemalloc

    from gpt2np.tokenizer.tokenizer import Tokenizer

    n = 1 << 20
    rng = random.Random(0)
    piece = {
        "a": "a" * n,
        "cjk": "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(n // 3)),
        "letters": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=n)),
    }[kind]
    tok = Tokenizer()
    tok.encode(" zqxjkv")  # the merge table and the cache are made on first use: not counted
    chunks = [piece[i : i + (1 << 16)] for i in range(0, len(piece), 1 << 16)]
    tracemalloc.start()
    try:
        if how == "encode_ordinary":
            ids = tok.encode_ordinary(piece)
        else:
            ids = [i for part in tok.encode_stream(iter(chunks)) for i in part]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    data = piece.encode()
    assert peak < 80 * len(data), peak / len(data)
    assert ids == bpe._bpe_heap(list(data.translate(tok._byte_table)), tok._table)


# -- many pieces at once ---------------------------------------------------------------------


def many(pieces: list[bytes], table, byte_ids: np.ndarray, tail: int) -> list[list[int]]:
    """bpe_many of ``pieces`` (each byte a symbol whose id byte_ids gives)."""
    b = np.arange(256)
    byte_ranks = table.arrays.rank(byte_ids[np.repeat(b, 256)], byte_ids[np.tile(b, 256)])
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    byte_ranks = byte_ranks.reshape(256, 256)
    return bpe.bpe_many(b"".join(pieces), lengths, table, byte_ids, byte_ranks, tail_pieces=tail)


#: How many last pieces bpe_many leaves to bpe_fast: none, a few, or every one.
TAILS = pytest.mark.parametrize("tail", [0, 2, 1000], ids=["no tail", "tail of 2", "all tail"])


@TAILS
@SETTINGS
@given(
    merge_tables(),
    st.lists(
        st.lists(st.sampled_from("abc"), max_size=12)
        | st.builds(
            lambda u, n: list(u * n), st.sampled_from(["a", "ab", "aab"]), st.integers(1, 30)
        ),
        max_size=20,
    ),
)
def test_many_equals_clear_piece_by_piece(tail, table, pieces) -> None:
    """Each piece merged as if alone, whatever its neighbours in the arrays: empty pieces, runs
    of one symbol (a, a pairs every other one), pieces done in the first round or the last."""
    merges, encoder = table
    ranks = {pair: r for r, pair in enumerate(merges)}
    expected = [[encoder[s] for s in bpe.bpe(list(p), ranks)] for p in pieces]
    byte_ids = np.zeros(256, np.int32)
    byte_ids[[ord(c) for c in "abc"]] = [encoder[c] for c in "abc"]
    table = bpe.MergeTable.build(merges, encoder)
    got = many(["".join(p).encode() for p in pieces], table, byte_ids, tail)
    assert got == expected


@TAILS
@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=40) | st.binary(max_size=60), max_size=40))
def test_many_equals_clear_on_gpt2(gpt2, tail, texts) -> None:
    encoder, _, table = gpt2
    byte_ids = np.array([encoder[bpe.bytes_to_unicode()[b]] for b in range(256)], np.int32)
    data = [t.encode("utf-8") if isinstance(t, str) else t for t in texts]
    assert many(data, table, byte_ids, tail) == [gpt2_both(gpt2, d)[0] for d in data]
