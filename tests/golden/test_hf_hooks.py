"""examples/hf_dump.py: HF transformers as a port, its intermediates taken with forward hooks.

An implementation independent of gpt2np agrees with the golden file tensor by tensor: a plain
pass, a KV-cached decode step and a left-padded ragged batch, its next-token loss, and the
weights' hash recomputed from HF's own state dict. And the classic pitfall, HF's last
hidden state taken for the last block's output, is named by compare's hint.

Oracle tier: needs ``pip install torch==2.13.0`` then transformers.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gpt2np

SCRIPT = pathlib.Path(__file__).parent.parent.parent / "examples" / "hf_dump.py"
pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory) -> tuple[gpt2np.GPT2, pathlib.Path]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=32, n_embd=32, n_head=4, n_layer=3)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=5, std=0.1))
    directory = tmp_path_factory.mktemp("hf") / "model"
    gpt2np.save(model, directory)  # config.json + model.safetensors, loadable by transformers
    return model, directory


def run_script(directory: pathlib.Path, golden: pathlib.Path, out: pathlib.Path, *extra: str):
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(directory), str(golden), str(out), *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize(
    "ids,prefix",
    [
        ([[464, 3290, 318, 257, 922, 1110, 13]], None),  # a plain pass
        ([[464, 3290, 318, 257, 922, 1110, 13]], 4),  # a decode step of 3 after 4
        ([[464, 3290, 318, 257, 922, 1110, 13], [11, 12, 13]], 2),  # ragged, left-padded
        ([[464, 3290, 318, 257, 922, 1110, 13], [11]], 5),  # padding inside the step too
    ],
)
def test_transformers_agrees_with_the_golden_file(hf_model, tmp_path, ids, prefix) -> None:
    model, directory = hf_model
    golden, port = tmp_path / "golden.npz", tmp_path / "hf.npz"
    m = gpt2np.dump(model, ids, golden, dtype="float64", prefix=prefix)
    run_script(directory, golden, port)
    assert not gpt2np.compare(golden, port).ok  # HF has no scores: the comparison must be told
    report = gpt2np.compare(golden, port, allow_missing="h*.attn.scores")
    assert report.ok, str(report)
    assert not report.mismatches  # the same weights_sha256, ids and T_past in HF's manifest
    expected_missing = {"targets", "h0.attn.scores", "h1.attn.scores", "h2.attn.scores"}
    if m["T_past"]:
        expected_missing.add("prefix_ids")
    assert set(report.missing) == expected_missing
    compared = {r.name for r in report.rows if r.status == "ok"}
    assert {"loss", "loss.mean", "h2.attn.probs", "h2.out", "ln_f", "logits"} <= compared
    assert ("past" in compared) == bool(m["T_past"])
    if prefix == 4:  # float64 against float64: the two implementations agree to ~1e-14
        run_script(directory, golden, port, "--dtype", "float64")
        report = gpt2np.compare(golden, port, precision="float64", allow_missing="*.scores")
        assert report.ok, str(report)


def test_hf_hidden_states_pitfall_is_named(hf_model, tmp_path) -> None:
    """output_hidden_states' last entry is ln_f's output; mapped naively to h{L-1}.out, compare
    reports it and says what it is."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, directory = hf_model
    ids = [[464, 3290, 318, 257]]
    golden = tmp_path / "golden.npz"
    gpt2np.dump(model, ids, golden, dtype="float64")
    hf = transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
    with torch.no_grad():
        out = hf(torch.tensor(ids), output_hidden_states=True)
    naive = {f"h{i}.out": h.numpy() for i, h in enumerate(out.hidden_states[1:])}
    report = gpt2np.compare(golden, naive)
    assert report.first_divergence == "h2.out"
    assert report.hints == [
        "port h2.out equals golden ln_f; HF's last hidden_states is ln_f's output, not the "
        "last block's"
    ]
    assert np.isfinite(report.diverged[0].tol_ratio)
