"""tiktoken's own test suite, for its "gpt2" encoding, run against gpt2np.Tokenizer.

Transcribed from tiktoken 0.14.0's tests/ (test_encoding.py, test_offsets.py, test_pickle.py,
test_simple_public.py, test_misc.py; the test names are kept). Where a test is written for
another encoding (cl100k_base, o200k_base), the gpt2 version checks the same property, with
gpt2's ids from tiktoken. The private names that users build and extend encodings with
(``_pat_str``, ``_mergeable_ranks``, ``_special_tokens``, ``_encode_bytes``) are tested too;
test_pickle's custom encoding, built by tiktoken from them, needs tiktoken (the oracle tier).
Left out: tiktoken's registry of other encodings.

The default tier runs each against gpt2np alone (the published ids and the properties the tests
state); the ``oracle`` tier builds tiktoken's genuine "gpt2" encoding offline (its own loader,
reading the bundled files through its cache, checked against its own pins) and compares every
public method's answers with gpt2np's.
"""

from __future__ import annotations

import hashlib
import pathlib
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpt2np import Tokenizer
from gpt2np.tokenizer import InvalidTokenError
from gpt2np.tokenizer.unstable import last_character

DATA = pathlib.Path(__file__).resolve().parent.parent.parent / "src" / "gpt2np" / "data"
MAX_EXAMPLES = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def enc() -> Tokenizer:
    return Tokenizer()


# -- test_encoding.py -------------------------------------------------------------------------


def test_simple(enc: Tokenizer) -> None:
    assert enc.encode("hello world") == [31373, 995]
    assert enc.decode([31373, 995]) == "hello world"
    assert enc.encode("hello <|endoftext|>", allowed_special="all") == [31373, 220, 50256]
    for token in range(min(10_000, enc.max_token_value - 1)):
        assert enc.encode_single_token(enc.decode_single_token_bytes(token)) == token


def test_simple_repeated(enc: Tokenizer) -> None:
    expected = {
        "0": [15], "00": [405], "000": [830], "0000": [2388], "00000": [20483],
        "000000": [10535], "0000000": [24598], "00000000": [8269], "000000000": [10535, 830],
        "0000000000": [8269, 405], "00000000000": [8269, 830], "000000000000": [8269, 2388],
        "0000000000000": [8269, 20483], "00000000000000": [8269, 10535],
        "000000000000000": [8269, 24598], "0000000000000000": [25645],
        "00000000000000000": [8269, 10535, 830],
    }  # fmt: skip
    for text, ids in expected.items():
        assert enc.encode(text) == ids, text


def test_large_repeated(enc: Tokenizer) -> None:
    """(tiktoken runs it on o200k_base with a million characters: see the oracle tier's
    test_large_repeated_equals_tiktoken) A long piece is encoded, not refused."""
    tokens = enc.encode("x" * 100_000)
    assert tokens and enc.decode(tokens) == "x" * 100_000


def test_simple_regex(enc: Tokenizer) -> None:
    """(cl100k_base in tiktoken) Contractions and whitespace runs, with gpt2's ids."""
    assert enc.encode("rer") == [11751]
    assert enc.encode("'rer") == [821, 81]
    assert enc.encode("today\n ") == [40838, 198, 220]
    assert enc.encode("today\n \n") == [40838, 198, 220, 198]
    assert enc.encode("today\n  \n") == [40838, 198, 220, 220, 198]


def test_basic_encode(enc: Tokenizer) -> None:
    assert enc.encode("hello world") == [31373, 995]  # r50k_base, gpt2's ranks
    assert enc.encode(" \x850") == [220, 126, 227, 15]


def test_encode_empty(enc: Tokenizer) -> None:
    assert enc.encode("") == []


def test_encode_surrogate_pairs(enc: Tokenizer) -> None:
    assert enc.encode("👍") == [41840, 235]
    # surrogate pair gets converted to codepoint
    assert enc.encode("\ud83d\udc4d") == [41840, 235]
    # lone surrogate just gets replaced
    assert enc.encode("\ud83d") == enc.encode("�")


def test_catastrophically_repetitive(enc: Tokenizer) -> None:
    for c in ["^", "0", "a", "'s", " ", "\n"]:
        big_value = c * 10_000
        assert big_value == enc.decode(enc.encode(big_value))
        big_value = " " + big_value
        assert big_value == enc.decode(enc.encode(big_value))
        big_value = big_value + "\n"
        assert big_value == enc.decode(enc.encode(big_value))


