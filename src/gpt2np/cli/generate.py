"""``gpt2np generate``: continue a prompt, streaming the text to stdout.

Its flags are the generation options that have a :class:`gpt2np.generation.options.Flag`, one
per option, with the option's help and check (a bad value is argparse's one-line error naming
the flag); combinations are checked by :func:`gpt2np.generation.options.check_args` before the
model is loaded. A flag not given leaves the option to the model's generation_config.json and
gpt2np's defaults, as a keyword argument not given does.

``--json`` prints JSON instead of text: one object per completion on a line of its own
(:meth:`gpt2np.Completion.to_dict`: text, ids, tokens, token_logprobs, top_logprobs,
finish_reason, ...), and when the output streams (one sample, no beam search) one such object
per piece as it comes (JSON Lines), with ``finish_reason`` null until the piece that ends it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from ..generation.options import OPTIONS, check_args
from .common import add_model_args, checked, load_model, parse_ids, progress_of

__all__ = ["add_option_flag", "add_parsers", "run_generate"]

_GROUPS = {
    "length": "length and ending",
    "sampling": "choosing a token (HF's warpers; OpenAI's defaults)",
    "rules": "logit rules (HF's and OpenAI's; each off by default)",
    "beams": "beam search (HF's; deterministic)",
    "output": "output",
}


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "generate",
        help="continue a prompt, streaming the text to stdout",
        description="Continue PROMPT and stream the new text to stdout. An end id "
        '(<|endoftext|>) ends it; an empty PROMPT ("") gives an unconditional sample. Several '
        "samples (-n), beam search and --logprobs print when they are complete. A flag not "
        "given takes the model's generation_config.json value, else gpt2np's default.",
    )
    p.add_argument("prompt", metavar="PROMPT", help="the text to continue; - reads stdin")
    add_model_args(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON: one object per completion (JSON Lines of pieces when streaming)",
    )
    groups = {name: p.add_argument_group(title) for name, title in _GROUPS.items()}
    for option in OPTIONS.values():
        if option.flag is not None:
            add_option_flag(groups[option.group], option.name)
    p.set_defaults(func=run_generate)


def add_option_flag(group: Any, name: str) -> None:
    """The generation option ``name`` as its flag (its help, its check); not given, it is absent
    from the parsed arguments (or the parser's ``set_defaults`` value)."""
    option = OPTIONS[name]
    flag = option.flag
    assert flag is not None, f"the option {name} has no flag"
    names = flag.names or ("--" + option.name.replace("_", "-"),)
    kw: dict[str, Any] = dict(dest=option.name, default=argparse.SUPPRESS, help=option.help)
    if flag.kind == "switch":
        group.add_argument(*names, action="store_true", **kw)
        return
    if flag.kind == "choice":
        text = {str(c).lower(): c for c in flag.choices}
        kw.update(type=lambda s: _choice(s, text), metavar="{" + ",".join(text) + "}")
    else:
        parse = _PARSE[flag.kind]
        if flag.repeat:  # each value parsed here; the list is checked with the others
            kw.update(type=parse)
        else:
            kw.update(type=lambda s: checked(option.check, option.name, parse(s)))
        kw.update(metavar=flag.metavar)
    group.add_argument(*names, action="append" if flag.repeat else "store", **kw)


def _choice(text: str, choices: dict[str, Any]) -> Any:
    if text.lower() not in choices:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}, got {text!r}")
    return choices[text.lower()]


def _pair(text: str) -> tuple[int, float]:
    parts = text.replace(",", " ").split()
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"must be START,FACTOR, got {text!r}")
    return int(parse_number(parts[0], int)), parse_number(parts[1], float)


def parse_number(text: str, kind: Callable[[str], Any]) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def _ids(text: str) -> list[int]:
    try:
        return parse_ids(text, "ids", '"15496 995"')
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_PARSE: dict[str, Callable[[str], Any]] = {
    "int": lambda s: parse_number(s, int),
    "float": lambda s: parse_number(s, float),
    "str": str,
    "ids": _ids,
    "pair": _pair,
}


def run_generate(args: argparse.Namespace) -> int:
    given = {name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}
    if args.json:
        given.setdefault("logprobs", 0)  # Completions: ids, finish reasons, log-probs
    check_args(args.prompt, **given)  # before the model is loaded
    progress = progress_of(args)
    model = load_model(args.model, args.dtype, args.revision, progress)
    opts = check_args(args.prompt, model.generation_config, **given)[3]
    beams = opts.num_beams > 1
    table = opts.logprobs is not None and not args.json  # a table needs the whole completion
    streams = opts.n == 1 and not beams and not table
    out = model.generate(args.prompt, stream=streams, progress=progress, **given)
    if streams:
        for piece in out:
            sys.stdout.write(json.dumps(piece.to_dict()) + "\n" if args.json else piece)
            sys.stdout.flush()
        if not args.json:
            sys.stdout.write("\n")
        return 0
    results = list(out) if opts.n > 1 else [out]
    for i, result in enumerate(results, 1):
        if args.json:
            sys.stdout.write(json.dumps(result.to_dict()) + "\n")
            continue
        if len(results) > 1:
            sys.stdout.write(f"--- {'beam' if beams else 'sample'} {i} of {len(results)} ---\n")
        sys.stdout.write(f"{result}\n")
    return 0
