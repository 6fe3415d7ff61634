"""The ``gpt2np dump`` and ``gpt2np compare`` subcommands (golden files for ports).

``gpt2np/cli.py`` calls :func:`add_parsers`; each subcommand's handler takes the parsed
arguments and returns the exit code. User mistakes raise ValueError / CheckpointError, which the
main CLI prints as one line.

    gpt2np dump --model 124M --prompt "Hello" --out golden.npz [--dtype float64] [--names GLOB]
    gpt2np compare golden.npz port.npz [--rtol R] [--atol A] [--strict]
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from .cli_common import load_model, parse_ids, progress_of
from .diff import DEFAULT_ATOL, DEFAULT_RTOL, compare
from .golden import dump

__all__ = ["add_parsers", "run_compare", "run_dump"]


def add_parsers(subparsers: Any) -> None:
    """Register ``dump`` and ``compare`` on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "dump",
        help="write every intermediate of a forward pass to a golden .npz",
        description="Trace a prompt through a model and write every named intermediate "
        "(embed.*, h{i}.*, ln_f, logits) plus a JSON manifest to an .npz that a port can "
        "diff against with 'gpt2np compare'. Layout: docs/golden-files.md.",
    )
    p.add_argument(
        "--model", required=True, help="published name (124M …), a model directory or a Hub repo id"
    )
    p.add_argument("--revision", help="the Hub repo's branch, tag or commit (default main)")
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument("--prompt", help="text to encode with the model's tokenizer")
    text.add_argument("--ids", help="token ids instead of text, e.g. '464,3290'")
    p.add_argument("--out", required=True, help="the .npz to write (the exact name given)")
    p.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        help="compute in this dtype (default: the weights' own, float32)",
    )
    p.add_argument(
        "--names",
        action="append",
        metavar="GLOB",
        help="keep only tensors matching this glob, e.g. 'h0.*' or '*.attn.probs' (repeatable)",
    )
    p.set_defaults(func=run_dump)

    c = subparsers.add_parser(
        "compare",
        help="diff a port's tensors against a golden .npz; exit 1 if any diverges",
        description="Print, for each tensor of GOLDEN in forward order, the max abs and max "
        "rel error of PORT's tensor, and mark the first one that diverges: some element has "
        "|port - golden| > atol + rtol*|golden|. Exit 1 if any tensor diverges. PORT may be "
        "an .npz or a directory of NAME.npy files.",
    )
    c.add_argument("golden", help="the reference .npz (from 'gpt2np dump')")
    c.add_argument("port", help="the port's .npz, or a directory of NAME.npy files")
    c.add_argument("--rtol", type=float, default=DEFAULT_RTOL, help="default %(default)g")
    c.add_argument("--atol", type=float, default=DEFAULT_ATOL, help="default %(default)g")
    c.add_argument(
        "--strict", action="store_true", help="also fail when the port lacks a golden tensor"
    )
    c.set_defaults(func=run_compare)


def run_dump(args: argparse.Namespace) -> int:
    """Load the model, dump the trace of --prompt or --ids to --out, print one summary line."""
    ids_or_text: Any = args.prompt
    if args.ids is not None:
        ids_or_text = parse_ids(args.ids, "--ids", "--ids 464,3290")
    # as stored, for the manifest's hash of the weights
    model = load_model(args.model, None, args.revision, progress=progress_of(args))
    manifest = dump(
        model, ids_or_text, args.out, dtype=args.dtype, names=args.names, model_name=args.model
    )
    n = len(manifest["tensors"])
    print(
        f"wrote {args.out}: {n} tensors, ids {manifest['ids']}, {manifest['dtype']}, "
        f"weights sha256 {manifest['weights_sha256']}"
    )
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """Print the comparison table; 0 when every tensor is within tolerance, else 1."""
    for name in ("rtol", "atol"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{name} must be a non-negative number, got {value}")
    report = compare(args.golden, args.port, rtol=args.rtol, atol=args.atol, strict=args.strict)
    print(report)
    return 0 if report.ok else 1