def test_basic_roundtrip(enc: Tokenizer) -> None:
    for value in ("hello", "hello ", "hello  ", " hello", " hello ", " hello  ", "hello world",
                  "请考试我的软件！12345"):  # fmt: skip
        assert value == enc.decode(enc.encode(value))
        assert value == enc.decode(enc.encode_ordinary(value))


def test_encode_bytes(enc: Tokenizer) -> None:
    """(cl100k_base in tiktoken) A text cut inside a character, with gpt2's ids from tiktoken:
    the last piece and the stray byte are one BPE piece."""
    assert enc._encode_bytes(b" \xec\x8b\xa4\xed") == [23821, 233, 97, 169]
    for i in range(10):
        bytestring = b"\x80" * i
        assert enc.decode_bytes(enc._encode_bytes(bytestring)) == bytestring


@MAX_EXAMPLES
@given(bytestring=st.binary())
def test_hyp_encode_bytes(enc: Tokenizer, bytestring: bytes) -> None:
    assert enc.decode_bytes(enc._encode_bytes(bytestring)) == bytestring


def test_encode_bytes_of_text_is_encode_ordinary(enc: Tokenizer) -> None:
    for text in ("hello world", "请考试我的软件！12345", "<|endoftext|> a", "  \n\t x"):
        assert enc._encode_bytes(text.encode()) == enc.encode_ordinary(text)
    assert enc._encode_bytes(bytearray(b"hello")) == [31373]
    with pytest.raises(TypeError, match="must be bytes"):
        enc._encode_bytes("hello")  # type: ignore[arg-type]


@MAX_EXAMPLES
@given(text=st.text())
def test_hyp_roundtrip(enc: Tokenizer, text: str) -> None:
    assert text == enc.decode(enc.encode(text, disallowed_special=()))


def test_single_token_roundtrip(enc: Tokenizer) -> None:
    for token in range(enc.n_vocab):
        try:
            token_bytes = enc.decode_single_token_bytes(token)
        except KeyError:
            continue
        assert enc.encode_single_token(token_bytes) == token


def test_special_token(enc: Tokenizer) -> None:
    """(cl100k_base's three special tokens in tiktoken; gpt2 has <|endoftext|> only)"""
    eot = enc.encode_single_token("<|endoftext|>")
    assert eot == enc.eot_token == 50256
    text = "<|endoftext|> hello <|endoftext|>"
    assert eot not in enc.encode(text, disallowed_special=())
    with pytest.raises(ValueError):
        enc.encode(text)
    with pytest.raises(ValueError):
        enc.encode(text, disallowed_special="all")
    with pytest.raises(ValueError):
        enc.encode(text, disallowed_special={"<|endoftext|>"})
    assert eot in enc.encode(text, allowed_special="all", disallowed_special=())
    assert eot in enc.encode(text, allowed_special="all", disallowed_special="all")
    assert eot in enc.encode(text, allowed_special={"<|endoftext|>"}, disallowed_special=())


@MAX_EXAMPLES
@given(text=st.text())
def test_hyp_special_ordinary(enc: Tokenizer, text: str) -> None:
    assert enc.encode_ordinary(text) == enc.encode(text, disallowed_special=())


def test_batch_encode(enc: Tokenizer) -> None:
    text1, text2 = "hello world", "goodbye world"
    assert enc.encode_batch([text1]) == [enc.encode(text1)]
    assert enc.encode_batch([text1, text2]) == [enc.encode(text1), enc.encode(text2)]
    assert enc.encode_ordinary_batch([text1]) == [enc.encode_ordinary(text1)]
    assert enc.encode_ordinary_batch([text1, text2]) == [
        enc.encode_ordinary(text1),
        enc.encode_ordinary(text2),
    ]


@MAX_EXAMPLES
@given(batch=st.lists(st.text()))
def test_hyp_batch_roundtrip(enc: Tokenizer, batch: list[str]) -> None:
    encoded = enc.encode_batch(batch, allowed_special="all")
    assert encoded == [enc.encode(t, allowed_special="all") for t in batch]
    assert enc.decode_batch(encoded) == batch


# -- test_offsets.py --------------------------------------------------------------------------


def _common_prefix_len(a: str, b: str) -> int:
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def _token_offsets_reference(enc: Tokenizer, tokens: list[int]) -> list[int]:
    text = enc.decode(tokens, errors="strict")
    return [
        _common_prefix_len(text, enc.decode(tokens[:i], errors="ignore"))
        for i in range(len(tokens))
    ]


