"""The injected-bug suite: an independent port (tests/helpers/toyport.py), correct or with one
classic bug, against a float64 golden file of a KV-cached decode step (or of a padded batch).

The correct port passes at every precision's preset; with the float32 preset each bug is
reported at the tensor where it enters (and is born there), with a hint that names it. The
step's mask bugs fail at float16 and bfloat16 with a 248-token cache, where every probability is
far below those presets' absolute tolerance. At a looser tolerance the subtle bugs first cross
it downstream, and the growth column still names where they were born. The same suite on
124M-shaped weights is the ``port124m`` tier (slow); docs/golden-files.md has its table.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import gpt2np
from gpt2np.golden import GoldenFile
from gpt2np.golden.diff import PRECISIONS
from gpt2np.golden.stress import stress_params
from gpt2np.golden.writer import write_tensors
from gpt2np.params import flatten
from tests.helpers.toyport import BUGS, ToyPort

P, T = 12, 4  # prefix, step
ROWS = [[7, 3, 9, 200, 41, 18, 5, 77, 120, 64], [250, 6, 33, 90, 12, 180, 2]]  # a ragged batch


class Goldens:
    """A small model and its float64 golden files, each written on first use: a decode step of
    2 rows, the same for one row, and a left-padded plain pass."""

    def __init__(
        self, root: pathlib.Path, hp: gpt2np.HParams, std: float, P: int, T: int, params=None
    ):
        self.root, self.hp, self.P = root, hp, P
        if params is None:
            params = gpt2np.init_params(hp, seed=1, std=std)
        self.model = gpt2np.GPT2(hp, params)
        self.weights = flatten(self.model.params)
        self.ids = np.random.default_rng(0).integers(0, hp.n_vocab, (2, P + T))
        # a plain pass of more positions than n_embd: c_proj's weight can be fitted from it
        self.plain_ids = np.random.default_rng(1).integers(0, hp.n_vocab, (2, hp.n_embd // 2 + 8))
        self.pad = np.array([len(ROWS[0]) - len(r) for r in ROWS])
        self.padded_ids = np.zeros((2, len(ROWS[0])), np.int64)
        for b, row in enumerate(ROWS):
            self.padded_ids[b, self.pad[b] :] = row

    def golden(self, case: str) -> pathlib.Path:
        path = self.root / f"{case}.npz"
        if not path.exists():
            if case == "padded":
                gpt2np.dump(self.model, ROWS, path, dtype="float64")
            elif case == "plain":
                gpt2np.dump(self.model, self.plain_ids, path, dtype="float64")
            else:
                ids = self.ids[:1] if case == "one" else self.ids
                gpt2np.dump(self.model, ids, path, dtype="float64", prefix=self.P)
        return path

    def run(self, bugs=frozenset(), precision="float32", case="step"):
        """(golden file, what the port writes for it, with its loss)."""
        port = ToyPort(self.weights, self.hp.n_head, precision, set(bugs))
        if case == "padded":
            return self.golden(case), with_loss(port.run(self.padded_ids, 0, self.pad), self.pad)
        if case == "plain":
            return self.golden(case), with_loss(port.run(self.plain_ids, 0))
        ids = self.ids[:1] if case == "one" else self.ids
        return self.golden(case), with_loss(port.run(ids, self.P))


def with_loss(tensors: dict, pad=None) -> dict:
    """The port's next-token loss from its logits, as a port computes it (log-sum-exp)."""
    logits, ids = tensors["logits"], tensors["ids"]
    if logits.ndim != 3:  # a port that dropped the batch axis
        return tensors
    with np.errstate(invalid="ignore"):  # NaN logits (the neg_inf_pad bug) give a NaN loss
        lse = np.logaddexp.reduce(logits[:, :-1].astype(np.float64), axis=-1)
    picked = np.take_along_axis(logits[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]
    loss = lse - picked
    real = np.ones(loss.shape, bool)
    if pad is not None:  # the golden's padded positions hold 0
        real = np.arange(loss.shape[1])[None, :] >= pad[:, None]
        loss = np.where(real, loss, 0.0)
    return {**tensors, "targets": ids[:, 1:], "loss": loss, "loss.mean": loss[real].mean()}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Goldens:
    hp = gpt2np.HParams(n_vocab=256, n_ctx=64, n_embd=64, n_head=4, n_layer=4)
    return Goldens(tmp_path_factory.mktemp("bugs"), hp, 0.1, P, T)


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("case", ["step", "padded"])
def test_the_correct_port_passes_at_its_precision(small, precision: str, case: str) -> None:
    report = gpt2np.compare(*small.run(precision=precision, case=case), precision=precision)
    assert report.ok, str(report)
    assert not report.missing and not report.extra  # it writes every tensor
    assert max(r.tol_ratio for r in report.rows) < 0.5  # with a margin
    assert report.first_nonfinite is None


#: bug: (the case, the first divergence = where it is born, what a hint must say, or None)
EXPECTED = {
    "ln_eps": ("step", "h0.ln_1", "LayerNorm with ε = 1e-6"),
    "erf_gelu": ("step", "h0.mlp.gelu", "GELU in the exact erf form"),
    "no_scale": ("step", "h0.attn.scores", "× 4 = √Dh (Dh = 16): the 1/√Dh scale is missing"),
    "pos_off_by_one": ("step", "embed.positions", "the positions run 1 ahead"),
    "unbiased_var": ("step", "h0.ln_1", "LayerNorm with the unbiased (n − 1) variance"),
    "qk_swap": ("step", "h0.attn.q", "port h0.attn.q equals golden h0.attn.k (q and k swapped?)"),
    "upper_left_mask": ("step", "h0.attn.probs", "counted from the upper-left corner"),
    "no_ln_f": ("step", "ln_f", "port ln_f equals golden h3.out"),
    "self_unseen": ("step", "h0.attn.probs", "a new token unable to attend to itself"),
    "no_step_mask": ("step", "h0.attn.probs", "no causal mask on the step"),
    "neg_inf_pad": ("padded", "h1.attn.merged", None),  # see test_nan_is_named_where_it_starts
    "kv_swap": ("step", "h0.attn.scores", "K and V swapped in the cache"),
    "k_prescaled": ("step", "h0.attn.k", "keys stored already scaled by 1/√Dh"),
    "past_after": ("step", "h0.attn.scores", "the past placed after the step's keys"),
    "right_pad": ("padded", "ids", "the port pads on the right"),
    "no_batch_axis": ("one", "ids", "the batch axis is dropped (so do 67 more tensors)"),
    "past_after_step": ("step", "past", "saved after the step was appended to the cache"),
    # issue 34: four hints that named the wrong cause, seven bug classes caught without a hint,
    # scale factors named by cause, and a divergence no variant explains (no hint at all)
    "step_only_mask": ("step", "h0.attn.probs", "see only the step's keys, not the past's"),
    "pad_positions_unshifted": (
        "padded",
        "embed.positions",
        "the positions are not shifted by the left padding",
    ),
    "nan_in_mlp": ("step", "h0.mlp.gelu", "NaN first appears in port h0.mlp.gelu (1 where"),
    "qkv_per_head": ("step", "h0.attn.q", "q, k and v split per head"),
    "heads_dh_h": ("step", "h0.attn.q", "heads laid out [Dh, H]"),
    "merge_no_transpose": ("step", "h0.attn.merged", "heads merged without the transpose"),
    "c_proj_transposed": ("plain", "h0.attn.c_proj", "through c_proj's weight transposed"),
    "softmax_wrong_axis": ("step", "h0.attn.probs", "a softmax over the wrong axis, the queries"),
    "mask_after_softmax": ("step", "h0.attn.probs", "the mask applied after the softmax"),
    "resid_from_ln_1": ("step", "h0.resid_mid", "the residual taken from ln_1's output"),
    "embed_scaled": (
        "step",
        "embed.tokens",
        "× 8 = √D (D = 64, d_model): token embeddings multiplied by √d_model",
    ),
    "scores_by_d_model": (
        "step",
        "h0.attn.scores",
        "× 0.5 = 1/√H (H = 4, n_head) = √(Dh/D): the "
        "scores divided by √D = √64 (d_model) instead of √Dh = √16",
    ),
    "fc_noise": ("step", "h0.mlp.c_fc", None),
    "pad_unmasked": ("padded", "h0.attn.probs", "the padding is not masked"),
    # caught here because init_params' biases are random; zero biases hide them (test_stress)
    "attn_bias_dropped": ("step", "h0.attn.qkv", "c_attn's bias dropped, added twice"),
    "mlp_bias_dropped": ("step", "h0.mlp.c_fc", "mlp.c_fc's bias dropped, added twice"),
    # issue 34 item 2: recomputed from the decode-step golden's wpe.rows
    "positions_from_0": ("step", "embed.positions", "counted from 0 on the cached step"),
}
#: The bugs whose hint named a wrong cause before issue 34 (what it said), and those with none.
MISLED = {"step_only_mask": "upper-left corner", "pad_positions_unshifted": "pads on the right",
          "nan_in_mlp": "GELU in the exact erf form"}  # fmt: skip
UNEXPLAINED = ["fc_noise", "neg_inf_pad"]
NEW_HINTS = ["step_only_mask", "pad_positions_unshifted", "nan_in_mlp", "qkv_per_head",
             "heads_dh_h", "merge_no_transpose", "c_proj_transposed", "softmax_wrong_axis",
             "mask_after_softmax", "resid_from_ln_1", "embed_scaled",
             "scores_by_d_model", "pad_unmasked"]  # fmt: skip


@pytest.mark.parametrize("bug", [b for b in BUGS if b in EXPECTED])
def test_each_bug_is_reported_where_it_enters(small, bug: str) -> None:
    case, first, hint = EXPECTED[bug]
    report = gpt2np.compare(*small.run({bug}, case=case))
    assert not report.ok
    assert report.first_divergence == report.born == first, str(report)
    if hint:
        assert any(hint in h for h in report.hints), report.hints
    names = [r.name for r in report.rows]
    assert all(r.status == "ok" for r in report.rows[: names.index(first)])  # no false alarm


#: The ten common port bugs of the issue that had no hint: each is named now.
NAMED = ["erf_gelu", "ln_eps", "unbiased_var", "pos_off_by_one", "kv_swap", "k_prescaled",
         "past_after", "right_pad", "no_batch_axis", "past_after_step"]  # fmt: skip


def test_the_ten_common_bugs_without_a_hint_now_have_one(small) -> None:
    named = [b for b in NAMED if any(EXPECTED[b][2] in h for h in hints_of(small, b))]
    assert len(named) >= 8, f"named only {named}"
    assert named == NAMED


@pytest.mark.parametrize("bug", list(MISLED))
def test_a_hint_never_names_a_cause_its_variant_does_not_reproduce(small, bug: str) -> None:
    """Issue 34: these bugs got a hint naming the wrong cause (a variant that came 5× closer
    than the golden, but not within tolerance, or one blind to the ids): now the right one."""
    hints = hints_of(small, bug)
    assert not any(MISLED[bug] in h for h in hints), hints
    assert len(hints) >= 1 and all(EXPECTED[bug][2] in h for h in hints[:1]), hints


@pytest.mark.parametrize("bug", UNEXPLAINED)
def test_a_divergence_no_variant_explains_gets_no_hint(small, bug: str) -> None:
    report = gpt2np.compare(*small.run({bug}, case=EXPECTED[bug][0]))
    assert not report.ok and report.first_divergence == EXPECTED[bug][1]
    assert report.hints == [], report.hints


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_the_new_hints_hold_at_low_precision(small, precision: str) -> None:
    """Within the low presets' tolerance too, each planted bug gets its hint and nothing else;
    was at bfloat16: 'port h0.attn.probs equals golden h0.attn.probs × 0.807582' for scores
    scaled by 1/√D, a least-squares factor inside bfloat16's rtol of 0.15, not a cause."""
    for bug in [b for b in EXPECTED if b in NEW_HINTS]:
        case, first, hint = EXPECTED[bug]
        report = gpt2np.compare(*small.run({bug}, precision, case), precision=precision)
        if hint is None:
            assert report.hints == [], (bug, report.hints)
            continue
        hint = re.sub(r"^× [\d.]+ ", "", hint)  # the fitted factor's digits vary with precision
        assert report.first_divergence == first and report.hints, (bug, str(report))
        assert all(hint in h for h in report.hints), (
            bug, report.hints)  # fmt: skip


def test_the_nan_hint_names_where_it_first_appears_and_nothing_after(small) -> None:
    report = gpt2np.compare(*small.run({"nan_in_mlp"}))
    assert report.first_divergence == "h0.mlp.gelu"
    assert len(report.hints) == 1 and report.hints[0].startswith(
        "NaN first appears in port h0.mlp.gelu (1 where the golden has numbers, the first at "
        "[0, 3, 3]); every tensor before it is finite"
    )


def test_nan_left_in_the_padding_does_not_silence_the_hints(small) -> None:
    """NaN in padded query rows only (not compared, never leaking) stops no hint downstream."""
    golden, port = small.run({"erf_gelu"}, case="padded")
    for i in range(small.hp.n_layer):
        probs = port[f"h{i}.attn.probs"].copy()
        probs[1, :, : small.pad[1]] = np.nan  # row 1's padded queries
        port[f"h{i}.attn.probs"] = probs
    report = gpt2np.compare(golden, port)
    assert report.first_nonfinite.startswith("NaN in the padded positions of h0.attn.probs")
    assert any("GELU in the exact erf form" in h for h in report.hints), report.hints


def test_hf_tensor_names_are_renames(small) -> None:
    """HF's module names (examples/hf_dump.py's table) read as the golden names they are."""
    golden, tensors = small.run()
    hf = {"transformer.wte": "embed.tokens", "transformer.h.0.mlp.act": "h0.mlp.gelu",
          "h.1.attn.c_attn": "h1.attn.qkv", "transformer.ln_f": "ln_f", "lm_head": "logits",
          "transformer.h.2.mlp.act": "h2.mlp.gelu", "h3.mlp.act": "h3.mlp.gelu",
          "blocks.0.attn.c_attn": "h0.attn.qkv",
          "transformer.wpe": "embed.positions"}  # fmt: skip
    port = {k: v for k, v in tensors.items() if k not in hf.values()}
    port.update({theirs: tensors[ours] for theirs, ours in hf.items()})
    report = gpt2np.compare(golden, port)
    assert report.renames == hf
    assert "h1.attn.c_attn" not in report.renames.values()


def hints_of(goldens: Goldens, bug: str, precision: str = "float32") -> list[str]:
    report = gpt2np.compare(*goldens.run({bug}, precision, EXPECTED[bug][0]), precision=precision)
    return report.hints


def test_nan_is_named_where_it_starts(small) -> None:
    """A padded batch masked with −inf: NaN in the padded query rows of h0.attn.probs, which are
    not compared, reaches real rows one layer down (0 · NaN in probs · v). Was: 'max abs 0.00'
    at h1.attn.merged and nothing about where the NaN came from."""
    report = gpt2np.compare(*small.run({"neg_inf_pad"}, case="padded"))
    merged = next(r for r in report.rows if r.name == "h1.attn.merged")
    assert np.isnan(merged.max_abs) and merged.n_nan > 0 and merged.tol_ratio == np.inf
    probs = next(r for r in report.rows if r.name == "h0.attn.probs")
    assert probs.status == "ok" and probs.hidden_nan > 0 and probs.first_nonfinite[0] == 1
    assert report.first_nonfinite.startswith("NaN in the padded positions of h0.attn.probs")
    assert "a −inf mask?" in report.first_nonfinite
    text = str(report)
    assert "NaN first appears in h0.attn.probs (in the padding)" in text.splitlines()[-1]
    assert "nan" in next(line for line in text.splitlines() if line.startswith("h1.attn.merged"))
    row = report.to_dict()["rows"][[r.name for r in report.rows].index("h1.attn.merged")]
    assert row["max_abs"] == "nan" and row["n_nan"] == merged.n_nan


def test_a_port_with_misnamed_files_fails_and_is_told_the_names(small) -> None:
    """Was: 'OK: 3 tensors … 186 missing', exit 0, for a port writing h0_ln_1.npy."""
    golden, tensors = small.run()
    misnamed = {name.replace(".", "_"): a for name, a in tensors.items()}
    report = gpt2np.compare(golden, misnamed)
    assert not report.ok
    assert report.renames["h0_ln_1"] == "h0.ln_1" and report.renames["loss_mean"] == "loss.mean"
    assert "port tensors look misnamed (embed_tokens → embed.tokens, embed_positions" in str(report)
    assert "h*_ln_1 (4)" in str(report)  # the extra files, grouped as the missing ones are
    assert str(report).splitlines()[-1].startswith("FAIL: 63 tensors missing in port, 63 of")


def test_a_single_token_step_hides_the_step_mask(small, tmp_path) -> None:
    """Why docs/golden-files.md asks for a step of 2 or more tokens: with one new token there is
    no later token to hide, so a missing step mask passes, as it must; the past placed after the
    step's keys changes only the order of the scores and probabilities (the logits are exact),
    which the hint still names."""
    hp, ids = small.hp, small.ids[:, : P + 1]
    golden = tmp_path / "one_token.npz"
    gpt2np.dump(small.model, ids, golden, dtype="float64", prefix=P)

    def compare(bug: str) -> gpt2np.CompareReport:
        port = ToyPort(small.weights, hp.n_head, "float32", {bug}).run(ids, P)
        return gpt2np.compare(golden, port)

    assert compare("no_step_mask").ok
    assert compare("self_unseen").first_divergence == "h0.attn.probs"
    report = compare("past_after")
    assert [r.name for r in report.diverged] == [f"h{i}.attn.{n}" for i in range(4)
                                                for n in ("scores", "probs")]  # fmt: skip
    assert any("the past placed after the step's keys" in h for h in report.hints)


@pytest.mark.parametrize(
    "bug,first,born",
    [("erf_gelu", "h3.resid_mid", "h0.mlp.gelu"), ("ln_eps", "h0.ln_2", "h0.ln_1")],
)
def test_a_loose_tolerance_still_names_where_the_error_is_born(small, bug, first, born) -> None:
    """At rtol = atol = 1e-3 these two bugs first cross the tolerance downstream; the born
    tensor is within tolerance, and its hint is still searched."""
    report = gpt2np.compare(*small.run({bug}), rtol=1e-3, atol=1e-3)
    assert (report.first_divergence, report.born) == (first, born)
    assert f"the error is born at {born}" in str(report).splitlines()[-1]
    assert any(EXPECTED[bug][2] in h for h in report.hints), report.hints


def test_the_upper_left_mask_needs_a_cached_step(small, tmp_path) -> None:
    """Without a past the two corners coincide: only a decode-step golden file catches it."""
    hp, weights, ids = small.hp, small.weights, small.ids
    golden = tmp_path / "plain.npz"
    model = gpt2np.GPT2(hp, gpt2np.params.unflatten(weights, hp))
    gpt2np.dump(model, ids, golden, dtype="float64")
    port = ToyPort(weights, hp.n_head, "float32", {"upper_left_mask", "pos_off_by_one"})
    assert gpt2np.compare(golden, port.step(ids), allow_missing="loss*").ok


# -- a long cache: probabilities far below the low precisions' absolute tolerance ---------------


@pytest.fixture(scope="module")
def long_cache(tmp_path_factory) -> Goldens:
    """248 cached tokens and an 8-token step, heads of GPT-2's width (Dh = 64), small elsewhere."""
    hp = gpt2np.HParams(n_vocab=512, n_ctx=256, n_embd=128, n_head=2, n_layer=2)
    return Goldens(tmp_path_factory.mktemp("long"), hp, 0.02, 248, 8)


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_the_correct_port_passes_with_a_long_cache(long_cache, precision: str) -> None:
    report = gpt2np.compare(*long_cache.run(precision=precision), precision=precision)
    assert report.ok, str(report)
    probs = [r.tol_ratio for r in report.rows if r.name.endswith("attn.probs")]
    assert max(probs) < 0.5  # the row-scaled tolerance leaves a correct port its margin


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
@pytest.mark.parametrize("bug", ["self_unseen", "no_step_mask"])
def test_step_mask_bugs_fail_at_low_precision_with_a_long_cache(long_cache, bug, precision):
    """Probabilities near 1/256 are far below float16's (0.02) and bfloat16's (0.15) absolute
    tolerance: both bugs passed with exit 0 until a probability row's tolerance scaled with the
    row's largest probability."""
    report = gpt2np.compare(*long_cache.run({bug}, precision), precision=precision)
    assert not report.ok and report.first_divergence == "h0.attn.probs", str(report)
    assert any(EXPECTED[bug][2] in h for h in report.hints), report.hints


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_mask_that_sees_only_the_step_is_not_called_upper_left(long_cache, precision) -> None:
    """Issue 34: with a 248-token cache the upper-left variant came 5× closer to a port whose
    step sees only its own keys than the golden did, and was named although it is no match."""
    report = gpt2np.compare(*long_cache.run({"step_only_mask"}, precision), precision=precision)
    assert report.first_divergence == "h0.attn.probs"
    assert not any("upper-left" in h for h in report.hints), report.hints
    assert any(EXPECTED["step_only_mask"][2] in h for h in report.hints), report.hints


# -- the same on 124M's shapes (slow: the port124m tier) ---------------------------------------


@pytest.fixture(scope="module")
def gpt2_124m(tmp_path_factory) -> Goldens:
    return Goldens(tmp_path_factory.mktemp("124m"), gpt2np.HParams(), 0.02, 248, 8)


@pytest.mark.port124m
def test_124m_the_correct_port_passes_at_every_preset(gpt2_124m) -> None:
    for precision in PRECISIONS:
        for case in ("one", "padded"):
            report = gpt2np.compare(*gpt2_124m.run(precision=precision, case=case),
                                    precision=precision, hint=False)  # fmt: skip
            assert report.ok, f"{precision} {case}\n{report}"


@pytest.mark.port124m
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_124m_step_mask_bugs_fail_at_low_precision(gpt2_124m, precision: str) -> None:
    for bug in ("self_unseen", "no_step_mask"):
        report = gpt2np.compare(*gpt2_124m.run({bug}, precision, "one"), precision=precision)
        assert report.first_divergence == "h0.attn.probs", f"{bug}\n{report}"
        assert any(EXPECTED[bug][2] in h for h in report.hints), report.hints


@pytest.mark.port124m
def test_124m_nan_misnamed_and_hints(gpt2_124m) -> None:
    report = gpt2np.compare(*gpt2_124m.run({"neg_inf_pad"}, case="padded"), hint=False)
    assert report.first_nonfinite.startswith("NaN in the padded positions of h0.attn.probs")
    golden, tensors = gpt2_124m.run(case="one")
    report = gpt2np.compare(golden, {k.replace(".", "_"): v for k, v in tensors.items()})
    assert not report.ok and report.renames["h0_ln_1"] == "h0.ln_1"
    expected = {**EXPECTED, "no_batch_axis": ("one", "ids", "the batch axis is dropped")}
    named = []
    for bug in NAMED:
        case = expected[bug][0] if expected[bug][0] != "step" else "one"
        report = gpt2np.compare(*gpt2_124m.run({bug}, case=case))
        if any(expected[bug][2] in h for h in report.hints):
            named.append(bug)
    assert len(named) >= 8, f"named only {named}"


def test_positions_from_0_are_named_and_only_they(small, tmp_path) -> None:
    """Issue 34: a cached step whose positions restart at 0 had no hint, the golden's step
    tensors holding only wpe[T_past + t]. A decode-step golden file now holds wpe's rows
    0 … T_past + T − 1 (wpe.rows, an input a port need not write); the hint is given only when
    wpe[t] explains the port: not for another bug at the same tensor, not for noise, and not
    from an older file without wpe.rows."""
    golden, port = small.run({"positions_from_0"})
    report = gpt2np.compare(golden, port)
    assert report.ok is False and report.first_divergence == "embed.positions"
    assert report.hints[0].startswith("port embed.positions at step position t holds wpe[t]")
    assert "T_past + t = 12 + t" in report.hints[0]
    assert "wpe.rows" not in [r.name for r in report.rows if r.required]  # not asked of ports
    for other in ("pos_off_by_one", "embed_scaled"):
        hints = gpt2np.compare(*small.run({other})).hints
        assert not any("counted from 0" in h for h in hints), (other, hints)
    golden, port = small.run()
    noisy = dict(port, **{"embed.positions": port["embed.positions"] + 1e-3})
    assert gpt2np.compare(golden, noisy).hints == []
    with GoldenFile(golden) as g:  # an older golden file: no wpe.rows, no hint
        assert g.header("wpe.rows").shape == (P + T, small.hp.n_embd)
        older = {n: g.read(n) for n in g.names if n != "wpe.rows"}
        manifest = dict(g.manifest)
    manifest["tensors"] = []
    old_file = tmp_path / "older.npz"
    write_tensors(old_file, manifest, older)
    report = gpt2np.compare(old_file, small.run({"positions_from_0"})[1])
    assert report.first_divergence == "embed.positions" and report.hints == []


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_positions_from_0_at_low_precision(small, precision: str) -> None:
    report = gpt2np.compare(*small.run({"positions_from_0"}, precision), precision=precision)
    assert not report.ok
    assert any("counted from 0 on the cached step" in h for h in report.hints), str(report)


@pytest.fixture(scope="module")
def stress_124m(tmp_path_factory) -> Goldens:
    hp = gpt2np.HParams()
    return Goldens(tmp_path_factory.mktemp("stress124m"), hp, 0.0, 248, 8, stress_params(hp, 0))


@pytest.mark.port124m
def test_124m_stress_weights(stress_124m) -> None:
    """`gpt2np stress-weights --like 124M`'s weights at 124M's shapes (a 248-token cache, an
    8-token step): a correct port passes at every preset; a dropped c_attn bias is named at
    h0.attn.qkv, and a float16 softmax without max-subtraction overflows to NaN at
    h0.attn.probs, as on the tiny model of tests/golden/test_stress.py."""
    for precision in ("float32", "float16", "bfloat16"):
        report = gpt2np.compare(*stress_124m.run(precision=precision, case="one"),
                                precision=precision, hint=False)  # fmt: skip
        assert report.ok, f"{precision}\n{report}"
    report = gpt2np.compare(*stress_124m.run({"attn_bias_dropped"}, "float16", "one"),
                            precision="float16")  # fmt: skip
    assert report.first_divergence == "h0.attn.qkv", str(report)
    assert any(EXPECTED["attn_bias_dropped"][2] in h for h in report.hints), report.hints
    report = gpt2np.compare(*stress_124m.run({"softmax_no_max"}, "float16", "one"),
                            precision="float16")  # fmt: skip
    assert report.first_divergence == "h0.attn.probs", str(report)
    assert report.hints[0].startswith("NaN first appears in port h0.attn.probs")
