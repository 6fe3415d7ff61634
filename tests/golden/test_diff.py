"""gpt2np.compare and the two CLI commands: verdicts, where an error is born, hints, dtypes,
masked scores, manifests, in-memory sources and what is printed.

Port files here are written with plain np.savez / np.save, independently of the code under test.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

import gpt2np
from gpt2np.cli import golden as cli_trace
from gpt2np.golden import MANIFEST_KEY, GoldenFile, dump, weights_sha256
from gpt2np.golden.diff import PRECISIONS, compare
from gpt2np.golden.trace import tensor_names, trace
from gpt2np.params import cast_params, flatten, unflatten

IDS = [[5, 17, 42, 3, 88, 60]]
N_TENSORS = 1 + 1 + len(tensor_names(2)) + 2  # ids, targets, the trace, loss, loss.mean


def read_npz(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def tensors_of(path: pathlib.Path) -> dict[str, np.ndarray]:
    return {k: v for k, v in read_npz(path).items() if k != MANIFEST_KEY}


@pytest.fixture
def golden_path(tiny_model, tmp_path) -> pathlib.Path:
    path = tmp_path / "golden.npz"
    dump(tiny_model, IDS, path, model_name="tiny")
    return path


def test_weights_sha256_follows_its_definition(tiny_model) -> None:
    """Recomputed here from the documented recipe, the way a port would."""
    import hashlib

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
    assert list(z) == [MANIFEST_KEY, "ids", "targets", "h0.attn.probs", "h1.attn.probs",
                       "logits", "loss", "loss.mean"]  # fmt: skip
    assert z["logits"].dtype == np.float64 and m["dtype"] == "float64"
    assert m["weights_dtype"] == "float32"  # the hash is of the weights as given, before the cast
    assert m["weights_sha256"] == weights_sha256(tiny_model.params, tiny_model.hparams)
    assert m["names"] == ["*.attn.probs", "logits"]
    m = dump(tiny_model, IDS, path, names=(g for g in ["h1.*", "logits"]))  # a generator
    assert m["names"] == ["h1.*", "logits"] and len(m["tensors"]) == 2 + 15 + 1 + 2
    with pytest.raises(ValueError, match="matches no traced tensor"):
        dump(tiny_model, IDS, path, names="h9.*")


def test_dump_text_prompt_uses_the_tokenizer(tmp_path) -> None:
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=16, n_embd=8, n_head=2, n_layer=1)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=1))
    m = dump(model, "Hello world", tmp_path / "g.npz", names="logits")
    assert m["prompt"] == "Hello world" and m["ids"] == [[15496, 995]]  # GPT-2's published ids
    m = dump(model, ["Hello world", "Hi"], tmp_path / "g.npz", names="logits")
    assert m["prompt"] == ["Hello world", "Hi"] and m["pad"] == [0, 1]
    with pytest.raises(ValueError, match="empty"):
        dump(model, "", tmp_path / "e.npz")


# ---- verdicts -------------------------------------------------------------------------------


def test_compare_a_file_with_itself_passes(golden_path) -> None:
    report = compare(golden_path, golden_path)
    assert report.ok and report.first_divergence is None and report.born is None
    assert report.compared == N_TENSORS and not report.missing and not report.extra
    assert all(r.max_abs == 0 for r in report.rows)
    text = str(report)
    assert f"OK: {N_TENSORS} tensors within tolerance" in text
    assert "h0.ln_1" not in text  # passing tensors get no row unless asked
    assert len(report.format("all").splitlines()) > N_TENSORS


def test_float64_golden_accepts_the_float32_run(tiny_model, tmp_path) -> None:
    dump(tiny_model, IDS, tmp_path / "g64.npz", dtype=np.float64)
    dump(tiny_model, IDS, tmp_path / "g32.npz")
    report = compare(tmp_path / "g64.npz", tmp_path / "g32.npz")
    assert report.ok, str(report)
    assert (report.rtol, report.atol) == PRECISIONS["float32"]
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
    assert report.first_divergence == report.born == "h1.ln_2"
    assert [r.name for r in report.diverged][-1] == "logits"
    before = report.rows[: report.rows.index(report.diverged[0])]
    assert {r.status for r in before} == {"ok", "missing"}
    assert report.missing == ["ids", "targets", "loss", "loss.mean"]  # reported, not failures
    first = report.diverged[0]
    assert first.worst[-1] == 5 and first.n_bad > 0
    text = str(report)
    assert "<- first divergence, error born here" in text and "FAIL" in text
    assert "h1.resid_mid" in text  # the last tensor that still agrees is shown for context


def test_a_planted_difference_in_one_element(golden_path, tmp_path) -> None:
    z = tensors_of(golden_path)
    z["h0.mlp.c_fc"][0, 4, 2] += 1e-3
    port = tmp_path / "port.npz"
    np.savez(port, **z)
    report = compare(golden_path, port)
    assert [r.name for r in report.diverged] == ["h0.mlp.c_fc"]
    d = report.diverged[0]
    assert d.n_bad == 1 and d.worst == (0, 4, 2)
    assert d.max_abs == pytest.approx(1e-3, rel=1e-3)
    assert compare(golden_path, port, atol=2e-3).ok  # within a looser tolerance
    assert compare(golden_path, port, precision="float16").ok


def test_exact_comparison_with_zero_tolerances_warns_nothing(golden_path, tmp_path) -> None:
    z = tensors_of(golden_path)
    z["logits"][0, 0, 0] += 1.0
    port = tmp_path / "port.npz"
    np.savez(port, **z)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # x / (0 + 0·|golden|) must not print a RuntimeWarning
        report = compare(golden_path, port, rtol=0.0, atol=0.0)
    assert [r.name for r in report.diverged] == ["logits"]
    assert report.diverged[0].n_bad == 1 and report.diverged[0].tol_ratio == np.inf


def test_missing_extra_shape_and_nan(golden_path, tmp_path) -> None:
    z = tensors_of(golden_path)
    del z["h1.mlp.gelu"]
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
    assert "SHAPE: port [1,3,6,7], golden [1,3,6,8]" in report.format("failures")
    same_nan = tmp_path / "nan.npz"  # NaN where the golden file has NaN too counts as equal
    np.savez(same_nan, a=np.array([1.0, np.nan, np.inf]))
    assert compare(same_nan, same_nan).ok


def test_strict_and_empty_overlap(golden_path, tmp_path) -> None:
    only_logits = tmp_path / "logits.npz"
    np.savez(only_logits, logits=read_npz(golden_path)["logits"])
    report = compare(golden_path, only_logits)  # a port that writes one tensor says so
    assert not report.ok and "FAIL: 34 tensors missing in port" in str(report)
    assert "--only GLOB" in str(report).splitlines()[-1]
    assert "missing in port, allowed (4): ids, targets, loss, loss.mean" in str(report)
    report = compare(golden_path, only_logits, only="logits")
    assert report.ok and [r.name for r in report.rows] == ["logits"]
    report = compare(golden_path, only_logits, allow_missing="*")
    assert report.ok and len(report.missing) == 38 and not report.missing_required
    assert compare(golden_path, only_logits, allow_missing=["h*", "loss*", "ln_f", "embed.*"]).ok
    assert not compare(golden_path, only_logits, allow_missing=["h*", "loss*", "ln_f"]).ok
    report = compare(golden_path, only_logits, only=["logits", "ids"], strict=True)
    assert report.missing_required == ["ids"]  # inputs are needed only with strict
    with pytest.raises(ValueError, match=r"--only 'h9\.\*' matches no golden tensor"):
        compare(golden_path, only_logits, only="h9.*")
    unrelated = tmp_path / "other.npz"
    np.savez(unrelated, foo=np.zeros(2))
    report = compare(golden_path, unrelated)
    assert not report.ok and "no tensor of the golden file" in str(report)
    with pytest.raises(ValueError, match="non-negative"):
        compare(golden_path, golden_path, rtol=-1)
    with pytest.raises(ValueError, match="precision must be one of"):
        compare(golden_path, golden_path, precision="int8")
    with pytest.raises(ValueError, match="allow_mismatch takes"):
        compare(golden_path, golden_path, allow_mismatch=["colour"])


# ---- the manifests ------------------------------------------------------------------------


def test_different_inputs_fail_unless_allowed(tiny_model, golden_path, tmp_path) -> None:
    """Was: a warning, and exit 0 when the tensors happened to agree."""
    other_ids = [[5, 17, 42, 3, 88, 61]]
    dump(tiny_model, other_ids, tmp_path / "other.npz", names="h0.ln_1")
    report = compare(golden_path, tmp_path / "other.npz")  # h0.ln_1 agrees up to the last row
    assert not report.ok and report.mismatches[0].startswith("ids: golden [[5, 17, 42")
    assert "MISMATCH: ids" in str(report) and "allow it with --allow-mismatch ids" in str(report)
    report = compare(golden_path, tmp_path / "other.npz", allow_mismatch=["ids"])
    assert not report.mismatches and any("allowed mismatch, ids" in n for n in report.notes)
    assert report.first_divergence == "ids"  # the ids tensor itself still differs

    flat = {k: v.copy() for k, v in flatten(tiny_model.params).items()}
    flat["wpe"][20, 0] += 1.0  # weights that differ where these 6 positions do not look
    other = gpt2np.GPT2(tiny_model.hparams, unflatten(flat, tiny_model.hparams))
    dump(other, IDS, tmp_path / "w.npz")
    report = compare(golden_path, tmp_path / "w.npz")
    assert [m.split(":")[0] for m in report.mismatches] == ["weights_sha256"]
    assert not report.diverged and not report.ok
    assert compare(golden_path, tmp_path / "w.npz", allow_mismatch="all").ok

    dump(tiny_model, [[9, 9, 9, 5, 17, 42, 3, 88, 60]], tmp_path / "p.npz", prefix=3)
    report = compare(golden_path, tmp_path / "p.npz")
    assert {m.split(":")[0] for m in report.mismatches} == {"T_past", "prefix_ids"}


def test_port_as_a_directory_of_npy_files(golden_path, tmp_path) -> None:
    port = tmp_path / "port"
    port.mkdir()
    for name, a in tensors_of(golden_path).items():
        np.save(port / f"{name}.npy", a.astype(np.float32) if a.dtype.kind == "f" else a)
    report = compare(golden_path, port)
    assert report.ok and "port: no manifest" in str(report)


# ---- in-memory sources ----------------------------------------------------------------------


def test_in_memory_mappings_and_traces_on_either_side(tiny_model, golden_path) -> None:
    t = trace(tiny_model, IDS)
    report = compare(golden_path, t, allow_missing="loss*")  # a Trace as the port
    assert report.ok and report.compared == len(t) and report.port.startswith("<Trace(")
    assert compare(golden_path, t).ok  # the loss is optional: a trace is a passing port
    assert compare(golden_path, t, strict=True).missing_required == ["ids", "targets", "loss",
                                                                    "loss.mean"]  # fmt: skip
    assert compare(t, golden_path).ok  # and as the golden side
    port = {"h0.ln_1": t["h0.ln_1"], "logits": t["logits"].tolist()}  # any array-like
    assert compare(golden_path, port).compared == 2
    assert compare(dict(t), dict(t)).ok
    buggy = dict(t)
    buggy["h1.attn.scores"] = t["h1.attn.scores"] * 2
    assert compare(t, buggy).first_divergence == "h1.attn.scores"
    with pytest.raises(TypeError, match="tensor names must be str"):
        compare(golden_path, {3: np.ones(2)})
    with pytest.raises(TypeError, match="expected a path"):
        compare(golden_path, 42)


# ---- where the error is born ----------------------------------------------------------------


def test_the_error_is_born_where_it_grows_most() -> None:
    """An error that enters under the tolerance and first crosses it downstream is reported at
    the tensor where it grew most, with the tensor where it crossed."""
    golden = {n: np.ones(100) for n in ("a", "b", "c", "d", "e")}
    port = {n: np.ones(100) for n in golden}
    for name, rel in (("a", 1e-7), ("b", 3e-7), ("c", 6e-6), ("d", 1.5e-5), ("e", 8e-5)):
        port[name][7] += rel  # /tol at rtol = atol = 1e-5: 0.005, 0.015, 0.3, 0.75, 4
    report = compare(golden, port, rtol=1e-5, atol=1e-5)
    assert report.first_divergence == "e" and report.born == "c"
    growth = {r.name: r.growth for r in report.rows}
    assert growth["c"] == max(growth.values())
    text = str(report)
    assert "error born here" in text and "the error is born at c" in text.splitlines()[-1]
    assert text.index("\nc ") < text.index("\ne ")  # the rows from the birth to the divergence


# ---- hints --------------------------------------------------------------------------------


def test_hint_q_and_k_swapped(tiny_model, golden_path) -> None:
    t = dict(trace(tiny_model, IDS))
    t["h0.attn.q"], t["h0.attn.k"] = t["h0.attn.k"], t["h0.attn.q"]
    report = compare(golden_path, t)
    assert report.first_divergence == "h0.attn.q"
    assert report.hints[0] == "port h0.attn.q equals golden h0.attn.k (q and k swapped?)"


def test_hint_a_transposed_cache_layout_that_passes_the_shape_check(tiny_model, tmp_path) -> None:
    """[B, T, H, Dh] written where [B, H, T, Dh] is expected: with T = H the shapes agree."""
    ids = [[5, 17, 42]]  # T = 3 = n_head
    dump(tiny_model, ids, tmp_path / "g.npz")
    t = dict(trace(tiny_model, ids))
    t["h1.attn.k"] = t["h1.attn.k"].transpose(0, 2, 1, 3)
    report = compare(tmp_path / "g.npz", t)
    assert report.first_divergence == "h1.attn.k"
    assert report.hints == [
        "port h1.attn.k equals golden h1.attn.k transposed: the port's axes are [B, T, H, Dh] "
        "where the golden has [B, H, T, Dh] (np.transpose(golden, (0, 2, 1, 3)))"
    ]
    t["h1.attn.k"] = t["h1.attn.k"][:, :, :, :]  # as a shape failure too, when T != H
    t["h1.attn.v"] = trace(tiny_model, ids)["h1.attn.v"].transpose(0, 2, 3, 1)
    report = compare(tmp_path / "g.npz", t)
    hint = [h for h in report.hints if h.startswith("port h1.attn.v")]
    assert hint and "[B, T, Dh, H]" in hint[0] and "(0, 2, 3, 1)" in hint[0]


def test_hint_hf_hidden_state_after_ln_f(tiny_model, golden_path) -> None:
    t = dict(trace(tiny_model, IDS))
    t["h1.out"] = t["ln_f"]  # HF's hidden_states[-1] taken for the last block's output
    report = compare(golden_path, t)
    assert report.hints == [
        "port h1.out equals golden ln_f; HF's last hidden_states is ln_f's output, not the "
        "last block's"
    ]


def test_hint_a_missing_scale(tiny_model, golden_path) -> None:
    t = dict(trace(tiny_model, IDS))
    t["h0.attn.scores"] = t["h0.attn.scores"] * np.sqrt(8)  # Dh = 24 / 3
    report = compare(golden_path, t)
    assert report.hints == [
        "port h0.attn.scores equals golden h0.attn.scores × 2.82843 = √Dh (Dh = 8): the 1/√Dh "
        "scale is missing?"
    ]


# ---- dtypes -------------------------------------------------------------------------------


def bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns as uint16 (round to nearest even), by hand."""
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_raw_16_bit_patterns_and_integers_are_dtype_failures(tiny_model, golden_path) -> None:
    t = dict(trace(tiny_model, IDS))
    t["h1.mlp.gelu"] = bfloat16_bits(t["h1.mlp.gelu"])
    t["h0.ln_2"] = t["h0.ln_2"].astype(np.float16).view(np.uint16)
    t["h0.ln_1"] = np.round(t["h0.ln_1"]).astype(np.int32)
    report = compare(golden_path, t)
    rows = {r.name: r for r in report.rows}
    assert rows["h1.mlp.gelu"].status == rows["h0.ln_2"].status == "dtype"
    assert rows["h0.ln_1"].note == "port stores integers (int32) where the golden holds float32"
    assert report.first_divergence == "h0.ln_1"
    hints = " ".join(report.hints)
    assert "port h1.mlp.gelu holds raw bfloat16 bits as uint16" in hints
    assert "port h0.ln_2 holds raw float16 bits as uint16" in hints
    t = dict(trace(tiny_model, IDS))
    t["h0.ln_1"] = t["h0.ln_1"].astype(np.float16)  # a float16 port: fine, compared as numbers
    assert compare(golden_path, t, precision="float16", allow_missing="loss*").ok
    t["ids"] = np.array(IDS, np.float64)  # ids from a language whose numbers are doubles
    assert compare(golden_path, t, precision="float16", allow_missing="loss*").ok


