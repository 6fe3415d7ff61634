"""Tokenizer goldens: each text's pre-tokenizer pieces, each piece's bytes as symbols, the BPE
merges it went through rank by rank, and the ids, as JSON a port in any language can read.

A port's tokenizer goes wrong in one of four places, and the golden file shows each (see
docs/golden-files.md, "Tokenizer goldens"):

1. the pre-tokenizer's pattern cuts the text into other **pieces** (``\\s+(?!\\S)``, the
   contractions, ``\\p{L}``);
2. a byte maps to another character of GPT-2's byte-to-unicode table (the piece's first
   **symbols**);
3. the merges run in another order than the ranks of ``vocab.bpe`` (each piece's **merges**:
   at every step the lowest-ranked adjacent pair is joined, all its occurrences left to right);
4. a token has another id (the **ids**).

:func:`dump_tokenizer` writes the golden file for a built-in corpus (:data:`CORPUS`: what breaks
ports) or the user's texts; :func:`trace_text` is one text's record; the comparison is in
:mod:`gpt2np.golden.tokens_diff`. The merges are recomputed here by the clear algorithm of
:func:`gpt2np.tokenizer.bpe.bpe` (with its steps recorded), and the ids are checked against the
tokenizer's own ``encode``.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import struct
from collections.abc import Sequence
from typing import Any, Optional, Union

import regex

from .._version import __version__
from ..errors import CheckpointError
from ..support.atomic import write_bytes
from ..tokenizer import Tokenizer
from ..tokenizer.bpe import bytes_to_unicode, merge_pair, pretokenize
from ..tokenizer.hf_json import read_tokenizer_json
from ..tokenizer.vocab import parse_vocabulary, read_vocabulary
from .kinds import TOKENIZER_BINARY_MAGIC

__all__ = [
    "BINARY_MAGIC",
    "BINARY_VERSION",
    "CORPUS",
    "OPENAI_PATTERN",
    "TOKENIZER_FORMAT",
    "Vocabulary",
    "dump_tokenizer",
    "read_binary",
    "to_binary",
    "trace_decode",
    "trace_text",
]

TOKENIZER_FORMAT = "gpt2np-tokenizer-golden"
#: OpenAI's pre-tokenizer pattern as src/encoder.py writes it (gpt2np's PATTERN is the same with
#: its shared prefixes factored out), for the ``regex`` module or any engine with \p{L}, \p{N}.
OPENAI_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
Special = Union[str, Sequence[str]]

#: The built-in corpus: (name, text, allowed special tokens). Each covers something ports get
#: wrong; the decode cases (invalid UTF-8) are added by :func:`dump_tokenizer`.
CORPUS: list[tuple[str, str, Special]] = [
    ("plain", "Alan Turing theorized that computers would one day become very powerful.", []),
    ("contractions", "I'm sure you're right: they'll say it's what we've done, he'd've known. "
     "I'M DON'T 'S 'll 're shouldn't", []),
    ("runs of spaces", "a  b   c    d \u00a0 e\u3000f", []),
    ("leading and trailing spaces", "   three before, three after   ", []),
    ("newlines", "line one\n\nline two\n\n\n  indented\n\tTabbed\r\nWindows\r\n \n", []),
    ("digits", "1234567890 3.14159 2,000,000 in 2024, v1.2.3 0x1F 007 ½ ² ٣", []),
    ("punctuation and code", 'def f(x):\n    return x**2  # comment\nif a != b: print("hi")'
     " ... !!! ?! -- — “quoted” «guillemets»", []),
    ("emoji", "I ❤️ NumPy 🐍🔥 👍🏽 👨‍👩‍👧 🇺🇸 🏳️‍🌈", []),
    ("CJK", "日本語のテキストと中文和한국어、全角スペース", []),
    ("combining marks", "café naïve résumé e\u0301 a\u0308 n\u0303 Z\u0335\u0321a\u0334lgo "
     "\u0915\u094d\u0937", []),
    ("scripts", "Ελληνικά Русский العربية עברית हिन्दी ไทย", []),
    ("long words", "antidisestablishmentarianism supercalifragilisticexpialidocious "
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", []),
    ("url", "https://example.com/path/to?query=1&x=y#frag user@example.org", []),
    ("special token", "Hello<|endoftext|>World <|endoftext|>", "all"),
    ("special token as text", "Hello<|endoftext|>World", []),
]  # fmt: skip


class Vocabulary:
    """A tokenizer's ``encoder`` (token -> id) and merge ranks ((left, right) -> rank), read from
    the files it was loaded from with the tokenizer package's own readers."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        files = tuple(pathlib.Path(f) for f in tokenizer.files)
        if len(files) == 2:
            self.encoder, merges, _ = read_vocabulary(files[0], files[1])
        else:
            data = read_tokenizer_json(files[0])
            self.encoder, merges = parse_vocabulary(*data, str(files[0]), str(files[0]))
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.symbol = bytes_to_unicode()
        self.files = files
        self.tokenizer = tokenizer

    def digests(self) -> dict[str, str]:
        """SHA-256 of each file the vocabulary came from, by file name."""
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in self.files}


