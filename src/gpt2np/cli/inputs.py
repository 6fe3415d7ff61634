"""Reading the texts the commands take, from a file, stdin or the command line: whole up to a
bound, or streamed, and always strict UTF-8.

What may be read. A FILE argument must be a regular file: a FIFO would block until a writer
comes, a device such as ``/dev/zero`` never ends, and a directory or socket is no text; each is
refused with one line naming it, as the checkpoint readers refuse them
(:mod:`gpt2np.support.bounded_read`). It is opened without blocking and checked on the open
descriptor, so a name swapped in between cannot slip past. ``-`` reads stdin, which may be a
regular file, a pipe (or FIFO, as the shell opened it), a terminal or ``/dev/null``; any other
device there is refused the same way.

How much. :func:`read_text` reads a whole text (score's FILE, a prompt or ids given as ``-``) up
to a bound, :data:`MAX_TEXT_BYTES` or :data:`MAX_ARG_BYTES`, and refuses a longer one before
holding more than that: ``cat /dev/zero | gpt2np score -`` ends with one line, not a
MemoryError. :func:`stream_text` yields the text a block at a time, for the commands that
stream (tokenize, detokenize): their memory does not grow with the input.

Which bytes. Text is decoded as strict UTF-8, whatever the locale (``sys.stdin`` would turn bad
bytes into surrogates under the C locale); a byte that is not UTF-8 is an error naming the input
and the byte's offset. Arguments on the command line are held to the same rule
(:func:`check_argument`): Python hands bytes that are not UTF-8 over as lone surrogates, which
would otherwise be encoded as U+FFFD while the same bytes on stdin are refused.
"""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Iterator
from typing import Any

from ..support.bounded_read import check_stdin, open_regular

__all__ = [
    "MAX_ARG_BYTES",
    "MAX_TEXT_BYTES",
    "READ_BYTES",
    "InputError",
    "check_argument",
    "decode",
    "input_name",
    "read_blocks",
    "read_text",
    "stream_text",
]

READ_BYTES = 1 << 16  # bytes read at a time
#: The longest text read whole: score's FILE (a 256 MiB text is ~60 million tokens, days of
#: scoring on a CPU; longer corpora are scored from Python in parts).
MAX_TEXT_BYTES = 256 << 20
#: The longest prompt or list of ids read whole from stdin: far more than any context holds.
MAX_ARG_BYTES = 16 << 20


class InputError(ValueError):
    """A text input the command cannot read; the message names it."""


def input_name(file: str) -> str:
    """How errors name an input: ``<stdin>`` for "-", else the path as given."""
    return "<stdin>" if file == "-" else file


def read_text(file: str, limit: int) -> str:
    """The whole of FILE (stdin for "-") as strict UTF-8, at most ``limit`` bytes of it."""
    name, data, size = input_name(file), bytearray(), 0
    for block in read_blocks(file, limit):
        size += len(block)
        if size > limit:
            raise InputError(
                f"{name} holds more than {_mib(limit)} of text, more than gpt2np reads at once"
            )
        data += block
    return decode(data, name)


def stream_text(file: str) -> Iterator[str]:
    """FILE (stdin for "-") as strict UTF-8 text, a block at a time (a character cut by a
    block's end comes whole with the next)."""
    name = input_name(file)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0  # bytes of the input before this block
    for block in read_blocks(file):
        held = len(decoder.getstate()[0])  # the start of a character the last block cut
        try:
            text = decoder.decode(block)
        except UnicodeDecodeError as e:  # positions count from the held bytes
            raise _not_utf8(name, e, offset - held) from None
        offset += len(block)
        if text:
            yield text
    held = len(decoder.getstate()[0])
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:  # the input ends inside a character
        raise _not_utf8(name, e, offset - held) from None


def decode(data: bytes | bytearray, name: str) -> str:
    """``data`` as strict UTF-8; InputError naming ``name``, the byte and its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(name, e, 0) from None


def check_argument(value: str, what: str) -> str:
    """``value`` (a command-line argument) if it is UTF-8 text, else an InputError: Python
    decodes the bytes of argv that are not UTF-8 into lone surrogates ("surrogateescape")."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError as e:
        at = e.start
    try:
        os.fsencode(value).decode("utf-8")  # the bytes as given (fsencode undoes the escape)
    except UnicodeDecodeError as bad:
        raise _not_utf8(what, bad, 0) from None
    except UnicodeEncodeError:  # a surrogate that stands for no byte (not from argv's bytes)
        pass
    raise InputError(f"{what}: not UTF-8 text (character {at} is a lone surrogate)")


def _not_utf8(name: str, e: UnicodeDecodeError, base: int) -> InputError:
    return InputError(
        f"{name}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {base + e.start})"
    )


def read_blocks(file: str, limit: int | None = None) -> Iterator[bytes]:
    """FILE's bytes (stdin's for "-") in blocks of at most :data:`READ_BYTES`. A FILE must be
    a regular file (of at most ``limit`` bytes, when given) and stdin a file, a pipe, a
    terminal or /dev/null; anything else is an InputError naming it."""
    if file == "-":
        yield from _stdin_blocks()
        return
    fd = open_regular(file, InputError, fifo_hint=" (pipe it in and give - instead)")
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise InputError(f"{file} holds {_mib(size)}, more than the {_mib(limit)} of text "
                             "gpt2np reads at once")  # fmt: skip
        while True:
            block = os.read(fd, READ_BYTES)
            if not block:
                return
            yield block
    finally:
        os.close(fd)


def _stdin_blocks() -> Iterator[bytes]:
    stream: Any = sys.stdin
    if stream is None:
        raise InputError("no stdin to read (give the text as an argument instead of -)")
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream (tests, notebooks)
        fd = None
    if fd is not None:
        check_stdin(fd, InputError)
    buffer = getattr(stream, "buffer", stream)
    read = getattr(buffer, "read1", None) or buffer.read  # read1: what a pipe has, no waiting
    while True:
        block = read(READ_BYTES)
        if not block:
            return
        yield block


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"
