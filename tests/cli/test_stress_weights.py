"""``gpt2np stress-weights``: a checkpoint of a model's shapes with stress weights
(gpt2np.golden.stress), in HF's format; OpenAI's format refused (gpt2np has no writer of it)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import gpt2np
import gpt2np.cli.app as cli
from gpt2np.cli.models import hparams_like
from gpt2np.golden.stress import stress_params
from gpt2np.params import flatten

HP = gpt2np.HParams(n_vocab=97, n_ctx=32, n_embd=24, n_head=3, n_layer=2)


@pytest.fixture()
def like_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    d = tmp_path / "tiny"
    gpt2np.save(gpt2np.GPT2(HP, gpt2np.init_params(HP, seed=0)), d)
    return d


def test_a_directory_gives_its_shapes_and_the_weights_are_stress_params(
    like_dir, tmp_path, capsys
) -> None:
    out = tmp_path / "stress"
    assert cli.main(["stress-weights", "--like", str(like_dir), "--out", str(out),
                     "--seed", "7"]) == 0  # fmt: skip
    assert "stress weights like" in capsys.readouterr().out
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    model = gpt2np.load(out)
    assert model.hparams == HP
    expected = flatten(stress_params(HP, seed=7))
    got = flatten(model.params)
    assert set(got) == set(expected)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)
    config = json.loads((out / "config.json").read_text())
    assert config["n_layer"] == 2 and config["n_embd"] == 24


def test_a_size_name_needs_no_files() -> None:
    assert hparams_like("124M") == gpt2np.HPARAMS["124M"]
    assert hparams_like("gpt2-medium") == gpt2np.HPARAMS["355M"]


def test_an_openai_release_directory_gives_its_hparams(tmp_path) -> None:
    (tmp_path / "hparams.json").write_text(json.dumps(
        {"n_vocab": 97, "n_ctx": 32, "n_embd": 24, "n_head": 3, "n_layer": 2}))  # fmt: skip
    assert hparams_like(str(tmp_path)) == HP


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--format", "openai"], "has no writer of it"),
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--like", "999M"], "neither a directory nor a size name"),
    ],
)
def test_refusals_are_one_line(like_dir, tmp_path, capsys, extra, message) -> None:
    out = tmp_path / "out"
    args = ["stress-weights", "--like", str(like_dir), "--out", str(out), *extra]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_a_non_empty_out_is_refused_and_left_alone(like_dir, tmp_path, capsys) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["stress-weights", "--like", str(like_dir), "--out", str(out)]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    # a model directory too: stress weights never replace a model
    assert cli.main(["stress-weights", "--like", str(like_dir), "--out", str(like_dir)]) == 1
    assert gpt2np.load(like_dir).hparams == HP
