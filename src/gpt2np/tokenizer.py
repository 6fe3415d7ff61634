"""GPT-2's tokenizer: text <-> token ids, with tiktoken's interface and OpenAI's algorithm.

>>> tok = Tokenizer()                  # the vocabulary bundled in gpt2np/data, no network
>>> tok.encode("Hello world")
[15496, 995]
>>> tok.decode([15496, 995])
'Hello world'

The algorithm lives in :mod:`gpt2np.bpe`; this module adds the vocabulary files (bundled ones
checked against pinned SHA-256 digests), special tokens, a bounded cache of encoded pieces
(English text repeats the same words, so most pieces are cache hits), id checking, and a
streaming decoder for generation.

Lone surrogates (``"\\ud800"``: a Python ``str`` may hold one, UTF-8 cannot encode it) are
replaced by U+FFFD before encoding, and a high+low surrogate pair is read as the character it
encodes — tiktoken's rule, so ids agree with tiktoken for every ``str``.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import os
import pathlib
from collections.abc import Collection, Iterable, Set
from typing import Literal, Union

import numpy as np
import regex

from .bpe import PATTERN, bpe, bytes_to_unicode, parse_encoder, parse_merges, read_file
from .errors import CheckpointError
from .tokenizer_json import read_tokenizer_json

__all__ = ["ENCODER_JSON_SHA256", "VOCAB_BPE_SHA256", "StreamDecoder", "Tokenizer"]

#: SHA-256 of OpenAI's GPT-2 ``encoder.json`` and ``vocab.bpe`` (the same pins tiktoken uses).
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

DATA_DIR = pathlib.Path(__file__).parent / "data"
ENDOFTEXT = "<|endoftext|>"

# The piece cache holds at most CACHE_SIZE entries and is emptied when full, so memory stays
# bounded on any input; pieces longer than CACHE_MAX_CHARS (rarely repeated) are not cached.
CACHE_SIZE = 1 << 16
CACHE_MAX_CHARS = 64

Ids = Union[Iterable[int], np.ndarray]
SpecialSet = Union[Literal["all"], Collection[str]]


class Tokenizer:
    """GPT-2's byte-level BPE tokenizer (50257 tokens; ``<|endoftext|>`` = 50256)."""

    def __init__(self) -> None:
        """Load the bundled vocabulary, refusing files whose SHA-256 differs from the pins."""
        self._load(
            DATA_DIR / "encoder.json",
            DATA_DIR / "vocab.bpe",
            pins=(ENCODER_JSON_SHA256, VOCAB_BPE_SHA256),
        )

    @classmethod
    def from_files(
        cls, encoder_json: str | os.PathLike[str], vocab_bpe: str | os.PathLike[str]
    ) -> Tokenizer:
        """A tokenizer from a model directory's own ``encoder.json`` and ``vocab.bpe`` (or HF's
        ``vocab.json`` and ``merges.txt``: the same formats). Their structure is checked
        (CheckpointError naming the file); their digests are not pinned.
        """
        tok = cls.__new__(cls)
        tok._load(pathlib.Path(encoder_json), pathlib.Path(vocab_bpe), pins=None)
        return tok

    @classmethod
    def from_tokenizer_json(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """A tokenizer from HF tokenizers' ``tokenizer.json``, when it describes GPT-2's
        byte-level BPE (else a CheckpointError saying what differs:
        :mod:`gpt2np.tokenizer_json`). Its vocabulary and merges are checked as
        :meth:`from_files` checks ``vocab.json`` and ``merges.txt``."""
        path = pathlib.Path(path)
        encoder_data, merges_data = read_tokenizer_json(path)
        tok = cls.__new__(cls)
        tok._build(encoder_data, merges_data, path, path, pins=None)
        tok._source = (str(path),)
        return tok

    def _load(
        self, encoder_path: pathlib.Path, merges_path: pathlib.Path, pins: tuple[str, str] | None
    ) -> None:
        encoder_data, merges_data = read_file(encoder_path), read_file(merges_path)
        self._build(encoder_data, merges_data, encoder_path, merges_path, pins)
        self._source = (str(encoder_path), str(merges_path))

    def _build(
        self,
        encoder_data: bytes,
        merges_data: bytes,
        encoder_path: pathlib.Path,
        merges_path: pathlib.Path,
        pins: tuple[str, str] | None,
    ) -> None:
        digests = [hashlib.sha256(data).hexdigest() for data in (encoder_data, merges_data)]
        if pins is not None:
            for path, digest, pin in zip((encoder_path, merges_path), digests, pins):
                if digest != pin:
                    raise CheckpointError(
                        f"{path}: SHA-256 is {digest}, expected {pin}; the bundled GPT-2 "
                        "vocabulary is damaged (reinstall gpt2np)"
                    )
        encoder = parse_encoder(encoder_data, str(encoder_path))
        merges = parse_merges(merges_data, str(merges_path), encoder)
        self._ranks = {pair: rank for rank, pair in enumerate(merges)}
        self._eot_token = encoder[ENDOFTEXT]
        # BPE output symbol -> id; special tokens are never produced by BPE.
        self._ids = {token: i for token, i in encoder.items() if token != ENDOFTEXT}
        # GPT-2's vocabulary is closed under BPE: each token's own text encodes to that token
        # alone (tests/test_tokenizer.py checks all 50256), so a piece that is a whole token
        # needs no merging. Other vocabularies need not have this property: no shortcut.
        self._whole_token_shortcut = digests == [ENCODER_JSON_SHA256, VOCAB_BPE_SHA256]
        byte_to_symbol = bytes_to_unicode()
        # str.translate tables: a latin-1 character (= one byte) <-> its symbol.
        self._to_symbols = str.maketrans({chr(b): s for b, s in byte_to_symbol.items()})
        to_latin1 = str.maketrans({s: chr(b) for b, s in byte_to_symbol.items()})
        # id -> bytes, for decoding. Special tokens decode to their own text, as in tiktoken.
        self._token_bytes: list[bytes] = [b""] * len(encoder)
        for token, i in self._ids.items():
            self._token_bytes[i] = token.translate(to_latin1).encode("latin-1")
        self._token_bytes[self._eot_token] = ENDOFTEXT.encode("utf-8")
        self._cache: dict[str, list[int]] = {}

    # -- properties -----------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        """Number of token ids (50257 for GPT-2): valid ids are 0 … n_vocab - 1."""
        return len(self._token_bytes)

    @property
    def eot_token(self) -> int:
        """The id of ``<|endoftext|>`` (50256 for GPT-2)."""
        return self._eot_token

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special-token text -> id: ``{"<|endoftext|>": 50256}``."""
        return {ENDOFTEXT: self.eot_token}

    @property
    def files(self) -> tuple[str, ...]:
        """The paths this vocabulary was read from: (encoder.json, vocab.bpe), HF's
        (vocab.json, merges.txt), or (tokenizer.json,)."""
        return self._source

    def __repr__(self) -> str:
        return f"Tokenizer(n_vocab={self.n_vocab}, files={self._source})"

    # -- encoding -------------------------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``, reading special-token text such as ``<|endoftext|>`` as
        ordinary text (as OpenAI's encoder.py does). Lone surrogates are read as U+FFFD."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        try:
            return self._encode_pieces(text)
        except UnicodeEncodeError:  # lone surrogates: see the module docstring
            return self._encode_pieces(_replace_surrogates(text))

    def encode(
        self,
        text: str,
        allowed_special: SpecialSet = (),
        disallowed_special: SpecialSet = "all",
    ) -> list[int]:
        """Token ids of ``text``, with tiktoken's rules for special tokens.

        ``allowed_special`` ("all" or a set): special tokens encoded as their single id.
        ``disallowed_special`` ("all" = every special token not allowed, or a set of strings):
        if the text contains one, ValueError naming it. Pass ``disallowed_special=()`` to read
        special-token text as ordinary text, like :meth:`encode_ordinary`.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        special = self.special_tokens  # a new dict per call: take it once
        allowed = self._special_set(allowed_special, "allowed_special")
        unknown = allowed - special.keys()
        if unknown:
            raise ValueError(
                f"allowed_special names {sorted(unknown)}, which are not special tokens of this "
                f"tokenizer (it has {sorted(special)})"
            )
        if disallowed_special == "all":
            disallowed = special.keys() - allowed
        else:
            disallowed = self._special_set(disallowed_special, "disallowed_special")
        if disallowed:
            found = _special_regex(frozenset(disallowed)).search(text)
            if found:
                raise ValueError(
                    f"text contains the special token {found.group()!r}, which is disallowed: "
                    f"pass allowed_special={{{found.group()!r}}} to encode it as a special token, "
                    "or disallowed_special=() to encode it as ordinary text"
                )
        if not allowed:
            return self.encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for match in _special_regex(frozenset(allowed)).finditer(text):
            ids += self.encode_ordinary(text[start : match.start()])
            ids.append(special[match.group()])
            start = match.end()
        return ids + self.encode_ordinary(text[start:])

    def _special_set(self, value: SpecialSet, name: str) -> Set[str]:
        if value == "all":
            return self.special_tokens.keys()
        if (
            isinstance(value, (str, bytes))
            or not isinstance(value, Iterable)
            or not all(isinstance(s, str) for s in value)
        ):
            raise TypeError(f'{name} must be "all" or a collection of str, not {value!r}')
        return frozenset(value)

    def _encode_pieces(self, text: str) -> list[int]:
        cache, encode_piece = self._cache, self._encode_piece
        # Pieces repeat (" the", ","), so most are cache hits; no piece encodes to [].
        return [
            i for piece in PATTERN.findall(text) for i in cache.get(piece) or encode_piece(piece)
        ]

    def _encode_piece(self, piece: str) -> list[int]:
        """BPE of one pre-tokenised piece, remembered in the bounded cache."""
        symbols = piece.encode("utf-8").decode("latin-1").translate(self._to_symbols)
        if self._whole_token_shortcut and symbols in self._ids:
            ids = [self._ids[symbols]]
        else:
            ids = [self._ids[s] for s in bpe(list(symbols), self._ranks)]
        if len(piece) <= CACHE_MAX_CHARS:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[piece] = ids
        return ids

    # -- decoding -------------------------------------------------------------------------

    def decode_bytes(self, ids: Ids) -> bytes:
        """The bytes that ``ids`` stand for (a token may hold part of a UTF-8 character)."""
        table = self._token_bytes
        return b"".join([table[i] for i in self._check_ids(ids)])

    def decode(self, ids: Ids) -> str:
        """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def stream_decoder(self) -> StreamDecoder:
        """A decoder that turns ids into text as they arrive (see :class:`StreamDecoder`)."""
        return StreamDecoder(self)

    def _check_ids(self, ids: Ids) -> list[int]:
        """``ids`` (list, tuple, or 1-D integer array) as a list of ints in [0, n_vocab)."""
        n = self.n_vocab
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1:
                raise ValueError(f"ids must be 1-D, got an array of shape {ids.shape}")
            if ids.dtype.kind not in "iu":
                raise TypeError(f"ids must be integers, got an array of dtype {ids.dtype}")
            bad = ids[(ids < 0) | (ids >= n)]
            if bad.size:
                raise ValueError(f"token id {int(bad[0])} is out of range [0, {n})")
            return ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids must be a sequence of ints, not {type(ids).__name__}")
        checked = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"token id {i!r} is not an int")
            if not 0 <= i < n:
                raise ValueError(f"token id {i} is out of range [0, {n})")
            checked.append(int(i))
        return checked


class StreamDecoder:
    """Ids in, text out, one piece at a time, never emitting half a UTF-8 character.

    A token may end inside a multi-byte character (an emoji is often 2-3 tokens), so
    :meth:`feed` returns only the complete characters and keeps the incomplete tail;
    :meth:`flush` returns the rest. Joined output equals ``tokenizer.decode(all_ids)`` —
    also for invalid UTF-8, because Python's incremental UTF-8 decoder replaces a byte
    sequence with U+FFFD exactly when ``bytes.decode(errors="replace")`` would.
    After :meth:`flush` the decoder starts afresh.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: int | Ids) -> str:
        """Add one id or several; return the text completed by them (maybe "")."""
        if isinstance(ids, (int, np.integer)) or (isinstance(ids, np.ndarray) and ids.ndim == 0):
            ids = [ids.item() if isinstance(ids, np.ndarray) else ids]
        return self._utf8.decode(self._tokenizer.decode_bytes(ids), final=False)

    def flush(self) -> str:
        """The buffered tail (U+FFFD for an incomplete character), and reset."""
        return self._utf8.decode(b"", final=True)


@functools.lru_cache(maxsize=16)
def _special_regex(tokens: frozenset[str]) -> regex.Pattern[str]:
    """Matches any of ``tokens`` (longest first, so one token's prefix never wins)."""
    return regex.compile("|".join(regex.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def _replace_surrogates(text: str) -> str:
    """Pair up surrogate halves where possible and turn the lone ones into U+FFFD (tiktoken's
    rule: UTF-16 lets a surrogate pair through and "replace" handles the strays)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
