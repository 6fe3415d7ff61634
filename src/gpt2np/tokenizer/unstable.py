"""tiktoken's ``encode_with_unstable``: which ids of a text are final, and how the rest may go on.

A text typed so far ends in a piece that more text could still change: "hello fant" is
[31373, 5113] ("hello", " fant"), but "hello fanta" is [31373, 277, 4910] ("hello", " f",
"anta"). So the ids of a prefix split in
two: the *stable* ids, of the text before its last piece, and the *unstable bytes* of that piece.
A *completion* is a sequence of ids that the stable ids may be followed by once more text
arrives: one that spells the unstable bytes and what may follow them, cut once it covers them.
This restates tiktoken's ``CoreBPE::_encode_unstable_native`` (src/lib.rs), rule for rule, so
that the answer is tiktoken's (tests/tokenizer/test_tokenizer_tiktoken.py checks it live):

1. The unstable bytes are the last piece's tokens; when the first of them is all blanks
   (space, newline, tab), the blank tokens before it join them, since a run of whitespace may be
   cut differently once something follows it.
2. Every token that starts with the unstable bytes is a completion of one id.
3. For each cut of the unstable bytes into a prefix and a non-empty suffix, every token that
   starts with the suffix is appended to the prefix, the result encoded (pre-tokenised if it is
   UTF-8, else BPE'd as one piece), and its ids kept until they cover the unstable bytes.
4. If the unstable bytes end in a whitespace character (Unicode's White_Space, as Rust's
   ``char::is_whitespace``) after something else, a following character may split that last
   character off: the two parts BPE'd apart are a completion too.

Special tokens: the text up to and including an allowed special token is always stable.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import regex

__all__ = ["Tokens", "completions_of", "last_character", "split_unstable"]


class Tokens(Protocol):
    """What this module needs of a tokenizer (:class:`gpt2np.tokenizer.Tokenizer` has it): the
    bytes of each id and back, the tokens starting with some bytes, and BPE on bytes or text.
    Typed here so that this module does not import the tokenizer, which imports it."""

    @property
    def eot_token(self) -> int: ...
    @property
    def _token_bytes(self) -> Sequence[bytes]: ...
    @property
    def _ids_of_bytes(self) -> dict[bytes, int]: ...
    def _tokens_starting_with(self, prefix: bytes) -> Iterator[bytes]: ...
    def _bpe_bytes(self, data: bytes) -> list[int]: ...
    def _encode_ordinary(self, text: str) -> list[int]: ...


_BLANKS = frozenset(b" \n\t")
_WHITE_SPACE = regex.compile(r"\p{White_Space}")


def completions_of(
    tok: Tokens, ids: list[int], last_piece: int
) -> tuple[list[int], list[list[int]]]:
    """(stable ids, sorted completions) of a text whose ids are ``ids``, of which the last
    ``last_piece`` came from its last piece (0: the text ends with a special token, or is
    empty, and nothing is unstable)."""
    if last_piece == 0:
        return ids, []
    stable, unstable = split_unstable(tok, ids, last_piece)
    ids_of = tok._ids_of_bytes
    completions: set[tuple[int, ...]] = {(ids_of[t],) for t in tok._tokens_starting_with(unstable)}
    for cut in range(1, len(unstable)):
        prefix = unstable[:cut]
        for token in tok._tokens_starting_with(unstable[cut:]):
            completions.add(_covering(tok, prefix + token, len(unstable)))
    if len(unstable) > 1:
        char, size = last_character(unstable)
        if char is not None and size < len(unstable) and _WHITE_SPACE.fullmatch(char):
            split = tok._bpe_bytes(unstable[:-size]) + tok._bpe_bytes(unstable[-size:])
            completions.add(tuple(split))
    return stable, sorted(map(list, completions))


def split_unstable(tok: Tokens, ids: list[int], last_piece: int) -> tuple[list[int], bytes]:
    """(stable ids, unstable bytes) of a text whose ids are ``ids``, of which the last
    ``last_piece`` came from its last piece: rule 1 above (tiktoken's
    ``_increase_last_piece_token_len``). With ``last_piece`` 0, all ids are stable."""
    if last_piece == 0:
        return ids, b""
    token_bytes = tok._token_bytes

    def blank(i: int) -> bool:
        return i != tok.eot_token and all(b in _BLANKS for b in token_bytes[i])

    if blank(ids[-last_piece]):
        while last_piece < len(ids) and blank(ids[-last_piece - 1]):
            last_piece += 1
    return ids[:-last_piece], b"".join(token_bytes[i] for i in ids[-last_piece:])


def _covering(tok: Tokens, data: bytes, length: int) -> tuple[int, ...]:
    """The ids of ``data`` up to the first that reaches byte ``length``."""
    try:
        ids = tok._encode_ordinary(data.decode("utf-8"))
    except UnicodeDecodeError:  # tiktoken: no pre-tokenising of bytes that are not text
        ids = tok._bpe_bytes(data)
    seq, covered = [], 0
    for i in ids:
        seq.append(i)
        covered += len(tok._token_bytes[i])
        if covered >= length:
            break
    return tuple(seq)


def last_character(data: bytes) -> tuple[str | None, int]:
    """The character that the UTF-8 ``data`` ends with and its length in bytes, or (None, 1)
    when ``data`` does not end with a whole, valid one (the rule of bstr's
    ``decode_last_utf8``, which tiktoken uses: look back at most 4 bytes for a lead byte)."""
    start = len(data) - 1
    while start > max(0, len(data) - 4) and 0x80 <= data[start] < 0xC0:  # 10xxxxxx
        start -= 1
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError:
        return None, 1
    return (text, len(data) - start) if len(text) == 1 else (None, 1)
