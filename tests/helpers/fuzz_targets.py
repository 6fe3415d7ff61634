"""The fuzz targets (tests/helpers/fuzzing.py): gpt2np's readers on damaged copies of the fixtures.

A loader target passes a case when every load of the damaged directory (without the cache,
cold into a fresh cache, warm from it, and with ``verify=True``) gives exactly the fixture's
weights and hparams, or every one refuses it with a CheckpointError. A cache target damages the
cache's own files after a first load: the checkpoint is intact, so the only right outcome is
its weights (a damaged entry must be rebuilt, never served, never an error).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import pathlib
import struct

import numpy as np

from gpt2np import CheckpointError, HParams
from gpt2np.checkpoint import load_dir
from gpt2np.hparams import SHAPE_FIELDS
from gpt2np.params import flatten
from tests.helpers.fuzzing import FIXTURES, INTERESTING_JSON, Wrong, target

TF_SMALL, TF_SHARDED = FIXTURES / "tf" / "small", FIXTURES / "tf" / "sharded"
HF_SMALL, HF_SHARDED = FIXTURES / "hf" / "small", FIXTURES / "hf" / "sharded"
_VERIFY = "verify" in inspect.signature(load_dir).parameters
_expected: dict[str, tuple[HParams, dict[str, np.ndarray]]] = {}


def expected(src: pathlib.Path) -> tuple[HParams, dict[str, np.ndarray]]:
    """The fixture's hparams and flat weights as TF / HF wrote them (expected.npz)."""
    if str(src) not in _expected:
        with np.load(src / "expected.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        flat = {}
        for name, a in arrays.items():  # OpenAI's model/h0/ln_1/g or HF's h.0.ln_1.weight
            parts = name.removeprefix("model/").removeprefix("transformer.").replace("/", ".")
            parts = parts.split(".")
            if parts[0] == "lm_head":  # the tied head, not a weight of its own
                continue
            if parts[0] == "h":
                parts = ["blocks", *parts[1:]]
            elif parts[0].startswith("h") and parts[0][1:].isdigit():
                parts = ["blocks", parts[0][1:], *parts[1:]]
            if len(parts) > 1 and parts[-1] in ("weight", "bias"):
                leaf = {"weight": "g" if parts[-2].startswith("ln_") else "w", "bias": "b"}
                parts = (
                    parts[:-1] if parts[-2] in ("wte", "wpe") else [*parts[:-1], leaf[parts[-1]]]
                )
            flat[".".join(parts)] = a[0] if a.ndim == 3 else a
        if (src / "hparams.json").exists():
            hp = HParams(**json.loads((src / "hparams.json").read_text()))
        else:  # HF's names for the five numbers
            c = json.loads((src / "config.json").read_text())
            hp = HParams(c["vocab_size"], c["n_positions"], c["n_embd"], c["n_head"], c["n_layer"])
        _expected[str(src)] = hp, flat
    return _expected[str(src)]


def same_model(checkpoint, src: pathlib.Path, case: pathlib.Path | None = None) -> None:
    """The fixture's weights and shapes. n_head is the one number no tensor records (every
    shape is in n_embd): hparams.json or config.json is its only source, so a changed n_head
    that still divides n_embd is another valid model, not a detectable lie. So are the GPT-2
    family's settings (ε, activation, attention scale, ...): a mutated config that still names
    valid ones describes another model, and the load must run exactly what it names."""
    hp, want = expected(src)
    shapes = ("n_vocab", "n_ctx", "n_embd", "n_layer")
    if [getattr(checkpoint.hparams, f) for f in shapes] != [getattr(hp, f) for f in shapes]:
        raise Wrong(f"hparams {checkpoint.hparams} instead of {hp}")
    declared = _declared_settings(case) if case is not None else {}
    for field in dataclasses.fields(HParams):
        if field.name in SHAPE_FIELDS:
            continue
        got, meant = getattr(checkpoint.hparams, field.name), declared.get(field.name)
        if meant is None:
            meant = field.default
        if field.name == "n_inner" and meant == 4 * hp.n_embd:
            meant = None  # HF's explicit default
        if got != meant and not (isinstance(meant, (int, float)) and got == float(meant)):
            raise Wrong(f"{field.name}={got!r}, but the files say {meant!r}")
    got = flatten(checkpoint.params)
    if got.keys() != want.keys():
        raise Wrong(f"tensors {sorted(got.keys() ^ want.keys())[:4]} differ")
    for name, a in want.items():
        if got[name].dtype != a.dtype or not np.array_equal(got[name], a):
            raise Wrong(f"tensor {name} differs from the fixture's")


def _declared_settings(case: pathlib.Path) -> dict:
    """The family settings the case's own config.json (HF) or hparams.json names, read with
    plain json: what a faithful load must run."""
    for name in ("config.json", "hparams.json"):
        try:
            data = json.loads((case / name).read_bytes())
        except (OSError, ValueError, RecursionError):
            continue
        return data if isinstance(data, dict) else {}
    return {}


def loads_agree(case: pathlib.Path, src: pathlib.Path, cached: bool = True) -> None:
    """Each way of loading gives the fixture's model, or each refuses with CheckpointError."""
    ways = [{"use_cache": False}]
    if cached:
        ways += [{"cache_dir": case / "cache"}] * 2 + (
            [{"cache_dir": case / "cache", "verify": True}] if _VERIFY else []
        )
    first_error, outcomes = None, []
    for kwargs in ways:
        try:
            same_model(load_dir(case, **kwargs), src, case)
            outcomes.append("ok")
        except CheckpointError as e:
            first_error = first_error or e
            outcomes.append("error")
    if len(set(outcomes)) > 1:
        raise Wrong(f"the loads disagree ({', '.join(outcomes)}): {first_error}")
    if first_error is not None:
        raise first_error


def safetensors_header(path: pathlib.Path, data: bytes) -> tuple[int, int]:
    """Damage only the header (and the length): the data section has no checksum, so a changed
    byte there is a changed weight by design (the README says so)."""
    n = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
    return 0, min(len(data), 8 + n)


def _only_header(path: pathlib.Path, data: bytes) -> tuple[int, int]:
    if path.suffix == ".safetensors":
        return safetensors_header(path, data)
    return 0, len(data)


@target("tf-index", TF_SMALL, ["model.ckpt.index"])
def tf_index(case: pathlib.Path) -> None:
    loads_agree(case, TF_SMALL)


@target("tf-data", TF_SMALL, ["model.ckpt.data-*"])
def tf_data(case: pathlib.Path) -> None:
    loads_agree(case, TF_SMALL)


@target("tf-hparams", TF_SMALL, ["hparams.json", "checkpoint"])
def tf_hparams(case: pathlib.Path) -> None:
    loads_agree(case, TF_SMALL)


@target("tf-sharded", TF_SHARDED, ["model.ckpt.*", "hparams.json"])
def tf_sharded(case: pathlib.Path) -> None:
    loads_agree(case, TF_SHARDED)


@target("hf", HF_SMALL, ["model.safetensors", "config.json"], region=_only_header)
def hf(case: pathlib.Path) -> None:
    loads_agree(case, HF_SMALL, cached=False)


@target("hf-sharded", HF_SHARDED, ["*.safetensors", "*.json"], region=_only_header)
def hf_sharded(case: pathlib.Path) -> None:
    loads_agree(case, HF_SMALL, cached=False)  # the same weights as hf/small


def _first_load(src: pathlib.Path):
    def prepare(case: pathlib.Path) -> None:
        same_model(load_dir(case, cache_dir=case / "cache"), src, case)

    return prepare


def _cache_files(case: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(case)) for p in (case / "cache").rglob("*") if p.is_file()) or [
        "hparams.json"
    ]  # (nothing cached: damage something else rather than nothing)