# ---- masked scores ------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [-1e10, -np.inf, 0.0, np.nan, np.finfo(np.float32).min])
def test_masked_scores_are_not_compared(tiny_model, tmp_path, masked: float) -> None:
    """A port may write its scores after masking, with any masked value; a decode step's mask
    is counted from the lower right."""
    ids = [[5, 17, 42, 3, 88, 60, 7]]
    dump(tiny_model, ids, tmp_path / "g.npz", prefix=3)
    t = dict(trace(tiny_model, [ids[0][3:]], past=tiny_model.forward([ids[0][:3]])[1]))
    T, S = 4, 7
    hidden = np.arange(S)[None, :] > 3 + np.arange(T)[:, None]
    for name in [n for n in t if n.endswith("attn.scores")]:
        t[name] = np.where(hidden, masked, t[name])
    report = compare(tmp_path / "g.npz", t, allow_missing=["loss*", "past"])
    assert report.ok and report.first_nonfinite is None  # -inf (or NaN) masks are no finding
    t["h0.attn.scores"][0, 0, 1, 4] += 1.0  # a visible entry (query 1 sees keys 0 … 4)
    assert compare(tmp_path / "g.npz", t).first_divergence == "h0.attn.scores"
    t = dict(trace(tiny_model, [ids[0][3:]], past=tiny_model.forward([ids[0][:3]])[1]))
    t["h0.attn.probs"][0, 0, 1, 5] += 1e-3  # probabilities are compared everywhere
    assert compare(tmp_path / "g.npz", t).first_divergence == "h0.attn.probs"


