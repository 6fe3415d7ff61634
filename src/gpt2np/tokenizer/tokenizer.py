"""GPT-2's tokenizer: text <-> token ids, with tiktoken's interface and OpenAI's algorithm.

>>> tok = Tokenizer()                  # the vocabulary bundled in gpt2np/data, no network
>>> tok.encode("Hello world")
[15496, 995]
>>> tok.decode([15496, 995])
'Hello world'

The algorithm lives in :mod:`gpt2np.tokenizer.bpe` and the two vocabulary files in
:mod:`gpt2np.tokenizer.vocab`
(the bundled ones checked against pinned SHA-256 digests). This module adds special tokens, a
bounded cache of encoded pieces, id checking, tiktoken's batch and per-token methods, and
streaming both ways.

Memory stays bounded on any input: a long text is pre-tokenised in parts of about
:data:`PART_CHARS` characters, cut only where the pre-tokeniser always cuts (between a
non-space and a space, :func:`gpt2np.tokenizer.bpe.split_text`), so the ids are those of the whole
text;
the piece cache holds at most :data:`CACHE_SIZE` entries beyond the vocabulary's own tokens.
:meth:`Tokenizer.encode_stream` encodes an iterable of text chunks (a file) part by part
without ever holding the whole text; :class:`StreamDecoder` turns ids into text as they come.

Lone surrogates (``"\\ud800"``: a Python ``str`` may hold one, UTF-8 cannot encode it) are
replaced by U+FFFD before encoding, and a high+low surrogate pair is read as the character it
encodes — tiktoken's rule, so ids agree with tiktoken for every ``str``.
"""

from __future__ import annotations

import array
import bisect
import codecs
import functools
import itertools
import os
import pathlib
from collections.abc import Collection, Iterable, Iterator, Sequence, Set
from typing import Any, Callable, Literal, Optional, Union

import numpy as np
import numpy.typing as npt
import regex

from .bpe import (
    LONG_PIECE,
    PATTERN,
    MergeTable,
    bpe_fast,
    bpe_many,
    bpe_rounds,
    bytes_to_unicode,
    last_cut,
    pretokenize,
    split_text,
)
from .hf_json import read_tokenizer_json
from .runs import SpaceCuts, SpacePiece, unsafe_pairs, whole_symbol
from .unstable import completions_of, split_unstable
from .vocab import ENDOFTEXT, parse_vocabulary, read_vocabulary

__all__ = [
    "ENCODER_JSON_SHA256",
    "VOCAB_BPE_SHA256",
    "InvalidTokenError",
    "StreamDecoder",
    "Tokenizer",
]

#: SHA-256 of OpenAI's GPT-2 ``encoder.json`` and ``vocab.bpe`` (the same pins tiktoken uses).
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

DATA_DIR = pathlib.Path(__file__).resolve().parent.parent / "data"

# Encoded pieces are cached (English repeats the same words), within two bounds: CACHE_SIZE
# pieces and CACHE_CHARS characters of pieces. When either is reached the cache starts afresh
# and keeps the full one as an older generation, which refills it as its pieces come back: the
# pieces still in use survive, and memory stays under twice the bounds. A piece longer than
# CACHE_MAX_CHARS is not kept, so one huge piece cannot flush the rest.
CACHE_SIZE = 1 << 16
CACHE_CHARS = 1 << 20
CACHE_MAX_CHARS = 1 << 10
#: Characters pre-tokenised at a time (more, when no cut point comes sooner). Small parts keep
#: a stray non-ASCII character from sending much text past the faster ASCII pattern.
PART_CHARS = 1 << 11
#: A part that brings at least COLD_MISSES pieces the cache has not seen starts windows of at
#: least WINDOW_CHARS characters whose new pieces are merged together (bpe_many), each piece of
#: at most MANY_CHARS characters; the longer ones alone.
COLD_MISSES = 32
WINDOW_CHARS = 1 << 17
MANY_CHARS = 64
#: Whitespace parts longer than this many bytes are merged in arrays by encode_stream.
SHORT_SPACE = 64
#: Characters read at a time from a file given to encode_stream.
READ_CHARS = 1 << 16

Ids = Union[Iterable[int], np.ndarray]
SpecialSet = Union[Literal["all"], Collection[str]]


class InvalidTokenError(ValueError, KeyError):
    """A token id outside 0 … n_vocab - 1: a ValueError, and a KeyError as tiktoken raises."""

    __str__ = ValueError.__str__  # KeyError's would quote the message


