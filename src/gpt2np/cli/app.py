"""The ``gpt2np`` command (also ``python -m gpt2np``).

    gpt2np generate "Alan Turing theorized" --max-new-tokens 40 --temperature 0
    gpt2np score essay.txt            (or - for stdin): tokens, NLL, perplexity
    gpt2np tokenize "Hello world"     -> 15496 995        (--file FILE: a file, streamed)
    gpt2np detokenize "15496 995"     -> Hello world      ("15496,995" and "[15496, 995]" too)
    gpt2np download 124M              -> $GPT2NP_HOME/models/124M
    gpt2np convert models/124M out/   -> HF config.json + model.safetensors
    gpt2np info --model 124M          hparams, parameter count, dtype, where the files are
    gpt2np dump / compare             golden files for ports

One module per group of commands: ``generate``, ``text`` (score, tokenize, detokenize),
``models`` (download, convert, info), ``golden`` (dump, compare); ``common`` holds what they
share and this module the parser and ``main``.

Pipes: "-" in place of a text or ids argument reads it from stdin, and ``detokenize`` with no
IDS reads them from stdin: ``echo Hello | gpt2np generate -``, ``gpt2np tokenize "Hello world" |
gpt2np detokenize``. ``tokenize`` and ``detokenize`` stream (memory does not grow with the
input) and keep every byte, so ``gpt2np tokenize --file a.txt | gpt2np detokenize`` prints
a.txt exactly; a prompt read from stdin loses one final newline (the one ``echo`` adds).
Inputs are strict UTF-8, on stdin, in files and on the command line alike; a FILE must be a
regular file (a FIFO or a device is refused), and a text read whole has a bound
(:mod:`gpt2np.cli.inputs`). ``--json`` (score, tokenize, info) prints JSON instead of text.

``--model`` takes a published name (124M ... 1558M, or HF's gpt2 ... gpt2-xl; downloaded on first
use), a directory, or a Hugging Face Hub repo id (``org/name`` or ``hf:name``, with
``--revision``). ``-q``/``--quiet`` (before or after the command) silences the progress bars
and notices on stderr; results still go to stdout. A mistake the user can make (bad flag value,
missing model, bad file, network failure, Ctrl-C) prints one line ``gpt2np: error: ...`` on
stderr and exits non-zero; set GPT2NP_DEBUG=1 for the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from . import corpus, generate, golden, models, text
from .common import read_stdin_text
from .inputs import check_argument

__all__ = ["build_parser", "main"]

EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
#: The text and ids arguments (of every command) that read stdin, whole, when given as "-"
#: (tokenize and detokenize, marked ``streams_stdin``, read it themselves, a block at a time).
STDIN_ARGS = ("prompt", "text", "ids")
#: The text and ids arguments, which must be UTF-8 (as stdin must), by their names in usage.
TEXT_ARGS = {"prompt": "PROMPT", "text": "TEXT", "ids": "IDS"}
QUIET_HELP = "no progress bars or notices on stderr (errors and warnings still go there)"


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse's default prints the whole usage first)."""

    def error(self, message: str) -> Any:
        sys.stderr.write(f"gpt2np: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(EXIT_USAGE)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default sys.argv[1:]), run the subcommand, return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from ..errors import CheckpointError, DownloadError

    try:
        _read_text_args(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if _debug():
            raise
        sys.stderr.write("\ngpt2np: error: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `gpt2np generate ... | head -c 10`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, TypeError, OSError, CheckpointError, DownloadError) as e:
        if _debug():
            raise
        message = " ".join(str(e).split()) or type(e).__name__  # one line
        sys.stderr.write(f"gpt2np: error: {message}\n")
        return EXIT_ERROR


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = _Parser(prog="gpt2np", description="GPT-2 inference in pure NumPy.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"gpt2np {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for commands in (generate, text, corpus, models, golden):
        commands.add_parsers(sub)
    for command in sub.choices.values():  # after the command too; SUPPRESS keeps a -q before it
        command.add_argument(
            "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP
        )
    return parser


def _read_text_args(args: argparse.Namespace) -> None:
    """Refuse a text argument that is not UTF-8; replace a "-" given for one of
    :data:`STDIN_ARGS` by stdin's text."""
    for name, usage in TEXT_ARGS.items():
        value = getattr(args, name, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_argument(item, usage)
    for name in () if getattr(args, "streams_stdin", False) else STDIN_ARGS:
        value = getattr(args, name, None)
        if value == "-":
            setattr(args, name, read_stdin_text())
        elif isinstance(value, list) and value == ["-"]:  # dump's --prompt (repeatable)
            setattr(args, name, [read_stdin_text()])


def _debug() -> bool:
    return os.environ.get("GPT2NP_DEBUG", "") not in ("", "0")