@pytest.mark.parametrize("mask", ["golden", "-inf", "below the row's minimum"])
@pytest.mark.parametrize("prefix", [0, 3])
def test_a_port_writing_what_trace_returns_passes_against_dump(tiny_model, tmp_path, prefix, mask):
    """Trace equals dump (issue 34, item 5): what gpt2np.trace returns, written as a port's
    files, passes against gpt2np.dump of the same ids, a plain pass or a decode step, with the
    scores masked as the golden does, with −inf, or with any value below the row's minimum (the
    masked keys then get probability 0, as the golden's). Failed before: loss and loss.mean were
    required, and a trace has none."""
    ids = [[5, 17, 42, 3, 88, 60, 7]]
    golden = tmp_path / "g.npz"
    dump(tiny_model, ids, golden, prefix=prefix)
    past = tiny_model.forward([ids[0][:prefix]])[1] if prefix else None
    port = dict(trace(tiny_model, [ids[0][prefix:]], past=past))
    T, S = len(ids[0]) - prefix, len(ids[0])
    hidden = np.arange(S)[None, :] > prefix + np.arange(T)[:, None]
    for name in [n for n in port if n.endswith("attn.scores")]:
        s = port[name].astype(np.float64)
        value = {"golden": s, "-inf": -np.inf, "below the row's minimum":
                 s.min(-1, keepdims=True) - 1.0}[mask]  # fmt: skip
        port[name] = np.where(hidden, value, s)
    if mask == "-inf":  # the port's softmax of its masked scores is the golden's probs
        s = port["h0.attn.scores"]
        e = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(e / e.sum(-1, keepdims=True), port["h0.attn.probs"], atol=1e-6)
    directory = tmp_path / "port"
    directory.mkdir()
    for name, a in port.items():
        np.save(directory / f"{name}.npy", a)
    for side in (port, directory):
        report = compare(golden, side)
        assert report.ok and report.first_nonfinite is None, str(report)
        optional = ["ids", "targets", "loss", "loss.mean", *(["prefix_ids", "past"] * bool(prefix))]
        assert sorted(report.missing) == sorted(optional) and not report.missing_required
    strict = compare(golden, port, strict=True)  # strict: every golden tensor, the loss too
    assert not strict.ok and {"loss", "loss.mean"} <= set(strict.missing_required)


