"""Stress weights (gpt2np.golden.stress): golden files dumped from them catch the bugs that plain
random weights hide — a dropped bias (invisible when every bias is 0) and a softmax without
max-subtraction (invisible while every score is below float16's exp overflow, 11.09)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import gpt2np
from gpt2np.golden.stress import SCORE_OFFSET, stress_params
from gpt2np.params import flatten, unflatten
from tests.helpers.toyport import ToyPort

HP = gpt2np.HParams(n_vocab=256, n_ctx=64, n_embd=64, n_head=4, n_layer=2)
P, T = 12, 4
FP16_EXP_OVERFLOW = float(np.log(np.finfo(np.float16).max))  # 11.09


def plain_weights(hp: gpt2np.HParams) -> dict[str, np.ndarray]:
    """init_params' matrices with PyTorch's and HF's initial biases and gains: every bias 0,
    every LayerNorm gain 1 (what a port is often first tested with)."""
    flat = flatten(gpt2np.init_params(hp, seed=1))
    return {k: np.zeros_like(v) if k.endswith(".b") else np.ones_like(v) if k.endswith(".g")
            else v for k, v in flat.items()}  # fmt: skip


class Case:
    """One set of weights and its float64 golden file of a decode step."""

    def __init__(self, root: pathlib.Path, weights: dict[str, np.ndarray]) -> None:
        self.weights = weights
        self.model = gpt2np.GPT2(HP, unflatten(weights, HP))
        self.ids = np.random.default_rng(0).integers(0, HP.n_vocab, (2, P + T))
        self.golden = root / "golden.npz"
        gpt2np.dump(self.model, self.ids, self.golden, dtype="float64", prefix=P)

    def compare(self, bug: str, precision: str = "float32") -> gpt2np.CompareReport:
        port = ToyPort(self.weights, HP.n_head, precision, {bug} - {""}).run(self.ids, P)
        return gpt2np.compare(self.golden, port, precision=precision)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Case:
    return Case(tmp_path_factory.mktemp("plain"), plain_weights(HP))


@pytest.fixture(scope="module")
def stress(tmp_path_factory) -> Case:
    return Case(tmp_path_factory.mktemp("stress"), flatten(stress_params(HP, seed=1)))


def test_every_parameter_group_is_set_as_documented() -> None:
    flat = flatten(stress_params(HP, seed=3))
    assert set(flat) == set(gpt2np.params.expected_shapes(HP))
    assert all(a.dtype == np.float32 for a in flat.values())
    for name, a in flat.items():
        if name.endswith(".b"):
            assert np.all(a != 0) and np.abs(a).mean() > 0.1, name  # every bias matters
        if name.endswith(".g"):
            assert np.all(a != 1) and a.min() > 0, name
    # b_q · b_k / √Dh = SCORE_OFFSET in every head of every layer
    D, H = HP.n_embd, HP.n_head
    Dh = D // H
    for i in range(HP.n_layer):
        b = flat[f"blocks.{i}.attn.c_attn.b"].astype(np.float64)
        bq, bk = b[:D].reshape(H, Dh), b[D : 2 * D].reshape(H, Dh)
        offset = (bq * bk).sum(-1) / np.sqrt(Dh)
        assert np.all(np.abs(offset - SCORE_OFFSET) < 3), offset
    again = flatten(stress_params(HP, seed=3))
    assert all(np.array_equal(flat[k], again[k]) for k in flat)  # deterministic
    assert not np.array_equal(flat["wte"], flatten(stress_params(HP, seed=4))["wte"])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_forward_pass_is_finite_and_its_scores_overflow_float16(dtype: str) -> None:
    """In every layer, head and query row, scores the query sees are past float16's exp
    overflow (most of them: the median too), and yet the forward pass is finite everywhere and
    the attention as spread out as without the offset."""
    hp = gpt2np.HParams(n_vocab=300, n_ctx=64, n_embd=96, n_head=6, n_layer=3)
    model = gpt2np.GPT2(hp, stress_params(hp, seed=0)).astype(dtype)
    ids = np.random.default_rng(1).integers(0, hp.n_vocab, (2, 24))
    trace = gpt2np.trace(model, ids)
    for name in trace:
        assert np.all(np.isfinite(trace[name])), name
    causal = np.tril(np.ones((24, 24), bool))
    for i in range(hp.n_layer):
        scores = np.where(causal, np.asarray(trace[f"h{i}.attn.scores"]), -np.inf)
        assert scores.max(-1).min() > FP16_EXP_OVERFLOW, i  # every row overflows
        assert np.median(scores[..., causal]) > FP16_EXP_OVERFLOW, i
        probs = np.asarray(trace[f"h{i}.attn.probs"])[..., -1, :]  # the last query sees all 24
        assert probs.max() < 0.9  # no one-hot attention: the offset shifts whole rows
    logits = np.asarray(trace["logits"])
    assert np.abs(logits).max() < 10


def test_stress_params_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError, match="hparams must be an HParams"):
        stress_params({"n_embd": 64}, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        stress_params(HP, -1)
    with pytest.raises(ValueError, match="dtype must be a float type"):
        stress_params(HP, 0, np.int32)


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_the_correct_port_passes_on_stress_weights(stress, precision: str) -> None:
    report = stress.compare("", precision)
    assert report.ok, str(report)
    assert max(r.tol_ratio for r in report.rows) < 0.5  # with a margin


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    "bug,where", [("attn_bias_dropped", "h0.attn.qkv"), ("mlp_bias_dropped", "h0.mlp.c_fc")]
)
def test_a_dropped_bias_passes_on_plain_weights_and_fails_on_stress_weights(
    plain, stress, bug: str, where: str, precision: str
) -> None:
    """The gap: with every bias 0 a port that never adds one computes the golden's numbers."""
    assert plain.compare(bug, precision).ok
    report = stress.compare(bug, precision)
    assert not report.ok and report.first_divergence == report.born == where, str(report)


