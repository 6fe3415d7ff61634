"""The injected-bug suite: an independent port (tests/toyport.py), correct or with one classic bug,
against a float64 golden file of a KV-cached decode step.

The correct port passes at every precision's preset; with the float32 preset each bug is
reported at the tensor where it enters (and is born there), with the hint that names it where
there is one. At a looser tolerance the subtle bugs first cross it downstream, and the growth
column still names where they were born. docs/golden-files.md has the same table measured on
124M-shaped weights (scripts/measure_tolerances.py).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import gpt2np
from gpt2np.golden.diff import PRECISIONS
from gpt2np.params import flatten

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from toyport import BUGS, ToyPort

P, T = 12, 4  # prefix, step


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[gpt2np.HParams, dict, np.ndarray, pathlib.Path]:
    hp = gpt2np.HParams(n_vocab=256, n_ctx=64, n_embd=64, n_head=4, n_layer=4)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=1, std=0.1))
    ids = np.random.default_rng(0).integers(0, hp.n_vocab, (2, P + T))
    golden = tmp_path_factory.mktemp("bugs") / "golden.npz"
    gpt2np.dump(model, ids, golden, dtype="float64", prefix=P)
    return hp, flatten(model.params), ids, golden


def run(setup, precision: str = "float32", bugs: frozenset = frozenset()) -> dict:
    """The port's own prefix pass, then the step: every tensor the golden file holds."""
    hp, weights, ids, _ = setup
    port = ToyPort(weights, hp.n_head, precision, bugs)
    port.prefill(ids[:, :P])
    tensors = {"ids": ids[:, P:], "prefix_ids": ids[:, :P], "past": port.past()}
    tensors.update(port.step(ids[:, P:]))
    logits = tensors["logits"].astype(np.float64)
    lse = np.logaddexp.reduce(logits[:, :-1], axis=-1)
    picked = np.take_along_axis(logits[:, :-1], ids[:, P + 1 :, None], axis=-1)[..., 0]
    tensors["targets"] = ids[:, P + 1 :]
    tensors["loss"] = lse - picked
    tensors["loss.mean"] = tensors["loss"].mean()
    return tensors


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_the_correct_port_passes_at_its_precision(setup, precision: str) -> None:
    report = gpt2np.compare(setup[3], run(setup, precision), precision=precision)
    assert report.ok, str(report)
    assert not report.missing and not report.extra  # it writes every tensor
    assert max(r.tol_ratio for r in report.rows) < 0.5  # with a margin


EXPECTED = {  # bug: (first divergence = where it is born, the hint's start or None)
    "ln_eps": ("h0.ln_1", None),
    "erf_gelu": ("h0.mlp.gelu", None),
    "no_scale": ("h0.attn.scores", "port h0.attn.scores equals golden h0.attn.scores × 4 = √Dh"),
    "pos_off_by_one": ("embed.positions", None),
    "unbiased_var": ("h0.ln_1", None),
    "qk_swap": ("h0.attn.q", "port h0.attn.q equals golden h0.attn.k (q and k swapped?)"),
    "upper_left_mask": ("h0.attn.probs", None),
    "no_ln_f": ("ln_f", "port ln_f equals golden h3.out"),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_bug_is_reported_where_it_enters(setup, bug: str) -> None:
    report = gpt2np.compare(setup[3], run(setup, bugs=frozenset({bug})))
    first, hint = EXPECTED[bug]
    assert not report.ok
    assert report.first_divergence == report.born == first, str(report)
    if hint:
        assert report.hints[0].startswith(hint), report.hints
    names = [r.name for r in report.rows]
    assert all(r.status == "ok" for r in report.rows[: names.index(first)])  # no false alarm


@pytest.mark.parametrize(
    "bug,first,born",
    [("erf_gelu", "h3.resid_mid", "h0.mlp.gelu"), ("ln_eps", "h0.ln_2", "h0.ln_1")],
)
def test_a_loose_tolerance_still_names_where_the_error_is_born(setup, bug, first, born) -> None:
    """At rtol = atol = 1e-3 these two bugs first cross the tolerance downstream."""
    report = gpt2np.compare(setup[3], run(setup, bugs=frozenset({bug})), rtol=1e-3, atol=1e-3)
    assert (report.first_divergence, report.born) == (first, born)
    assert f"the error is born at {born}" in str(report).splitlines()[-1]


def test_the_upper_left_mask_needs_a_cached_step(setup, tmp_path) -> None:
    """Without a past the two corners coincide: only a decode-step golden file catches it."""
    hp, weights, ids, _ = setup
    golden = tmp_path / "plain.npz"
    model = gpt2np.GPT2(hp, gpt2np.params.unflatten(weights, hp))
    gpt2np.dump(model, ids, golden, dtype="float64")
    port = ToyPort(weights, hp.n_head, "float32", {"upper_left_mask", "pos_off_by_one"})
    assert gpt2np.compare(golden, port.step(ids), allow_missing="loss*").ok