def _cache_target(src: pathlib.Path):
    def check(case: pathlib.Path) -> None:
        try:
            same_model(load_dir(case, cache_dir=case / "cache"), src, case)
            same_model(load_dir(case, cache_dir=case / "cache"), src, case)
            if _VERIFY:
                same_model(load_dir(case, cache_dir=case / "cache", verify=True), src, case)
        except CheckpointError as e:  # the checkpoint is intact: refusing it is wrong too
            raise Wrong(f"refused an intact checkpoint: {e}") from None

    return check


target("cache", TF_SMALL, _cache_files, prepare=_first_load(TF_SMALL), errors=())(
    _cache_target(TF_SMALL)
)
target("cache-converted", TF_SHARDED, _cache_files, prepare=_first_load(TF_SHARDED), errors=())(
    _cache_target(TF_SHARDED)
)


@target("vocab", TF_SMALL, ["encoder.json", "vocab.bpe"], errors=(CheckpointError, ValueError))
def vocab(case: pathlib.Path) -> None:
    """No oracle for a vocabulary that loads (a changed merge is another valid vocabulary):
    only that damage is refused with a documented error, or tokenizes without crashing."""
    from gpt2np import Tokenizer

    tok = Tokenizer.from_files(case / "encoder.json", case / "vocab.bpe")
    ids = tok.encode(" the hello world <|endoftext|>", allowed_special="all")
    tok.decode(ids)


