"""gpt2np.trace: recording changes nothing in the forward pass, and each intermediate is what its
name says (checked against first-principles NumPy written out here, not against gpt2np's
layers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpt2np
from gpt2np.golden.trace import Trace, tensor_names, tensor_shapes, trace
from gpt2np.layers import Recorder


def ids_for(model: gpt2np.GPT2, B: int, T: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, model.hparams.n_vocab, (B, T))


class KeepingCopies(Recorder):
    """A recorder that keeps every intermediate and a copy of it taken when it was recorded."""

    def __init__(self, prefix: str = "", kept: dict | None = None) -> None:
        self.prefix, self.kept = prefix, ({} if kept is None else kept)

    def __call__(self, name: str, x: np.ndarray) -> np.ndarray:
        self.kept[self.prefix + name] = (x, x.copy())
        return x

    def scope(self, name: str) -> Recorder:
        return KeepingCopies(f"{self.prefix}{name}.", self.kept)


# Bitwise, not a tolerance: a recorder only looks, so the pass must compute the same bits.
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("B,T,split", [(1, 7, 0), (2, 9, 0), (2, 9, 4), (3, 5, 1)])
def test_recording_changes_nothing(tiny_model, dtype, B: int, T: int, split: int) -> None:
    """The forward pass gives the same bits with a recorder that keeps everything as with none,
    and nothing it recorded is changed afterwards by the rest of the pass (an in-place update
    of a recorded array would make the trace lie)."""
    model = gpt2np.GPT2(tiny_model.hparams, tiny_model.params, dtype=dtype, fast=False)
    ids = ids_for(model, B, T, seed=B * 10 + T)
    past = model.forward(ids[:, :split])[1] if split else None
    ids2 = np.asarray(ids[:, split:])
    logits, present = gpt2np.forward(model.params, model.hparams, ids2, past)
    recorder = KeepingCopies()
    logits2, present2 = gpt2np.forward(model.params, model.hparams, ids2, past, recorder)
    np.testing.assert_array_equal(logits2, logits)
    np.testing.assert_array_equal(present2, present)
    assert set(recorder.kept) == set(tensor_names(model.hparams.n_layer))
    for name, (array, at_the_time) in recorder.kept.items():
        np.testing.assert_array_equal(array, at_the_time, err_msg=name)
    t = trace(model, ids2, past=past)  # the trace is that recorder's view
    np.testing.assert_array_equal(t.logits, logits)
    assert t.T_past == split


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_trace_equals_fast_forward_to_rounding(dtype, rtol: float) -> None:
    """The default (fast, blocked) attention kernel sums in another order beyond 128 queries."""
    hp = gpt2np.HParams(n_vocab=50, n_ctx=200, n_embd=16, n_head=2, n_layer=2)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=2, std=0.2), dtype=dtype, fast=True)
    ids = np.random.default_rng(1).integers(0, 50, (1, 170))
    logits, present = model.forward(ids[:, 30:], past=model.forward(ids[:, :30])[1])
    t = trace(model, ids[:, 30:], past=model.forward(ids[:, :30])[1])
    np.testing.assert_allclose(t.logits, logits, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(t.present, present, rtol=rtol, atol=rtol)


def test_golden_fixture_through_trace(golden, golden_model) -> None:
    """The traced logits also match HF transformers' (the committed independent fixture)."""
    t = trace(golden_model, golden["ids"])
    np.testing.assert_allclose(t.logits, golden["logits"], atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(t.present, golden["present"], atol=2e-5, rtol=1e-4)


def test_one_dimensional_ids_keep_the_batch_axis(tiny_model) -> None:
    ids = ids_for(tiny_model, 1, 6)[0]
    t = trace(tiny_model, ids.tolist())
    assert t.ids.shape == (1, 6) and t.ids.dtype == np.int64
    assert t["logits"].shape == (1, 6, tiny_model.hparams.n_vocab)
    clear = gpt2np.GPT2(tiny_model.hparams, tiny_model.params, fast=False)
    np.testing.assert_array_equal(t.logits[0], clear.forward(ids)[0])


@pytest.mark.parametrize("split", [0, 3])
def test_names_order_and_shapes(tiny_model, split: int) -> None:
    h = tiny_model.hparams
    ids = ids_for(tiny_model, 2, 8)
    past = tiny_model.forward(ids[:, :split])[1] if split else None
    t = trace(tiny_model, ids[:, split:], past=past)
    assert list(t) == tensor_names(h.n_layer)
    assert t.shapes() == tensor_shapes(h, batch=2, T=8 - split, T_past=split)
    assert len(t) == 3 + 15 * h.n_layer + 2
    D, H, Dh, T, S = h.n_embd, h.n_head, h.d_head, 8 - split, 8
    assert t["h1.attn.scores"].shape == (2, H, T, S)
    assert t["h0.attn.k"].shape == (2, H, T, Dh)
    assert t["h0.mlp.gelu"].shape == (2, T, 4 * D)
    assert all(a.dtype == np.float32 for a in t.values())


def test_names_filter_keeps_only_matches(tiny_model) -> None:
    ids = ids_for(tiny_model, 1, 5)
    full = trace(tiny_model, ids)
    t = trace(tiny_model, ids, names=["*.attn.probs", "ln_f"])
    assert list(t) == ["h0.attn.probs", "h1.attn.probs", "ln_f"]
    np.testing.assert_array_equal(t["h1.attn.probs"], full["h1.attn.probs"])
    np.testing.assert_array_equal(t.logits, full.logits)  # always there, even when not kept
    np.testing.assert_array_equal(t.present, full.present)
    assert list(trace(tiny_model, ids, names="h1.*")) == [
        n for n in tensor_names(2) if n.startswith("h1.")
    ]
    with pytest.raises(KeyError, match=r"no tensor 'h0\.ln_1'"):
        t["h0.ln_1"]


def test_bad_arguments(tiny_model) -> None:
    ids = ids_for(tiny_model, 1, 4)
    with pytest.raises(ValueError, match="matches no traced tensor"):
        trace(tiny_model, ids, names="h9.*")
    with pytest.raises(TypeError, match="glob strings"):
        trace(tiny_model, ids, names=[3])
    with pytest.raises(ValueError, match="outside"):
        trace(tiny_model, [[0, 97]])
    with pytest.raises(ValueError, match="n_head"):
        trace(tiny_model, ids, past=np.zeros((1, 2, 2, 4, 3, 8), np.float32))
    with pytest.raises(ValueError, match="exceed n_ctx"):
        trace(tiny_model, ids_for(tiny_model, 1, 33))
    assert isinstance(trace(tiny_model, ids), Trace)


# ---- each intermediate against first principles ------------------------------------------


@pytest.fixture(scope="module")
def t64(tiny_model) -> tuple[gpt2np.GPT2, Trace, np.ndarray]:
    """A float64 trace of 4 new tokens after a past of 3, so the mask has an offset."""
    model = tiny_model.astype(np.float64)
    ids = ids_for(model, 2, 7, seed=5)
    past = model.forward(ids[:, :3])[1]
    return model, trace(model, ids[:, 3:], past=past), past


def test_embeddings(t64) -> None:
    model, t, _ = t64
    wte, wpe = model.params["wte"], model.params["wpe"]
    for b in range(2):
        for i in range(4):
            np.testing.assert_array_equal(t["embed.tokens"][b, i], wte[t.ids[b, i]])
            np.testing.assert_array_equal(t["embed.positions"][b, i], wpe[3 + i])  # T_past + t
    np.testing.assert_allclose(t["embed.sum"], t["embed.tokens"] + t["embed.positions"])


def test_layernorm_output_is_normalised_before_gain(t64) -> None:
    model, t, _ = t64
    ln = model.params["blocks"][0]["ln_1"]
    x = t["embed.sum"]
    z = (t["h0.ln_1"] - ln["b"]) / ln["g"]  # undo the gain and bias
    np.testing.assert_allclose(z.mean(-1), 0.0, atol=1e-12)
    var = x.var(-1)  # the biased variance, as GPT-2 uses
    np.testing.assert_allclose(z.var(-1), var / (var + 1e-5), rtol=1e-12)


def test_attention_steps(t64) -> None:
    model, t, past = t64
    h = model.hparams
    H, Dh, D = h.n_head, h.d_head, h.n_embd
    qkv = t["h1.attn.qkv"]
    for name, j in (("q", 0), ("k", 1), ("v", 2)):
        part = qkv[..., j * D : (j + 1) * D].reshape(2, 4, H, Dh)  # [B, T, H, Dh]
        np.testing.assert_array_equal(t[f"h1.attn.{name}"], part.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(t["h1.attn.k"], t.present[:, 1, 0])
    np.testing.assert_array_equal(t["h1.attn.v"], t.present[:, 1, 1])

    keys = np.concatenate([past[:, 1, 0], t["h1.attn.k"]], axis=2)  # [B, H, S, Dh]
    values = np.concatenate([past[:, 1, 1], t["h1.attn.v"]], axis=2)
    scores = np.einsum("bhtd,bhsd->bhts", t["h1.attn.q"], keys) / math.sqrt(Dh)
    np.testing.assert_allclose(t["h1.attn.scores"], scores, rtol=1e-12, atol=1e-12)

    probs = t["h1.attn.probs"]
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-12)
    for i in range(4):  # query i is at position 3 + i: it sees keys 0 … 3 + i and none after
        assert (probs[:, :, i, 3 + i + 1 :] == 0).all()
        assert (probs[:, :, i, : 3 + i + 1] > 0).all()
        seen = scores[:, :, i, : 3 + i + 1]
        e = np.exp(seen - seen.max(-1, keepdims=True))
        np.testing.assert_allclose(probs[:, :, i, : 3 + i + 1], e / e.sum(-1, keepdims=True))

    heads = np.einsum("bhts,bhsd->bthd", probs, values)  # [B, T, H, Dh]
    np.testing.assert_allclose(t["h1.attn.merged"], heads.reshape(2, 4, D), rtol=1e-12)


def test_mlp_and_residual_stream(t64) -> None:
    model, t, _ = t64
    p = model.params["blocks"][0]
    x = t["h0.mlp.c_fc"]
    np.testing.assert_allclose(x, t["h0.ln_2"] @ p["mlp"]["c_fc"]["w"] + p["mlp"]["c_fc"]["b"])
    tanh_gelu = np.vectorize(
        lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    )
    np.testing.assert_allclose(t["h0.mlp.gelu"], tanh_gelu(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(t["h0.resid_mid"], t["embed.sum"] + t["h0.attn.c_proj"])
    np.testing.assert_allclose(t["h0.out"], t["h0.resid_mid"] + t["h0.mlp.c_proj"])
    np.testing.assert_array_equal(t["h1.ln_1"].shape, t["h0.out"].shape)


def test_tied_head(t64) -> None:
    model, t, _ = t64
    logits = np.einsum("btd,vd->btv", t["ln_f"], model.params["wte"])
    np.testing.assert_allclose(t["logits"], logits, rtol=1e-12, atol=1e-12)


def test_float64_agrees_with_float32_to_float32_precision(tiny_model) -> None:
    ids = ids_for(tiny_model, 2, 10, seed=3)
    t32 = trace(tiny_model, ids)
    t64 = trace(tiny_model.astype(np.float64), ids)
    for name in t32:
        scale = np.abs(t64[name]).max()
        err = np.abs(t32[name].astype(np.float64) - t64[name]).max()
        assert err <= 1e-5 * scale, f"{name}: float32 differs by {err:.3g} (scale {scale:.3g})"


def test_model_trace_method_delegates(tiny_model) -> None:
    t = tiny_model.trace([[1, 2, 3]], names="h0.attn.*")
    clear = gpt2np.GPT2(tiny_model.hparams, tiny_model.params, fast=False)
    np.testing.assert_array_equal(t.logits, clear.forward([[1, 2, 3]])[0])
    assert all(name.startswith("h0.attn.") for name in t if name not in ("logits",))


def test_gpt2np_trace_is_the_function_of_golden_trace(tiny_model) -> None:
    """gpt2np.trace(model, ids) is golden.trace.trace, re-exported like gpt2np.generate."""
    from gpt2np.golden.trace import trace as function

    assert gpt2np.trace is function and "trace" in gpt2np.__all__
    ids = ids_for(tiny_model, 2, 5)
    called = gpt2np.trace(tiny_model, ids, names="h1.*")
    assert isinstance(called, Trace) and list(called) == [n for n in tensor_names(2) if "h1." in n]
    past = gpt2np.trace(tiny_model, ids[:, :2]).present
    np.testing.assert_array_equal(
        gpt2np.trace(tiny_model, ids[:, 2:], past).logits,
        trace(tiny_model, ids[:, 2:], past).logits,
    )
    with pytest.raises(ValueError, match="matches no traced tensor"):
        gpt2np.trace(tiny_model, ids, names="nothing*")


def test_a_trace_shows_as_a_short_repr_and_an_html_table(tiny_model) -> None:
    t = gpt2np.trace(tiny_model, [[1, 2, 3]])
    assert repr(t) == f"Trace({len(t)} tensors, ids [1, 3], T_past 0)"
    page = t._repr_html_()
    assert page.startswith(f"<table><caption>{t!r}</caption><tr><th>name</th>")
    name, array = next(iter(t.items()))
    assert f"<td>{name}</td><td>{list(array.shape)}</td><td>{array.dtype}</td>" in page
    assert page.count("<tr>") == 1 + min(20, len(t)) + (len(t) > 20)
