"""gpt2np.Tokenizer against published ids, tiktoken (committed fixture and live), and itself.

Independent references:
* published ids from tiktoken's own test suite and GPT-2 documentation;
* tests/fixtures/tokenizer_cases.json: ids computed by tiktoken (Rust) from the same vocabulary
  files, written by scripts/make_tokenizer_fixture.py, so the default run needs no tiktoken;
* live tiktoken (tests marked ``oracle``) under hypothesis, on arbitrary text.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import pathlib
import re
import shutil

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpt2np
from gpt2np import CheckpointError, Tokenizer
from gpt2np.tokenizer import runs as runs_module
from gpt2np.tokenizer import tokenizer as tokenizer_module
from gpt2np.tokenizer.bpe import bpe, bytes_to_unicode
from gpt2np.tokenizer.runs import WHITESPACE, WhitespaceRunError

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "tokenizer_cases.json"
DATA = ROOT / "src" / "gpt2np" / "data"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Text that stresses the pattern: real characters of every kind, plus pieces of it.
TRICKY = st.sampled_from(list(" \t\n\r'sStTdDmMlLvVeErR0123456789!.,-😀👍\u200d🇺\U0001f3fd\u0301ä"))
TEXT = st.text(alphabet=st.one_of(st.characters(exclude_categories=("Cs",)), TRICKY))
# Any str at all: lone surrogates and surrogate pairs too.
ANY_TEXT = st.text(alphabet=st.one_of(st.characters(), st.characters(categories=["Cs"]), TRICKY))


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer()


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


def has_surrogates(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


# -- published ids ---------------------------------------------------------------------------

# "Hello world"/" Hello world": the issue and DESIGN.md; "hello world", "hello <|endoftext|>"
# and the zero runs: tiktoken's test suite (test_simple, test_encode_repeated_zeros) for gpt2.
PUBLISHED = [
    ("Hello world", [15496, 995]),
    (" Hello world", [18435, 995]),
    ("hello world", [31373, 995]),
    ("Hello, world!", [15496, 11, 995, 0]),
    ("0", [15]),
    ("00", [405]),
    ("000", [830]),
    ("0000", [2388]),
    ("00000", [20483]),
    ("000000", [10535]),
    ("0000000", [24598]),
]


@pytest.mark.parametrize(("text", "ids"), PUBLISHED)
def test_published_ids(tok: Tokenizer, text: str, ids: list[int]) -> None:
    assert tok.encode(text) == ids
    assert tok.encode_ordinary(text) == ids
    assert tok.decode(ids) == text


def test_published_special_token(tok: Tokenizer) -> None:
    assert tok.encode("hello <|endoftext|>", allowed_special="all") == [31373, 220, 50256]
    assert tok.encode("hello <|endoftext|>", allowed_special={"<|endoftext|>"}) == [
        31373,
        220,
        50256,
    ]
    assert tok.decode([31373, 220, 50256]) == "hello <|endoftext|>"


def test_vocabulary_facts(tok: Tokenizer) -> None:
    assert tok.n_vocab == 50257
    assert tok.eot_token == 50256
    assert tok.special_tokens == {"<|endoftext|>": 50256}
    assert gpt2np.Tokenizer is Tokenizer
    assert len(tokenizer_module.ENCODER_JSON_SHA256) == len(tokenizer_module.VOCAB_BPE_SHA256) == 64


def test_byte_table_is_openais() -> None:
    table = bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[0] == "Ā"
    assert table[ord("A")] == "A" and table[0xFF] == "ÿ" and table[0xAD] == "Ń"


# -- against tiktoken, through the committed fixture ----------------------------------------


def test_fixture_ids_match_tiktoken(tok: Tokenizer, cases: list[dict]) -> None:
    assert len(cases) > 300
    for case in cases:
        ids = tok.encode(
            case["text"], allowed_special=case["allowed_special"], disallowed_special=()
        )
        assert ids == case["ids"], f"ids differ from tiktoken's for {case['text'][:60]!r}"


def test_fixture_ids_decode_to_text(tok: Tokenizer, cases: list[dict]) -> None:
    for case in cases:
        if not has_surrogates(case["text"]):
            assert tok.decode(case["ids"]) == case["text"]


def test_fixture_covers_the_required_kinds_of_text(cases: list[dict]) -> None:
    """Guards the fixture itself: if someone trims it, this says what went missing."""
    texts = "".join(case["text"] for case in cases)
    for needle in ["東京", "Съешь", "Ξεσκεπάζω", "نص", "דג", "เป็น", "ខ្ញុំ", "Tiếng", "👨\u200d👩",
                   "🇺🇸", "\t\t", "  \n", "'S", "'RE", "We'Ve", "12345678901234567890", "!!!???",
                   "def fib", "<|endoftext|>"]:  # fmt: skip
        assert needle in texts, needle
    assert any(case["allowed_special"] == "all" for case in cases)


# -- the algorithm ---------------------------------------------------------------------------


def test_every_token_encodes_to_itself() -> None:
    """GPT-2's vocabulary is closed under BPE: each token's own symbols merge back into exactly
    that token. This licenses the tokenizer's whole-token shortcut for the pinned files."""
    encoder = json.loads((DATA / "encoder.json").read_text(encoding="utf-8"))
    lines = (DATA / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:-1]
    ranks = {(a, b): rank for rank, (a, b) in enumerate(line.split(" ") for line in lines)}
    broken = [t for t in encoder if t != "<|endoftext|>" and bpe(list(t), ranks) != [t]]
    assert broken == []


def test_bpe_merges_lowest_rank_first_and_left_to_right() -> None:
    ranks = {("a", "b"): 0, ("b", "c"): 1, ("ab", "c"): 2, ("a", "a"): 3}
    assert bpe(list("abc"), ranks) == ["abc"]  # ab first (rank 0), then ab+c
    assert bpe(list("bc"), ranks) == ["bc"]
    assert bpe(list("aaa"), ranks) == ["aa", "a"]  # non-overlapping, leftmost first
    assert bpe(list("xyz"), ranks) == ["x", "y", "z"]
    assert bpe(["q"], ranks) == ["q"]


def test_contractions_are_case_sensitive(tok: Tokenizer) -> None:
    """OpenAI's pattern has no IGNORECASE: "'s" is one piece, "'S" is "'" then "S"."""
    assert tok.encode("'s") == [338]
    assert tok.encode("'S") == tok.encode("'") + tok.encode("S")


def test_whitespace_run_leaves_last_space_to_next_word(tok: Tokenizer) -> None:
    assert tok.encode("a  b") == tok.encode("a") + tok.encode(" ") + tok.encode(" b")


# -- special tokens --------------------------------------------------------------------------


def test_special_token_text_is_disallowed_by_default(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match=r"<\|endoftext\|>"):
        tok.encode("the end <|endoftext|>")


def test_special_token_text_as_ordinary_text(tok: Tokenizer) -> None:
    ordinary = tok.encode_ordinary("a <|endoftext|> b")
    assert 50256 not in ordinary
    assert tok.encode("a <|endoftext|> b", disallowed_special=()) == ordinary
    assert tok.decode(ordinary) == "a <|endoftext|> b"


def test_allowed_special_splits_around_the_token(tok: Tokenizer) -> None:
    ids = tok.encode("a<|endoftext|>b<|endoftext|>", allowed_special="all")
    assert ids == [*tok.encode("a"), 50256, *tok.encode("b"), 50256]


