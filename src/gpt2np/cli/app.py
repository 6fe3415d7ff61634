"""The ``gpt2np`` command (also ``python -m gpt2np``).

    gpt2np generate "Alan Turing theorized" --max-new-tokens 40 --temperature 0
    gpt2np score essay.txt            (or - for stdin): tokens, NLL, perplexity
    gpt2np tokenize "Hello world"     -> 15496 995
    gpt2np detokenize "15496 995"     -> Hello world      ("15496,995" and "[15496, 995]" too)
    gpt2np download 124M              -> $GPT2NP_HOME/models/124M
    gpt2np convert models/124M out/   -> HF config.json + model.safetensors
    gpt2np info --model 124M          hparams, parameter count, dtype, where the files are
    gpt2np dump / compare             golden files for ports (gpt2np/cli_trace.py)

Pipes: "-" in place of a text or ids argument reads it from stdin, and ``detokenize`` with no
IDS reads them from stdin: ``echo Hello | gpt2np generate -``, ``gpt2np tokenize "Hello world" |
gpt2np detokenize``. A text read so loses one final newline (the one ``echo`` adds), so that
``tokenize -`` of what ``detokenize`` printed gives the same ids back.

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
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, Callable, Optional, TypeVar

from . import golden
from .common import load_model, parse_ids, progress_of, read_stdin_text

__all__ = ["build_parser", "main"]

EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
T = TypeVar("T")
#: The text and ids arguments (of every command) that read stdin when given as "-".
STDIN_ARGS = ("prompt", "text", "ids")


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
        _read_stdin_args(args)
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
    _add_generate(sub)
    _add_score(sub)
    _add_tokenize(sub)
    _add_download(sub)
    _add_convert(sub)
    _add_info(sub)
    golden.add_parsers(sub)
    for command in sub.choices.values():  # after the command too; SUPPRESS keeps a -q before it
        command.add_argument(
            "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP
        )
    return parser


QUIET_HELP = "no progress bars or notices on stderr (errors and warnings still go there)"


def _read_stdin_args(args: argparse.Namespace) -> None:
    """Replace a "-" given for a text or ids argument (:data:`STDIN_ARGS`) by stdin's text."""
    for name in STDIN_ARGS:
        value = getattr(args, name, None)
        if value == "-":
            setattr(args, name, read_stdin_text())
        elif isinstance(value, list) and value == ["-"]:  # detokenize's IDS
            setattr(args, name, [read_stdin_text()])


# -- flag types: argparse turns an ArgumentTypeError into "argument --x: message" -----------------