# --- golden files: the numbers in a manifest ---------------------------------------------------

_GOLDEN_TEMPLATE: dict[str, pathlib.Path] = {}


def _golden_case(case: pathlib.Path) -> None:
    """A golden file of a padded decode step (so T_past, pad, prefix_ids are all present) and
    its manifest as two JSON files that the fuzzer damages: ``manifest.json`` holds the keys
    (ids, T_past, pad, hparams, ...) and ``tensors.json`` the list of tensors, so that most
    damage lands on the numbers compare reads. Made once per worker."""
    import shutil
    import tempfile

    import gpt2np

    if "dir" not in _GOLDEN_TEMPLATE:
        root = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-golden-template-"))
        hp = HParams(n_vocab=31, n_ctx=16, n_embd=8, n_head=2, n_layer=1)
        model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=0, std=0.2))
        gpt2np.dump(model, [[1, 2, 3, 4], [5, 6]], root / "golden.npz", prefix=1)
        with np.load(root / "golden.npz", allow_pickle=False) as z:
            manifest = json.loads(z["__manifest__.json"].tobytes())
        (root / "tensors.json").write_text(json.dumps(manifest.pop("tensors")))
        (root / "manifest.json").write_text(json.dumps(manifest))
        _GOLDEN_TEMPLATE["dir"] = root
    shutil.copytree(_GOLDEN_TEMPLATE["dir"], case)


def _with_manifest(src: pathlib.Path, dst: pathlib.Path, manifest: bytes) -> None:
    """``src`` with its manifest member replaced by ``manifest`` (written with zipfile and
    numpy's own .npy writer, not with gpt2np's)."""
    import io
    import zipfile

    member = io.BytesIO()
    np.lib.format.write_array(member, np.frombuffer(manifest, np.uint8), allow_pickle=False)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = member.getvalue() if info.filename == "__manifest__.json.npy" else None
            zout.writestr(info.filename, data if data is not None else zin.read(info))


def _joined_manifest(case: pathlib.Path) -> bytes:
    """The two JSON files as one manifest (as text when either no longer parses)."""
    head, tensors = (case / "manifest.json").read_bytes(), (case / "tensors.json").read_bytes()
    try:
        manifest = json.loads(head)
        manifest["tensors"] = json.loads(tensors)
        return json.dumps(manifest).encode()
    except (ValueError, TypeError, RecursionError):  # keep the damage: a manifest that is not
        return head[:-1] + b', "tensors": ' + tensors + b"}"  # JSON must be refused too


@target("golden-manifest", _golden_case, ["manifest.json", "manifest.json", "tensors.json"])
def golden_manifest(case: pathlib.Path) -> None:
    """Any number (or value) in a golden file's manifest: compare gives a report, either way
    round, or refuses the file with a CheckpointError; never another exception."""
    import gpt2np

    damaged = case / "damaged.npz"
    _with_manifest(case / "golden.npz", damaged, _joined_manifest(case))
    for golden, port in ((damaged, case / "golden.npz"), (case / "golden.npz", damaged)):
        report = gpt2np.compare(golden, port)
        str(report)
        report.to_json()


# --- CLI device inputs: what the gpt2np command reads (gpt2np.cli.inputs) ----------------------
#
# A case damages text.txt or ids.txt (a text and its ids), then picks, from the damaged bytes,
# a command (tokenize, detokenize, score, generate, dump) and where its input comes from: the
# file as FILE or as stdin, a pipe of its bytes, an endless pipe (zeros, random bytes, or the
# text repeated, cut off by the writer after a while), a device (/dev/zero, /dev/urandom,
# /dev/null), a FIFO without a writer, a directory, a socket, a symlink to /dev/zero. The command
# runs in the worker (its memory cap applies, its timeout catches a wait without end; the CLI's
# bounds on a text are lowered to a few MiB so that a case takes under a second), and must
# end with status 0 and the right output, or status 1 and one line "gpt2np: error: ..."
# (counted as a refusal); a device, FIFO, directory or socket must be refused.

