"""``gpt2np score``, ``tokenize`` and ``detokenize``: a text file's perplexity, text to ids and
back."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    add_model_args,
    load_model,
    parse_ids,
    pos_int,
    progress_of,
    read_stdin_text,
    read_utf8,
)

__all__ = ["add_parsers", "run_detokenize", "run_score", "run_tokenize"]


def add_parsers(sub: Any) -> None:
    _add_score(sub)
    _add_tokenize(sub)


def _add_score(sub: Any) -> None:
    p = sub.add_parser(
        "score",
        help="NLL and perplexity of a text file",
        description="Score FILE (UTF-8 text; - reads stdin): print the number of tokens, the "
        "NLL in nats and the perplexity. Texts longer than the context use a strided sliding "
        "window.",
    )
    p.add_argument("file", metavar="FILE", help="a text file, or - for stdin")
    add_model_args(p)
    p.add_argument("--stride", type=pos_int, help="window step (default: window // 2)")
    p.add_argument("--max-len", type=pos_int, help="window length (default: n_ctx)")
    p.add_argument(
        "--per-token", action="store_true", help="also print each token's log-prob and context"
    )
    p.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    text = read_utf8(args.file)
    progress = progress_of(args)
    model = load_model(args.model, args.dtype, args.revision, progress)
    from ..scoring.logprobs import score

    result = score(model, text, stride=args.stride, max_len=args.max_len, progress=progress)
    if args.per_token:
        tok = model.tokenizer
        for i, (lp, ctx) in enumerate(zip(result.token_logprobs, result.context_len), 1):
            token = tok.decode([int(result.ids[i])])
            print(f"{int(result.ids[i])}\t{token!r}\t{lp:.6f}\t{int(ctx)}")
    print(f"tokens      {result.n_tokens} ({result.n_scored} scored)")
    print(f"nll         {result.nll:.6f} nats ({result.mean_nll:.6f} per token)")
    print(f"perplexity  {result.perplexity:.6f}")
    return 0


def _add_tokenize(sub: Any) -> None:
    p = sub.add_parser("tokenize", help="print the token ids of TEXT (GPT-2's vocabulary)")
    p.add_argument("text", metavar="TEXT", help="the text to encode; - reads stdin")
    p.add_argument(
        "--allow-special",
        action="store_true",
        help="encode <|endoftext|> as the special token (otherwise it is an error)",
    )
    p.set_defaults(func=run_tokenize)
    d = sub.add_parser("detokenize", help="print the text of token ids")
    d.add_argument(
        "ids",
        metavar="IDS",
        nargs="*",
        help='e.g. "15496 995", 15496,995 or "[15496, 995]"; none or - reads them from stdin',
    )
    d.set_defaults(func=run_detokenize)


def run_tokenize(args: argparse.Namespace) -> int:
    from ..tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer()
    special = [t for t in tokenizer.special_tokens if t in args.text]
    if special and not args.allow_special:
        raise ValueError(
            f"TEXT contains the special token {special[0]}; pass --allow-special to encode it "
            "as that token"
        )
    allowed = "all" if args.allow_special else ()
    print(" ".join(map(str, tokenizer.encode(args.text, allowed_special=allowed))))
    return 0


def run_detokenize(args: argparse.Namespace) -> int:
    from ..tokenizer.tokenizer import Tokenizer

    if not args.ids:
        if sys.stdin is None or sys.stdin.isatty():  # nothing piped: waiting would look hung
            raise ValueError(
                "no IDS given; e.g. gpt2np detokenize 15496 995, or pipe them: "
                'gpt2np tokenize "Hello world" | gpt2np detokenize'
            )
        args.ids = [read_stdin_text()]
    ids = parse_ids(" ".join(args.ids), "token ids", "gpt2np detokenize 15496 995")
    sys.stdout.write(Tokenizer().decode(ids) + "\n")
    return 0