def _nonneg_int(text: str) -> int:
    value = _parse(int, text, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _pos_int(text: str) -> int:
    value = _parse(int, text, "an integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _temperature(text: str) -> float:
    value = _parse(float, text, "a number")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0 is greedy), got {text}")
    return value


def _top_p(text: str) -> float:
    value = _parse(float, text, "a number")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (1 is off), got {text}")
    return value


def _parse(kind: Callable[[str], T], text: str, what: str) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def _add_model_args(p: argparse.ArgumentParser, dtype: bool = True) -> None:
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


# -- generate ----------------------------------------------------------------------------------


def _add_generate(sub: Any) -> None:
    p = sub.add_parser(
        "generate",
        help="continue a prompt, streaming the text to stdout",
        description="Continue PROMPT and stream the new text to stdout. <|endoftext|> ends it; "
        'an empty PROMPT ("") gives an unconditional sample. Several samples (-n), beam search '
        "and --logprobs print when they are complete.",
    )
    p.add_argument("prompt", metavar="PROMPT", help="the text to continue; - reads stdin")
    _add_model_args(p)
    p.add_argument("--max-new-tokens", type=_nonneg_int, default=50, help="default %(default)s")
    p.add_argument("--temperature", type=_temperature, help="0 is greedy; default 1 (sampling)")
    p.add_argument("--top-k", type=_nonneg_int, default=0, help="0 (default) is off")
    p.add_argument("--top-p", type=_top_p, default=1.0, help="nucleus mass; 1 (default) is off")
    p.add_argument("--seed", type=_nonneg_int, help="makes sampling reproducible")
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
        type=_pos_int,
        default=1,
        metavar="N",
        help="samples of the prompt (one prefill), or with --num-beams the N best",
    )
    p.add_argument("--echo", action="store_true", help="print the prompt before the continuation")
    p.add_argument(
        "--logprobs",
        type=_nonneg_int,
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
        type=_pos_float,
        default=1.0,
        metavar="THETA",
        help="CTRL's rule on every id seen, prompt included; 1 is off",
    )
    g.add_argument(
        "--presence-penalty",
        type=_float,
        default=0.0,
        metavar="A",
        help="OpenAI's: minus A from every token generated before",
    )
    g.add_argument(
        "--frequency-penalty",
        type=_float,
        default=0.0,
        metavar="A",
        help="OpenAI's: minus A for each time a token was generated before",
    )
    g.add_argument(
        "--no-repeat-ngram-size",
        type=_nonneg_int,
        default=0,
        metavar="N",
        help="never repeat an N-gram of the prompt and continuation",
    )
    g.add_argument(
        "--min-new-tokens",
        type=_nonneg_int,
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
    b.add_argument("--num-beams", type=_pos_int, default=1, metavar="K", help="1 (default) is off")
    b.add_argument(
        "--length-penalty",
        type=_float,
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


def _float(text: str) -> float:
    value = _parse(float, text, "a number")
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _pos_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


# -- score -------------------------------------------------------------------------------------


def _add_score(sub: Any) -> None:
    p = sub.add_parser(
        "score",
        help="NLL and perplexity of a text file",
        description="Score FILE (UTF-8 text; - reads stdin): print the number of tokens, the "
        "NLL in nats and the perplexity. Texts longer than the context use a strided sliding "
        "window.",
    )
    p.add_argument("file", metavar="FILE", help="a text file, or - for stdin")
    _add_model_args(p)
    p.add_argument("--stride", type=_pos_int, help="window step (default: window // 2)")
    p.add_argument("--max-len", type=_pos_int, help="window length (default: n_ctx)")
    p.add_argument(
        "--per-token", action="store_true", help="also print each token's log-prob and context"
    )
    p.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    text = _read_utf8(args.file)
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


def _read_utf8(file: str) -> str:
    """FILE (or stdin for "-") as strict UTF-8, byte for byte (see :func:`read_stdin_text`)."""
    if file == "-":
        return read_stdin_text(strip_newline=False)
    data = pathlib.Path(file).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{file}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


# -- tokenize / detokenize ---------------------------------------------------------------------


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


# -- download / convert / info -----------------------------------------------------------------


def _add_download(sub: Any) -> None:
    p = sub.add_parser("download", help="fetch OpenAI's release files of a model size")
    p.add_argument(
        "name", metavar="NAME", help="124M, 355M, 774M or 1558M (or gpt2, gpt2-medium, ...)"
    )
    p.add_argument("--models-dir", help="parent directory (default $GPT2NP_HOME/models)")
    p.add_argument("--base-url", help="download base (default $GPT2NP_BASE_URL or OpenAI's)")
    p.set_defaults(func=run_download)


def run_download(args: argparse.Namespace) -> int:
    from ..sources.openai import download

    progress = progress_of(args)
    print(
        download(args.name, models_dir=args.models_dir, base_url=args.base_url, progress=progress)
    )
    return 0


def _add_convert(sub: Any) -> None:
    p = sub.add_parser(
        "convert",
        help="write a model as HF config.json + model.safetensors",
        description="Load SRC (a published name or a directory) and write DST/config.json and "
        "DST/model.safetensors, loadable by gpt2np and by HF transformers.",
    )
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument("--revision", help="SRC's branch, tag or commit when it is a Hub repo id")
    p.add_argument("--dtype", choices=["float32", "float64"], help="cast the weights")
    p.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from ..api import save

    model = load_model(args.src, args.dtype, args.revision, progress_of(args))
    save(model, args.dst)
    print(f"wrote {os.path.join(args.dst, 'config.json')} and model.safetensors ({model!r})")
    return 0


def _add_info(sub: Any) -> None:
    p = sub.add_parser(
        "info",
        help="hparams, parameter count, dtype and where the files are",
        description="Describe a model. A published name that is not downloaded yet is "
        "described from its published hparams, without downloading.",
    )
    _add_model_args(p, dtype=False)
    p.set_defaults(func=run_info)


def run_info(args: argparse.Namespace) -> int:
    from ..checkpoint.conversion_cache import default_cache_dir
    from ..hparams import HPARAMS
    from ..sources.openai import KNOWN_NAMES, missing_files, model_dir, resolve_name

    path = pathlib.Path(args.model).expanduser()
    source, text_use = None, None
    if path.exists() or args.model not in KNOWN_NAMES:  # a directory, or a Hub repo
        model = load_model(args.model, None, args.revision, progress_of(args))
        hparams, dtype, source = model.hparams, str(model.dtype), model.source
        where = str(path.resolve()) if source is None else f"{source.repo} at {source.commit}"
        text_use = _text_use(model)
    else:
        name = resolve_name(args.model)  # ValueError naming the known names
        directory = model_dir(name)
        present = not missing_files(directory)
        hparams, dtype = HPARAMS[name], "float32 (as released)"
        where = f"{directory}" + ("" if present else " (not downloaded)")
    print(f"model       {args.model}")
    if source is not None:
        print(f"revision    {source.revision} -> commit {source.commit}")
        if source.offline:
            print(f"offline     {source.offline}")
    print(f"files       {where}")
    if source is not None:
        for name, file in source.files.items():
            mark = " (huggingface_hub's cache)" if name in source.hf_cache else ""
            print(f"  {name:<34} {file}{mark}")
    print(f"cache       {default_cache_dir()}")
    for key, value in hparams.to_dict().items():
        print(f"{key:<11} {value}")
    print(f"parameters  {hparams.n_params:,}")
    print(f"dtype       {dtype}")
    if text_use is not None:
        print(f"text        {text_use}")
    return 0


def _text_use(model: Any) -> str:
    """Whether the model's tokenizer can encode text, and if not, why."""
    from ..errors import CheckpointError

    try:
        tokenizer = model.tokenizer
    except (CheckpointError, ValueError) as e:
        return "no: " + " ".join(str(e).split()) + " (token ids work)"
    files = ", ".join(getattr(tokenizer, "files", ()))
    return f"yes ({files or 'GPT-2 bundled vocabulary'}; eot {model.eot_token})"


def _debug() -> bool:
    return os.environ.get("GPT2NP_DEBUG", "") not in ("", "0")