# ---- what is printed ------------------------------------------------------------------------


def test_enough_digits_to_show_the_difference(golden_path, tmp_path) -> None:
    """Was: 'golden -0.0626126, port -0.0626126' for a failure at a tight tolerance."""
    z = tensors_of(golden_path)
    z["h0.ln_1"] = z["h0.ln_1"].astype(np.float64) * (1 + 3e-7)
    report = compare(golden_path, z, rtol=1e-8, atol=1e-9)
    last = str(report).splitlines()[-1]
    golden, port = last.split("golden ")[1].split(", port ")
    port = port.rstrip(")")
    assert float(port) / float(golden) == pytest.approx(1 + 3e-7, abs=1e-8)


def test_missing_tensors_are_grouped_not_one_long_line(tiny_model, tmp_path) -> None:
    hp = gpt2np.HParams(n_vocab=97, n_ctx=32, n_embd=24, n_head=3, n_layer=12)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp))
    dump(model, IDS, tmp_path / "g.npz")
    t = trace(model, IDS)
    text = str(compare(tmp_path / "g.npz", {"logits": t.logits}))
    assert all(len(line) <= 100 for line in text.splitlines()[1:])  # the first names the files
    assert "h*.attn.qkv (12)" in text and "missing in port (184)" in text
    assert "missing in port, allowed (4): ids, targets, loss, loss.mean" in text


