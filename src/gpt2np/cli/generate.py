"""``gpt2np generate``: continue a prompt, streaming the text to stdout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    add_model_args,
    finite_float,
    load_model,
    nonneg_int,
    parse_ids,
    pos_float,
    pos_int,
    progress_of,
    temperature,
    top_p,
)

__all__ = ["add_parsers", "run_generate"]


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "generate",
        help="continue a prompt, streaming the text to stdout",
        description="Continue PROMPT and stream the new text to stdout. <|endoftext|> ends it; "
        'an empty PROMPT ("") gives an unconditional sample. Several samples (-n), beam search '
        "and --logprobs print when they are complete.",
    )
    p.add_argument("prompt", metavar="PROMPT", help="the text to continue; - reads stdin")
    add_model_args(p)
    p.add_argument("--max-new-tokens", type=nonneg_int, default=50, help="default %(default)s")
    p.add_argument("--temperature", type=temperature, help="0 is greedy; default 1 (sampling)")
    p.add_argument("--top-k", type=nonneg_int, default=0, help="0 (default) is off")
    p.add_argument("--top-p", type=top_p, default=1.0, help="nucleus mass; 1 (default) is off")
    p.add_argument("--seed", type=nonneg_int, help="makes sampling reproducible")
    p.add_argument(
        "--stop",
        action="append",
        metavar="TEXT",
        help="end at this text, which is not printed (repeatable)",
    )
    p.add_argument(
        "--context",
        choices=["error", "slide"],
        default="error",
        help="past n_ctx tokens: error (default), or slide to keep the last n_ctx",
    )
    p.add_argument(
        "-n",
        "--num-samples",
        type=pos_int,
        default=1,
        metavar="N",
        help="samples of the prompt (one prefill), or with --num-beams the N best",
    )
    p.add_argument("--echo", action="store_true", help="print the prompt before the continuation")
    p.add_argument(
        "--logprobs",
        type=nonneg_int,
        metavar="K",
        help="print a table of each token's log-probability and the K most likely alternatives",
    )
    p.add_argument(
        "--logprobs-mode",
        choices=["processed", "raw"],
        default="processed",
        help="the distribution chosen from (default), or the model's own",
    )
    g = p.add_argument_group("penalties (HF's and OpenAI's; each off by default)")
    g.add_argument(
        "--repetition-penalty",
        type=pos_float,
        default=1.0,
        metavar="THETA",
        help="CTRL's rule on every id seen, prompt included; 1 is off",
    )
    g.add_argument(
        "--presence-penalty",
        type=finite_float,
        default=0.0,
        metavar="A",
        help="OpenAI's: minus A from every token generated before",
    )
    g.add_argument(
        "--frequency-penalty",
        type=finite_float,
        default=0.0,
        metavar="A",
        help="OpenAI's: minus A for each time a token was generated before",
    )
    g.add_argument(
        "--no-repeat-ngram-size",
        type=nonneg_int,
        default=0,
        metavar="N",
        help="never repeat an N-gram of the prompt and continuation",
    )
    g.add_argument(
        "--min-new-tokens",
        type=nonneg_int,
        default=0,
        metavar="N",
        help="no <|endoftext|> before N new tokens",
    )
    g.add_argument(
        "--bad-words-ids",
        action="append",
        metavar="IDS",
        help='a token id sequence never to generate, e.g. "15496 995" (repeatable)',
    )
    b = p.add_argument_group("beam search (HF's; deterministic)")
    b.add_argument("--num-beams", type=pos_int, default=1, metavar="K", help="1 (default) is off")
    b.add_argument(
        "--length-penalty",
        type=finite_float,
        default=1.0,
        metavar="L",
        help="score = sum of log-probs / length**L; default 1",
    )
    b.add_argument(
        "--early-stopping",
        choices=["true", "false", "never"],
        default="false",
        help="when a beam search ends (HF's); default false",
    )
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    progress = progress_of(args)
    model = load_model(args.model, args.dtype, args.revision, progress)
    example = '--bad-words-ids "15496 995"'
    bad = [parse_ids(ids, "--bad-words-ids", example) for ids in args.bad_words_ids or ()]
    early = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    whole = args.num_samples > 1 or args.num_beams > 1 or args.logprobs is not None
    out = model.generate(
        args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, stop=args.stop, stream=not whole,
        context=args.context, n=args.num_samples, logprobs=args.logprobs,
        logprobs_mode=args.logprobs_mode, echo=args.echo,
        repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty, no_repeat_ngram_size=args.no_repeat_ngram_size,
        min_new_tokens=args.min_new_tokens, bad_words_ids=bad or None, num_beams=args.num_beams,
        length_penalty=args.length_penalty, early_stopping=early, progress=progress,
    )  # fmt: skip
    if not whole:
        for piece in out:
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        return 0
    results = out if args.num_samples > 1 else [out]
    for i, result in enumerate(results, 1):
        if len(results) > 1:
            kind = "beam" if args.num_beams > 1 else "sample"
            sys.stdout.write(f"--- {kind} {i} of {len(results)} ---\n")
        sys.stdout.write(f"{result}\n")
    return 0
