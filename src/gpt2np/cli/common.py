"""What the ``gpt2np`` subcommands share: reading token ids and texts from the command line or
stdin, the ``--quiet`` flag, and loading a model by name or directory. (``cli.py`` holds the
parser and most subcommands, ``cli_trace.py`` dump and compare; both import this module and
``cli_trace`` never imports ``cli``.)"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Optional

__all__ = ["load_model", "parse_ids", "progress_of", "read_stdin_text"]

# The list formats the API prints: Python's [15496, 995], NumPy's [15496   995] and its repr
# array([15496, 995]) (with or without ", dtype=int64"), each perhaps wrapped in one more [...].
_NUMPY_REPR = re.compile(r"^array\((.*?)(?:,\s*dtype=\w+)?\)$", re.S)


def parse_ids(text: str, what: str, example: str) -> list[int]:
    """'15496 995', '15496,995', '[15496, 995]' or 'array([15496, 995])' -> [15496, 995];
    ValueError naming ``what`` (the flag or argument) and the part that is not an integer, or
    giving ``example`` when there is none."""
    body = text.strip()
    match = _NUMPY_REPR.match(body)
    if match:
        body = match.group(1).strip()
    while body[:1] == "[" and body[-1:] == "]":
        body = body[1:-1].strip()
    if re.search(r"\]\s*,?\s*\[", body):
        raise ValueError(f"{what} must be one row of ids, got several: {text.strip()!r}")
    if "[" in body or "]" in body:
        raise ValueError(f"{what} has unbalanced brackets: {text.strip()!r}")
    parts = body.replace(",", " ").split()
    if not parts:
        raise ValueError(f"no {what} given; e.g. {example}")
    ids = []
    for part in parts:
        try:  # not str.isdigit: it accepts "²", which int() refuses with a bare message
            ids.append(int(part))
        except ValueError:
            raise ValueError(
                f"{what} must be integers separated by spaces or commas, got {part!r}"
            ) from None
    return ids


def read_stdin_text(strip_newline: bool = True) -> str:
    """Standard input as strict UTF-8, whatever the locale (``sys.stdin`` would turn bad bytes
    into surrogates under the C locale, which the tokenizer then encodes as U+FFFD).

    With ``strip_newline`` one final newline ("\\n" or "\\r\\n") is dropped: the one ``echo``
    and ``detokenize`` print after a text, which is not part of it. ``score -`` keeps every byte.
    """
    if sys.stdin is None:
        raise ValueError("no stdin to read (give the text as an argument instead of -)")
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"<stdin>: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None
    if strip_newline:
        text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    return text


def progress_of(args: argparse.Namespace) -> bool:
    """Whether a command shows progress: never with ``--quiet``, else as
    :func:`gpt2np.support.progress.show_progress` decides (a terminal on stderr)."""
    from ..support.progress import show_progress

    return not getattr(args, "quiet", False) and show_progress(None)


def load_model(
    name_or_dir: str,
    dtype: Optional[str] = None,
    revision: Optional[str] = None,
    progress: Any = None,
) -> Any:
    """gpt2np.load, imported on first use: the commands that need no model start faster.
    ``revision``: a Hub repo's branch, tag or commit."""
    from ..api import load

    return load(name_or_dir, dtype=dtype, revision=revision, progress=progress)