def test_json_report(golden_path, tmp_path) -> None:
    z = tensors_of(golden_path)
    z["h1.ln_2"] = z["h1.ln_2"] + 1.0
    d = json.loads(compare(golden_path, z).to_json())  # strict JSON: no NaN or Infinity tokens
    assert d["ok"] is False and d["first_divergence"] == "h1.ln_2"
    assert d["rows"][0]["name"] == "ids" and d["precision"] == "float32"
    row = next(r for r in d["rows"] if r["name"] == "h1.ln_2")
    assert row["status"] == "diverged" and row["worst"] and row["growth"] > 1
    json.loads(compare(golden_path, golden_path, rtol=0, atol=0).to_json())


# ---- damaged files (the rest is in test_golden_read.py) -----------------------------------


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
    elif content == "flipped":  # a byte of logits' data, read in full before it is compared
        data = bytearray(golden_path.read_bytes())
        with GoldenFile(golden_path) as g:
            data[g.data_offset("logits") + 7] ^= 0xFF
        bad.write_bytes(bytes(data))
    elif content == "pickled":
        np.savez(bad, logits=np.array([{"a": 1}], dtype=object))
    else:
        bad.write_bytes(content)
    with pytest.raises(gpt2np.CheckpointError, match=match) as e:
        compare(bad, golden_path)
    assert str(bad) in str(e.value)
    with pytest.raises(gpt2np.CheckpointError, match="no such file"):
        compare(tmp_path / "absent.npz", golden_path)