CLI_TEXT = "Größe über alles, the café's naïve 😀 — 12 345\r\n\ttabs  and  spaces\nend\n"
_cli_model: list[pathlib.Path] = []
_cli_tokenizer: list = []


class Refused(Exception):
    """The command refused its input with one line and status 1: a right outcome."""


def _tokenizer():
    """One Tokenizer per worker process (building one takes a third of a second)."""
    if not _cli_tokenizer:
        from gpt2np import Tokenizer

        _cli_tokenizer.append(Tokenizer())
    return _cli_tokenizer[0]


def _cli_fixture(case: pathlib.Path) -> None:
    case.mkdir(parents=True)
    (case / "text.txt").write_bytes(CLI_TEXT.encode())
    (case / "ids.txt").write_bytes(_cli_ids_bytes())


def _tiny_model_dir() -> pathlib.Path:
    """One small model with GPT-2's vocabulary per worker process, for score/generate/dump."""
    if not _cli_model:
        import tempfile

        import gpt2np

        h = gpt2np.HParams(n_vocab=50257, n_ctx=256, n_embd=8, n_head=2, n_layer=1)
        directory = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-fuzz-model-")) / "tiny"
        gpt2np.save(gpt2np.GPT2(h, gpt2np.init_params(h, seed=1, std=0.3)), directory)
        _cli_model.append(directory)
    return _cli_model[0]


_CLI_COMMANDS = {  # argv, with {file} for the input ("-" when it comes on stdin)
    "tokenize": ["tokenize", "--file", "{file}"],
    "tokenize-json": ["tokenize", "--file", "{file}", "--json"],
    "detokenize": ["detokenize", "{file}"],
    "score": ["score", "{file}", "--model", "{model}", "--json"],
    "generate": ["generate", "{file}", "--model", "{model}", "--max-new-tokens", "2", "-q"],
    "dump": ["dump", "--prompt", "{file}", "--model", "{model}", "--out", "{out}", "-q"],
}
_STDIN_ONLY = ("detokenize", "generate", "dump")  # they take text or ids, or "-" for stdin
_SOURCES = ["file", "file", "stdin-file", "pipe", "pipe", "endless-zeros", "endless-random",
            "endless-text", "endless-spaces", "dev-zero", "dev-urandom", "dev-null", "fifo",
            "directory", "socket", "symlink-zero"]  # fmt: skip
_REFUSED = ("dev-zero", "dev-urandom", "fifo", "directory", "socket", "symlink-zero")


@target("cli-devices", _cli_fixture, ["text.txt", "ids.txt"], errors=(Refused,))
def cli_devices(case: pathlib.Path) -> None:
    import hashlib
    import random

    name = "ids.txt" if (case / "ids.txt").read_bytes() != _cli_ids_bytes() else "text.txt"
    data = (case / name).read_bytes()
    rng = random.Random(hashlib.sha256(data + name.encode()).digest())
    others = sorted(set(_CLI_COMMANDS) - {"detokenize"})  # a list of ids is a text too
    command = rng.choice(["detokenize"] * len(others) + others if name == "ids.txt" else others)
    source = rng.choice(_SOURCES)
    if command in _STDIN_ONLY and source in ("file", "fifo", "directory", "socket", "symlink-zero"):
        source = "stdin-file"
    code, out, err = _run_cli(case, command, source, data, rng)
    if code == 1 and err.startswith("gpt2np: error: ") and len(err.splitlines()) == 1:
        if source in ("file", "stdin-file", "pipe") and _should_work(command, data):
            raise Wrong(f"{command} from {source} refused a good input: {err.strip()}")
        if source == "endless-spaces" and command.startswith("tokenize"):
            raise Wrong(f"{command} refused 4 MiB of whitespace: {err.strip()}")
        raise Refused(f"{command} from {source}: {err.strip()[15:]}")
    if code != 0:
        raise Wrong(f"{command} from {source}: status {code}, stderr {err[-300:]!r}")
    if source in _REFUSED:
        raise Wrong(f"{command} read from {source} (status 0), which must be refused")
    _check_output(command, source, data, out)