def test_bad_special_arguments(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match=re.escape("<|bogus|>")):
        tok.encode("x", allowed_special={"<|bogus|>"})
    with pytest.raises(TypeError, match="allowed_special"):
        tok.encode("x", allowed_special="<|endoftext|>")
    with pytest.raises(ValueError, match="'forbidden'"):  # tiktoken: any text can be disallowed
        tok.encode("a forbidden word", disallowed_special={"forbidden"})
    for kw in (dict(allowed_special=None), dict(disallowed_special=None)):  # was: 'NoneType'
        with pytest.raises(TypeError, match=f"{next(iter(kw))} must be"):  # is not iterable
            tok.encode("x", **kw)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [b"bytes", None, 123, ["a"]])
def test_encode_rejects_non_str(tok: Tokenizer, text: object) -> None:
    with pytest.raises(TypeError, match="str"):
        tok.encode(text)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        tok.encode_ordinary(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [50257, -1, 10**12])
def test_decode_rejects_out_of_range_ids(tok: Tokenizer, bad: int) -> None:
    for ids in ([15496, bad], (bad,), np.array([15496, bad], dtype=np.int64)):
        with pytest.raises(ValueError, match=rf"token id {bad}\b"):
            tok.decode(ids)
        with pytest.raises(ValueError, match=rf"token id {bad}\b"):
            tok.decode_bytes(ids)


@pytest.mark.parametrize("ids", [[1.0], ["1"], [True], [None], "15496", 15496])
def test_decode_rejects_non_integer_ids(tok: Tokenizer, ids: object) -> None:
    with pytest.raises(TypeError):
        tok.decode(ids)  # type: ignore[arg-type]