def test_garbage_npy_in_a_port_directory_is_not_called_pickled(golden_path, tmp_path) -> None:
    (tmp_path / "logits.npy").write_bytes(b"garbage, not an array")
    with pytest.raises(gpt2np.CheckpointError, match=r"cannot read tensor logits: not a \.npy"):
        compare(golden_path, tmp_path)


def test_manifest_listing_an_absent_tensor(golden_path, tmp_path) -> None:
    with zipfile.ZipFile(golden_path) as zin, zipfile.ZipFile(tmp_path / "g.npz", "w") as zout:
        for item in zin.infolist():
            if item.filename != "logits.npy":
                zout.writestr(item, zin.read(item.filename))
    with pytest.raises(gpt2np.CheckpointError, match="lists tensor logits"):
        GoldenFile(tmp_path / "g.npz")


@pytest.mark.parametrize("manifest", [b"{not json", b'{"tensors": [{"name": "gone"}]}'])
def test_a_refused_golden_file_is_closed_at_once(tmp_path, monkeypatch, manifest) -> None:
    import gpt2np.golden.reader as reader

    opened = []
    real = reader.open_file
    monkeypatch.setattr(reader, "open_file", lambda p: opened.append(real(p)) or opened[-1])
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{MANIFEST_KEY: np.frombuffer(manifest, np.uint8), "x": np.ones(2)})
    with pytest.raises(gpt2np.CheckpointError, match="manifest"):
        GoldenFile(bad)
    assert len(opened) == 1 and opened[0].closed  # closed, not left to the GC