def _cli_ids_bytes() -> bytes:
    return (" ".join(map(str, _tokenizer().encode(CLI_TEXT))) + "\n").encode()


def _should_work(command: str, data: bytes) -> bool:
    """A small UTF-8 text without <|endoftext|> is tokenized; its ids are detokenized."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if command.startswith("tokenize"):
        return "<|endoftext|>" not in text
    return False  # scores, prompts and ids may fail for reasons of their own (length, range)


def _check_output(command: str, source: str, data: bytes, out: str) -> None:
    import json

    if command not in ("tokenize", "tokenize-json") or source.startswith(("endless", "dev")):
        return
    ids = json.loads(out)["ids"] if command == "tokenize-json" else [int(i) for i in out.split()]
    if _tokenizer().encode(data.decode("utf-8")) != ids:
        raise Wrong(f"{command} from {source}: ids differ from Tokenizer.encode")


def _run_cli(case: pathlib.Path, command: str, source: str, data: bytes, rng) -> tuple:
    """Run the command in this process with its input from ``source``: (status, out, err)."""
    import io
    import sys
    import threading

    import gpt2np.cli.app as cli
    from gpt2np.cli import common, text

    file, stdin, cleanup = _prepare_source(case, command, source, data, rng)
    argv = [a.format(file=file, model=_tiny_model_dir(), out=case / "g.npz")
            for a in _CLI_COMMANDS[command]]  # fmt: skip
    saved = sys.stdin, sys.stdout, sys.stderr
    bounds = {(common, "MAX_TEXT_BYTES"): 8 << 20, (common, "MAX_ARG_BYTES"): 1 << 20,
              (text, "MAX_ARG_BYTES"): 1 << 20, (text, "MAX_STRETCH"): 1 << 20}  # fmt: skip
    real = {key: getattr(*key) for key in bounds}  # smaller bounds: each case takes < 1 s
    for (module, name), value in bounds.items():
        setattr(module, name, value)
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.TextIOWrapper(stdin) if stdin is not None else io.StringIO("")
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(argv)
    finally:
        sys.stdin.close()  # a writer still feeding the pipe gets EPIPE and stops
        sys.stdin, sys.stdout, sys.stderr = saved
        for (module, name), value in real.items():
            setattr(module, name, value)
        for thing in cleanup:
            (thing.join if isinstance(thing, threading.Thread) else thing.close)()
    return code, out.getvalue(), err.getvalue()


def _prepare_source(case: pathlib.Path, command: str, source: str, data: bytes, rng) -> tuple:
    """(FILE argument, stdin as a binary file or None, things to join or close after)."""
    import os
    import socket
    import threading

    devices = {"dev-zero": "/dev/zero", "dev-urandom": "/dev/urandom", "dev-null": os.devnull}
    if source in ("file", "stdin-file"):
        (case / "input").write_bytes(data)
        if source == "file":
            return str(case / "input"), None, []
        return "-", open(case / "input", "rb"), []
    if source in devices:
        return "-", open(devices[source], "rb"), []
    if source == "pipe" or source.startswith("endless"):
        read_fd, write_fd = os.pipe()
        args = (write_fd, source, data, rng, command.startswith(("tokenize", "detokenize")))
        writer = threading.Thread(target=_feed, args=args, daemon=True)
        writer.start()
        return "-", os.fdopen(read_fd, "rb"), [writer]
    special, cleanup = case / "special", []  # a FIFO without a writer, a directory, ...
    if source == "fifo":
        os.mkfifo(special)
    elif source == "directory":
        special.mkdir()
    elif source == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(special))
        cleanup.append(sock)
    else:
        special.symlink_to("/dev/zero")
    return str(special), None, cleanup


def _feed(fd: int, source: str, data: bytes, rng, streams: bool) -> None:
    """Write the pipe's bytes: the data once, or an endless stream (up to 300 MiB, past every
    bound the CLI has) until the reader closes its end. The text repeated, for a command that
    ``streams`` (tokenize, detokenize), stops after 256 KiB: it is valid, and must be read."""
    import os

    if source == "pipe":
        block, limit = data, len(data)
    elif source == "endless-zeros":
        block, limit = b"\0" * 65536, 300 << 20
    elif source == "endless-random":
        block, limit = rng.randbytes(65536), 300 << 20
    elif source == "endless-spaces":  # one run, of one character or a mix: held a window at a time
        unit = rng.choice(
            [b" ", b"\n", b"\t", b"\n ", b"\r\n", "\u3000".encode(), "\t\u2028 ".encode()]
        )
        block = unit * (65536 // len(unit))  # whole characters, and so is the limit: ~4 MiB
        limit = len(block) * (64 if streams else 4800)
    else:
        block = data * (65536 // max(len(data), 1) + 1)
        limit = 1 << 18 if streams else 300 << 20
    sent = 0
    try:
        while sent < limit and block:
            sent += os.write(fd, block[: limit - sent])
    except OSError:  # the reader is gone: it refused, or stopped reading
        pass
    finally:
        os.close(fd)


# --- JSON goldens: tokenizer goldens and their port files ---------------------------------------
#
# A tokenizer golden of two texts and a port file equal to it; the fuzzer damages either (a
# value replaced by a nesting bomb, a wrong type, a key dropped, bytes damaged). compare gives a
# report or refuses the golden, or a port file far larger than its golden, with a
# CheckpointError; never another exception, a MemoryError under the worker's cap, or a hang.

_DEEP: list = [1]
for _ in range(40):
    _DEEP = [_DEEP]
_BOMBS: tuple = (
    [[]] * 3000, [{}] * 3000, _DEEP, [1], [[1]], [None], [[1, "a"]], ["a", 3], {"text": 3},
    2**62, -1, "x", None, True, [], {},
)  # fmt: skip
_TOKENIZER_GOLDEN: dict[str, bytes] = {}


def _tokenizer_golden_case(case: pathlib.Path) -> None:
    """golden.json (two texts: a contraction, digits, spaces) and port.json, a copy of it."""
    if "golden" not in _TOKENIZER_GOLDEN:
        import tempfile

        from gpt2np.golden.tokens import dump_tokenizer

        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "g.json"
            dump_tokenizer(path, _tokenizer(), ["It's 12  ok", "héllo\n\n"])
            _TOKENIZER_GOLDEN["golden"] = path.read_bytes()
    case.mkdir(parents=True)
    for name in ("golden.json", "port.json"):
        (case / name).write_bytes(_TOKENIZER_GOLDEN["golden"])


@target("golden-tokenizer", _tokenizer_golden_case, ["golden.json", "port.json", "port.json"],
        values=_BOMBS + tuple(INTERESTING_JSON))  # fmt: skip
def golden_tokenizer(case: pathlib.Path) -> None:
    from gpt2np.golden.tokens_diff import compare_tokenizer

    report = compare_tokenizer(case / "golden.json", case / "port.json")
    str(report), report.to_json()


def _shape_region(data: bytes) -> tuple[int, int]:
    """The bytes of an .npy header's dtype and shape (the whole file when there is none)."""
    at = data.find(b"'descr'")
    end = data.find(b"}", at)
    return (at, end) if 0 <= at < end else (0, len(data))