def test_decode_rejects_bad_arrays(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(np.array([[15496, 995]]))
    with pytest.raises(TypeError, match="float"):
        tok.decode(np.array([15496.0]))


def test_decode_accepts_lists_tuples_and_integer_arrays(tok: Tokenizer) -> None:
    ids = [15496, 995]
    for form in (ids, tuple(ids), np.array(ids, dtype=np.int32), np.array(ids, dtype=np.uint16)):
        assert tok.decode(form) == "Hello world"
    assert tok.decode([np.int64(15496), np.int32(995)]) == "Hello world"
    assert tok.decode([]) == ""
    assert tok.decode(np.array([], dtype=np.int64)) == ""


def test_decode_replaces_invalid_utf8(tok: Tokenizer) -> None:
    ids = tok.encode("😀")  # four bytes, split over several tokens
    assert len(ids) > 1
    assert tok.decode_bytes(ids) == "😀".encode()
    assert tok.decode(ids[:1]) == "\ufffd"  # an incomplete character
    assert tok.decode(ids[:1] + tok.encode(" ok")) == "\ufffd ok"


@SETTINGS
@given(ANY_TEXT)
def test_any_str_encodes_to_valid_ids(tok: Tokenizer, text: str) -> None:
    """Surrogates or not, encode never fails and decoding gives valid text."""
    ids = tok.encode_ordinary(text)
    assert all(0 <= i < tok.n_vocab for i in ids)
    decoded = tok.decode(ids)
    assert not has_surrogates(decoded)
    if not has_surrogates(text):
        assert decoded == text


def test_lone_surrogates_become_replacement_characters(tok: Tokenizer) -> None:
    """UTF-8 cannot encode a lone surrogate; like tiktoken, encode reads it as U+FFFD and a
    high+low pair as the character it stands for."""
    assert tok.encode("a\ud800b") == tok.encode("a\ufffdb")
    assert tok.decode(tok.encode("a\ud800b")) == "a\ufffdb"
    assert tok.encode("\udc00 x") == tok.encode("\ufffd x")
    assert tok.encode("\ud83d\ude00!") == tok.encode("😀!")


# -- files -----------------------------------------------------------------------------------


def write_tiny_vocab(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A valid toy vocabulary: the 256 byte symbols, two merges, and <|endoftext|>."""
    symbols = list(bytes_to_unicode().values())
    encoder = {s: i for i, s in enumerate(symbols)}
    encoder.update({"Ġt": 256, "Ġth": 257, "<|endoftext|>": 258})
    encoder_json, vocab_bpe = directory / "vocab.json", directory / "merges.txt"
    encoder_json.write_text(json.dumps(encoder), encoding="utf-8")
    vocab_bpe.write_text("#version: 0.2\nĠ t\nĠt h\n", encoding="utf-8")
    return encoder_json, vocab_bpe


def test_from_files_with_a_toy_vocabulary(tmp_path: pathlib.Path) -> None:
    tok = Tokenizer.from_files(*write_tiny_vocab(tmp_path))
    assert tok.n_vocab == 259 and tok.eot_token == 258
    ids = tok.encode(" the<|endoftext|>", allowed_special="all")
    assert ids == [257, ord("e"), 258]  # "Ġth", then "e" (the toy numbers bytes in order)
    assert tok.decode(ids) == " the<|endoftext|>"


def test_from_files_accepts_hf_names_and_crlf(tok: Tokenizer, tmp_path: pathlib.Path) -> None:
    """HF's vocab.json/merges.txt are the same formats. CRLF line ends change the digest, which
    turns off the whole-token shortcut: the full merge loop must give the same ids."""
    shutil.copy(DATA / "encoder.json", tmp_path / "vocab.json")
    merges = (DATA / "vocab.bpe").read_bytes().replace(b"\n", b"\r\n")
    (tmp_path / "merges.txt").write_bytes(merges)
    other = Tokenizer.from_files(tmp_path / "vocab.json", str(tmp_path / "merges.txt"))
    text = "Hello world! The tokenizer's merge loop, über-careful, 12345 东京 🇯🇵\n\n  end"
    assert other.encode(text) == tok.encode(text)
    assert other.n_vocab == 50257


BROKEN_ENCODERS = {
    "not json": (b"{not json", "not a valid JSON"),
    "array": (b"[1, 2]", "JSON object"),
    "string id": (json.dumps({"a": "0"}).encode(), "not an integer"),
}


@pytest.mark.parametrize("name", list(BROKEN_ENCODERS))
def test_malformed_encoder_json(tmp_path: pathlib.Path, name: str) -> None:
    encoder_json, vocab_bpe = write_tiny_vocab(tmp_path)
    data, message = BROKEN_ENCODERS[name]
    encoder_json.write_bytes(data)
    with pytest.raises(CheckpointError, match=message) as err:
        Tokenizer.from_files(encoder_json, vocab_bpe)
    assert str(encoder_json) in str(err.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.update({"Ġt": 5}), "id 5"),  # duplicate id
        (lambda e: e.pop("Ġ"), "byte symbol"),  # a byte cannot be encoded
        (lambda e: e.pop("<|endoftext|>"), "endoftext"),
        (lambda e: e.update({"x y": 259}), "byte alphabet"),  # raw space is not a symbol
    ],
)
def test_inconsistent_encoder_json(tmp_path: pathlib.Path, edit, message: str) -> None:
    encoder_json, vocab_bpe = write_tiny_vocab(tmp_path)
    encoder = json.loads(encoder_json.read_text(encoding="utf-8"))
    edit(encoder)
    if "Ġ" not in encoder or "<|endoftext|>" not in encoder:  # keep ids 0 … n-1
        encoder = {t: i for i, t in enumerate(encoder)}
    encoder_json.write_text(json.dumps(encoder), encoding="utf-8")
    with pytest.raises(CheckpointError, match=message) as err:
        Tokenizer.from_files(encoder_json, vocab_bpe)
    assert str(encoder_json) in str(err.value)


@pytest.mark.parametrize(
    ("merges", "message"),
    [
        ("#version: 0.2\nĠ t x\n", "line 2: expected two symbols"),
        ("#version: 0.2\nĠ t\n\nĠt h\n", "line 3: expected two symbols"),
        ("#version: 0.2\nĠ q\n", "line 2: symbol 'Ġq' is not a token"),
        ("#version: 0.2\nĠ t\nĠ t\n", "line 3: pair 'Ġ t' is listed twice"),
        (b"#version: 0.2\n\xff\xfe\n", "not UTF-8"),
    ],
)
def test_malformed_vocab_bpe(tmp_path: pathlib.Path, merges: str | bytes, message: str) -> None:
    encoder_json, vocab_bpe = write_tiny_vocab(tmp_path)
    vocab_bpe.write_bytes(merges if isinstance(merges, bytes) else merges.encode("utf-8"))
    with pytest.raises(CheckpointError, match=message) as err:
        Tokenizer.from_files(encoder_json, vocab_bpe)
    assert str(vocab_bpe) in str(err.value)


def test_missing_file_names_it(tmp_path: pathlib.Path) -> None:
    encoder_json, _ = write_tiny_vocab(tmp_path)
    with pytest.raises(CheckpointError, match=r"nowhere\.bpe"):
        Tokenizer.from_files(encoder_json, tmp_path / "nowhere.bpe")


def test_bundled_files_are_checked_against_the_pins(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(DATA / "encoder.json", tmp_path / "encoder.json")
    data = (DATA / "vocab.bpe").read_bytes()
    (tmp_path / "vocab.bpe").write_bytes(data[:-10])  # truncated
    monkeypatch.setattr(tokenizer_module, "DATA_DIR", tmp_path)
    with pytest.raises(CheckpointError, match=r"vocab\.bpe: SHA-256 is [0-9a-f]{64}, expected"):
        Tokenizer()


# -- the bounded cache -----------------------------------------------------------------------


def learned(tok: Tokenizer) -> dict:
    """The cache's entries beyond the vocabulary's own whole tokens."""
    return {piece: ids for piece, ids in tok._cache.items() if piece not in tok._cache._whole}


def test_piece_cache_stays_bounded_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenizer_module, "CACHE_SIZE", 8)
    tok = Tokenizer()
    words = [f"zq{chr(97 + i % 26)}{chr(97 + i // 26)}xv" for i in range(60)]  # not tokens
    text = " ".join(words) + " " + "z" * 2000
    ids = tok.encode(text)
    assert 0 < len(learned(tok)) <= 8
    assert len(tok._cache) <= len(tok._cache._whole) + 8
    assert len(tok._cache._older) <= len(tok._cache._whole) + 8  # the previous generation
    assert "z" * 2000 not in tok._cache  # longer than CACHE_MAX_CHARS: never kept
    assert tok.encode(text) == ids  # after starting afresh, the same answer
    monkeypatch.setattr(tokenizer_module, "CACHE_SIZE", 1 << 16)
    assert Tokenizer().encode(text) == ids


def test_pieces_of_the_older_generation_are_not_encoded_again(monkeypatch) -> None:
    monkeypatch.setattr(tokenizer_module, "CACHE_SIZE", 4)
    tok = Tokenizer()
    encoded = []
    real = tok._cache._encode
    tok._cache._encode = lambda piece: encoded.append(piece) or real(piece)
    words = [" zqxa", " zqxb", " zqxc", " zqxd", " zqxe"]  # five new pieces: one reset
    ids = tok.encode("".join(words))
    assert encoded == words and set(tok._cache._older) >= set(words[:4])
    assert tok.encode("".join(words)) == ids
    assert encoded == words  # the first four came back from the older generation


def test_piece_cache_stays_bounded_in_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenizer_module, "CACHE_CHARS", 100)
    tok = Tokenizer()
    text = " ".join(f"qz{i}x" * 9 for i in range(40))  # 40 pieces of 30-40 characters
    ids = tok.encode(text)
    assert 0 < sum(map(len, learned(tok))) <= 100
    assert tok.encode(text) == ids == Tokenizer.from_files(*Tokenizer().files).encode(text)


# OpenAI's pattern as src/encoder.py writes it (the tokenizer's own factors out prefixes).
OPENAI_PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


def new_words(n: int, seed: int = 0) -> str:
    """``n`` random words of Latin, Cyrillic, Greek, Arabic and CJK letters with digits and
    punctuation between: text whose pieces a fresh cache has mostly not seen."""
    rng = np.random.default_rng(seed)
    scripts = [(0x61, 26), (0x430, 32), (0x3B1, 25), (0x627, 20), (0x4E00, 3000)]
    words = []
    for _ in range(n):
        start, size = scripts[rng.integers(len(scripts))]
        words.append(
            "".join(chr(start + int(c)) for c in rng.integers(0, size, rng.integers(1, 9)))
        )
        words.append(str(rng.choice([" ", " ", " ", ", ", "  ", "\n", " 12 ", "! "])))
    return "".join(words)


def clear_ids(text: str) -> list[int]:
    """OpenAI's algorithm, piece by piece: pre-tokenise, bytes to symbols, bpe (the clear twin)."""
    encoder = json.loads((DATA / "encoder.json").read_text(encoding="utf-8"))
    lines = (DATA / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:-1]
    ranks = {tuple(line.split(" ")): r for r, line in enumerate(lines)}
    symbol = bytes_to_unicode()
    text = regex.sub(r"\p{Cs}", "\ufffd", text)  # lone surrogates, as the module docstring says
    return [
        encoder[token]
        for piece in OPENAI_PATTERN.findall(text)
        for token in bpe([symbol[b] for b in piece.encode()], ranks)
    ]


@pytest.mark.parametrize("case", ["plain", "lone surrogates", "cache starting afresh"])
def test_a_cold_text_is_merged_in_windows_to_the_same_ids(monkeypatch, case: str) -> None:
    """Parts that bring many new pieces are gathered into windows whose new pieces bpe_many
    merges at once (small parts and windows here, so that a short text has many): the same
    ids as OpenAI's algorithm piece by piece, with lone surrogates in the text, and with the
    cache starting afresh in the middle of a window."""
    text = new_words(3000)
    if case == "lone surrogates":
        text = text[:5000] + "\ud800" + text[5000:9000] + "x\udfff " + text[9000:]
    if case == "cache starting afresh":
        monkeypatch.setattr(tokenizer_module, "CACHE_SIZE", 300)
    monkeypatch.setattr(tokenizer_module, "PART_CHARS", 256)
    monkeypatch.setattr(tokenizer_module, "WINDOW_CHARS", 2048)
    batches: list[int] = []
    real = tokenizer_module.bpe_many
    monkeypatch.setattr(
        tokenizer_module, "bpe_many", lambda data, *a: batches.append(len(a[0])) or real(data, *a)
    )
    tok = Tokenizer()
    ids = tok.encode_ordinary(text)
    assert len(batches) > 3 and sum(batches) > 1000  # most of the text went through windows
    assert ids == clear_ids(text)
    assert tok.encode_ordinary(text) == ids  # warm: from the cache


def test_whole_tokens_start_in_the_cache_only_for_the_pinned_vocabulary(tmp_path) -> None:
    """The head start relies on GPT-2's vocabulary being closed under BPE (checked above for
    all 50256 tokens); a vocabulary with other digests starts with an empty cache."""
    tok = Tokenizer()
    assert tok._cache[" the"] == (262,) and len(tok._cache._whole) > 49000
    assert "<|endoftext|>" not in tok._cache._whole
    shutil.copy(DATA / "encoder.json", tmp_path / "vocab.json")
    (tmp_path / "merges.txt").write_bytes((DATA / "vocab.bpe").read_bytes() + b"\n")
    other = Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert other._cache._whole == {}
    assert other.encode(" the") == [262]


# -- properties ------------------------------------------------------------------------------


@SETTINGS
@given(TEXT)
def test_decode_inverts_encode(tok: Tokenizer, text: str) -> None:
    ids = tok.encode_ordinary(text)
    assert tok.decode(ids) == text
    assert tok.decode_bytes(ids) == text.encode("utf-8")
    assert all(0 <= i < tok.n_vocab for i in ids)


def stream(tok: Tokenizer, ids: list[int], cuts: list[int]) -> str:
    """Feed ``ids`` in chunks ending at ``cuts`` (single ids fed as ints) and flush."""
    decoder = tok.stream_decoder()
    out, start = [], 0
    for cut in [*sorted(cuts), len(ids)]:
        chunk = ids[start:cut]
        out.append(decoder.feed(chunk[0]) if len(chunk) == 1 else decoder.feed(chunk))
        start = max(start, cut)
    return "".join(out) + decoder.flush()


# Byte tokens (ids 0 … 255 are single bytes) cut multi-byte characters anywhere; the rest
# of the vocabulary adds whole pieces.
RANDOM_IDS = st.lists(st.one_of(st.integers(0, 255), st.integers(0, 50256)), max_size=40)


@SETTINGS
@given(RANDOM_IDS, st.lists(st.integers(0, 40), max_size=10))
def test_stream_decoder_equals_decode_on_random_ids(
    tok: Tokenizer, ids: list[int], cuts: list[int]
) -> None:
    assert stream(tok, ids, cuts) == tok.decode(ids)


@SETTINGS
@given(TEXT, st.lists(st.integers(0, 60), max_size=10))
def test_stream_decoder_never_emits_half_a_character(
    tok: Tokenizer, text: str, cuts: list[int]
) -> None:
    ids = tok.encode_ordinary(text)
    decoder = tok.stream_decoder()
    pieces = [decoder.feed(i) for i in ids]
    assert all("\ufffd" not in piece for piece in pieces if "\ufffd" not in text)
    assert "".join(pieces) + decoder.flush() == text
    assert stream(tok, ids, cuts) == text


def test_stream_decoder_buffers_and_flushes(tok: Tokenizer) -> None:
    ids = tok.encode("é😀")
    decoder = tok.stream_decoder()
    out = [decoder.feed(np.int64(i)) for i in ids]
    assert "".join(out) == "é😀" and "" in out  # some token ended mid-character
    first = tok.encode("😀")[0]
    assert decoder.feed(np.array([first])) == ""  # buffered, incomplete
    assert decoder.flush() == "\ufffd"
    assert decoder.feed([15496]) == "Hello"  # starts afresh after flush
    with pytest.raises(ValueError, match="token id 50257"):
        decoder.feed(50257)


# -- tiktoken's batch and per-token methods, on their own ---------------------------------


@pytest.fixture(scope="module")
def fixture_file() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_published_examples_of_the_per_token_methods(tok: Tokenizer) -> None:
    """The examples in tiktoken's docstrings, for its gpt2 encoding."""
    assert tok.encode_batch(["hello world", "goodbye world"]) == [[31373, 995], [11274, 16390, 995]]
    assert tok.decode_single_token_bytes(31373) == b"hello"
    assert tok.decode_tokens_bytes([31373, 995]) == [b"hello", b" world"]
    assert tok.decode_with_offsets([31373, 995]) == ("hello world", [0, 5])


def test_encode_batch_and_encode_ordinary_batch(tok: Tokenizer) -> None:
    texts = ["Hello world", "", "a<|endoftext|>b", "東京 😀"]
    assert tok.encode_ordinary_batch(texts) == [tok.encode_ordinary(t) for t in texts]
    assert tok.encode_batch(texts, allowed_special="all") == [
        tok.encode(t, allowed_special="all") for t in texts
    ]
    assert tok.encode_batch(texts, disallowed_special=())[2] == tok.encode_ordinary(texts[2])
    assert tok.encode_batch(iter(texts[:1]), num_threads=1) == [[15496, 995]]
    assert tok.encode_batch([]) == []
    with pytest.raises(ValueError, match="endoftext"):
        tok.encode_batch(texts)  # the third text holds a disallowed special token
    with pytest.raises(TypeError, match="list, not str"):
        tok.encode_batch("Hello world")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a str, not int"):
        tok.encode_ordinary_batch(["a", 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="num_threads must be at least 1"):
        tok.encode_batch(texts, num_threads=0)
    with pytest.raises(TypeError, match="num_threads must be an int"):
        tok.encode_ordinary_batch(texts, num_threads=2.0)  # type: ignore[arg-type]


def test_decode_batch_and_decode_bytes_batch(tok: Tokenizer) -> None:
    rows = [[15496, 995], [], [50256], tok.encode("😀")[:1]]
    assert tok.decode_batch(rows) == ["Hello world", "", "<|endoftext|>", "\ufffd"]
    assert tok.decode_bytes_batch(rows) == [tok.decode_bytes(r) for r in rows]
    assert tok.decode_batch(np.array([[15496, 995], [18435, 995]])) == [
        "Hello world",
        " Hello world",
    ]
    assert tok.decode_batch(rows, errors="ignore")[3] == ""
    with pytest.raises(UnicodeDecodeError):
        tok.decode_batch(rows, errors="strict")
    with pytest.raises(ValueError, match="errors='bogus'"):
        tok.decode_batch(rows, errors="bogus")
    with pytest.raises(TypeError, match="ids must be a sequence of ints, not int"):
        tok.decode_batch([15496, 995])  # a flat list is one row, not a batch
    with pytest.raises(ValueError, match="token id 50257"):
        tok.decode_batch([[1], [50257]])


def test_decode_errors_argument(tok: Tokenizer) -> None:
    half = tok.encode("😀")[:1]
    assert tok.decode(half) == "\ufffd" and tok.decode(half, errors="ignore") == ""
    escaped = "".join(f"\\x{b:02x}" for b in tok.decode_bytes(half))
    assert tok.decode(half, errors="backslashreplace") == escaped
    with pytest.raises(UnicodeDecodeError):
        tok.decode(half, errors="strict")
    with pytest.raises(ValueError, match="errors="):
        tok.decode(half, errors="nonsense")


def test_decode_single_token_bytes(tok: Tokenizer) -> None:
    assert tok.decode_single_token_bytes(50256) == b"<|endoftext|>"  # special: its text
    assert tok.decode_single_token_bytes(np.int64(220)) == b" "
    assert tok.decode_single_token_bytes(188) == b"\x00"  # byte tokens come after printables
    for bad in (50257, -1):
        with pytest.raises(
            gpt2np.tokenizer.tokenizer.InvalidTokenError, match=f"token id {bad}\\b"
        ):
            tok.decode_single_token_bytes(bad)
    for bad in (True, 1.0, "1", None, [1]):
        with pytest.raises(TypeError):
            tok.decode_single_token_bytes(bad)  # type: ignore[arg-type]


def test_an_unknown_id_is_a_value_error_and_a_key_error_as_in_tiktoken(tok: Tokenizer) -> None:
    for call in (tok.decode, tok.decode_bytes, tok.decode_tokens_bytes, tok.decode_with_offsets):
        with pytest.raises(ValueError) as err:
            call([1, 50257])
        assert isinstance(err.value, KeyError) and str(err.value).startswith("token id 50257")


def test_decode_tokens_bytes_joins_to_decode_bytes(tok: Tokenizer, cases: list[dict]) -> None:
    for case in cases:
        parts = tok.decode_tokens_bytes(case["ids"])
        assert len(parts) == len(case["ids"]) and all(parts)
        assert b"".join(parts) == tok.decode_bytes(case["ids"])
    assert tok.decode_tokens_bytes(np.array([31373, 995])) == [b"hello", b" world"]
    assert tok.decode_tokens_bytes([]) == []


def test_decode_with_offsets_equals_tiktokens_fixture(tok: Tokenizer, fixture_file) -> None:
    assert len(fixture_file["offsets"]) >= 5
    for case in fixture_file["offsets"]:
        text, offsets = tok.decode_with_offsets(case["ids"])
        assert text == tok.decode(case["ids"]) and offsets == case["offsets"]


def test_decode_with_offsets_points_at_the_characters(tok: Tokenizer) -> None:
    text = "héllo 😀 wörld"
    ids = tok.encode(text)
    decoded, offsets = tok.decode_with_offsets(ids)
    assert decoded == text and len(offsets) == len(ids) and offsets == sorted(offsets)
    emoji = [o for o, b in zip(offsets, tok.decode_tokens_bytes(ids)) if b[0] >= 0x80]
    assert text.index("😀") in emoji  # a token inside the emoji points at the emoji
    assert tok.decode_with_offsets([]) == ("", [])
    with pytest.raises(UnicodeDecodeError):  # tiktoken: invalid UTF-8 raises
        tok.decode_with_offsets(tok.encode("😀")[:1])


def test_token_byte_values(tok: Tokenizer, fixture_file) -> None:
    values = tok.token_byte_values()
    assert len(values) == 50256 and values == sorted(set(values))
    assert b"<|endoftext|>" not in values and b"hello" in values
    digest = hashlib.sha256(",".join(b.hex() for b in values).encode("ascii")).hexdigest()
    assert digest == fixture_file["token_byte_values_sha256"]  # tiktoken's list
    assert set(values) == {tok.decode_single_token_bytes(i) for i in range(50256)}


def test_repr_and_tiktoken_names(tok: Tokenizer, tmp_path: pathlib.Path) -> None:
    assert repr(tok) == "Tokenizer(bundled GPT-2 vocabulary, n_vocab=50257, eot_token=50256)"
    files = write_tiny_vocab(tmp_path)
    small = repr(Tokenizer.from_files(*files))
    assert small.startswith("Tokenizer(files=(") and str(files[0]) in small
    assert "n_vocab=259, eot_token=258" in small
    assert tok.max_token_value == 50256 and tok.special_tokens_set == {"<|endoftext|>"}


# -- long texts and streams ------------------------------------------------------------------


@SETTINGS
@given(TEXT, st.integers(1, 40))
def test_long_texts_are_encoded_in_parts_with_the_same_ids(
    tok: Tokenizer, text: str, part: int
) -> None:
    whole = tok.encode_ordinary(text)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "PART_CHARS", part)
        assert tok.encode_ordinary(text) == whole


def flat(batches: list[list[int]]) -> list[int]:
    return [i for ids in batches for i in ids]


def chunked(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(c % (len(text) + 1) for c in cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@SETTINGS
@given(
    st.lists(st.one_of(TEXT, ANY_TEXT, st.just("<|endoftext|>")), max_size=5),
    st.lists(st.integers(0, 10**6), max_size=12),
    st.integers(1, 30),
)
def test_encode_stream_equals_encode_of_the_joined_text(
    tok: Tokenizer, parts: list[str], cuts: list[int], part_chars: int
) -> None:
    """Chunks may end anywhere (inside a word, a space run, a special token, a surrogate
    pair); small parts force many cuts."""
    text = "".join(parts)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "READ_CHARS", part_chars)
        m.setattr(tokenizer_module, "PART_CHARS", part_chars)
        streamed = list(tok.encode_stream(chunked(text, cuts), allowed_special="all"))
        ordinary = list(tok.encode_stream(chunked(text, cuts), disallowed_special=()))
    assert all(streamed) and all(ordinary)  # no empty lists
    assert flat(streamed) == tok.encode(text, allowed_special="all")
    assert flat(ordinary) == tok.encode_ordinary(text)


WHITESPACE_RUN = st.builds(
    lambda chars, n: "".join(c * n for c in chars),
    st.lists(st.sampled_from([" ", "\n", "\t", "\r", "\x0b", "\x0c", "\u3000", "\x85"]),
             min_size=1, max_size=4),
    st.integers(1, 300),
)  # fmt: skip


@SETTINGS
@given(
    st.lists(st.one_of(TEXT, WHITESPACE_RUN, st.just("<|endoftext|>")), max_size=6),
    st.lists(st.integers(0, 10**6), max_size=12),
    st.integers(1, 40),
)
def test_encode_stream_of_whitespace_runs_equals_encode(
    tok: Tokenizer, parts: list[str], cuts: list[int], read_chars: int
) -> None:
    """Runs of whitespace longer than READ_CHARS are held as runs of one character: the ids
    are encode's, whatever follows the run (a word, other whitespace, the end)."""
    text = "".join(parts)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "READ_CHARS", read_chars)
        streamed = list(tok.encode_stream(chunked(text, cuts), allowed_special="all"))
    assert all(streamed)
    assert flat(streamed) == tok.encode(text, allowed_special="all")


@pytest.mark.parametrize("run", [" ", "\n", " \t"])
def test_encode_stream_holds_a_bounded_window_of_a_whitespace_run(tok: Tokenizer, run) -> None:
    """2 MiB of spaces (of newlines; of two alternating characters), then a word: the ids are
    encode's, and the peak is under a block of ids and two of text, not the run (it was held
    whole and merged as one piece: 10 MiB of spaces took 0.39 GB; then two alternating
    characters were a run each)."""
    import tracemalloc

    block = (run * (1 << 16))[: 1 << 16]
    n_blocks = 32 if len(run) == 1 else 4

    def chunks():
        for _ in range(n_blocks):
            yield block
        yield " end"

    tok.encode(" end")  # caches warmed
    tracemalloc.start()
    try:
        streamed = [i for ids in tok.encode_stream(chunks()) for i in ids]
        peak = tracemalloc.get_traced_memory()[1] - 9 * len(streamed)  # less the result list
    finally:
        tracemalloc.stop()
    assert streamed == tok.encode(block * n_blocks + " end")
    assert peak < 2 << 20, peak


# Whitespace of every kind, in runs, mixes and repeated patterns ("\r\n" * n, "\n " * n).
MIXED_WHITESPACE = st.one_of(
    st.text(alphabet=st.sampled_from(WHITESPACE), min_size=1, max_size=200),
    st.builds(lambda unit, n: unit * n,
              st.text(alphabet=st.sampled_from(WHITESPACE), min_size=1, max_size=4),
              st.integers(1, 120)),
    st.builds(lambda chars, n: "".join(c * n for c in chars),
              st.lists(st.sampled_from(WHITESPACE), min_size=1, max_size=4), st.integers(1, 90)),
)  # fmt: skip


def test_whitespace_is_every_character_the_pattern_reads_as_whitespace() -> None:
    every = "".join(map(chr, range(0x110000)))
    assert "".join(regex.findall(r"\s", every)) == WHITESPACE
    assert WHITESPACE == "".join(sorted(WHITESPACE))


@SETTINGS
@given(st.lists(MIXED_WHITESPACE, min_size=1, max_size=4))
def test_bpe_of_whitespace_splits_exactly_at_every_safe_place(tok: Tokenizer, parts) -> None:
    """The claim encode_stream's windows rest on (gpt2np.tokenizer.runs): at a place no merge's
    token can span, BPE of the piece is BPE of the part before it, then of the part after.
    SpaceCuts finds exactly the places the table calls safe."""
    text = "".join(parts)
    cuts = tok._space_cuts
    safe = [i for i in range(1, len(text)) if text[i] not in cuts.unsafe[text[i - 1]]]
    assert cuts.first(text) == (safe[0] if safe else 0)
    assert cuts.last(text) == (safe[-1] if safe else 0)
    whole = tok._bpe_bytes(text.encode())
    assert tok._encode_space(text) == whole
    for i in safe:
        assert tok._bpe_bytes(text[:i].encode()) + tok._bpe_bytes(text[i:].encode()) == whole


def test_safe_places_of_gpt2_whitespace() -> None:
    """GPT-2's vocabulary: no token holds two ASCII whitespace characters but "\n\n", so every
    change of ASCII whitespace is safe; U+00A0 and a space before U+0085, U+1680, U+2000-U+200A,
    U+2028, U+2029, U+202F and U+205F are not (tokens " \xa0", "\xa0\xa0", " \xe2\x80", ...)."""
    unsafe = Tokenizer()._space_cuts.unsafe
    assert {x: "".join(sorted(ys)) for x, ys in unsafe.items() if ys} == {
        "\n": "\n\xa0",
        " ": "\x85\xa0\u1680"
        + "".join(map(chr, range(0x2000, 0x200B)))
        + "\u2028\u2029\u202f\u205f",
        "\xa0": " \xa0",
    }


@SETTINGS
@given(
    st.lists(st.one_of(TEXT, MIXED_WHITESPACE, st.just("<|endoftext|>")), max_size=6),
    st.lists(st.integers(0, 10**6), max_size=12),
    st.integers(1, 40),
    st.integers(1, 12),
)
def test_encode_stream_of_mixed_whitespace_equals_encode(
    tok: Tokenizer, parts: list[str], cuts: list[int], read_chars: int, part_chars: int
) -> None:
    """Whitespace of any kind, its character changing often or never: cut at safe places into
    windows, or held as runs where there is none, the ids are encode's."""
    text = "".join(parts)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "READ_CHARS", read_chars)
        m.setattr(runs_module, "PART_CHARS", part_chars)
        streamed = list(tok.encode_stream(chunked(text, cuts), allowed_special="all"))
    assert all(streamed)
    assert flat(streamed) == tok.encode(text, allowed_special="all")


def longest_without_a_safe_place(tok: Tokenizer, text: str) -> int:
    """The most characters in a row, inside one stretch of whitespace, with no safe place."""
    cuts, longest, n = tok._space_cuts, 0, 0
    for before, char in zip(" " + text, text):
        if not regex.match(r"\s", char):
            n = 0
        elif n and before in cuts.unsafe and char in cuts.unsafe[before]:
            n += 1
        else:
            n = 1
        longest = max(longest, n)
    return longest


@SETTINGS
@given(
    st.lists(st.one_of(TEXT, MIXED_WHITESPACE, st.text(st.sampled_from("\xa0 \n"), max_size=300)),
             max_size=6),
    st.lists(st.integers(0, 10**6), max_size=12),
    st.integers(1, 40),
)  # fmt: skip
def test_encode_stream_refuses_only_a_long_stretch_with_no_safe_place(
    tok: Tokenizer, parts: list[str], cuts: list[int], read_chars: int
) -> None:
    """With few runs allowed, a stretch of whitespace with no safe place longer than a window
    may be refused (WhitespaceRunError, a ValueError naming the characters); anything else is
    encoded, with encode's ids. No wrong ids either way."""
    text = "".join(parts)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "READ_CHARS", read_chars)
        m.setattr(runs_module, "MAX_RUNS", 8)
        try:
            streamed = flat(list(tok.encode_stream(chunked(text, cuts), disallowed_special=())))
        except WhitespaceRunError as e:
            assert longest_without_a_safe_place(tok, text) > read_chars
            assert "no place where a token boundary is certain" in str(e)
            assert all(c in text for c in e.held) and e.held
            return
    assert streamed == tok.encode_ordinary(text)