class _PieceCache(dict[str, tuple[int, ...]]):
    """piece -> its ids (a tuple); a missing piece is taken from the older generation or
    encoded, and remembered. It starts from ``whole``, the pieces that are one token."""

    def __init__(
        self, whole: dict[str, tuple[int, ...]], encode: Callable[[str], tuple[int, ...]]
    ) -> None:
        super().__init__(whole)
        self._whole, self._encode = whole, encode
        self._older: dict[str, tuple[int, ...]] = {}
        self._room, self._chars = CACHE_SIZE, CACHE_CHARS

        self.misses = 0  # pieces encoded so far (how cold the cache is: see _encode_ordinary)

    def __missing__(self, piece: str) -> tuple[int, ...]:
        ids = self._older.get(piece)
        if not ids:
            ids = self._encode(piece)
            self.misses += 1
        self.remember(piece, ids)
        return ids

    def unseen(self, pieces: Iterable[str]) -> list[str]:
        """The distinct pieces neither generation holds, in order of first appearance."""
        older = self._older
        return [p for p in dict.fromkeys(pieces) if p not in self and p not in older]

    def remember(self, piece: str, ids: tuple[int, ...]) -> None:
        """Keep ``piece``'s ids (not a piece longer than CACHE_MAX_CHARS)."""
        if len(piece) <= CACHE_MAX_CHARS:
            if self._room == 0 or self._chars < len(piece):
                self._older = dict(self)
                self.clear()
                self.update(self._whole)
                self._room, self._chars = CACHE_SIZE, CACHE_CHARS
            self[piece] = ids
            self._room -= 1
            self._chars -= len(piece)