# --- sampler goldens: the golden's tensors and the port's .npy files -----------------------------

_SAMPLER_GOLDEN: dict[str, pathlib.Path] = {}


def _sampler_case(case: pathlib.Path) -> None:
    """golden.npz (3 steps over 40 ids, top-k and top-p on) and port/, its probs, chosen and
    top_k as NAME.npy files: damage to a header changes a declared shape or dtype."""
    import shutil
    import tempfile

    from gpt2np.golden.reader import GoldenFile
    from gpt2np.golden.sampler import Setting, dump_sampler

    if "dir" not in _SAMPLER_GOLDEN:
        root = pathlib.Path(tempfile.mkdtemp(prefix="gpt2np-sampler-template-"))
        dump_sampler(root / "golden.npz", Setting(top_k=5, top_p=0.9), steps=3, n_vocab=40)
        (root / "port").mkdir()
        with GoldenFile(root / "golden.npz") as g:
            for name in ("probs", "chosen", "top_k"):
                np.save(root / "port" / f"{name}.npy", g.read(name))
        _SAMPLER_GOLDEN["dir"] = root
    shutil.copytree(_SAMPLER_GOLDEN["dir"], case)


@target("golden-sampler", _sampler_case, ["port/*.npy", "port/*.npy", "golden.npz"],
        errors=(ValueError,), region=lambda path, data: _shape_region(data))  # fmt: skip
