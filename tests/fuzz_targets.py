"""The fuzz targets (tests/fuzzing.py): gpt2np's readers on damaged copies of the fixtures.

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

from fuzzing import FIXTURES, Wrong, target
from gpt2np import CheckpointError, HParams
from gpt2np.checkpoint import load_dir
from gpt2np.hparams import SHAPE_FIELDS
from gpt2np.params import flatten

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
