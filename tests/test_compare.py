"""Golden files (gpt2np.golden.dump), their comparison (gpt2np.compare) and the two CLI commands.

Port files here are written with plain np.savez / np.save, independently of the code under test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

import gpt2np
from gpt2np import cli_trace
from gpt2np.diff import compare
from gpt2np.golden import MANIFEST_KEY, GoldenFile, dump, weights_sha256
from gpt2np.params import cast_params, flatten, unflatten
from gpt2np.trace import tensor_names, trace

IDS = [[5, 17, 42, 3, 88, 60]]


def read_npz(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def manifest_of(tensors: dict[str, np.ndarray]) -> dict:
    return json.loads(tensors[MANIFEST_KEY].tobytes().decode("utf-8"))


@pytest.fixture
def golden_path(tiny_model, tmp_path) -> pathlib.Path:
    path = tmp_path / "golden.npz"
    dump(tiny_model, IDS, path, model_name="tiny")
    return path


def test_dump_writes_every_tensor_and_a_manifest(tiny_model, golden_path) -> None:
    z = read_npz(golden_path)
    t = trace(tiny_model, IDS)
    names = ["ids", *tensor_names(tiny_model.hparams.n_layer)]
    assert list(z) == [MANIFEST_KEY, *names]  # np.savez keeps the order written
    for name in names[1:]:
        np.testing.assert_array_equal(z[name], t[name])
    np.testing.assert_array_equal(z["ids"], np.array(IDS, np.int64))
    m = manifest_of(z)
    assert z[MANIFEST_KEY].dtype == np.uint8
    assert m["format"] == "gpt2np-golden" and m["format_version"] == 1
    assert m["model"] == "tiny" and m["prompt"] is None
    assert m["hparams"] == tiny_model.hparams.to_dict()
    assert m["ids"] == IDS
    assert m["dtype"] == m["weights_dtype"] == "float32"
    assert m["gpt2np_version"] == gpt2np.__version__ and m["numpy_version"] == np.__version__
    assert [e["name"] for e in m["tensors"]] == names
    assert m["tensors"][-1] == {"name": "logits", "shape": [1, 6, 97], "dtype": "float32"}
    assert m["weights_sha256"] == weights_sha256(tiny_model.params, tiny_model.hparams)
    assert [p.name for p in golden_path.parent.iterdir()] == ["golden.npz"]  # no temp left


def test_weights_sha256_follows_its_definition(tiny_model) -> None:
    """Recomputed here from the documented recipe, the way a port would."""
    sha = hashlib.sha256()
    for name, a in flatten(tiny_model.params).items():  # flatten's order is expected_shapes'
        sha.update(f"{name}:float32:{'x'.join(str(d) for d in a.shape)}\n".encode())
        sha.update(a.astype("<f4").tobytes(order="C"))
    assert weights_sha256(tiny_model.params, tiny_model.hparams) == sha.hexdigest()

    big_endian = cast_params(tiny_model.params, np.dtype(">f4"))
    assert weights_sha256(big_endian, tiny_model.hparams) == sha.hexdigest()
    flat = {k: v.copy() for k, v in flatten(tiny_model.params).items()}
    flat["blocks.1.mlp.c_proj.b"][3] += 1e-6
    assert (
        weights_sha256(unflatten(flat, tiny_model.hparams), tiny_model.hparams) != sha.hexdigest()
    )


def test_dump_float64_and_names(tiny_model, tmp_path) -> None:
    path = tmp_path / "g64"  # written under exactly this name
    m = dump(tiny_model, IDS, path, dtype="float64", names=["*.attn.probs", "logits"])
    z = read_npz(path)
    assert list(z) == [MANIFEST_KEY, "ids", "h0.attn.probs", "h1.attn.probs", "logits"]
    assert z["logits"].dtype == np.float64 and m["dtype"] == "float64"
    assert m["weights_dtype"] == "float32"  # the hash is of the weights as given, before the cast
    assert m["weights_sha256"] == weights_sha256(tiny_model.params, tiny_model.hparams)
    assert m["names"] == ["*.attn.probs", "logits"]
    with pytest.raises(ValueError, match="float"):
        dump(tiny_model, IDS, tmp_path / "x.npz", dtype="int32")
    with pytest.raises(ValueError, match="does not exist"):
        dump(tiny_model, IDS, tmp_path / "no" / "x.npz")


def test_dump_names_from_a_generator_are_recorded(tiny_model, tmp_path) -> None:
    manifest = dump(tiny_model, IDS, tmp_path / "g.npz", names=(g for g in ["h1.*", "logits"]))
    assert manifest["names"] == ["h1.*", "logits"]
    assert [t["name"] for t in manifest["tensors"]][-1] == "logits"
    assert len(manifest["tensors"]) == 1 + 15 + 1  # ids, h1.*, logits


def test_dump_text_prompt_uses_the_tokenizer(tmp_path) -> None:
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=16, n_embd=8, n_head=2, n_layer=1)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=1))
    m = dump(model, "Hello world", tmp_path / "g.npz", names="logits")
    assert m["prompt"] == "Hello world" and m["ids"] == [[15496, 995]]  # GPT-2's published ids
    with pytest.raises(ValueError, match="empty"):
        dump(model, "", tmp_path / "e.npz")


def test_compare_a_file_with_itself_passes(golden_path) -> None:
    report = compare(golden_path, golden_path)
    assert report.ok and report.first_divergence is None
    assert report.compared == 1 + len(tensor_names(2)) and not report.missing and not report.extra
    assert all(r.max_abs == 0 for r in report.rows)
    assert "OK: 36 tensors within tolerance" in str(report)


def test_float64_golden_accepts_the_float32_run(tiny_model, tmp_path) -> None:
    dump(tiny_model, IDS, tmp_path / "g64.npz", dtype=np.float64)
    dump(tiny_model, IDS, tmp_path / "g32.npz")
    report = compare(tmp_path / "g64.npz", tmp_path / "g32.npz")
    assert report.ok, str(report)
    assert 0 < max(r.max_abs for r in report.rows) < 1e-5  # they differ, by float32 rounding


def test_a_planted_weight_bug_is_found_where_it_enters(tiny_model, golden_path, tmp_path) -> None:
    """A port whose ln_2 gain of block 1 is off diverges first at h1.ln_2, then downstream."""
    flat = {k: v.copy() for k, v in flatten(tiny_model.params).items()}
    flat["blocks.1.ln_2.g"][5] *= 1.01
    buggy = gpt2np.GPT2(tiny_model.hparams, unflatten(flat, tiny_model.hparams))
    port = tmp_path / "port.npz"
    np.savez(port, **{k: v for k, v in trace(buggy, IDS).items()})
    report = compare(golden_path, port)
    assert not report.ok
    assert report.first_divergence == "h1.ln_2"
    assert [r.name for r in report.diverged][-1] == "logits"
    before = report.rows[: report.rows.index(report.diverged[0])]
    assert {r.status for r in before} == {"ok", "missing"}
    assert report.missing == ["ids"]  # the port did not write it: reported, not a failure
    first = report.diverged[0]
    assert first.worst[-1] == 5 and first.n_bad > 0
    text = str(report)
    assert "h1.ln_2" in text and "<- first divergence" in text and "FAIL" in text


def test_a_planted_difference_in_one_element(golden_path, tmp_path) -> None:
    z = read_npz(golden_path)
    z["h0.attn.probs"][0, 1, 4, 2] += 1e-3
    port = tmp_path / "port.npz"
    np.savez(port, **z)
    report = compare(golden_path, port)
    assert [r.name for r in report.diverged] == ["h0.attn.probs"]
    d = report.diverged[0]
    assert d.n_bad == 1 and d.worst == (0, 1, 4, 2)
    assert d.max_abs == pytest.approx(1e-3, rel=1e-3)
    assert compare(golden_path, port, atol=2e-3).ok  # within a looser tolerance


def test_exact_comparison_with_zero_tolerances_warns_nothing(golden_path, tmp_path) -> None:
    z = read_npz(golden_path)
    z["logits"][0, 0, 0] += 1.0
    port = tmp_path / "port.npz"
    np.savez(port, **z)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # x / (0 + 0·|golden|) must not print a RuntimeWarning
        report = compare(golden_path, port, rtol=0.0, atol=0.0)
    assert [r.name for r in report.diverged] == ["logits"]
    assert report.diverged[0].n_bad == 1 and report.diverged[0].tol_ratio == np.inf


def test_missing_extra_shape_and_nan(golden_path, tmp_path) -> None:
    z = read_npz(golden_path)
    del z[MANIFEST_KEY], z["h1.mlp.gelu"]
    z["h0.attn.k"] = z["h0.attn.k"][..., :-1]  # a port that got the head width wrong
    z["h0.ln_1"][0, 0, 0] = np.nan
    z["my.debug"] = np.zeros(3)
    port = tmp_path / "port.npz"
    np.savez(port, **z)
    report = compare(golden_path, port)
    assert report.missing == ["h1.mlp.gelu"] and report.extra == ["my.debug"]
    status = {r.name: r.status for r in report.rows}
    assert status["h0.attn.k"] == "shape" and status["h0.ln_1"] == "diverged"
    assert report.first_divergence == "h0.ln_1"
    assert "SHAPE differs: port [1,3,6,7]" in str(report)
    same_nan = tmp_path / "nan.npz"  # NaN where the golden file has NaN too counts as equal
    np.savez(same_nan, a=np.array([1.0, np.nan, np.inf]))
    assert compare(same_nan, same_nan).ok


def test_strict_and_empty_overlap(golden_path, tmp_path) -> None:
    only_logits = tmp_path / "logits.npz"
    np.savez(only_logits, logits=read_npz(golden_path)["logits"])
    assert compare(golden_path, only_logits).ok
    assert not compare(golden_path, only_logits, strict=True).ok
    unrelated = tmp_path / "other.npz"
    np.savez(unrelated, foo=np.zeros(2))
    report = compare(golden_path, unrelated)
    assert not report.ok and "no tensor of the golden file" in str(report)
    with pytest.raises(ValueError, match="non-negative"):
        compare(golden_path, golden_path, rtol=-1)


def test_manifests_with_different_inputs_are_flagged(tiny_model, golden_path, tmp_path) -> None:
    dump(tiny_model, [[5, 17, 42, 3, 88, 61]], tmp_path / "other.npz")
    report = compare(golden_path, tmp_path / "other.npz")
    assert "WARNING: the two files' manifests have different ids" in report.notes
    assert report.first_divergence == "ids" and not report.ok


def test_port_as_a_directory_of_npy_files(golden_path, tmp_path) -> None:
    port = tmp_path / "port"
    port.mkdir()
    for name, a in read_npz(golden_path).items():
        if name != MANIFEST_KEY:
            np.save(port / f"{name}.npy", a.astype(np.float32) if a.dtype.kind == "f" else a)
    assert compare(golden_path, port).ok


@pytest.mark.parametrize(
    "content,match",
    [
        (b"", "not a readable .npz"),
        (b"this is not a zip file at all", "not a readable .npz"),
        (None, "single .npy"),
        ("truncated", "not a readable .npz"),
        ("badmanifest", "bad __manifest__.json"),
        ("pickled", "cannot read tensor logits"),
        ("flipped", "cannot read tensor logits"),
    ],
)
def test_corrupt_files_raise_checkpoint_error(golden_path, tmp_path, content, match) -> None:
    bad = tmp_path / "bad.npz"
    if content is None:
        np.save(tmp_path / "bad.npy", np.zeros(3))
        bad = tmp_path / "bad.npy"
    elif content == "truncated":
        bad.write_bytes(golden_path.read_bytes()[:-500])
    elif content == "badmanifest":
        np.savez(bad, **{MANIFEST_KEY: np.frombuffer(b"{not json", np.uint8), "x": np.ones(2)})
    elif content == "flipped":  # the last byte of the last member's data: logits.npy
        data = bytearray(golden_path.read_bytes())
        with zipfile.ZipFile(golden_path) as z:
            assert z.infolist()[-1].filename == "logits.npy"
            data[z.start_dir - 1] ^= 0xFF
        bad.write_bytes(bytes(data))
    elif content == "pickled":
        np.savez(bad, logits=np.array([{"a": 1}], dtype=object))
    else:
        bad.write_bytes(content)
    with pytest.raises(gpt2np.CheckpointError, match=match) as e:
        compare(bad, golden_path)
    assert str(bad) in str(e.value)
    if content != "pickled":  # np.load calls any unknown header pickled data
        assert "pickle" not in str(e.value)
    with pytest.raises(gpt2np.CheckpointError, match="no such file"):
        compare(tmp_path / "absent.npz", golden_path)


def test_garbage_npy_in_a_port_directory_is_not_called_pickled(golden_path, tmp_path) -> None:
    (tmp_path / "logits.npy").write_bytes(b"garbage, not an array")
    with pytest.raises(gpt2np.CheckpointError, match=r"cannot read tensor logits: unknown format"):
        compare(golden_path, tmp_path)


def test_manifest_listing_an_absent_tensor(golden_path, tmp_path) -> None:
    with zipfile.ZipFile(golden_path) as zin, zipfile.ZipFile(tmp_path / "g.npz", "w") as zout:
        for item in zin.infolist():
            if item.filename != "logits.npy":
                zout.writestr(item, zin.read(item.filename))
    with pytest.raises(gpt2np.CheckpointError, match="lists tensor logits"):
        GoldenFile(tmp_path / "g.npz")


# ---- the CLI subcommands, through add_parsers on a local parser --------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpt2np")
    cli_trace.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_dump_and_compare(tiny_model, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli_trace, "load_model", lambda name, *args, **kw: tiny_model)
    g, p = str(tmp_path / "g.npz"), str(tmp_path / "p.npz")
    assert run_cli(["dump", "--model", "tiny", "--ids", "5,17,42", "--out", g]) == 0
    assert f"wrote {g}: 36 tensors, ids [[5, 17, 42]], float32" in capsys.readouterr().out
    assert run_cli(["dump", "--model", "x", "--ids", "5 17 42", "--out", p, "--dtype", "float64",
                    "--names", "h1.*", "--names", "logits"]) == 0  # fmt: skip
    assert read_npz(pathlib.Path(p))["logits"].dtype == np.float64
    assert run_cli(["compare", g, p]) == 0
    assert "OK: 17 tensors within tolerance, 19 missing" in capsys.readouterr().out

    z = read_npz(pathlib.Path(p))
    z["h1.mlp.c_fc"] = z["h1.mlp.c_fc"] * 1.001
    np.savez(p, **z)
    assert run_cli(["compare", g, p, "--rtol", "1e-5"]) == 1
    out = capsys.readouterr().out
    assert "h1.mlp.c_fc" in out.splitlines()[-1] and "<- first divergence" in out
    with pytest.raises(ValueError, match="--atol"):
        run_cli(["compare", g, p, "--atol", "nan"])
    with pytest.raises(ValueError, match="--ids must be integers"):
        run_cli(["dump", "--model", "x", "--ids", "5,a", "--out", p])


# ---- the installed command, end to end in a subprocess ------------------------------------


def gpt2np_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpt2np", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_end_to_end_in_a_subprocess(tmp_path) -> None:
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=16, n_embd=16, n_head=2, n_layer=1)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=3, std=0.1))
    gpt2np.save(model, tmp_path / "model")  # config.json + model.safetensors
    g, p = tmp_path / "golden.npz", tmp_path / "port.npz"

    r = gpt2np_cli("dump", "--model", str(tmp_path / "model"), "--prompt", "Hello world",
                   "--out", str(g), "--dtype", "float64")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "21 tensors, ids [[15496, 995]], float64" in r.stdout
    m = manifest_of(read_npz(g))
    assert m["weights_sha256"] == weights_sha256(model.params, hp)  # the saved weights, reloaded
    expected = trace(model.astype(np.float64), [15496, 995]).logits
    np.testing.assert_allclose(read_npz(g)["logits"], expected, rtol=1e-12, atol=1e-12)

    r = gpt2np_cli(
        "dump", "--model", str(tmp_path / "model"), "--ids", "15496,995", "--out", str(p)
    )
    assert r.returncode == 0, r.stderr
    r = gpt2np_cli("compare", str(g), str(p))
    assert r.returncode == 0 and "OK: 21 tensors within tolerance" in r.stdout, r.stdout

    z = read_npz(p)
    z["h0.attn.probs"] = z["h0.attn.probs"][..., ::-1].copy()  # a port with the mask backwards
    np.savez(p, **z)
    r = gpt2np_cli("compare", str(g), str(p))
    assert r.returncode == 1
    assert "FAIL: " in r.stdout and "the first is h0.attn.probs" in r.stdout

    p.write_bytes(b"garbage")
    r = gpt2np_cli("compare", str(g), str(p))
    assert r.returncode != 0 and str(p) in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("manifest", [b"{not json", b'{"tensors": [{"name": "gone"}]}'])
def test_a_refused_golden_file_is_closed_at_once(tmp_path, monkeypatch, manifest) -> None:
    import gpt2np.golden as golden

    opened = []
    real = golden._open_npz
    monkeypatch.setattr(golden, "_open_npz", lambda p: opened.append(real(p)) or opened[-1])
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{MANIFEST_KEY: np.frombuffer(manifest, np.uint8), "x": np.ones(2)})
    with pytest.raises(gpt2np.CheckpointError, match="manifest"):
        GoldenFile(bad)
    assert len(opened) == 1 and opened[0].zip is None  # closed, not left to the GC