def trace_piece(piece: str, vocab: Vocabulary) -> dict[str, Any]:
    """One pre-tokenized piece: its byte symbols, the merges (rank by rank: each joins every
    occurrence of the lowest-ranked adjacent pair, left to right), the tokens and their ids."""
    symbols = [vocab.symbol[b] for b in piece.encode("utf-8")]
    record: dict[str, Any] = {"text": piece, "symbols": list(symbols), "merges": []}
    while len(symbols) > 1:
        ranked = [vocab.ranks[p] for p in zip(symbols, symbols[1:]) if p in vocab.ranks]
        if not ranked:
            break
        rank = min(ranked)
        left, right = _pair_of(rank, symbols, vocab)
        record["merges"].append([rank, left, right])
        symbols = merge_pair(symbols, (left, right))
    record["tokens"] = symbols
    record["ids"] = [vocab.encoder[s] for s in symbols]
    return record


def _pair_of(rank: int, symbols: list[str], vocab: Vocabulary) -> tuple[str, str]:
    """The adjacent pair of ``symbols`` that has ``rank``."""
    return next(p for p in zip(symbols, symbols[1:]) if vocab.ranks.get(p) == rank)


def trace_text(text: str, vocab: Vocabulary, allowed_special: Special = ()) -> dict[str, Any]:
    """One text's record: its pieces (special tokens as pieces of their own), and its ids, which
    must equal the tokenizer's ``encode``. Lone surrogates are replaced as the tokenizer does."""
    tok = vocab.tokenizer
    text = _without_surrogates(text)
    allowed = sorted(tok.special_tokens_set if allowed_special == "all" else allowed_special)
    pieces: list[dict[str, Any]] = []
    for part, special in _split_special(text, allowed):
        if special:
            pieces.append({"text": part, "special": True, "symbols": [], "merges": [],
                           "tokens": [part], "ids": [tok.special_tokens[part]]})  # fmt: skip
        else:
            pieces += [trace_piece(p, vocab) for p in pretokenize(part)]
    ids = [i for p in pieces for i in p["ids"]]
    expected = tok.encode(text, allowed_special=set(allowed), disallowed_special=())
    if (
        ids != expected
    ):  # the record and the tokenizer disagree: a bug of gpt2np's, never the port's
        raise RuntimeError(f"tokenizer golden: the traced ids of {text[:40]!r} differ from encode")
    return {"text": text, "allowed_special": allowed, "pieces": pieces, "ids": ids}


def trace_decode(ids: list[int], vocab: Vocabulary) -> dict[str, Any]:
    """A decode case: the ids, their bytes (hex) and the text with U+FFFD for invalid UTF-8."""
    data = vocab.tokenizer.decode_bytes(ids)
    return {"decode": list(ids), "bytes": data.hex(), "text": data.decode("utf-8", "replace")}


def _split_special(text: str, allowed: list[str]) -> list[tuple[str, bool]]:
    if not allowed:
        return [(text, False)]
    pattern = regex.compile("|".join(regex.escape(t) for t in sorted(allowed, key=len)[::-1]))
    out, at = [], 0
    for m in pattern.finditer(text):
        out += [(text[at : m.start()], False), (m.group(), True)]
        at = m.end()
    return [p for p in [*out, (text[at:], False)] if p[0]]