def test_every_merge_ranks_after_the_merges_that_make_its_tokens(tok) -> None:
    """What bpe_runs and whole_symbol rest on (gpt2np.tokenizer.runs): a token a merge makes
    only pairs at a higher rank, so merges apply in rank order."""
    table = tok._table
    made = {}
    for rank, token in enumerate(table.merged):
        made.setdefault(token, rank)
    first, second = table.arrays.first.tolist(), table.arrays.second.tolist()
    late = [
        r
        for r, (a, b) in enumerate(zip(first, second))
        if max(made.get(a, -1), made.get(b, -1)) >= r
    ]
    assert not late, late[:5]


def test_a_character_of_several_bytes_is_one_symbol_only_where_that_is_certain(tok) -> None:
    """U+00A0 (C2 A0) always becomes token 1849 first after "\\n" or itself, so a stretch
    of them is held as runs of that token; after a space it is not (" \\xc2" ranks before
    "\\xc2\\xa0"), nor is U+3000 (no one token)."""
    nbsp, whole = "\xa0", tok._whole_symbol
    assert tok.encode(nbsp) == [1849]
    assert whole(nbsp, frozenset("\n\xa0"), frozenset({("\n", nbsp), (nbsp, nbsp)})) == 1849
    assert whole(nbsp, frozenset(" \xa0"), frozenset({(" ", nbsp)})) is None
    assert whole(nbsp, frozenset(" \xa0"), frozenset({(nbsp, " ")})) == 1849
    assert whole("\u3000", frozenset("\u3000"), frozenset({("\u3000", "\u3000")})) is None


