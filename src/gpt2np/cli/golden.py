"""The ``gpt2np dump``, ``compare``, ``dump-tokenizer``, ``dump-sampler`` and ``check-port``
subcommands (golden files for ports, and the conformance runner that drives a port over them).

``gpt2np.cli.app`` calls :func:`add_parsers`; each subcommand's handler takes the parsed
arguments and returns the exit code. User mistakes raise ValueError / CheckpointError, which the
main CLI prints as one line.

    gpt2np dump [--model 124M] (--prompt TEXT ... | --ids "1,2;3,4") --out golden.npz
                [--prefix-len N | --prefix TEXT | --prefix-ids IDS] [--targets IDS]
                [--dtype float64] [--names GLOB ...]
    gpt2np compare GOLDEN PORT [--precision P] [--rtol R] [--atol A] [--only GLOB ...]
                   [--allow-missing GLOB ...] [--strict] [--only-failures | --all | --json]
                   [--allow-mismatch KEY ...]
    gpt2np dump-tokenizer --out tokenizer.json [--text TEXT ...] [--model DIR] [--format bin]
    gpt2np dump-sampler --out sampler.npz [--temperature T] [--top-k K] [--top-p P] [--min-p M]
                        [--repetition-penalty R] [--presence-penalty A] [--frequency-penalty A]
                        [--steps N] [--vocab V] [--seed S] [--logits FILE.npy]
    gpt2np dump-sampler --suite --out DIR [--steps N] [--vocab V] [--seed S]
    gpt2np check-port [--model 124M] [--suite quick|full] [--precision P] [--json] [--keep DIR]
                      [--case NAME ...] [--timeout SECONDS] [--allow-missing GLOB ...]
                      -- COMMAND [ARG ...]

``compare`` tells the kinds of golden file apart (:mod:`gpt2np.golden.kinds`): a forward
pass's, a tokenizer's, a sampler's, and a sampler suite's directory.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

from ..errors import CheckpointError
from ..golden import dump
from ..golden.diff import PRECISIONS, compare
from ..golden.diff.engine import CHECKED_KEYS
from ..golden.kinds import golden_kind
from .common import load_model, nonneg_int, pos_int, progress_of, read_stdin_text
from .generate import add_option_flag

#: The generation options a sampler golden records, as generate's flags, with the values that
#: turn each off (the sampler golden has no model whose generation_config.json could say).
SAMPLER_OPTIONS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                   "repetition_penalty": 1.0, "presence_penalty": 0.0,
                   "frequency_penalty": 0.0}  # fmt: skip

__all__ = [
    "add_parsers",
    "parse_rows",
    "run_check_port",
    "run_compare",
    "run_dump",
    "run_dump_sampler",
    "run_dump_tokenizer",
]


def add_parsers(subparsers: Any) -> None:
    """Register ``dump``, ``compare``, ``dump-tokenizer`` and ``dump-sampler`` on an
    ``argparse`` subparsers object."""
    _add_dump(subparsers)
    _add_compare(subparsers)
    _add_dump_tokenizer(subparsers)
    _add_dump_sampler(subparsers)
    _add_check_port(subparsers)


def _add_dump(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "dump",
        help="write every intermediate of a forward pass (or a decode step) to a golden .npz",
        description="Trace a prompt through a model and write every named intermediate "
        "(embed.*, h{i}.*, ln_f, logits, the next-token loss) plus a JSON manifest to an .npz "
        "that a port can diff against with 'gpt2np compare'. With a prefix, the prefix's keys "
        "and values become the past and the rest is traced as one KV-cached step: make the step "
        "2 tokens or more, since a 1-token step cannot show a step that misses its causal mask "
        "or puts the past after its own keys. Layout: docs/golden-files.md.",
    )
    p.add_argument(
        "--model",
        default="124M",
        help="published name, a model directory or a Hub repo id (default: 124M)",
    )
    p.add_argument("--revision", help="the Hub repo's branch, tag or commit (default main)")
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument(
        "--prompt", action="append", help="text to encode (repeat it for a batch of rows)"
    )
    text.add_argument(
        "--ids", help="token ids instead of text: '464,3290', rows separated by ';' ('1,2;3,4')"
    )
    prefix = p.add_mutually_exclusive_group()
    prefix.add_argument(
        "--prefix-len",
        type=int,
        metavar="N",
        help="the first N positions are the prefix; the rest is one KV-cached step (2 or "
        "more tokens, to test the step's mask)",
    )
    prefix.add_argument("--prefix", metavar="TEXT", help="a prefix text before every row")
    prefix.add_argument("--prefix-ids", metavar="IDS", help="prefix token ids, rows by ';'")
    p.add_argument("--targets", metavar="IDS", help="loss targets [B, T] (default: next token)")
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
        help="keep only traced tensors matching this glob, e.g. 'h0.*' (repeatable)",
    )
    p.set_defaults(func=run_dump)


def _add_compare(subparsers: Any) -> None:
    c = subparsers.add_parser(
        "compare",
        help="diff a port's tensors against a golden .npz; exit 1 if any diverges",
        description="Compare each tensor of GOLDEN, in forward order, with PORT's; report the "
        "first that diverges (some element has |port - golden| > atol + rtol*|golden|), where "
        "its error is born, and what a failing tensor equals instead. PORT may be an .npz or a "
        "directory of NAME.npy files. Exit 1 if the comparison fails.",
    )
    c.add_argument(
        "golden",
        help="the reference: a forward pass's .npz (from 'gpt2np dump'), a tokenizer .json, a "
        "sampler .npz, or a sampler suite's directory (dump-sampler --suite)",
    )
    c.add_argument(
        "port",
        help="the port's .npz, or a directory of NAME.npy files (for a sampler suite: a "
        "directory with NAME/ or NAME.npz for each setting)",
    )
    c.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="float32",
        help="the port's precision, which sets the tolerances "
        + ", ".join(f"{k}: rtol {r:g} atol {a:g}" for k, (r, a) in PRECISIONS.items()),
    )
    c.add_argument("--rtol", type=float, help="override the preset's rtol")
    c.add_argument("--atol", type=float, help="override the preset's atol")
    c.add_argument(
        "--only",
        action="append",
        metavar="GLOB",
        help="compare just the golden tensors matching this glob, e.g. 'h0.*' or 'logits' "
        "(repeatable): for a port that writes only those",
    )
    c.add_argument(
        "--allow-missing",
        action="append",
        metavar="GLOB",
        help="golden tensors matching this glob may be absent from the port, e.g. "
        "'h*.attn.scores', or '*' for any (repeatable); any other missing tensor fails",
    )
    c.add_argument(
        "--strict",
        action="store_true",
        help="also fail when the port lacks the inputs (ids, prefix_ids, targets, past) or the "
        "loss (loss, loss.mean)",
    )
    view = c.add_mutually_exclusive_group()
    view.add_argument("--only-failures", action="store_true", help="list every failing tensor")
    view.add_argument("--all", action="store_true", help="list every tensor, passing or not")
    view.add_argument("--json", action="store_true", help="print the whole report as JSON")
    c.add_argument(
        "--allow-mismatch",
        action="append",
        default=[],
        metavar="KEY",
        choices=[*CHECKED_KEYS, "all"],
        help="do not fail when the manifests differ in KEY (" + ", ".join(CHECKED_KEYS) + ", all)",
    )
    c.set_defaults(func=run_compare)


def _add_dump_tokenizer(subparsers: Any) -> None:
    t = subparsers.add_parser(
        "dump-tokenizer",
        help="write a tokenizer golden file: pieces, byte symbols, merges rank by rank, ids",
        description="Tokenize a built-in corpus of the texts that break ports (contractions, "
        "runs of spaces and newlines, digits, emoji, CJK, combining marks, special tokens, "
        "invalid UTF-8 through decode), or your own texts, and write each text's "
        "pre-tokenizer pieces, each piece's byte symbols, its BPE merges rank by rank and the "
        "ids as JSON. A port writes the same for the same texts; 'gpt2np compare' names the "
        "first text, piece and merge where it departs. Format: docs/golden-files.md.",
    )
    t.add_argument("--out", required=True, help="the .json file to write")
    t.add_argument(
        "--format",
        choices=["json", "bin"],
        default="json",
        help="json (default: what 'gpt2np compare' reads) or bin, the same cases in a binary "
        "layout for readers without JSON, e.g. examples/read_tokenizer_golden.c",
    )
    t.add_argument(
        "--text", action="append", metavar="TEXT", help="a text instead of the built-in corpus "
        "(repeatable; - reads stdin)",
    )  # fmt: skip
    t.add_argument(
        "--allow-special",
        action="store_true",
        help="encode <|endoftext|> in --text as the special token (otherwise as text)",
    )
    t.add_argument(
        "--model",
        metavar="DIR",
        help="a model directory whose encoder.json + vocab.bpe (or vocab.json + merges.txt, or "
        "tokenizer.json) to use (default: GPT-2's bundled vocabulary)",
    )
    t.set_defaults(func=run_dump_tokenizer)


def _add_dump_sampler(subparsers: Any) -> None:
    d = subparsers.add_parser(
        "dump-sampler",
        help="write a sampler golden file: each stage's logits and the chosen id per step",
        description="Run gpt2np's sampler on logits (synthetic ones shaped like a language "
        "model's, or --logits), a setting and a stream of uniform draws, and write each step's "
        "logits after the penalties, the temperature, top-k, top-p and min-p, the final "
        "distribution and the chosen id. A port's sampler, fed the same logits, history and "
        "draws, is checked with 'gpt2np compare' without matching anyone's random generator. "
        "Format: docs/golden-files.md.",
    )
    d.add_argument("--out", required=True, help="the .npz to write (with --suite: a directory)")
    d.add_argument(
        "--suite",
        action="store_true",
        help="write the sampler suite instead of one setting: one golden per setting (each "
        "filter and penalty alone, greedy, repeated ids, a tied top-k with top-p, everything in "
        "HF's order) and suite.json, in the directory --out; compare it with "
        "'gpt2np compare DIR PORT_DIR'",
    )
    d.add_argument("--logits", metavar="FILE.npy", help="logits [steps, V] (default: synthetic)")
    d.add_argument(
        "--steps", type=pos_int, help="steps of synthetic logits (8; the suite's: 6, at least 4)"
    )
    d.add_argument("--vocab", type=pos_int, default=50257, help="their vocabulary (50257)")
    d.add_argument("--seed", type=nonneg_int, default=0, help="seed of the logits and draws")
    for name in SAMPLER_OPTIONS:  # generate's flags: one definition of each option
        add_option_flag(d, name)
    d.set_defaults(**SAMPLER_OPTIONS)
    d.set_defaults(func=run_dump_sampler)


def _add_check_port(subparsers: Any) -> None:
    from ..golden.check import SUITES

    c = subparsers.add_parser(
        "check-port",
        usage="gpt2np check-port [--model M] [--suite quick|full] [--precision P] [--case NAME] "
        "[--json] [--keep DIR] [--timeout SECONDS] [--allow-missing GLOB] -- COMMAND [ARG ...]",
        help="run a port's program over a suite of golden cases and compare what it writes",
        description="For each case of a versioned suite (a plain forward pass, a decode step, a "
        "long cache, a left-padded batch, the tokenizer corpus, sampler settings) write the "
        "golden file and a case.json into a case directory, run 'COMMAND ARG... CASE_DIR', and "
        "compare what the port wrote into CASE_DIR/port/ with the golden. Prints one table "
        "(case, result, first divergence, hint); exit 0 if every case passes, 1 if any fails, "
        "2 on a usage error. Protocol: docs/golden-files.md, 'Checking a port'.",
    )
    c.add_argument(
        "--model",
        default="124M",
        help="published name, a model directory or a Hub repo id (default: 124M); the port is "
        "given its weights as HF config.json + model.safetensors (float32)",
    )
    c.add_argument("--revision", help="the Hub repo's branch, tag or commit (default main)")
    c.add_argument("--suite", choices=SUITES, default="quick", help="the cases (default quick)")
    c.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="float32",
        help="the port's precision, which sets compare's tolerances (default float32)",
    )
    c.add_argument(
        "--case",
        action="append",
        metavar="NAME",
        help="run only this case of the suite (repeatable), e.g. decode-step",
    )
    c.add_argument("--json", action="store_true", help="print the table as JSON")
    c.add_argument(
        "--keep",
        metavar="DIR",
        help="write the case directories into DIR (new or empty) and keep them "
        "(default: a temporary directory, removed afterwards)",
    )
    c.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="kill a port still running after this long on one case, a safety net for a hung "
        "port (default 600; 0: no limit)",
    )
    c.add_argument(
        "--allow-missing",
        action="append",
        metavar="GLOB",
        help="golden tensors matching this glob may be absent from a forward case's outputs, "
        "e.g. 'h*.attn.scores' (repeatable)",
    )
    c.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARG ...]",
        help="the port's program; it is run as COMMAND ARG... CASE_DIR",
    )
    c.set_defaults(func=run_check_port)


def parse_rows(text: str, what: str) -> list[list[int]]:
    """'1,2;3 4' -> [[1, 2], [3, 4]] (rows may differ in length); ValueError naming ``what``."""
    rows = []
    for part in text.split(";"):
        items = part.replace(",", " ").split()
        if not items:
            raise ValueError(f"{what}: an empty row in {text!r}; e.g. {what} '464,3290;464,318'")
        try:  # not str.isdigit: it accepts "²", which int() refuses with a bare message
            rows.append([int(i) for i in items])
        except ValueError:
            bad = next(i for i in items if not _is_int(i))
            raise ValueError(
                f"{what} must be integers separated by spaces or commas, rows by ';', got {bad!r}"
            ) from None
    return rows


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def run_dump(args: argparse.Namespace) -> int:
    """Load the model, dump the trace to --out, print one summary line."""
    ids_or_text: Any = args.prompt if args.ids is None else parse_rows(args.ids, "--ids")
    if isinstance(ids_or_text, list) and len(ids_or_text) == 1 and args.ids is None:
        ids_or_text = ids_or_text[0]
    prefix: Any = args.prefix_len if args.prefix_len is not None else args.prefix
    if args.prefix_ids is not None:
        prefix = parse_rows(args.prefix_ids, "--prefix-ids")
    targets = None if args.targets is None else parse_rows(args.targets, "--targets")
    # as stored: the manifest hashes the weights as stored
    model = load_model(args.model, None, args.revision, progress=progress_of(args))
    m = dump(
        model, ids_or_text, args.out, dtype=args.dtype, names=args.names,
        model_name=args.model, prefix=prefix, targets=targets,
    )  # fmt: skip
    ids = m["ids"]
    first = ", ".join(map(str, ids[0][:4])) + (", …" if len(ids[0]) > 4 else "")
    past = f", T_past {m['T_past']}" if m["T_past"] else ""
    pad = f", left padding {m['pad']}" if m["pad"] else ""
    print(
        f"wrote {args.out}: {len(m['tensors'])} tensors, ids [{len(ids)}, {len(ids[0])}] "
        f"({first}){past}{pad}, {m['dtype']}, weights sha256 {m['weights_sha256'][:16]}…"
    )
    if m["T_past"] and len(ids[0]) == 1:
        sys.stderr.write(
            "gpt2np: note: a 1-token step cannot show a missing causal mask on the step, nor the "
            "past placed after the step's keys; a step of 2 or more tokens can\n"
        )
    return 0


def run_dump_tokenizer(args: argparse.Namespace) -> int:
    """Write the tokenizer golden file, print one summary line."""
    from ..golden.tokens import dump_tokenizer

    texts = args.text
    if texts is not None:
        texts = [read_stdin_text() if t == "-" else t for t in texts]
    golden = dump_tokenizer(
        args.out,
        _tokenizer_of(args.model),
        texts,
        allowed_special="all" if args.allow_special else [],
        format=args.format,
    )
    cases = golden["cases"]
    ids = sum(len(c.get("ids", c.get("decode", []))) for c in cases)
    print(f"wrote {args.out}: {len(cases)} cases, {ids} ids, {golden['n_vocab']} tokens")
    return 0


def run_dump_sampler(args: argparse.Namespace) -> int:
    """Write the sampler golden file, print one summary line."""
    import numpy as np

    from ..golden.npy import read_header
    from ..golden.reader import open_file
    from ..golden.sampler import Setting, dump_sampler, golden_bytes
    from ..support.sizes import check_bytes

    if args.suite:
        return _dump_suite(args)
    setting = Setting(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
    )  # fmt: skip
    logits = None
    if args.logits is not None:
        with open_file(args.logits) as f:
            try:  # the header's shape is checked before np.load allocates it
                shape = read_header(f.read).shape
            except ValueError as e:
                raise CheckpointError(f"{args.logits}: {e}") from None
            if len(shape) == 2:
                check_bytes(golden_bytes(*shape), f"a sampler golden of logits {list(shape)}",
                            args.logits)  # fmt: skip
            f.seek(0)
            logits = np.load(f, allow_pickle=False)
    steps = 8 if args.steps is None else args.steps
    m = dump_sampler(args.out, setting, logits, steps=steps, n_vocab=args.vocab, seed=args.seed)
    print(f"wrote {args.out}: {m['steps']} steps over {m['n_vocab']} ids, {m['setting']}")
    return 0


def _dump_suite(args: argparse.Namespace) -> int:
    """Write the sampler suite to the directory --out; the setting's flags and --logits are
    refused (the suite has its own settings and logits)."""
    from ..golden.sampler import dump_sampler_suite

    given = [name for name, off in SAMPLER_OPTIONS.items() if getattr(args, name) != off]
    if args.logits is not None:
        given.append("logits")
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"--suite writes its own settings and logits: drop {flags}")
    steps = 6 if args.steps is None else args.steps
    index = dump_sampler_suite(args.out, steps=steps, n_vocab=args.vocab, seed=args.seed)
    names = ", ".join(e["name"] for e in index["settings"])
    print(
        f"wrote {args.out}: {len(index['settings'])} sampler goldens ({names}), {steps} steps "
        f"over {args.vocab} ids, and suite.json (suite version {index['suite_version']})"
    )
    return 0


def _tokenizer_of(model: Any) -> Any:
    """The tokenizer of a model directory's vocabulary files, or None for GPT-2's bundled one."""
    if model is None:
        return None
    from ..tokenizer import Tokenizer

    d = pathlib.Path(model)
    for pair in (("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt")):
        if all((d / f).is_file() for f in pair):
            return Tokenizer.from_files(d / pair[0], d / pair[1])
    if (d / "tokenizer.json").is_file():
        return Tokenizer.from_tokenizer_json(d / "tokenizer.json")
    raise ValueError(f"{model}: no encoder.json + vocab.bpe, vocab.json + merges.txt or "
                     "tokenizer.json in that directory")  # fmt: skip


def run_compare(args: argparse.Namespace) -> int:
    """Print the comparison; 0 when it passes, else 1."""
    kind = golden_kind(args.golden)
    if kind != "forward":
        return _compare_other(kind, args)
    report = compare(
        args.golden, args.port, rtol=args.rtol, atol=args.atol, strict=args.strict,
        precision=args.precision, allow_mismatch=args.allow_mismatch, only=args.only,
        allow_missing=args.allow_missing,
    )  # fmt: skip
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        print(report.format("failures" if args.only_failures else "all" if args.all else "default"))
    return 0 if report.ok else 1


def _compare_other(kind: str, args: argparse.Namespace) -> int:
    """A tokenizer or sampler golden file, or a sampler suite: its own comparison and report."""
    if kind == "tokenizer binary":
        raise ValueError(
            f"{args.golden}: a binary tokenizer golden (--format bin) is for "
            "readers without JSON; compare the JSON one (dump-tokenizer's default)"
        )
    if kind == "tokenizer":
        from ..golden.tokens_diff import compare_tokenizer

        report: Any = compare_tokenizer(args.golden, args.port)
    elif kind == "sampler suite":
        from ..golden.sampler_diff import compare_sampler_suite

        report = compare_sampler_suite(
            args.golden, args.port, rtol=args.rtol, atol=args.atol, precision=args.precision
        )
    else:
        from ..golden.sampler_diff import compare_sampler

        report = compare_sampler(
            args.golden, args.port, rtol=args.rtol, atol=args.atol, precision=args.precision
        )
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        print(report.format("failures" if args.only_failures or args.all else "default"))
    return 0 if report.ok else 1


def run_check_port(args: argparse.Namespace) -> int:
    """Run the suite; print the table (or JSON); 0 if every case passes, 1 if not, 2 when the
    command is missing or cannot be found."""
    import shutil
    import tempfile

    from ..api import save
    from ..golden.check import check_port

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    usage = None
    if not command:
        usage = "check-port: give the port's command after --, e.g. -- node port.js"
    elif shutil.which(command[0]) is None:
        usage = f"check-port: the port's command {command[0]!r} is not found or not executable"
    elif args.timeout < 0:
        usage = f"check-port: --timeout must be >= 0, got {args.timeout:g}"
    if usage is not None:
        sys.stderr.write(f"gpt2np: error: {usage} (see 'gpt2np check-port --help')\n")
        return 2
    if args.keep is not None:
        work = pathlib.Path(args.keep)
        if work.exists() and (not work.is_dir() or any(work.iterdir())):
            raise ValueError(f"--keep {args.keep}: not an empty directory")
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-check-port-"))
    quiet = getattr(args, "quiet", False)
    try:
        model = load_model(args.model, "float32", args.revision, progress=progress_of(args))
        save(model, work / "model")  # the one format the port reads
        report = check_port(
            command, model, work / "model", work, suite=args.suite, precision=args.precision,
            timeout=args.timeout or None, allow_missing=args.allow_missing,
            model_name=args.model, cases=args.case,
            progress=None if quiet else (lambda line: sys.stderr.write(f"gpt2np: {line}\n")),
        )  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.keep is not None:
        report.work_dir = str(work.resolve())
    else:  # removed: name no directory that is gone
        for result in report.results:
            result.case_dir = ""
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        print(report.format())
    return 0 if report.ok else 1