def _without_surrogates(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _decode_cases(vocab: Vocabulary) -> list[dict[str, Any]]:
    """Ids whose bytes are not valid UTF-8: a lone 0xFF, a lone continuation byte, an emoji cut
    after its first token, a truncated two-byte character, then valid text."""
    byte = {b: vocab.encoder[vocab.symbol[b]] for b in (0xFF, 0x80, 0xC3)}
    fire = vocab.tokenizer.encode("🔥")
    hello = vocab.tokenizer.encode(" hello")
    cases = [
        ("invalid UTF-8: lone bytes", [byte[0xFF], *hello, byte[0x80]]),
        ("invalid UTF-8: a cut emoji", [*fire[:1], *hello, *fire[:2]]),
        ("invalid UTF-8: a truncated character", [*hello, byte[0xC3]]),
    ]
    return [{"name": name, **trace_decode(ids, vocab)} for name, ids in cases]


def dump_tokenizer(
    path: Union[str, pathlib.Path],
    tokenizer: Optional[Tokenizer] = None,
    texts: Optional[list[str]] = None,
    allowed_special: Special = (),
    format: str = "json",
) -> dict[str, Any]:
    """Write a tokenizer golden file to ``path`` and return it as a dict.

    tokenizer: default GPT-2's bundled one. texts: the texts to record (each with
    ``allowed_special``); default the built-in :data:`CORPUS` and its decode cases. format:
    ``"json"`` (what ``compare`` reads) or ``"bin"`` (:func:`to_binary`, for readers without
    JSON: examples/read_tokenizer_golden.c).
    """
    if format not in ("json", "bin"):
        raise ValueError(f"format must be 'json' or 'bin', got {format!r}")
    vocab = Vocabulary(tokenizer if tokenizer is not None else Tokenizer())
    if texts is None:
        cases = [{"name": n, **trace_text(t, vocab, s)} for n, t, s in CORPUS]
        cases += _decode_cases(vocab)
    else:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of str")
        cases = [{"name": f"text {i}", **trace_text(t, vocab, allowed_special)}
                 for i, t in enumerate(texts)]  # fmt: skip
    golden = {
        "format": TOKENIZER_FORMAT,
        "format_version": 1,
        "gpt2np_version": __version__,
        "n_vocab": vocab.tokenizer.n_vocab,
        "vocabulary_sha256": vocab.digests(),
        "pattern": OPENAI_PATTERN,
        "cases": cases,
    }
    write_bytes(path, to_json(golden) if format == "json" else to_binary(golden))
    return golden


def to_json(golden: dict[str, Any]) -> str:
    """The file's text: the header keys one per line, then one case per line."""
    head = {k: v for k, v in golden.items() if k != "cases"}
    lines = [json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [']
    cases = [json.dumps(c, ensure_ascii=False) for c in golden["cases"]]
    return "\n".join([*lines, ",\n".join(cases), "]}"]) + "\n"


# -- the binary layout, for readers without JSON -------------------------------------------------

#: The first 8 bytes of a binary tokenizer golden, and its layout's version.
BINARY_MAGIC = TOKENIZER_BINARY_MAGIC
BINARY_VERSION = 1
#: The fewest bytes a case takes (kind, name, text, then 3 counts or 2): counts are checked
#: against the bytes left before anything is allocated.
_MIN_CASE = 20


def to_binary(golden: dict[str, Any]) -> bytes:
    """A tokenizer golden (:func:`dump_tokenizer`'s dict) in the binary layout of
    docs/golden-files.md ("Reading the tokenizer golden from C"). Every integer is 4 bytes,
    little-endian; a string is its byte count (u32) then its UTF-8 bytes; a list of ids is its
    count (u32) then the ids (int32)::

        "GPT2NPTK"  u32 version (1)  u32 n_vocab  u32 n_cases  string pattern
        each case:  u32 kind (0 text, 1 decode)  string name  string text
          text:     u32 n_special, n_special strings   u32 n_pieces, each piece:
                    u32 special (0 or 1)  string text  ids      then ids (the whole text's)
          decode:   ids (the ids decoded)  string bytes (their bytes, raw)
    """
    out = bytearray(BINARY_MAGIC)

    def u32(v: int) -> None:
        out.extend(struct.pack("<I", v))

    def string(b: bytes) -> None:
        u32(len(b))
        out.extend(b)

    def ids(v: list[int]) -> None:
        u32(len(v))
        out.extend(struct.pack(f"<{len(v)}i", *v))

    u32(BINARY_VERSION)
    u32(golden["n_vocab"])
    u32(len(golden["cases"]))
    string(golden["pattern"].encode("utf-8"))
    for case in golden["cases"]:
        decode = "decode" in case
        u32(int(decode))
        string(case["name"].encode("utf-8"))
        string(case["text"].encode("utf-8"))
        if decode:
            ids(case["decode"])
            string(bytes.fromhex(case["bytes"]))
            continue
        u32(len(case["allowed_special"]))
        for token in case["allowed_special"]:
            string(token.encode("utf-8"))
        u32(len(case["pieces"]))
        for piece in case["pieces"]:
            u32(int(bool(piece.get("special"))))
            string(piece["text"].encode("utf-8"))
            ids(piece["ids"])
        ids(case["ids"])
    return bytes(out)


def read_binary(path: Union[str, pathlib.Path]) -> dict[str, Any]:
    """Read a binary tokenizer golden (:func:`to_binary`) back: ``format_version``,
    ``n_vocab``, ``pattern`` and ``cases`` (a text case's ``name``, ``text``,
    ``allowed_special``, ``pieces`` as ``{text, special, ids}`` and ``ids``; a decode case's
    ``name``, ``text``, ``decode`` and ``bytes`` as hex). CheckpointError for a file that is
    truncated or damaged, naming the byte; the checks are the C reader's."""
    r = _Binary(pathlib.Path(path).read_bytes(), str(path))
    if r.data[:8] != BINARY_MAGIC:
        raise r.fail("not a gpt2np tokenizer golden (its first 8 bytes are not GPT2NPTK)")
    r.at = 8
    version = r.u32()
    if version != BINARY_VERSION:
        raise r.fail(f"format version {version}; this reader reads {BINARY_VERSION}")
    r.n_vocab = r.u32()
    n_cases = r.u32()
    golden: dict[str, Any] = {"format_version": version, "n_vocab": r.n_vocab,
                              "pattern": r.string(), "cases": []}  # fmt: skip
    r.count(n_cases, _MIN_CASE, "cases")
    for _ in range(n_cases):
        kind = r.u32()
        if kind > 1:
            raise r.fail(f"a case's kind is {kind}, neither 0 (text) nor 1 (decode)")
        case: dict[str, Any] = {"name": r.string(), "text": r.string()}
        if kind == 1:
            case["decode"] = r.ids()
            case["bytes"] = r.raw().hex()
        else:
            case.update(_text_case(r))
        golden["cases"].append(case)
    if r.at != len(r.data):
        raise r.fail("bytes after the last case: damaged")
    return golden


def _text_case(r: _Binary) -> dict[str, Any]:
    """A text case's special tokens, pieces and ids (the pieces' ids one after another)."""
    r.count(n_special := r.u32(), 4, "special tokens")
    case: dict[str, Any] = {"allowed_special": [r.string() for _ in range(n_special)]}
    r.count(n_pieces := r.u32(), 12, "pieces")
    case["pieces"] = []
    for _ in range(n_pieces):
        special = r.u32()
        if special > 1:
            raise r.fail(f"a piece's special flag is {special}, neither 0 nor 1")
        case["pieces"].append({"text": r.string(), "special": bool(special), "ids": r.ids()})
    case["ids"] = r.ids()
    if case["ids"] != [i for p in case["pieces"] for i in p["ids"]]:
        raise r.fail("a text case's ids are not its pieces' ids one after another")
    return case


class _Binary:
    """A cursor over a binary tokenizer golden; every count checked against the bytes left."""

    def __init__(self, data: bytes, label: str) -> None:
        self.data, self.label, self.at, self.n_vocab = data, label, 0, 0

    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.label}: {what} (at byte {self.at})")

    def count(self, n: int, least: int, what: str) -> None:
        if n > (len(self.data) - self.at) // least:
            raise self.fail(f"more {what} ({n}) than the file can hold")

    def u32(self) -> int:
        if len(self.data) - self.at < 4:
            raise self.fail("the file ends inside a number: truncated")
        self.at += 4
        return int.from_bytes(self.data[self.at - 4 : self.at], "little")

    def raw(self) -> bytes:
        n = self.u32()
        if n > len(self.data) - self.at:
            raise self.fail("a string runs past the end of the file: truncated or damaged")
        self.at += n
        return self.data[self.at - n : self.at]

    def string(self) -> str:
        raw = self.raw()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string is not UTF-8") from None

    def ids(self) -> list[int]:
        n = self.u32()
        if n > (len(self.data) - self.at) // 4:
            raise self.fail("a list of ids runs past the end of the file: truncated or damaged")
        out = list(struct.unpack_from(f"<{n}I", self.data, self.at))
        self.at += 4 * n
        if any(i >= self.n_vocab for i in out):
            raise self.fail("an id outside [0, n_vocab)")
        return out