def test_encode_stream_refusal_names_what_the_run_held(tok: Tokenizer, monkeypatch) -> None:
    monkeypatch.setattr(tokenizer_module, "READ_CHARS", 16)
    monkeypatch.setattr(runs_module, "MAX_RUNS", 100)
    with pytest.raises(ValueError) as e:
        list(tok.encode_stream(["x", "\r\n" * 20, " \xa0" * 200, "y"]))
    assert str(e.value) == (
        "the text holds a run of 120+ whitespace characters in which over 16 in a row (U+0020 "
        "SPACE, U+00A0 NO-BREAK SPACE) have no place where a token boundary is certain; "
        "encode_stream would hold them as over 100 runs of bytes, so it refuses them (encode() "
        "takes the text whole)"
    )


@pytest.mark.parametrize(
    "unit",
    [
        "\n ",
        "\r\n",
        "\t\n  ",
        "\u3000",
        "\u3000 \n\xa0",
        "\u2028\x85\u2029",
        " \xa0\n",
        "\xa0",
        "\n\n\xa0\xa0\xa0",
    ],
)
def test_encode_stream_holds_a_bounded_window_of_mixed_whitespace(tok: Tokenizer, unit) -> None:
    """1 MiB of whitespace whose character changes at every step (a run list grew with every
    change: "\n " * 2**19 held a million runs), or that is not ASCII (held whole): the peak is
    a fraction of it, and the ids are encode's."""
    import tracemalloc

    block = (unit * (1 << 16))[: 1 << 16]
    n_blocks = 16
    expected = tok.encode(block * n_blocks + " end")

    def chunks():
        for _ in range(n_blocks):
            yield block
        yield " end"

    tok.encode(" end")  # caches and tables made before
    assert tok._space_cuts.unsafe
    done = 0
    tracemalloc.start()
    try:
        for ids in tok.encode_stream(chunks()):
            assert ids == expected[done : done + len(ids)]
            done += len(ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert done == len(expected)
    assert peak < 4 << 20, peak


def test_encode_stream_reads_files_in_blocks(tok: Tokenizer, monkeypatch) -> None:
    monkeypatch.setattr(tokenizer_module, "READ_CHARS", 50)
    text = "".join(case for case in ["Hello world. " * 40, "東京" * 100, " end\n"])
    reads = []
    file = io.StringIO(text)
    real_read = file.read
    file.read = lambda n=-1: reads.append(n) or real_read(n)  # type: ignore[method-assign]
    batches = list(tok.encode_stream(file))
    assert flat(batches) == tok.encode(text) and len(batches) > 5
    assert set(reads) == {50}  # by blocks, not by lines or all at once


def test_encode_stream_refuses_disallowed_special_tokens(tok: Tokenizer, monkeypatch) -> None:
    monkeypatch.setattr(tokenizer_module, "READ_CHARS", 8)
    chunks = ["first words here, ", "then <|endof", "text|> and more"]
    out = tok.encode_stream(chunks)
    first = next(out)  # the text before it is encoded and handed out first
    assert tok.decode(first).startswith("first")
    with pytest.raises(ValueError, match=r"<\|endoftext\|>"):
        list(out)
    # A disallowed string holding a space can straddle a cut, even after tiny parts: found.
    with pytest.raises(ValueError, match="'a b c d e'"):
        list(tok.encode_stream(["a ", "b ", "c ", "d ", "e"], disallowed_special={"a b c d e"}))
    with pytest.raises(ValueError, match="'bad word'"):
        list(
            tok.encode_stream(
                ["x " * 20 + "bad", " word" + " y" * 20], disallowed_special={"bad word"}
            )
        )


def test_encode_stream_bad_arguments(tok: Tokenizer) -> None:
    with pytest.raises(TypeError, match="iterable of str or a text file, not str"):
        tok.encode_stream("Hello world")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="each chunk must be a str, not bytes"):
        list(tok.encode_stream([b"Hello"]))  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not int"):
        tok.encode_stream(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not special tokens"):
        tok.encode_stream(["x"], allowed_special={"<|bogus|>"})  # checked at the call
    assert list(tok.encode_stream([])) == [] and list(tok.encode_stream(["", ""])) == []


def test_encode_stream_without_whitespace_holds_text_until_the_end(tok: Tokenizer, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "READ_CHARS", 10)
    chunks = ["東京" * 7] * 30  # one piece of 420 characters: nowhere to cut
    assert list(tok.encode_stream(chunks)) == [tok.encode("".join(chunks))]


# -- live tiktoken ---------------------------------------------------------------------------


def offline_tiktoken():
    """tiktoken's gpt2 Encoding built from the bundled files (see the fixture script)."""
    path = ROOT / "scripts" / "make_tokenizer_fixture.py"
    spec = importlib.util.spec_from_file_location("make_tokenizer_fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.offline_tiktoken()


@pytest.fixture(scope="module")
def tt():
    pytest.importorskip("tiktoken")
    return offline_tiktoken()


@pytest.mark.oracle
def test_fixture_is_what_tiktoken_says(tt, cases: list[dict]) -> None:
    for case in cases:
        allowed = case["allowed_special"]
        allowed = allowed if allowed == "all" else set(allowed)  # tiktoken insists on a set
        ids = tt.encode(case["text"], allowed_special=allowed, disallowed_special=())
        assert ids == case["ids"], case["text"][:60]


@pytest.mark.oracle
def test_a_cold_text_in_windows_equals_tiktoken(tt) -> None:
    """A fresh tokenizer's first text of many new pieces (merged in windows by bpe_many, with
    the module's own part and window sizes)."""
    text = new_words(60_000, seed=1)
    assert Tokenizer().encode_ordinary(text) == tt.encode_ordinary(text)


@pytest.mark.oracle
@SETTINGS
@given(st.one_of(TEXT, ANY_TEXT))
def test_ids_equal_tiktoken(tok: Tokenizer, tt, text: str) -> None:
    assert tok.encode_ordinary(text) == tt.encode_ordinary(text)


@pytest.mark.oracle
@SETTINGS
@given(st.lists(st.one_of(TEXT, st.just("<|endoftext|>")), max_size=6))
def test_ids_with_special_tokens_equal_tiktoken(tok: Tokenizer, tt, parts: list[str]) -> None:
    text = "".join(parts)
    assert tok.encode(text, allowed_special="all") == tt.encode(text, allowed_special="all")
    assert tok.encode(text, disallowed_special=()) == tt.encode(text, disallowed_special=())


@pytest.mark.oracle
@SETTINGS
@given(
    st.lists(st.one_of(TEXT, WHITESPACE_RUN), max_size=6),
    st.lists(st.integers(0, 10**6), max_size=12),
    st.integers(1, 40),
)
def test_encode_stream_of_whitespace_runs_equals_tiktoken(
    tok: Tokenizer, tt, parts: list[str], cuts: list[int], read_chars: int
) -> None:
    text = "".join(parts)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "READ_CHARS", read_chars)
        streamed = flat(list(tok.encode_stream(chunked(text, cuts))))
    assert streamed == tt.encode_ordinary(text)


@pytest.mark.oracle
@SETTINGS
@given(
    st.lists(st.one_of(TEXT, MIXED_WHITESPACE), max_size=6),
    st.lists(st.integers(0, 10**6), max_size=12),
    st.integers(1, 40),
)
def test_encode_stream_of_mixed_whitespace_equals_tiktoken(
    tok: Tokenizer, tt, parts: list[str], cuts: list[int], read_chars: int
) -> None:
    text = "".join(parts)
    with pytest.MonkeyPatch().context() as m:
        m.setattr(tokenizer_module, "READ_CHARS", read_chars)
        m.setattr(runs_module, "PART_CHARS", 3)
        streamed = flat(list(tok.encode_stream(chunked(text, cuts))))
    assert streamed == tt.encode_ordinary(text)


@pytest.mark.oracle
@SETTINGS
@given(st.lists(MIXED_WHITESPACE, min_size=1, max_size=4))
def test_tiktoken_splits_whitespace_exactly_at_every_safe_place(tok: Tokenizer, tt, parts) -> None:
    """The safe places, checked with tiktoken's BPE rather than ours: whitespace only is one
    piece, so encode_ordinary of the whole is the two parts' ids."""
    text = "".join(parts)
    unsafe = tok._space_cuts.unsafe
    whole = tt.encode_ordinary(text)
    for i in range(1, len(text)):
        if text[i] not in unsafe[text[i - 1]]:
            assert tt.encode_ordinary(text[:i]) + tt.encode_ordinary(text[i:]) == whole


@pytest.mark.oracle
@SETTINGS
@given(RANDOM_IDS)
def test_decode_equals_tiktoken(tok: Tokenizer, tt, ids: list[int]) -> None:
    assert tok.decode_bytes(ids) == tt.decode_bytes(ids)
    assert tok.decode(ids) == tt.decode(ids)


@pytest.mark.oracle
def test_reference_manual_equals_tiktoken(tok: Tokenizer, tt) -> None:
    import pydoc_data.topics

    text = "".join(pydoc_data.topics.topics.values())  # ~0.46 MB of English prose and code
    assert tok.encode_ordinary(text) == tt.encode_ordinary(text)


# -- live tiktoken: the batch and per-token methods ------------------------------------------


@pytest.mark.oracle
@SETTINGS
@given(st.lists(st.one_of(TEXT, st.just("<|endoftext|>")), max_size=4))
def test_encode_batch_equals_tiktoken(tok: Tokenizer, tt, texts: list[str]) -> None:
    assert tok.encode_ordinary_batch(texts) == tt.encode_ordinary_batch(texts)
    for kw in (dict(allowed_special="all"), dict(disallowed_special=())):
        assert tok.encode_batch(texts, **kw) == tt.encode_batch(texts, **kw)
    if any("<|endoftext|>" in t for t in texts):  # both refuse it by default
        with pytest.raises(ValueError):
            tt.encode_batch(texts)
        with pytest.raises(ValueError):
            tok.encode_batch(texts)


@pytest.mark.oracle
@SETTINGS
@given(st.lists(RANDOM_IDS, max_size=4), st.sampled_from(["replace", "ignore", "strict"]))
def test_decode_batch_equals_tiktoken(tok: Tokenizer, tt, batch, errors: str) -> None:
    assert tok.decode_bytes_batch(batch) == tt.decode_bytes_batch(batch)
    try:
        expected = tt.decode_batch(batch, errors=errors)
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            tok.decode_batch(batch, errors=errors)
    else:
        assert tok.decode_batch(batch, errors=errors) == expected


@pytest.mark.oracle
@SETTINGS
@given(RANDOM_IDS)
def test_per_token_bytes_equal_tiktoken(tok: Tokenizer, tt, ids: list[int]) -> None:
    assert tok.decode_tokens_bytes(ids) == tt.decode_tokens_bytes(ids)
    assert [tok.decode_single_token_bytes(i) for i in ids] == [
        tt.decode_single_token_bytes(i) for i in ids
    ]


@pytest.mark.oracle
@SETTINGS
@given(TEXT, st.integers(0, 10), st.integers(0, 10))
def test_decode_with_offsets_equals_tiktoken(tok: Tokenizer, tt, text: str, a: int, b: int):
    """On whole texts, and on slices of their ids that may start or end mid-character."""
    ids = tt.encode_ordinary(text)
    for part in (ids, ids[a : len(ids) - b]):
        try:
            expected = tt.decode_with_offsets(part)
        except UnicodeDecodeError:
            with pytest.raises(UnicodeDecodeError):
                tok.decode_with_offsets(part)
        else:
            assert tok.decode_with_offsets(part) == expected


@pytest.mark.oracle
def test_unknown_ids_raise_key_errors_like_tiktoken(tok: Tokenizer, tt) -> None:
    for call in ("decode_single_token_bytes", "decode_tokens_bytes", "decode", "decode_bytes"):
        arg = 50257 if call == "decode_single_token_bytes" else [50257]
        with pytest.raises(KeyError):
            getattr(tt, call)(arg)
        with pytest.raises(KeyError):
            getattr(tok, call)(arg)


@pytest.mark.oracle
def test_token_byte_values_and_names_equal_tiktoken(tok: Tokenizer, tt) -> None:
    assert tok.token_byte_values() == tt.token_byte_values()
    assert tok.n_vocab == tt.n_vocab and tok.eot_token == tt.eot_token
    assert tok.max_token_value == tt.max_token_value
    assert tok.special_tokens_set == tt.special_tokens_set


@pytest.mark.oracle
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(min_codepoint=0x3040, max_codepoint=0x9FFF), min_size=500))
def test_long_pieces_equal_tiktoken(tok: Tokenizer, tt, text: str) -> None:
    assert tok.encode_ordinary(text) == tt.encode_ordinary(text)