@MAX_EXAMPLES
@given(data=st.data())
def test_hyp_offsets(enc: Tokenizer, data: st.DataObject) -> None:
    tokens = data.draw(st.lists(st.integers(0, enc.n_vocab - 1), min_size=1, max_size=20))
    # tiktoken's hack to make sure that the tokens are a valid UTF-8 string
    tokens = enc.encode(enc.decode(tokens, errors="ignore"), allowed_special="all")
    assert enc.decode_with_offsets(tokens)[1] == _token_offsets_reference(enc, tokens)


def test_basic_offsets(enc: Tokenizer) -> None:
    """tiktoken's prompts (cl100k_base there), with gpt2's offsets from tiktoken."""
    cases = {
        "hello world": [0, 5],
        "hello world<|endoftext|> green cow": [0, 5, 11, 24, 30],
        "我非常渴望与人工智能一起工作": [0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 7, 7, 8, 8,
                                         8, 9, 9, 10, 11, 11, 11, 12, 12, 13],
        "நடிகர் சூர்யா": [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 7, 7, 7, 8, 8,
                          8, 9, 9, 9, 10, 10, 10, 11, 11, 11, 12, 12, 12],
        " Ġ除": [0, 1, 2, 2, 2],
    }  # fmt: skip
    for prompt, offsets in cases.items():
        tokens = enc.encode(prompt, allowed_special="all")
        assert enc.decode_with_offsets(tokens) == (prompt, offsets)
        assert offsets == _token_offsets_reference(enc, tokens)


# -- test_pickle.py, test_simple_public.py, test_misc.py --------------------------------------


def test_pickle(enc: Tokenizer) -> None:
    enc_new = pickle.loads(pickle.dumps(enc))
    assert enc.encode("hello world") == enc_new.encode("hello world")
    assert enc_new.name == "gpt2"


def test_private_names_describe_the_encoding(enc: Tokenizer) -> None:
    """test_pickle builds an encoding from ``_pat_str`` and ``_mergeable_ranks``: the pattern
    cuts text into the pieces gpt2np encodes, and the ranks are the ordinary tokens' ids."""
    import regex

    from gpt2np.tokenizer.bpe import pretokenize

    text = "Hello  world's 12 ünïcode!\n\n  end "
    assert regex.findall(enc._pat_str, text) == pretokenize(text)
    ranks = enc._mergeable_ranks
    assert len(ranks) == enc.n_vocab - 1 and sorted(ranks.values()) == list(range(50256))
    assert all(enc.decode_single_token_bytes(i) == data for data, i in ranks.items())
    assert enc._special_tokens == {"<|endoftext|>": 50256}


def test_encoding_for_model(enc: Tokenizer) -> None:
    assert enc.name == "gpt2"


# -- the rest of tiktoken's public Encoding, from its docstrings --------------------------------


def test_encode_to_numpy(enc: Tokenizer) -> None:
    ids = enc.encode_to_numpy("hello world")
    assert ids.dtype == np.uint32 and ids.tolist() == [31373, 995]
    assert enc.encode_to_numpy("a<|endoftext|>", allowed_special="all").tolist() == [64, 50256]
    assert enc.encode_to_numpy("").shape == (0,)
    with pytest.raises(ValueError, match="disallowed"):
        enc.encode_to_numpy("<|endoftext|>")


def test_encode_single_token(enc: Tokenizer) -> None:
    assert enc.encode_single_token("hello") == 31373
    assert enc.encode_single_token(b" world") == 995
    assert enc.encode_single_token(bytearray(b"hello")) == 31373
    assert enc.decode_single_token_bytes(enc.encode_single_token(b"\xe4")) == b"\xe4"  # a byte
    for bad in ("hello world", b"", "notatoken!!"):
        with pytest.raises(InvalidTokenError, match="not one token") as caught:
            enc.encode_single_token(bad)
        assert isinstance(caught.value, KeyError) and isinstance(caught.value, ValueError)
    with pytest.raises(TypeError, match="str or bytes"):
        enc.encode_single_token(31373)  # type: ignore[arg-type]


def test_is_special_token(enc: Tokenizer) -> None:
    assert enc.is_special_token(50256) and enc.is_special_token(np.int64(50256))
    assert not any(enc.is_special_token(i) for i in (0, 31373, 50255, 50257, -1))
    with pytest.raises(TypeError):
        enc.is_special_token("50256")  # type: ignore[arg-type]