def golden_sampler(case: pathlib.Path) -> None:
    """A damaged header (shape, dtype) or data: a report, or a ValueError (CheckpointError
    for the golden) naming the tensor, before the declared size is read."""
    from gpt2np.golden.sampler_diff import compare_sampler

    report = compare_sampler(case / "golden.npz", case / "port")
    str(report), report.to_json()


# --- size-bearing fields: generation_config.json, dump-sampler's flags, a .npy header ----------
#
# sizes.json holds a model's generation_config.json and dump-sampler's flags; the fuzzer sets
# any of them to a size (10**9, 2**62, 1e13, ...) or a wrong type. generate and dump-sampler
# must work or refuse with one line (ValueError / TypeError / CheckpointError; exit 1 or
# argparse's 2), before allocating: the worker's 2 GiB cap turns a missing check into a
# MemoryError, a loop without end into a hang.

_SIZES = {
    "generation_config": {"num_beams": 2, "num_return_sequences": 2, "max_new_tokens": 2,
                          "length_penalty": 1.0},
    "dump_sampler": {"steps": 2, "vocab": 30, "top-p": 0.9, "top-k": 3, "seed": 1,
                     "temperature": 0.7},
}  # fmt: skip
_SIZE_VALUES = (10**6, 10**9, 2**40, 2**62, 10**13, 1e13, 1e-6, 1e-300, 0, -1, 1, 0.5, "x", None,
                True, [], {}, "1e13", "1000000000")  # fmt: skip


def _sizes_case(case: pathlib.Path) -> None:
    case.mkdir(parents=True)
    (case / "sizes.json").write_text(json.dumps(_SIZES))
    np.save(case / "logits.npy", np.random.default_rng(0).standard_normal((2, 30)))


def _dump_sampler_cli(case: pathlib.Path, flags: list[str]) -> None:
    """gpt2np dump-sampler FLAGS in this process: exit 0, or 1/2 with an error line; else
    Wrong."""
    import contextlib
    import io

    from gpt2np.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["dump-sampler", "--out", str(case / "s.npz"), *flags])
        except SystemExit as e:  # argparse refuses a flag's value: exit 2
            code = e.code if isinstance(e.code, int) else 2
    lines = err.getvalue().splitlines()
    if code not in (0, 1, 2) or (code and not any("error: " in line for line in lines)):
        raise Wrong(f"dump-sampler {flags}: exit {code}, stderr {err.getvalue()[-300:]!r}")
    if code == 1 and len(lines) != 1:
        raise Wrong(f"dump-sampler {flags}: {len(lines)} lines of error: {lines[:3]}")


@target("size-fields", _sizes_case, ["sizes.json"], errors=(ValueError, TypeError),
        values=_SIZE_VALUES, json_only=True)  # fmt: skip
def size_fields(case: pathlib.Path) -> None:
    import gpt2np

    try:
        sizes = json.loads((case / "sizes.json").read_text())
    except ValueError:  # the damage left no JSON: nothing to try
        return
    flags = sizes.get("dump_sampler") if isinstance(sizes, dict) else None
    if isinstance(flags, dict):
        _dump_sampler_cli(case, [x for k, v in flags.items() for x in (f"--{k}", str(v))])
    config = sizes.get("generation_config") if isinstance(sizes, dict) else None
    hp = HParams(n_vocab=31, n_ctx=16, n_embd=8, n_head=2, n_layer=1)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=0))
    model.generation_config = config if isinstance(config, dict) else {}
    model.generate([1, 2, 3])


@target("size-npy", _sizes_case, ["logits.npy"], region=lambda path, data: _shape_region(data))
def size_npy(case: pathlib.Path) -> None:
    """dump-sampler --logits of a damaged .npy (its header's shape, dtype, length)."""
    _dump_sampler_cli(case, ["--logits", str(case / "logits.npy")])


import tests.helpers.fuzz_corpus  # noqa: E402  (registers corpus-input, corpus-output)
import tests.helpers.fuzz_servers  # noqa: E402, F401  (registers the server targets: hub-server, file-server)