def test_the_pinned_files_parse_to_what_the_checked_parse_gives() -> None:
    """Tokenizer() parses the bundled files without the structural checks, because their pinned
    digests name bytes that pass them: the checked parse of the same bytes agrees."""
    from gpt2np.tokenizer.tokenizer import DATA_DIR
    from gpt2np.tokenizer.vocab import parse_pinned, parse_vocabulary

    data = (DATA_DIR / "encoder.json").read_bytes(), (DATA_DIR / "vocab.bpe").read_bytes()
    checked = parse_vocabulary(*data, "encoder.json", "vocab.bpe")
    fast = parse_pinned(*data)
    assert fast[0] == checked[0] and fast[1] == checked[1] and len(fast[1]) == 50000


def test_a_tokenizer_that_only_decodes_builds_no_merge_table() -> None:
    """The merge table and the piece cache are made when a text is first encoded; decoding
    needs neither, so `Tokenizer()` and decode pay for neither."""
    tok = Tokenizer()
    assert tok.decode([31373, 995]) == "hello world"
    assert "_table" not in vars(tok) and "_cache" not in vars(tok)
    assert tok.encode("hello world") == [31373, 995]  # whole tokens: the cache, no merges
    assert "_cache" in vars(tok) and "_table" not in vars(tok)
    assert tok.decode(tok.encode(" zqxjkv")) == " zqxjkv"  # a piece to merge
    assert "_table" in vars(tok)


