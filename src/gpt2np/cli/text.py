"""``gpt2np score``, ``tokenize`` and ``detokenize``: a text file's perplexity, text to ids and
back.

tokenize and detokenize stream: a file or stdin is read, encoded (or decoded) and printed a
block at a time, so ``gpt2np tokenize --file big.txt`` holds about a block of text, not the
file, and ``tokenize --file a.txt | detokenize`` prints a.txt exactly. ``--json`` prints one
JSON object (docs/cli.md describes each).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

import regex

from .common import (
    add_model_args,
    load_model,
    parse_ids,
    pos_int,
    progress_of,
    read_utf8,
    strip_final_newline,
)
from .inputs import MAX_ARG_BYTES, InputError, input_name, stream_text

if TYPE_CHECKING:
    from ..tokenizer.tokenizer import Tokenizer

__all__ = ["add_parsers", "iter_ids", "run_detokenize", "run_score", "run_tokenize"]

#: The longest stretch of text without whitespace that tokenize holds (the tokenizer encodes
#: text up to a place where its pre-tokeniser always cuts, which needs whitespace; whitespace
#: itself it holds a bounded window of).
MAX_STRETCH = 4 << 20
#: The longest run of characters detokenize reads as one id ("50256" is 5).
MAX_ID_CHARS = 64
DETOKENIZE_EXAMPLE = "gpt2np detokenize 15496 995"


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
    p.add_argument("--json", action="store_true", help="print one JSON object (docs/cli.md)")
    p.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    text = read_utf8(args.file)
    progress = progress_of(args)
    model = load_model(args.model, args.dtype, args.revision, progress)
    from ..scoring.logprobs import score

    result = score(model, text, stride=args.stride, max_len=args.max_len, progress=progress)
    if args.json:
        record = {"model": args.model, "file": args.file, "n_tokens": result.n_tokens,
                  "n_scored": result.n_scored, "nll": _number(result.nll),
                  "mean_nll": _number(result.mean_nll),
                  "perplexity": _number(result.perplexity)}  # fmt: skip
        if args.per_token:
            record["ids"] = result.ids.tolist()
            record["token_logprobs"] = [_number(lp) for lp in result.token_logprobs.tolist()]
            record["context_len"] = result.context_len.tolist()
        print(json.dumps(record, ensure_ascii=False, allow_nan=False))
        return 0
    if args.per_token:
        tok = model.tokenizer
        for i, (lp, ctx) in enumerate(zip(result.token_logprobs, result.context_len), 1):
            token = tok.decode([int(result.ids[i])])
            print(f"{int(result.ids[i])}\t{token!r}\t{lp:.6f}\t{int(ctx)}")
    print(f"tokens      {result.n_tokens} ({result.n_scored} scored)")
    print(f"nll         {result.nll:.6f} nats ({result.mean_nll:.6f} per token)")
    print(f"perplexity  {result.perplexity:.6f}")
    return 0


def _number(x: float) -> float | None:
    """JSON has no inf or nan: those are null."""
    return x if math.isfinite(x) else None


def _add_tokenize(sub: Any) -> None:
    p = sub.add_parser(
        "tokenize",
        help="print the token ids of TEXT or of a file (GPT-2's vocabulary)",
        description="Print the token ids of TEXT, or of FILE (--file FILE), on one line. "
        "The text is encoded exactly as given, every byte, a final newline too (--strip-newline "
        "drops one). A file or stdin is read and encoded a block at a time: memory does not "
        "grow with its size.",
    )
    p.add_argument("text", metavar="TEXT", nargs="?", help="the text to encode; - reads stdin")
    p.add_argument(
        "-f", "--file", metavar="FILE", help="encode this UTF-8 file instead (- reads stdin)"
    )
    p.add_argument(
        "--strip-newline",
        action="store_true",
        help='drop one final newline ("\\n" or "\\r\\n"), such as echo adds',
    )
    p.add_argument(
        "--allow-special",
        action="store_true",
        help="encode <|endoftext|> as the special token (otherwise it is an error)",
    )
    p.add_argument(
        "--json", action="store_true", help='print {"ids": [...], "n_tokens": N} (docs/cli.md)'
    )
    p.set_defaults(func=run_tokenize, streams_stdin=True)
    d = sub.add_parser(
        "detokenize",
        help="print the text of token ids",
        description="Print the text of token ids, exactly (a newline follows only on a "
        "terminal). Ids read from stdin are decoded as they arrive.",
    )
    d.add_argument(
        "ids",
        metavar="IDS",
        nargs="*",
        help='e.g. "15496 995", 15496,995 or "[15496, 995]"; none or - reads them from stdin',
    )
    d.set_defaults(func=run_detokenize, streams_stdin=True)


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Tokenizer:
    """The bundled tokenizer, built once (a third of a second) for every call of main."""
    from ..tokenizer.tokenizer import Tokenizer

    return Tokenizer()


def run_tokenize(args: argparse.Namespace) -> int:
    if (args.text is None) == (args.file is None):
        raise ValueError("give TEXT or --file FILE, one of them (- reads stdin)")
    tokenizer = _tokenizer()
    if args.file is None and args.text != "-":
        chunks: Iterable[str] = [args.text]
        name = "TEXT"
    else:
        source = args.text if args.file is None else args.file
        name = input_name(source)
        chunks = _bounded_stretches(stream_text(source), name)
    if args.strip_newline:
        chunks = _strip_final_newline(chunks)
    ids = tokenizer.encode_stream(chunks, allowed_special="all" if args.allow_special else ())
    special = ", ".join(tokenizer.special_tokens)
    _write_ids(_hint_special(ids, name, special), sys.stdout, args.json)
    return 0


def _write_ids(batches: Iterator[list[int]], out: TextIO, as_json: bool) -> None:
    """The ids, space-separated on one line (or as {"ids": [...], "n_tokens": N}), written
    batch by batch as they come. With ``as_json``, an input refused on the way still ends a
    complete object: the ids before the refusal and ``"error"``, its message (and the error
    is raised, for the exit status and stderr's line)."""
    n, sep = 0, ", " if as_json else " "
    out.write('{"ids": [' if as_json else "")
    try:
        for ids in batches:
            out.write((sep if n else "") + sep.join(map(str, ids)))
            n += len(ids)
    except (ValueError, OSError) as e:
        if as_json:
            out.write(f'], "n_tokens": {n}, "error": {json.dumps(str(e), ensure_ascii=False)}}}\n')
        raise
    out.write(f'], "n_tokens": {n}}}\n' if as_json else "\n")


def _hint_special(batches: Iterator[list[int]], name: str, special: str) -> Iterator[list[int]]:
    """The tokenizer refuses a disallowed special token with a ValueError that speaks of its
    arguments; say the command's flag instead. A run of whitespace it refuses is named as what
    the input holds."""
    from ..tokenizer.runs import MAX_RUNS, WhitespaceRunError, describe

    try:
        yield from batches
    except InputError:
        raise
    except WhitespaceRunError as e:
        raise InputError(
            f"{name} has a run of over {e.chars:,} whitespace characters, over {e.window:,} of "
            f"them in a row of {describe(e.held)} with no place where a token boundary is "
            f"certain: more than gpt2np tokenize holds at once (over {MAX_RUNS:,} runs of bytes)"
        ) from None
    except ValueError:
        raise ValueError(
            f"{name} contains the special token {special}; pass --allow-special to encode it as "
            "that token"
        ) from None


_SPACE = regex.compile(r"\s", regex.REVERSE)  # the last whitespace, as the pre-tokeniser reads it


def _bounded_stretches(chunks: Iterable[str], name: str) -> Iterator[str]:
    """``chunks``, refusing a stretch of more than :data:`MAX_STRETCH` characters without
    whitespace, which the tokenizer would hold whole (``cat /dev/zero | gpt2np tokenize -``
    would grow without end): it encodes text up to a place where its pre-tokeniser always cuts,
    a non-space before whitespace. Whitespace of any kind, however long, it holds a bounded
    window of (:meth:`~gpt2np.tokenizer.tokenizer.Tokenizer.encode_stream`), so it does not
    count; the rare run it cannot hold so is refused by the tokenizer (:func:`_hint_special`)."""
    since = 0  # characters since the last whitespace
    for chunk in chunks:
        found = _SPACE.search(chunk)
        since = len(chunk) - found.end() if found else since + len(chunk)
        if since > MAX_STRETCH:
            raise InputError(
                f"{name} has over {MAX_STRETCH:,} characters without a space or line break (no "
                "whitespace at all), more than gpt2np tokenize holds at once"
            )
        yield chunk


def _strip_final_newline(chunks: Iterable[str]) -> Iterator[str]:
    """``chunks`` without one final newline: the last two characters are held back."""
    held = ""
    for chunk in chunks:
        text = held + chunk
        held = text[-2:]
        if text[:-2]:
            yield text[:-2]
    if strip_final_newline(held):
        yield strip_final_newline(held)


def run_detokenize(args: argparse.Namespace) -> int:
    if not args.ids or args.ids == ["-"]:
        if not args.ids and (sys.stdin is None or sys.stdin.isatty()):
            raise ValueError(  # nothing piped: waiting would look hung
                f"no IDS given; e.g. {DETOKENIZE_EXAMPLE}, or pipe them: "
                'gpt2np tokenize "Hello world" | gpt2np detokenize'
            )
        chunks: Iterable[str] = stream_text("-")
    else:
        chunks = [" ".join(args.ids)]
    decoder, out, last = _tokenizer().stream_decoder(), sys.stdout, ""
    for ids in iter_ids(chunks):
        text = decoder.feed(ids)
        out.write(text)
        last = text or last
    text = decoder.flush()
    out.write(text)
    if _is_terminal(out) and not (last + text).endswith("\n"):
        out.write("\n")  # so that the shell's prompt starts on a line of its own
    return 0


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


_LAST_SEPARATOR = re.compile(r"[\s,][^\s,]*\Z")


def iter_ids(chunks: Iterable[str]) -> Iterator[list[int]]:
    """The token ids in a text that arrives in ``chunks``, a list of ids at a time.

    Ids separated by spaces, commas or newlines are parsed as they come (memory holds a chunk);
    a list as Python or NumPy prints it ("[15496, 995]", "array([...])") is read whole, up to
    :data:`~gpt2np.cli.inputs.MAX_ARG_BYTES`, and parsed by
    :func:`~gpt2np.cli.common.parse_ids`, whose errors these are.
    """
    chunks, buf = iter(chunks), ""
    for chunk in chunks:
        buf = (buf + chunk).lstrip()  # leading whitespace, however long, is not held
        if buf:
            break
    head = buf.lstrip()
    if head.startswith(("[", "array(")):
        yield parse_ids(
            buf + _rest(chunks, MAX_ARG_BYTES - len(buf)), "token ids", DETOKENIZE_EXAMPLE
        )
        return
    found = False
    for chunk in _prepend("", chunks):
        buf += chunk
        match = _LAST_SEPARATOR.search(buf)
        if match:
            done, buf = buf[: match.start() + 1], buf[match.start() + 1 :]
            if done.replace(",", " ").split():
                found = True
                yield _parse_part(done)
        if len(buf) > MAX_ID_CHARS:
            raise ValueError(
                f"token ids must be integers separated by spaces or commas, got {buf[:20]!r}..."
            )
    if buf.strip() or not found:  # "no token ids given" when there were none at all
        yield _parse_part(buf)


def _parse_part(text: str) -> list[int]:
    """The ids of a part of a plain list (brackets there belong to no list)."""
    if "[" in text or "]" in text:
        raise ValueError(f"token ids have unbalanced brackets: {text.strip()[:40]!r}")
    return parse_ids(text, "token ids", DETOKENIZE_EXAMPLE)


def _prepend(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def _rest(chunks: Iterator[str], limit: int) -> str:
    """The rest of ``chunks`` joined, at most ``limit`` characters of it."""
    parts, size = [], 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise InputError(f"more than {MAX_ARG_BYTES >> 20} MiB of ids in one list")
        parts.append(chunk)
    return "".join(parts)