def test_encode_with_unstable_docstring_example(enc: Tokenizer) -> None:
    """tiktoken's docstring: ``enc.encode_with_unstable("hello fanta")`` is
    ``([31373], [(277, 4910), (5113, 265), ..., (8842,)])``, and its two invariants."""
    text = "hello fanta"
    stable, completions = enc.encode_with_unstable(text)
    assert stable == [31373]
    for seq in ([277, 4910], [5113, 265], [8842]):
        assert seq in completions
    assert text.encode().startswith(enc.decode_bytes(stable))
    assert all(enc.decode_bytes(stable + seq).startswith(text.encode()) for seq in completions)
    assert completions == sorted(completions) and len(completions) == 1432  # tiktoken's count


def test_encode_with_unstable_special_tokens(enc: Tokenizer) -> None:
    assert enc.encode_with_unstable("a <|endoftext|>", allowed_special="all") == (
        [64, 220, 50256],
        [],
    )
    assert enc.encode_with_unstable("") == ([], [])
    with pytest.raises(ValueError, match="disallowed"):
        enc.encode_with_unstable("<|endoftext|>")


def test_lone_surrogates_in_unstable(enc: Tokenizer) -> None:
    """A lone surrogate is read as U+FFFD, as encode reads it (tiktoken's encode_with_unstable
    raises UnicodeEncodeError there, unlike its encode)."""
    assert enc.encode_with_unstable("a \ud800") == enc.encode_with_unstable("a \ufffd")
    assert enc.encode_with_unstable("\ud83d\udc4d") == enc.encode_with_unstable("👍")


@pytest.mark.parametrize(
    "data, expected",
    [(b"a", ("a", 1)), (b"ab\xc3\xa9", ("é", 2)), (b"a\xe3\x80\x80", ("\u3000", 3)),
     (b"a\xf0\x9f\x91\x8d", ("👍", 4)), (b"a\xc3", (None, 1)), (b"a\x80\x80\x80\x80", (None, 1)),
     (b"\xc3\xa9\x80", (None, 1))],
)  # fmt: skip
def test_last_character(data: bytes, expected: tuple) -> None:
    assert last_character(data) == expected


# -- live tiktoken: its "gpt2" encoding, built offline --------------------------------------------

URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"


@pytest.fixture(scope="module")
def tt(tmp_path_factory: pytest.TempPathFactory):
    """tiktoken.get_encoding("gpt2"), its files served from tiktoken's cache directory: the
    bundled copies, under the names tiktoken gives the URLs it would download (it checks their
    SHA-256 against its own pins)."""
    tiktoken = pytest.importorskip("tiktoken")
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for name in ("encoder.json", "vocab.bpe"):
        key = hashlib.sha1((URL + name).encode()).hexdigest()
        (cache / key).write_bytes((DATA / name).read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        return tiktoken.get_encoding("gpt2")


# No lone surrogates: tiktoken's encode_with_unstable raises UnicodeEncodeError on them, where
# gpt2np reads them as U+FFFD, as encode does in both (test_lone_surrogates_in_unstable). No
# characters unassigned in this Python's Unicode database either: the regex module knows a newer
# Unicode than tiktoken's Rust regex, so a character assigned since (U+323B0, a letter to one and
# unassigned to the other) is cut into other pieces, which moves the stable/unstable boundary
# (test_unicode_versions_differ_only_on_new_characters).
TEXT = st.text(
    alphabet=st.sampled_from(list("ab \n\t'sé日👍0!.\u3000\xa0\x85"))
    | st.characters(exclude_categories=("Cs", "Cn"))
)


@pytest.mark.oracle
def test_public_api_is_tiktokens(enc: Tokenizer, tt) -> None:
    """Every public name of tiktoken's Encoding exists on Tokenizer; the values agree."""
    missing = [n for n in dir(tt) if not n.startswith("_") and not hasattr(enc, n)]
    assert not missing
    for name in ("name", "n_vocab", "max_token_value", "eot_token", "special_tokens_set"):
        assert getattr(enc, name) == getattr(tt, name), name


@pytest.mark.oracle
def test_published_cases_equal_tiktoken(enc: Tokenizer, tt) -> None:
    """The ids and offsets the default-tier transcription states are tiktoken's."""
    for text in ("today\n ", "today\n \n", "today\n  \n", " \x850", "rer", "'rer", "👍"):
        assert enc.encode(text) == tt.encode(text)
    for prompt in ("我非常渴望与人工智能一起工作", "நடிகர் சூர்யா", " Ġ除"):
        assert enc.decode_with_offsets(enc.encode(prompt)) == tt.decode_with_offsets(
            tt.encode(prompt)
        )
    assert enc.encode_single_token("<|endoftext|>") == tt.encode_single_token("<|endoftext|>")
    for token in range(enc.n_vocab):  # every token, both ways
        data = tt.decode_single_token_bytes(token)
        assert enc.encode_single_token(data) == tt.encode_single_token(data) == token
        assert enc.is_special_token(token) == tt.is_special_token(token)


@pytest.mark.oracle
@MAX_EXAMPLES
@given(text=TEXT)
def test_encode_to_numpy_equals_tiktoken(enc: Tokenizer, tt, text: str) -> None:
    for kw in ({"allowed_special": "all"}, {"disallowed_special": ()}):
        ours, theirs = enc.encode_to_numpy(text, **kw), tt.encode_to_numpy(text, **kw)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


@pytest.mark.oracle
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.one_of(TEXT, st.just("<|endoftext|>")), max_size=4).map("".join))
def test_encode_with_unstable_equals_tiktoken(enc: Tokenizer, tt, text: str) -> None:
    for kw in ({"allowed_special": "all"}, {"disallowed_special": ()}):
        stable, completions = tt.encode_with_unstable(text, **kw)
        ours = enc.encode_with_unstable(text, **kw)
        assert ours[0] == stable
        assert set(map(tuple, ours[1])) == set(map(tuple, completions))
        assert len(ours[1]) == len(completions)  # tiktoken's come from a set: no repeats
    if "<|endoftext|>" in text:
        with pytest.raises(ValueError):
            tt.encode_with_unstable(text)
        with pytest.raises(ValueError):
            enc.encode_with_unstable(text)