# ---- the CLI subcommands, through add_parsers on a local parser --------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpt2np")
    cli_trace.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_dump_and_compare(tiny_model, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli_trace, "load_model", lambda name, *args, **kw: tiny_model)
    g, p = str(tmp_path / "g.npz"), str(tmp_path / "p.npz")
    assert run_cli(["dump", "--ids", "5,17,42", "--out", g]) == 0  # --model defaults to 124M
    out = capsys.readouterr().out
    assert f"wrote {g}: {N_TENSORS} tensors, ids [1, 3] (5, 17, 42), float32" in out
    assert run_cli(["dump", "--model", "x", "--ids", "5 17 42", "--out", p, "--dtype", "float64",
                    "--names", "h1.*", "--names", "logits"]) == 0  # fmt: skip
    assert read_npz(pathlib.Path(p))["logits"].dtype == np.float64
    assert run_cli(["compare", g, p]) == 1  # p holds only some tensors: say which
    assert "FAIL: 19 tensors missing in port" in capsys.readouterr().out
    assert run_cli(["compare", g, p, "--allow-missing", "*"]) == 0
    assert "OK: 20 tensors within tolerance" in capsys.readouterr().out
    assert run_cli(["compare", g, p, "--only", "h1.*", "--only", "logits"]) == 0
    assert "OK: 16 tensors within tolerance" in capsys.readouterr().out

    z = read_npz(pathlib.Path(p))
    z["h1.mlp.c_fc"] = z["h1.mlp.c_fc"] * 1.001
    np.savez(p, **z)
    assert run_cli(["compare", g, p, "--allow-missing", "*"]) == 1
    out = capsys.readouterr().out
    assert "h1.mlp.c_fc" in out.splitlines()[-1] and "<- first divergence" in out
    assert run_cli(["compare", g, p, "--allow-missing", "*", "--precision", "bfloat16"]) == 0
    capsys.readouterr()
    assert run_cli(["compare", g, p, "--allow-missing", "*", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["first_divergence"] == "h1.mlp.c_fc"
    assert run_cli(["compare", g, p, "--allow-missing", "*", "--only-failures"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if "DIVERGES" in line]
    assert len(rows) == 1  # the file was edited: nothing downstream of c_fc changed
    assert run_cli(["compare", g, p, "--allow-missing", "*", "--all"]) == 1
    assert "h1.ln_1 " in capsys.readouterr().out
    with pytest.raises(ValueError, match="atol"):
        run_cli(["compare", g, p, "--allow-missing", "*", "--atol", "nan"])
    with pytest.raises(ValueError, match="--ids must be integers"):
        run_cli(["dump", "--ids", "5,a", "--out", p])


def test_cli_dump_batches_ragged_rows_and_decode_steps(tiny_model, tmp_path, monkeypatch, capsys):
    """Was: --ids '1,2;3,4' refused."""
    monkeypatch.setattr(cli_trace, "load_model", lambda name, *args, **kw: tiny_model)
    g = str(tmp_path / "g.npz")
    assert run_cli(["dump", "--ids", "1,2,3;4,5,6", "--out", g]) == 0
    assert "ids [2, 3] (1, 2, 3)" in capsys.readouterr().out
    assert run_cli(["dump", "--ids", "1,2,3,9;4,5", "--prefix-len", "1", "--out", g]) == 0
    out, err = capsys.readouterr()
    assert "ids [2, 3] (2, 3, 9), T_past 1, left padding [0, 2]" in out and not err
    assert run_cli(["dump", "--ids", "7;8", "--prefix-ids", "1,2;3", "--out", g]) == 0
    assert "a 1-token step cannot show a missing causal mask" in capsys.readouterr().err
    m = json.loads(read_npz(pathlib.Path(g))[MANIFEST_KEY].tobytes())
    assert m["prefix_ids"] == [[1, 2], [0, 3]] and m["ids"] == [[7], [8]] and m["pad"] == [0, 1]
    assert run_cli(["dump", "--ids", "7,8", "--targets", "8,9", "--out", g]) == 0
    assert read_npz(pathlib.Path(g))["targets"].tolist() == [[8, 9]]
    with pytest.raises(ValueError, match="an empty row"):
        run_cli(["dump", "--ids", "1,2;;3", "--out", g])


def test_cli_dump_does_not_print_every_id(tiny_model, tmp_path, monkeypatch, capsys) -> None:
    """Was: 4,235 characters of ids at T = 1024."""
    monkeypatch.setattr(cli_trace, "load_model", lambda name, *args, **kw: tiny_model)
    ids = ",".join(str(i % 97) for i in range(30))
    assert run_cli(["dump", "--ids", ids, "--out", str(tmp_path / "g.npz")]) == 0
    out = capsys.readouterr().out
    assert len(out) < 200 and "ids [1, 30] (0, 1, 2, 3, …)" in out


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
    assert "24 tensors, ids [1, 2] (15496, 995), float64" in r.stdout
    m = json.loads(read_npz(g)[MANIFEST_KEY].tobytes())
    assert m["weights_sha256"] == weights_sha256(model.params, hp)  # the saved weights, reloaded
    expected = trace(model.astype(np.float64), [15496, 995]).logits
    np.testing.assert_allclose(read_npz(g)["logits"], expected, rtol=1e-12, atol=1e-12)

    r = gpt2np_cli(
        "dump", "--model", str(tmp_path / "model"), "--ids", "15496,995", "--out", str(p)
    )
    assert r.returncode == 0, r.stderr
    r = gpt2np_cli("compare", str(g), str(p))
    assert r.returncode == 0 and "OK: 24 tensors within tolerance" in r.stdout, r.stdout

    z = tensors_of(p)
    z["h0.attn.probs"] = z["h0.attn.probs"][..., ::-1].copy()  # a port with the mask backwards
    np.savez(p, **z)
    r = gpt2np_cli("compare", str(g), str(p))
    assert r.returncode == 1
    assert "FAIL: " in r.stdout and "the first is h0.attn.probs" in r.stdout

    p.write_bytes(b"garbage")
    r = gpt2np_cli("compare", str(g), str(p))
    assert r.returncode != 0 and str(p) in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_dump_from_python_without_a_model_name_says_what_the_model_is(tiny_model, tmp_path):
    """gpt2np.dump from Python (no model_name) gave the header 'golden: model None'."""
    path = tmp_path / "g.npz"
    dump(tiny_model, IDS, path)
    header = str(compare(path, path)).splitlines()[1]
    assert "None" not in header
    assert header.startswith("golden: an unnamed model (n_layer 2, n_embd 24, n_head 3, n_vocab 97")
    dump(tiny_model, IDS, path, model_name="tiny")
    assert str(compare(path, path)).splitlines()[1].startswith("golden: model tiny, float32")


def test_a_hub_models_dump_names_its_repo_and_commit(tiny_model, tmp_path) -> None:
    """A model loaded from the Hub knows where it came from: the manifest records it."""
    from gpt2np.sources.hub import Snapshot

    model = tiny_model.astype(np.float32)
    model.source = Snapshot("org/tiny", "main", "0123456789abcdef0123456789abcdef01234567", {})
    m = dump(model, IDS, tmp_path / "g.npz")
    assert m["model"] == "org/tiny@0123456789abcdef0123456789abcdef01234567"
