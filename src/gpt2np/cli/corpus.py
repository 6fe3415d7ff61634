"""``gpt2np score-corpus``: one record of log-probabilities per line of a corpus, resumable, in
one process or several (:func:`gpt2np.scoring.score_corpus`)."""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from typing import Any, Optional, TextIO, Union

from .common import add_model_args, pos_int, progress_of

__all__ = ["add_parsers", "run_score_corpus"]

DESCRIPTION = """\
Score each line of INPUT (JSON Lines with the text in --field, or a text file with one document
per line; - reads stdin) and append one JSON record per line to OUTPUT, in input order: line,
id (when the line has --id-field), n_tokens, logprob_sum, logprob_mean, perplexity and
line_sha256, or line and error for a line that cannot be scored. Run the same command again
after a crash, Ctrl-C or kill -9 and it goes on after the last whole record; it refuses an
OUTPUT scored from another input, model or settings (OUTPUT.fingerprint lies beside it).
A summary line ends the run on stdout; see docs/scoring-corpus.md."""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "score-corpus",
        help="log-probs and perplexity of every line of a corpus, resumable, in parallel",
        description=DESCRIPTION,
    )
    p.add_argument("input", metavar="INPUT", help="a .jsonl or .txt file, or - for stdin")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="the JSON Lines records")
    add_model_args(p)
    p.add_argument(
        "--format",
        choices=["jsonl", "text"],
        help="how INPUT is read (default: text for a .txt file, else jsonl)",
    )
    p.add_argument("--field", default="text", help="the JSON field of the text (default text)")
    p.add_argument(
        "--id-field", default="id", help="the JSON field copied into each record (default id)"
    )
    p.add_argument("--stride", type=pos_int, help="window step (default: window // 2)")
    p.add_argument("--max-len", type=pos_int, help="window length (default: n_ctx)")
    p.add_argument(
        "--batch-size", type=pos_int, help="windows per forward pass (default: 4096 tokens' worth)"
    )
    p.add_argument(
        "--jobs",
        type=pos_int,
        default=1,
        metavar="N",
        help="worker processes, sharing the memory-mapped weights (default 1: this process)",
    )
    p.set_defaults(func=run_score_corpus)


def run_score_corpus(args: argparse.Namespace) -> int:
    from ..api import load
    from ..scoring.corpus import score_corpus

    progress = progress_of(args)
    # Called here first (downloading the model if need be, with its bars), then once by each
    # worker process, which finds it in the cache.
    loader = functools.partial(load, args.model, args.dtype, revision=args.revision,
                               progress=progress)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("always", RuntimeWarning)
        warnings.showwarning = _one_line_warning
        summary = score_corpus(
            loader,
            args.input,
            args.out,
            format=args.format,
            field=args.field,
            id_field=args.id_field,
            stride=args.stride,
            max_len=args.max_len,
            batch_size=args.batch_size,
            jobs=args.jobs,
            progress=progress,
        )
    print(f"score-corpus: {summary}")
    return 0


def _one_line_warning(
    message: Union[Warning, str],
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Optional[TextIO] = None,
    line: Optional[str] = None,
) -> None:
    """A warning as the CLI's errors look: one line, no source location."""
    sys.stderr.write(f"gpt2np: warning: {message}\n")