@pytest.mark.oracle
def test_unicode_versions_differ_only_on_new_characters(enc: Tokenizer, tt) -> None:
    """U+323B0 (CJK Extension J, Unicode 17) is a letter to the regex module and unassigned to
    tiktoken's regex: the pieces differ (here the ids do not), so encode_with_unstable's
    boundary does. Recorded so that a change on either side shows up here."""
    text = ":\U000323b0"
    assert enc.encode(text) == tt.encode(text)
    assert tt.encode_with_unstable(text)[0] == [] and enc.encode_with_unstable(text)[0] == [25]


@pytest.mark.oracle
def test_large_repeated_equals_tiktoken(enc: Tokenizer, tt) -> None:
    """tiktoken's test_large_repeated, a million-character piece, against tiktoken's ids."""
    assert enc.encode("x" * 1_000_000) == tt.encode("x" * 1_000_000)


@pytest.mark.oracle
def test_unknown_single_tokens_raise_key_errors_like_tiktoken(enc: Tokenizer, tt) -> None:
    for bad in (b"notatoken!!", b"", "hello world"):
        with pytest.raises(KeyError):
            tt.encode_single_token(bad)
        with pytest.raises(KeyError):
            enc.encode_single_token(bad)


@pytest.mark.oracle
def test_pickle_of_an_encoding_built_from_the_private_names(enc: Tokenizer) -> None:
    """tiktoken's test_pickle, its custom encoding built from gpt2np's names."""
    tiktoken = pytest.importorskip("tiktoken")
    enc_old = tiktoken.Encoding(
        name="custom_enc",
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        special_tokens={"<|pickle|>": 100_000},
    )
    enc_new = pickle.loads(pickle.dumps(enc_old))
    assert enc_old.encode("hello world") == enc_new.encode("hello world") == [31373, 995]
    assert (
        enc_old.encode("<|pickle|>", allowed_special="all")
        == enc_new.encode("<|pickle|>", allowed_special="all")
        == [100_000]
    )


@pytest.fixture(scope="module")
def built(enc: Tokenizer):
    """A tiktoken encoding built from gpt2np's private names, as users extend encodings."""
    tiktoken = pytest.importorskip("tiktoken")
    return tiktoken.Encoding(
        name="built",
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        special_tokens=enc._special_tokens,
    )


@pytest.mark.oracle
@MAX_EXAMPLES
@given(text=st.lists(st.one_of(TEXT, st.just("<|endoftext|>")), max_size=4).map("".join))
def test_an_encoding_built_from_the_private_names_gives_gpt2nps_ids(
    enc: Tokenizer, built, text: str
) -> None:
    assert built.encode(text, allowed_special="all") == enc.encode(text, allowed_special="all")


# Bytes that are mostly text, cut and spliced anywhere: UTF-8 broken in every way.
BYTES = st.lists(st.one_of(st.binary(max_size=4), TEXT.map(str.encode)), max_size=6).map(b"".join)


@pytest.mark.oracle
@MAX_EXAMPLES
@given(bytestring=st.one_of(st.binary(), BYTES))
def test_encode_bytes_equals_tiktoken(enc: Tokenizer, tt, bytestring: bytes) -> None:
    assert enc._encode_bytes(bytestring) == tt._encode_bytes(bytestring)