class Tokenizer:
    """GPT-2's byte-level BPE tokenizer (50257 tokens; ``<|endoftext|>`` = 50256)."""

    def __init__(self) -> None:
        """Load the bundled vocabulary, refusing files whose SHA-256 differs from the pins (read
        once per process: a second ``Tokenizer()`` reuses what the first read)."""
        encoder, merges, digests = _bundled_vocabulary(DATA_DIR)
        source = (str(DATA_DIR / "encoder.json"), str(DATA_DIR / "vocab.bpe"))
        self._build(encoder, merges, digests, source, bundled=True)

    @classmethod
    def from_files(
        cls, encoder_json: str | os.PathLike[str], vocab_bpe: str | os.PathLike[str]
    ) -> Tokenizer:
        """A tokenizer from a model directory's own ``encoder.json`` and ``vocab.bpe`` (or HF's
        ``vocab.json`` and ``merges.txt``: the same formats). Their structure and consistency
        are checked (CheckpointError naming the file); their digests are not pinned.
        """
        tok = cls.__new__(cls)
        tok._load(pathlib.Path(encoder_json), pathlib.Path(vocab_bpe), pins=None)
        return tok

    @classmethod
    def from_tokenizer_json(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """A tokenizer from HF tokenizers' ``tokenizer.json``, when it describes GPT-2's
        byte-level BPE (else a CheckpointError saying what differs:
        :mod:`gpt2np.tokenizer.hf_json`). Its vocabulary and merges are checked as
        :meth:`from_files` checks ``vocab.json`` and ``merges.txt``."""
        path = pathlib.Path(path)
        encoder, merges = parse_vocabulary(*read_tokenizer_json(path), str(path), str(path))
        tok = cls.__new__(cls)
        tok._build(encoder, merges, digests=None, source=(str(path),), bundled=False)
        return tok

    def _load(
        self, encoder_path: pathlib.Path, merges_path: pathlib.Path, pins: tuple[str, str] | None
    ) -> None:
        encoder, merges, digests = read_vocabulary(encoder_path, merges_path, pins)
        source = (str(encoder_path), str(merges_path))
        self._build(encoder, merges, digests, source, bundled=pins is not None)

    def _build(
        self,
        encoder: dict[str, int],
        merges: list[tuple[str, str]],
        digests: tuple[str, str] | None,
        source: tuple[str, ...],
        bundled: bool,
    ) -> None:
        self._eot_token = encoder[ENDOFTEXT]
        self._vocabulary = encoder, merges  # for the merge table and the cache, made when used
        byte_to_symbol = bytes_to_unicode()
        self._byte_ids = [encoder[byte_to_symbol[b]] for b in range(256)]
        self._byte_table = bytes(self._byte_ids) if max(self._byte_ids) < 256 else None
        self._byte_id_array = np.asarray(self._byte_ids, np.int32)
        # id -> bytes, for decoding. Special tokens decode to their own text, as in tiktoken.
        to_latin1 = str.maketrans({s: chr(b) for b, s in byte_to_symbol.items()})
        self._token_bytes = [b""] * len(encoder)
        for token, i in encoder.items():
            self._token_bytes[i] = token.translate(to_latin1).encode("latin-1")
        self._token_bytes[self._eot_token] = ENDOFTEXT.encode("utf-8")
        self._digests = digests
        self._source = source
        self._bundled = bundled
        gpt2 = digests == (ENCODER_JSON_SHA256, VOCAB_BPE_SHA256)
        self._name = "gpt2" if gpt2 else source[0]

    @functools.cached_property
    def _table(self) -> MergeTable:
        """The merges as a table of pair ranks, made the first time a text is encoded (a
        tokenizer that only decodes never pays for it)."""
        encoder, merges = self._vocabulary
        return MergeTable.build(merges, encoder)

    @functools.cached_property
    def _cache(self) -> _PieceCache:
        """piece -> ids, made the first time a text is encoded. GPT-2's vocabulary is closed
        under BPE: each token's own text encodes to that token alone (a test checks all 50256:
        tests/tokenizer/test_tokenizer.py), so the cache starts with every token whose bytes
        are text. Other vocabularies need not be closed: no head start."""
        whole: dict[str, tuple[int, ...]] = {}
        if self._digests == (ENCODER_JSON_SHA256, VOCAB_BPE_SHA256):
            for i, data in enumerate(self._token_bytes):
                text = data.decode("utf-8", errors="replace")
                if i != self._eot_token and "\ufffd" not in text:
                    whole[text] = (i,)
        return _PieceCache(whole, self._encode_piece)

    # -- properties -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The encoding's name, tiktoken's ``Encoding.name``: "gpt2" for GPT-2's vocabulary (the
        bundled files, or files with their SHA-256), else the path of the first file read."""
        return self._name

    @property
    def n_vocab(self) -> int:
        """Number of token ids (50257 for GPT-2): valid ids are 0 … n_vocab - 1."""
        return len(self._token_bytes)

    @property
    def max_token_value(self) -> int:
        """The largest token id, n_vocab - 1 (tiktoken's name)."""
        return self.n_vocab - 1

    @property
    def eot_token(self) -> int:
        """The id of ``<|endoftext|>`` (50256 for GPT-2)."""
        return self._eot_token

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special-token text -> id: ``{"<|endoftext|>": 50256}``."""
        return {ENDOFTEXT: self.eot_token}

    @property
    def special_tokens_set(self) -> set[str]:
        """The special tokens' texts (tiktoken's name): ``{"<|endoftext|>"}``."""
        return {ENDOFTEXT}

    def is_special_token(self, token: int) -> bool:
        """Whether the id ``token`` is a special token's (tiktoken's method): True for 50256."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"token must be an int, not {type(token).__name__}")
        return int(token) in self.special_tokens.values()

    @property
    def files(self) -> tuple[str, ...]:
        """The paths this vocabulary was read from: (encoder.json, vocab.bpe), HF's
        (vocab.json, merges.txt), or (tokenizer.json,)."""
        return self._source

    def __repr__(self) -> str:
        where = "bundled GPT-2 vocabulary" if self._bundled else f"files={self._source}"
        return f"Tokenizer({where}, n_vocab={self.n_vocab}, eot_token={self.eot_token})"

    # -- encoding -------------------------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``, reading special-token text such as ``<|endoftext|>`` as
        ordinary text (as OpenAI's encoder.py does). Lone surrogates are read as U+FFFD."""
        _check_text(text)
        return self._encode_ordinary(text)

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
        _check_text(text)
        allowed, disallowed = self._specials(allowed_special, disallowed_special)
        _refuse_disallowed(text, disallowed)
        return self._encode_allowed(text, allowed)

    def encode_to_numpy(
        self,
        text: str,
        *,
        allowed_special: SpecialSet = (),
        disallowed_special: SpecialSet = "all",
    ) -> npt.NDArray[np.uint32]:
        """:meth:`encode` as a 1-D ``uint32`` array (tiktoken's method; the dtype is its)."""
        ids = self.encode(
            text, allowed_special=allowed_special, disallowed_special=disallowed_special
        )
        return np.array(ids, dtype=np.uint32)

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of the token whose text (str, as UTF-8) or bytes is ``text_or_bytes``, special
        tokens included; an :class:`InvalidTokenError` (a KeyError, as tiktoken raises, and a
        ValueError) if no token is exactly that.

        >>> Tokenizer().encode_single_token("hello"), Tokenizer().encode_single_token(b" world")
        (31373, 995)
        """
        if isinstance(text_or_bytes, str):
            data = text_or_bytes.encode("utf-8")  # a lone surrogate: UnicodeEncodeError
        elif isinstance(text_or_bytes, (bytes, bytearray, memoryview)):
            data = bytes(text_or_bytes)
        else:
            raise TypeError(f"expected str or bytes, not {type(text_or_bytes).__name__}")
        token = self._ids_of_bytes.get(data)
        if token is None:
            raise InvalidTokenError(f"{data!r} is not one token of this vocabulary")
        return token

    def encode_with_unstable(
        self,
        text: str,
        *,
        allowed_special: SpecialSet = (),
        disallowed_special: SpecialSet = "all",
    ) -> tuple[list[int], list[list[int]]]:
        """tiktoken's ``encode_with_unstable``: the ids of ``text`` up to its last piece (which
        more text could still change), and every way the ids may go on, each covering at least
        that piece's bytes; see :mod:`gpt2np.tokenizer.unstable`. The completions come sorted
        (tiktoken's come in no particular order). Special tokens follow :meth:`encode`'s rules.

        >>> stable, completions = Tokenizer().encode_with_unstable("hello fanta")
        >>> stable, [277, 4910] in completions, [8842] in completions
        ([31373], True, True)
        """
        _check_text(text)
        allowed, disallowed = self._specials(allowed_special, disallowed_special)
        _refuse_disallowed(text, disallowed)
        if _has_surrogates(text):
            text = _replace_surrogates(text)
        ids = self._encode_allowed(text, allowed)
        tail = text
        for match in _special_regex(frozenset(allowed)).finditer(text) if allowed else ():
            tail = text[match.end() :]
        pieces = pretokenize(tail[last_cut(tail) :])
        last = len(self._cache[pieces[-1]]) if pieces else 0
        return completions_of(self, ids, last)

    def encode_ordinary_batch(
        self, text: Sequence[str], *, num_threads: int = 8
    ) -> list[list[int]]:
        """:meth:`encode_ordinary` of each text. ``num_threads`` is accepted for tiktoken's
        signature; encoding runs in this thread (pure Python would hold the GIL anyway)."""
        return [self.encode_ordinary(t) for t in _check_batch(text, "text", num_threads)]

    def encode_batch(
        self,
        text: Sequence[str],
        *,
        num_threads: int = 8,
        allowed_special: SpecialSet = (),
        disallowed_special: SpecialSet = "all",
    ) -> list[list[int]]:
        """:meth:`encode` of each text, with the same special-token rules; ValueError if any
        text holds a disallowed special token. ``num_threads``: as in
        :meth:`encode_ordinary_batch`.

        >>> Tokenizer().encode_batch(["hello world", "goodbye world"])
        [[31373, 995], [11274, 16390, 995]]
        """
        text = _check_batch(text, "text", num_threads)
        allowed, disallowed = self._specials(allowed_special, disallowed_special)
        for t in text:
            _check_text(t)
            _refuse_disallowed(t, disallowed)
        return [self._encode_allowed(t, allowed) for t in text]

    def encode_stream(
        self,
        chunks: Iterable[str],
        *,
        allowed_special: SpecialSet = (),
        disallowed_special: SpecialSet = "all",
    ) -> Iterator[list[int]]:
        """Encode text that arrives in chunks (a text file, a generator of str) in bounded
        memory: yields lists of ids whose concatenation is ``encode("".join(chunks))``.

        A chunk may end anywhere, even inside a word: text is held back until a place where
        the pre-tokeniser always cuts, then encoded about :data:`READ_CHARS` characters at a
        time. A file object is read in blocks of that size, not by lines. A run of whitespace
        of any kind longer than that (one piece, whose ids depend on all of it) is not held
        (:mod:`gpt2np.tokenizer.runs`; unless a string in ``disallowed_special`` holds
        whitespace): it is cut at places no token of the vocabulary can
        span, which leaves BPE's result unchanged (GPT-2: between any two different ASCII
        whitespace characters, between two spaces, ...), and a stretch with no such place is
        held as runs of one character (``"\\n"`` repeated: a few runs). So 200 MiB of spaces,
        of ``"\\r\\n"`` or of U+3000 take a window of text, not 200 MiB. Memory grows only with
        the longest stretch of text without whitespace. The one run refused is a stretch of
        over :data:`READ_CHARS` characters with no safe place that would take more than
        :data:`~gpt2np.tokenizer.runs.MAX_RUNS` runs to hold (GPT-2: over 65,536 characters
        of U+00A0 and single spaces, ``"\\xa0 "`` repeated): it raises
        :class:`~gpt2np.tokenizer.runs.WhitespaceRunError`, a ValueError naming its characters,
        after the ids before it have been yielded; ``encode`` takes such text whole. A
        disallowed special token raises ValueError when it is reached, after the ids before it
        have been yielded.

        >>> with open("corpus.txt", encoding="utf-8") as f:          # doctest: +SKIP
        ...     for ids in tok.encode_stream(f):
        ...         np.asarray(ids, dtype=np.uint16).tofile(out)
        """
        if isinstance(chunks, (str, bytes)) or not (
            isinstance(chunks, Iterable) or hasattr(chunks, "read")
        ):
            raise TypeError(
                f"chunks must be an iterable of str or a text file, not {type(chunks).__name__}"
                " (use encode() for one str)"
            )
        if hasattr(chunks, "read"):
            chunks = iter(functools.partial(chunks.read, READ_CHARS), "")
        allowed, disallowed = self._specials(allowed_special, disallowed_special)
        return self._stream(chunks, allowed, disallowed)

    def _stream(
        self, chunks: Iterable[str], allowed: Set[str], disallowed: Set[str]
    ) -> Iterator[list[int]]:
        # Special tokens hold no whitespace, so none straddles a cut; a disallowed string given
        # by the caller may: each part is checked together with the end of the one before.
        overlap = max(map(len, disallowed), default=1) - 1
        held: list[str] = []  # held[0]: text after the last cut, which holds no cut point
        size = searched = 0
        done = ""
        space: Optional[SpacePiece] = None  # a long piece of whitespace, encoded as it comes
        after = ""  # the text after it, while it may still be an allowed special token
        runs_ok = not any(map(_SPACE.search, disallowed))  # else a run is checked as text
        source = _Chunks(chunks)
        for chunk in source:
            if space is not None:  # the piece goes on, or ends in this chunk
                _refuse_disallowed(done + chunk, disallowed)
                if not after:
                    lead = _leading_space(chunk)
                    yield from space.add(chunk[:lead])
                    chunk = chunk[lead:]
                    if not chunk:
                        continue
                after += chunk
                closed = self._close_space(space, after, allowed, final=False)
                if closed is None:
                    continue
                ids_of_space, chunk = closed
                yield from ids_of_space
                space, after, searched = None, "", 0
            held.append(chunk)
            size += len(chunk)
            if size < max(READ_CHARS, 2 * searched):  # doubling: no quadratic re-joining
                continue
            text = "".join(held)
            cut = last_cut(text, max(searched - 1, 0))
            if cut:
                part, text = text[:cut], text[cut:]
                if disallowed:
                    _refuse_disallowed(done + part, disallowed)
                    done = (done + part)[-overlap:] if overlap else ""
                ids = self._encode_allowed(part, allowed)
                if ids:
                    yield ids
            held, size, searched = [text], len(text), len(text)
            lead = _leading_space(text)
            if runs_ok and lead > READ_CHARS:  # one piece of whitespace, long: not held
                _refuse_disallowed(done + text[:lead], disallowed)
                held, size, searched, done = [], 0, 0, ""
                space = self._space_piece()
                yield from space.add(text[:lead])
                source.put_back(text[lead:])
        if space is not None:
            closed = self._close_space(space, after, allowed, final=True)
            assert closed is not None  # final: the text after it is all there is
            ids_of_space, text = closed
            yield from ids_of_space
            held = [text]
        text = "".join(held)
        _refuse_disallowed(done + text, disallowed)
        ids = self._encode_allowed(text, allowed)
        if ids:
            yield ids

    def _space_piece(self) -> SpacePiece:
        return SpacePiece(self._space_cuts, self._encode_space, self._table, self._byte_ids,
                          READ_CHARS, self._whole_symbol)  # fmt: skip

    def _whole_symbol(
        self, char: str, alphabet: frozenset[str], pairs: frozenset[tuple[str, str]]
    ) -> Optional[int]:
        """:func:`~gpt2np.tokenizer.runs.whole_symbol` for this vocabulary, remembered:
        ``pairs`` are the (character, the one after it) of the stretch."""
        lefts = frozenset(a for a, b in pairs if b == char)
        rights = frozenset(b for a, b in pairs if a == char)
        key = (char, alphabet, lefts, rights)
        if key not in self._whole_symbols:
            self._whole_symbols[key] = whole_symbol(
                char, alphabet, lefts, rights, self._table, self._token_bytes, self._byte_ids
            )
        return self._whole_symbols[key]

    @functools.cached_property
    def _whole_symbols(self) -> dict[tuple[Any, ...], Optional[int]]:
        return {}

    @functools.cached_property
    def _space_cuts(self) -> SpaceCuts:
        """The safe places of whitespace for this vocabulary (:mod:`~gpt2np.tokenizer.runs`),
        from the tokens its merges make."""
        return SpaceCuts(unsafe_pairs(self._token_bytes[i] for i in set(self._table.merged)))

    def _encode_space(self, text: str) -> list[int]:
        """BPE of whitespace ``text`` as one piece (no pre-tokenising, no cache), in arrays
        (:func:`~gpt2np.tokenizer.bpe.bpe_rounds`: a part of a run is thousands of bytes)."""
        data = text.encode()
        if len(data) <= SHORT_SPACE:
            return self._bpe_bytes(data)
        merged: list[int] = bpe_rounds(self._byte_id_array[np.frombuffer(data, np.uint8)],
                                       self._table).tolist()  # fmt: skip
        return merged

    def _close_space(
        self, space: SpacePiece, after: str, allowed: Set[str], final: bool
    ) -> Optional[tuple[Iterator[list[int]], str]]:
        """(the ids of a whitespace piece, the text to hold after them) once the text ``after``
        it (which does not start with whitespace) tells how the piece ends; None while
        ``after`` may still grow into an allowed special token."""
        if not after:  # the text ends with it
            return space.close(whole=True)[0], ""
        follows = [t for t in allowed if t.startswith(after[: len(t)])]
        if not final and any(len(after) < len(t) for t in follows):
            return None
        if any(after.startswith(t) for t in follows):  # the part the piece ends ends there
            return space.close(whole=True)[0], after
        ids, last = space.close(whole=False)
        return ids, last + after

    def _specials(
        self, allowed_special: SpecialSet, disallowed_special: SpecialSet
    ) -> tuple[Set[str], Set[str]]:
        special = self.special_tokens_set
        allowed = special if allowed_special == "all" else _str_set(allowed_special, "allowed")
        unknown = allowed - special
        if unknown:
            raise ValueError(
                f"allowed_special names {sorted(unknown)}, which are not special tokens of this "
                f"tokenizer (it has {sorted(special)})"
            )
        if disallowed_special == "all":
            return allowed, special - allowed
        return allowed, _str_set(disallowed_special, "disallowed")

    def _encode_allowed(self, text: str, allowed: Set[str]) -> list[int]:
        if not allowed:
            return self._encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for match in _special_regex(frozenset(allowed)).finditer(text):
            ids += self._encode_ordinary(text[start : match.start()])
            ids.append(self.special_tokens[match.group()])
            start = match.end()
        return ids + self._encode_ordinary(text[start:])

    def _encode_ordinary(self, text: str) -> list[int]:
        # Pieces repeat (" the", ","), so most are cache hits: map and chain keep them in C.
        # While parts bring many pieces the cache has not seen (a language it has not met
        # yet), parts are gathered into windows whose new pieces are merged together first.
        cache = self._cache
        lookup = cache.__getitem__
        ids: list[int] = []
        window: list[list[str]] = []  # the pieces of parts waiting to be encoded together
        chars, cold = 0, False  # cold: the last part brought many new pieces
        for part in split_text(text, PART_CHARS):
            if cold:
                window.append(pretokenize(_encodable(part)))
                chars += len(part)
                if chars >= WINDOW_CHARS:
                    misses = cache.misses
                    ids += self._encode_window(window)
                    cold = cache.misses - misses >= COLD_MISSES * len(window)
                    window, chars = [], 0
                continue
            done, misses = len(ids), cache.misses
            try:
                ids += itertools.chain.from_iterable(map(lookup, pretokenize(part)))
            except UnicodeEncodeError:  # lone surrogates: see the module docstring
                del ids[done:]
                part = _replace_surrogates(part)
                ids += itertools.chain.from_iterable(map(lookup, pretokenize(part)))
            cold = cache.misses - misses >= COLD_MISSES
        return ids + self._encode_window(window) if window else ids

    def _encode_window(self, window: list[list[str]]) -> list[int]:
        """The ids of several parts' pieces, the pieces the cache has not seen merged at once
        (:func:`bpe_many`) first (each counted in the cache's ``misses``)."""
        cache = self._cache
        new = [
            p for p in cache.unseen(itertools.chain.from_iterable(window)) if len(p) <= MANY_CHARS
        ]
        if new:
            data = [p.encode() for p in new]
            lengths = np.fromiter(map(len, data), np.int64, len(data))
            merged = bpe_many(
                b"".join(data), lengths, self._table, self._byte_id_array, self._byte_ranks
            )
            # Cached ids are one int object per id, and keys strings decoded anew, as compact
            # as the scalar path's: bpe_many's fresh ints and the window's scattered strings
            # made every later encode touch more memory (~5% slower warm, measured).
            shared = self._id_objects.__getitem__
            for piece, piece_ids in zip(data, merged):
                cache.remember(piece.decode(), tuple(map(shared, piece_ids)))
            cache.misses += len(new)
        lookup = cache.__getitem__
        return list(
            itertools.chain.from_iterable(map(lookup, itertools.chain.from_iterable(window)))
        )

    @functools.cached_property
    def _id_objects(self) -> list[int]:
        """One int object per token id, shared by the cached ids of bpe_many's pieces."""
        return list(range(self._table.width))

    @functools.cached_property
    def _byte_ranks(self) -> np.ndarray:
        """[256, 256]: the rank of each pair of bytes' symbols (NO_RANK: none), for bpe_many."""
        b = self._byte_id_array
        return self._table.arrays.rank(np.repeat(b, 256), np.tile(b, 256)).reshape(256, 256)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        """BPE of one pre-tokenised piece (the cache's miss handler)."""
        return tuple(self._bpe_bytes(piece.encode()))

    def _bpe_bytes(self, data: bytes) -> list[int]:
        """BPE of ``data`` as one piece, without pre-tokenising (any bytes, UTF-8 or not):
        tiktoken's ``byte_pair_encode``. A long piece is merged in arrays (bpe_rounds), not as
        a list of a Python int per byte."""
        if len(data) >= LONG_PIECE:
            ids_array = self._byte_id_array[np.frombuffer(data, np.uint8)]
            rounds: list[int] = bpe_rounds(ids_array, self._table).tolist()
            return rounds
        if self._byte_table is not None:  # bytes -> their tokens' ids in one C call
            ids = list(data.translate(self._byte_table))
        else:
            ids = list(map(self._byte_ids.__getitem__, data))
        return bpe_fast(ids, self._table)

    @functools.cached_property
    def _ids_of_bytes(self) -> dict[bytes, int]:
        """Token bytes -> id, special tokens' text included (for :meth:`encode_single_token`)."""
        return self._mergeable_ranks | {t.encode(): i for t, i in self.special_tokens.items()}

    @functools.cached_property
    def _sorted_token_bytes(self) -> list[bytes]:
        """:meth:`token_byte_values`, computed once (for :mod:`gpt2np.tokenizer.unstable`)."""
        return self.token_byte_values()

    def _tokens_starting_with(self, prefix: bytes) -> Iterator[bytes]:
        """The bytes of every ordinary token that starts with ``prefix``, in sorted order."""
        values = self._sorted_token_bytes
        i = bisect.bisect_left(values, prefix)
        while i < len(values) and values[i].startswith(prefix):
            yield values[i]
            i += 1

    # -- tiktoken's private names, with which users build and extend encodings -------------

    @property
    def _pat_str(self) -> str:
        """The pre-tokenisation pattern, as a string (tiktoken's ``Encoding._pat_str``): the
        one :func:`gpt2np.tokenizer.bpe.pretokenize` cuts text with (OpenAI's GPT-2 pattern
        with its shared prefixes factored out: the same pieces).
        ``tiktoken.Encoding(pat_str=tok._pat_str, mergeable_ranks=tok._mergeable_ranks, ...)``
        builds an encoding with this tokenizer's ids."""
        return PATTERN.pattern

    @functools.cached_property
    def _mergeable_ranks(self) -> dict[bytes, int]:
        """Each ordinary token's bytes -> its id (tiktoken's ``Encoding._mergeable_ranks``,
        which merges the pair whose result ranks lowest: GPT-2's ids are in its merges' order).
        Built on first use."""
        return {data: i for i, data in enumerate(self._token_bytes) if i != self._eot_token}

    @property
    def _special_tokens(self) -> dict[str, int]:
        """Special-token text -> id (tiktoken's ``Encoding._special_tokens``)."""
        return self.special_tokens

    def _encode_bytes(self, data: bytes) -> list[int]:
        """Token ids of bytes that need not be UTF-8 (tiktoken's ``Encoding._encode_bytes``);
        :meth:`decode_bytes` gives ``data`` back. Valid UTF-8 is :meth:`encode_ordinary` of
        its text. Otherwise the longest valid prefix is encoded, the ids of its last piece
        (with the blank tokens before it, as :meth:`encode_with_unstable` counts them) are
        taken back, and their bytes followed by the rest of ``data`` are one BPE piece."""
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        try:
            return self._encode_ordinary(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            valid = e.start  # the first byte that is not part of a whole UTF-8 character
        text = data[:valid].decode("utf-8")
        ids = self._encode_ordinary(text)
        pieces = pretokenize(text[last_cut(text) :])
        stable, rest = split_unstable(self, ids, len(self._cache[pieces[-1]]) if pieces else 0)
        rest += data[valid:]
        token = self._mergeable_ranks.get(rest)
        return stable + ([token] if token is not None else self._bpe_bytes(rest))

    # -- decoding -------------------------------------------------------------------------

    def decode_bytes(self, ids: Ids) -> bytes:
        """The bytes that ``ids`` stand for (a token may hold part of a UTF-8 character).

        Many ids are gathered from one buffer of every token's bytes in a few NumPy passes
        (:meth:`_gather_bytes`), a few are joined token by token; both give the same bytes."""
        if isinstance(ids, (list, tuple, np.ndarray)) and len(ids) >= GATHER_IDS:
            return self._gather_bytes(self._id_array(ids))
        return b"".join(map(self._token_bytes.__getitem__, self._check_ids(ids)))

    @functools.cached_property
    def _byte_buffer(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(every token's bytes one after another [total] uint8, where each starts [V], its
        length [V]), made the first time many ids are decoded."""
        lengths = np.fromiter(map(len, self._token_bytes), np.int64, len(self._token_bytes))
        starts = np.cumsum(lengths) - lengths
        return np.frombuffer(b"".join(self._token_bytes), np.uint8), starts, lengths

    def _gather_bytes(self, ids: np.ndarray) -> bytes:
        """b"".join(token_bytes[i] for i in ids) as index arithmetic: output byte k of token j
        (which starts at ``out_start[j]`` in the output) is buffer byte ``starts[ids[j]] + k``."""
        buffer, starts, lengths = self._byte_buffer
        n = lengths[ids]  # [N] bytes per token
        out_start = np.cumsum(n) - n  # [N]
        shift = np.repeat(starts[ids] - out_start, n)  # [total]: buffer index - output index
        data: bytes = buffer[np.arange(shift.size) + shift].tobytes()
        return data

    def _id_array(self, ids: list[int] | tuple[int, ...] | np.ndarray) -> np.ndarray:
        """``ids`` as a 1-D int64 array, checked as :meth:`_check_ids` checks them (which
        raises the error for anything this quick check does not pass)."""
        if isinstance(ids, np.ndarray):
            a = ids
        else:  # array("q") reads a list of ints in C, faster than np.array (decode's first cost)
            try:
                a = np.frombuffer(array.array("q", ids), np.int64)
            except (TypeError, OverflowError):  # not all ints: _check_ids names the culprit
                return np.asarray(self._check_ids(ids), np.int64)
        if (
            a.ndim == 1
            and a.dtype.kind in "iu"
            and a.size
            and 0 <= a.min()
            and a.max() < self.n_vocab
        ):
            # A list mixing True or False with ints becomes an int array: look at the 0s and 1s.
            if isinstance(ids, np.ndarray) or not any(
                type(ids[i]) is bool for i in np.flatnonzero(a <= 1)
            ):
                return a.astype(np.int64, copy=False)
        return np.asarray(self._check_ids(ids), np.int64)

    def decode(self, ids: Ids, errors: str = "replace") -> str:
        """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD (or as
        ``errors``, a codec error handler such as "strict", says)."""
        if errors != "replace":
            _check_errors(errors)
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_bytes_batch(self, batch: Iterable[Ids], *, num_threads: int = 8) -> list[bytes]:
        """:meth:`decode_bytes` of each row of ``batch`` (``num_threads``: see
        :meth:`encode_ordinary_batch`)."""
        return [self.decode_bytes(ids) for ids in _check_batch(batch, "batch", num_threads)]

    def decode_batch(
        self, batch: Iterable[Ids], *, errors: str = "replace", num_threads: int = 8
    ) -> list[str]:
        """:meth:`decode` of each row of ``batch`` (lists of ids, or a 2-D integer array)."""
        batch = _check_batch(batch, "batch", num_threads)
        _check_errors(errors)
        return [self.decode(ids, errors) for ids in batch]

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one token; special tokens give their text.

        >>> Tokenizer().decode_single_token_bytes(31373)
        b'hello'
        """
        return self.decode_tokens_bytes([token])[0]

    def decode_tokens_bytes(self, tokens: Ids) -> list[bytes]:
        """The bytes of each token, for showing how a text was cut.

        >>> Tokenizer().decode_tokens_bytes([31373, 995])
        [b'hello', b' world']
        """
        return list(map(self._token_bytes.__getitem__, self._check_ids(tokens)))

    def decode_with_offsets(self, tokens: Ids) -> tuple[str, list[int]]:
        """The text of ``tokens`` and, per token, the index of the character where it starts:
        for a token that starts inside a character, that character. As in tiktoken, bytes that
        are not valid UTF-8 raise UnicodeDecodeError (a ValueError).

        >>> Tokenizer().decode_with_offsets([31373, 995])
        ('hello world', [0, 5])
        """
        pieces = self.decode_tokens_bytes(tokens)
        offsets, chars = [], 0
        for piece in pieces:
            continuation = sum(0x80 <= byte < 0xC0 for byte in piece)  # UTF-8's 10xxxxxx
            offsets.append(max(0, chars - (0x80 <= piece[0] < 0xC0)))
            chars += len(piece) - continuation
        return b"".join(pieces).decode("utf-8", errors="strict"), offsets

    def token_byte_values(self) -> list[bytes]:
        """Every ordinary token's bytes, sorted (special tokens excluded), as tiktoken's."""
        return sorted(b for i, b in enumerate(self._token_bytes) if i != self._eot_token)

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
                raise InvalidTokenError(f"token id {int(bad[0])} is out of range [0, {n})")
            as_ints: list[int] = ids.tolist()
            return as_ints
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids must be a sequence of ints, not {type(ids).__name__}")
        checked = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"token id {i!r} is not an int")
            if not 0 <= i < n:
                raise InvalidTokenError(f"token id {i} is out of range [0, {n})")
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


class _Chunks:
    """An iterator of str chunks (each checked) into which text can be put back, to be the
    next chunk."""

    def __init__(self, chunks: Iterable[str]) -> None:
        self._chunks, self._back = iter(chunks), ""

    def __iter__(self) -> _Chunks:
        return self

    def __next__(self) -> str:
        if self._back:
            chunk, self._back = self._back, ""
            return chunk
        chunk = next(self._chunks)
        _check_text(chunk, "each chunk")
        return chunk

    def put_back(self, text: str) -> None:
        self._back += text


_SPACE = regex.compile(r"\s")  # whitespace as PATTERN reads it
_LEADING_SPACE = regex.compile(r"\s*")


def _leading_space(text: str) -> int:
    """How many characters of whitespace (as PATTERN reads it) start ``text``."""
    found = _LEADING_SPACE.match(text)
    return found.end() if found else 0


def _check_text(text: object, what: str = "text") -> None:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")


def _check_batch(batch: object, what: str, num_threads: object) -> list[Any]:
    """``batch`` as a list (it may be an iterator), after checking it and ``num_threads``."""
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Iterable):
        raise TypeError(f"{what} must be a list, not {type(batch).__name__}")
    if isinstance(num_threads, bool) or not isinstance(num_threads, int):
        raise TypeError(f"num_threads must be an int, not {type(num_threads).__name__}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be at least 1, got {num_threads}")
    return list(batch)


def _check_errors(errors: object) -> None:
    if isinstance(errors, str):
        try:
            codecs.lookup_error(errors)
            return
        except LookupError:
            pass
    raise ValueError(
        f"errors={errors!r} is not a codec error handler ('replace', 'strict', 'ignore', …)"
    )


def _str_set(value: object, name: str) -> Set[str]:
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Iterable)
        or not all(isinstance(s, str) for s in value)
    ):
        raise TypeError(f'{name}_special must be "all" or a collection of str, not {value!r}')
    return frozenset(value)


