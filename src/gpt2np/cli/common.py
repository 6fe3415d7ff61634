"""What the ``gpt2np`` subcommands share: reading token ids and texts from the command line or
stdin (bounded and strict: :mod:`gpt2np.cli.inputs`), the ``--quiet`` flag, loading a model
by name or directory, and the flag types (which run the library's own checks)."""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Optional, TypeVar

from ..support.checks import check_int
from .inputs import MAX_ARG_BYTES, MAX_TEXT_BYTES, read_text

__all__ = [
    "add_model_args",
    "checked",
    "load_model",
    "nonneg_int",
    "parse_as",
    "parse_ids",
    "pos_int",
    "progress_of",
    "read_stdin_text",
    "read_utf8",
    "strip_final_newline",
]

T = TypeVar("T")

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
        # ASCII digits only: int() also takes "١٢", "1_000" and "+5" (and str.isdigit "²")
        if not (part.isascii() and part.isdigit()):
            shown = repr(part) if len(part) <= 40 else f"{part[:40]!r}..."
            raise ValueError(
                f"{what} must be integers separated by spaces or commas, got {shown} (an id "
                "is ASCII digits)"
            )
        ids.append(int(part))
    return ids


def read_stdin_text(strip_newline: bool = True) -> str:
    """Standard input as strict UTF-8, at most :data:`~gpt2np.cli.inputs.MAX_ARG_BYTES` of it
    (a prompt or ids given as "-"; see :mod:`gpt2np.cli.inputs` for what stdin may be).

    With ``strip_newline`` one final newline ("\\n" or "\\r\\n") is dropped: the one ``echo``
    adds after a prompt, which is not part of it.
    """
    text = read_text("-", MAX_ARG_BYTES)
    return strip_final_newline(text) if strip_newline else text


def strip_final_newline(text: str) -> str:
    """``text`` without one final "\\n" or "\\r\\n"."""
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


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


# -- flag types: argparse turns an ArgumentTypeError into "argument --x: message" -----------------


def nonneg_int(text: str) -> int:
    return checked(check_int, "the value", parse_as(int, text, "an integer"), minimum=0)


def pos_int(text: str) -> int:
    return checked(check_int, "the value", parse_as(int, text, "an integer"), minimum=1)


def checked(check: Callable[..., T], name: str, value: Any, **bounds: Any) -> T:
    """``check(name, value, **bounds)``, its ValueError/TypeError as argparse's error (which
    names the flag): the library's checks serve the command line too."""
    try:
        return check(name, value, **bounds)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_as(kind: Callable[[str], T], text: str, what: str) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def add_model_args(p: argparse.ArgumentParser, dtype: bool = True) -> None:
    p.add_argument(
        "--model",
        default="124M",
        metavar="NAME_OR_DIR",
        help="published name (124M, 355M, 774M, 1558M, or HF's gpt2, gpt2-medium, gpt2-large, "
        "gpt2-xl; downloaded on first use), a model directory (OpenAI's release, or HF "
        "config.json + model.safetensors), or a Hugging Face Hub repo id (org/name, or "
        "hf:name; an existing path wins); default 124M",
    )
    p.add_argument("--revision", help="the Hub repo's branch, tag or commit (default main)")
    if dtype:
        p.add_argument(
            "--dtype", choices=["float32", "float64"], help="compute dtype (default float32)"
        )


def read_utf8(file: str) -> str:
    """FILE (or stdin for "-") as strict UTF-8, byte for byte, at most
    :data:`~gpt2np.cli.inputs.MAX_TEXT_BYTES` of it; FILE must be a regular file."""
    return read_text(file, MAX_TEXT_BYTES)