def test_a_softmax_without_max_subtraction_overflows_float16_only_on_stress_weights(
    plain, stress
) -> None:
    """Plain weights' scores are far below 11.09: exp(score) fits in float16 and the bug is
    invisible; stress weights' scores are ~16: exp overflows, inf / inf is NaN, named where it
    first appears."""
    assert plain.compare("softmax_no_max", "float16").ok
    report = stress.compare("softmax_no_max", "float16")
    assert not report.ok and report.first_divergence == "h0.attn.probs", str(report)
    assert report.hints[0].startswith("NaN first appears in port h0.attn.probs")
    assert stress.compare("softmax_no_max", "float32").ok  # float32's exp overflows at 88.7


def test_values_within_atol_of_zero_are_not_called_a_scale(stress) -> None:
    """Was, at float16: 'port embed.positions equals golden embed.positions × 0.0209297' for a
    port whose positions are another table altogether: stress weights' position embeddings
    (std 0.005) all lie within float16's atol (0.02) of 0, so c · golden was within tolerance
    of the port for any small c. A scale is named only when it explains the port."""
    port = ToyPort(stress.weights, HP.n_head, "float16").run(stress.ids, P)
    other = np.random.default_rng(9).standard_normal(port["embed.positions"].shape) * 0.005
    port["embed.positions"] = other.astype(np.float32)
    report = gpt2np.compare(stress.golden, port, precision="float16")
    assert report.first_divergence == "embed.positions", str(report)
    assert report.hints == [], report.hints


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    "bug,where,bias",
    [
        ("attn_bias_dropped", "h0.attn.qkv", "c_attn"),
        ("mlp_bias_dropped", "h0.mlp.c_fc", "mlp.c_fc"),
    ],
)
def test_a_dropped_bias_is_named_as_a_constant_per_channel(stress, bug, where, bias, precision):
    """Was: no hint. port − golden is the same vector at every position; the golden file does
    not hold the bias, so the hint says what that means rather than guessing which."""
    report = stress.compare(bug, precision)
    assert report.hints and report.hints[0].startswith(
        f"port {where} is the golden's plus one constant per channel, the same at every position"
    ), report.hints
    assert f"{bias}'s bias dropped, added twice or the wrong one?" in report.hints[0]


def test_an_error_that_varies_by_position_is_not_called_a_bias(stress) -> None:
    """Noise on mlp.c_fc, or a constant on one position only, is no constant per channel."""
    golden, port = stress.golden, ToyPort(stress.weights, HP.n_head).run(stress.ids, P)
    noisy = dict(port)
    noisy["h0.mlp.c_fc"] = port["h0.mlp.c_fc"] + np.random.default_rng(3).normal(
        0, 0.05, port["h0.mlp.c_fc"].shape
    ).astype(np.float32)
    one = dict(port)
    one["h0.mlp.c_fc"] = port["h0.mlp.c_fc"].copy()
    one["h0.mlp.c_fc"][0, 1] += 0.3
    for tensors in (noisy, one):
        report = gpt2np.compare(golden, tensors)
        assert report.first_divergence == "h0.mlp.c_fc"
        assert not any("constant per channel" in h for h in report.hints), report.hints


def test_a_constant_from_upstream_is_not_called_this_layers_bias(stress) -> None:
    """ln_1 written without its bias: ln_1 fails first, and attn.qkv = (ln_1 − b) · W + b_attn
    is the golden's plus a constant per channel too (−b · W), but c_attn's bias is right."""
    port = ToyPort(stress.weights, HP.n_head).run(stress.ids, P)
    w = stress.weights
    b, W = w["blocks.0.ln_1.b"].astype(np.float64), w["blocks.0.attn.c_attn.w"].astype(np.float64)
    port["h0.ln_1"] = (port["h0.ln_1"] - b).astype(np.float32)
    port["h0.attn.qkv"] = (port["h0.attn.qkv"] - b @ W).astype(np.float32)
    report = gpt2np.compare(stress.golden, port)
    assert report.first_divergence == "h0.ln_1"
    assert "h0.attn.qkv" in [r.name for r in report.diverged]
    assert not any("c_attn's bias" in h for h in report.hints), report.hints