def _refuse_disallowed(text: str, disallowed: Set[str]) -> None:
    found = disallowed and _special_regex(frozenset(disallowed)).search(text)
    if found:
        raise ValueError(
            f"text contains the special token {found.group()!r}, which is disallowed: "
            f"pass allowed_special={{{found.group()!r}}} to encode it as a special token, "
            "or disallowed_special=() to encode it as ordinary text"
        )


#: From this many ids on, decode_bytes gathers from one buffer (NumPy's few passes cost ~10 µs).
GATHER_IDS = 64


@functools.lru_cache(maxsize=1)
def _bundled_vocabulary(
    data_dir: pathlib.Path,
) -> tuple[dict[str, int], list[tuple[str, str]], tuple[str, str]]:
    """The bundled files, read, pinned and parsed once per process (callers only read them)."""
    pins = (ENCODER_JSON_SHA256, VOCAB_BPE_SHA256)
    return read_vocabulary(data_dir / "encoder.json", data_dir / "vocab.bpe", pins)


@functools.lru_cache(maxsize=16)
def _special_regex(tokens: frozenset[str]) -> regex.Pattern[str]:
    """Matches any of ``tokens`` (longest first, so one token's prefix never wins)."""
    return regex.compile("|".join(regex.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _encodable(text: str) -> str:
    """``text``, its lone surrogates replaced (see the module docstring) if it has any."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return _replace_surrogates(text)
    return text


def _replace_surrogates(text: str) -> str:
    """Pair up surrogate halves where possible and turn the lone ones into U+FFFD (tiktoken's
    rule: UTF-16 lets a surrogate pair through and "replace" handles the strays)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