@pytest.mark.parametrize("kind", ["list", "tuple", "int32 array", "uint16 array"])
def test_decoding_many_ids_gathers_the_same_bytes_as_joining_them(kind) -> None:
    """decode_bytes of many ids (gathered from one buffer) equals the token-by-token join, every
    id included once, special token too; bad ids are refused as for a few."""
    from gpt2np.tokenizer import tokenizer as tokenizer_module

    tok = Tokenizer()
    rng = np.random.default_rng(0)
    ids = np.concatenate([np.arange(tok.n_vocab), rng.integers(0, tok.n_vocab, 5000)])
    ids = rng.permutation(ids)
    if kind == "uint16 array":
        ids = ids.astype(np.uint16)
    given = {"list": ids.tolist(), "tuple": tuple(ids.tolist())}.get(kind, ids.astype(np.int32))
    if kind == "uint16 array":
        given = ids
    assert len(given) >= tokenizer_module.GATHER_IDS
    joined = b"".join(tok.decode_single_token_bytes(int(i)) for i in ids)
    assert tok.decode_bytes(given) == joined
    assert tok.decode(given) == joined.decode("utf-8", errors="replace")
    many = [5] * 100
    for bad, error in (
        ([*many, True], TypeError),
        ([*many, 1.0], TypeError),
        ([*many, -1], ValueError),
        ([*many, tok.n_vocab], ValueError),
        ([*many, 2**70], ValueError),
        (np.array([many, many]), ValueError),
    ):
        with pytest.raises(error):
            tok.decode(bad)
