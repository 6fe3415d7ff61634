"""gpt2np.golden.lens: the logit lens on a Trace, checked against the read-out written out here in
plain NumPy (LayerNorm with the biased variance, then the tied head) and against the model's
own logits for the last block."""

from __future__ import annotations

import numpy as np
import pytest

import gpt2np
from gpt2np.golden.lens import logit_lens, residual_names, top_tokens


def read_out(x: np.ndarray, ln_f: dict, wte: np.ndarray) -> np.ndarray:
    """ln_f(x) · wteᵀ from first principles, in float64."""
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (ln_f["g"] * (x - mean) / np.sqrt(var + 1e-5) + ln_f["b"]) @ wte.T.astype(np.float64)


@pytest.fixture
def traced(tiny_model):
    ids = np.array([[5, 17, 42, 7, 3], [1, 2, 3, 4, 5]])
    return tiny_model, gpt2np.trace(tiny_model, ids), ids


def test_each_row_reads_the_residual_stream_out_through_ln_f_and_the_head(traced) -> None:
    model, t, _ = traced
    lens = logit_lens(model, t)
    assert list(lens) == ["embed", "h0", "h1"]
    streams = {"embed": t["embed.sum"], "h0": t["h0.out"], "h1": t["h1.out"]}
    for row, x in streams.items():
        assert lens[row].shape == (2, model.hparams.n_vocab) and lens[row].dtype == np.float32
        want = read_out(x[:, -1], model.params["ln_f"], model.params["wte"])
        np.testing.assert_allclose(lens[row], want, rtol=1e-4, atol=1e-5, err_msg=row)


def test_the_last_row_is_the_models_prediction(traced) -> None:
    model, t, ids = traced
    every = logit_lens(model, t, position=None)
    assert every["h1"].shape == t.logits.shape
    np.testing.assert_array_equal(every["h1"], t.logits)  # same functions, same shapes
    np.testing.assert_allclose(logit_lens(model, t)["h1"], t.logits[:, -1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        logit_lens(model, t, position=2)["h0"], every["h0"][:, 2], rtol=1e-5, atol=1e-6
    )
    logits, _ = model.forward(ids)
    np.testing.assert_allclose(every["h1"], logits, rtol=1e-5, atol=1e-5)


def test_a_trace_of_the_residual_stream_alone_is_enough(traced) -> None:
    model, t, ids = traced
    small = gpt2np.trace(model, ids, names=["embed.sum", "h*.out"])
    assert list(small) == list(residual_names(2).values())
    for row, logits in logit_lens(model, small).items():
        np.testing.assert_array_equal(logits, logit_lens(model, t)[row])


def test_bad_input_is_named(traced) -> None:
    model, t, ids = traced
    with pytest.raises(ValueError, match=r"lacks h0.out, h1.out.*names=\['embed.sum', 'h\*.out'\]"):
        logit_lens(model, gpt2np.trace(model, ids, names="embed.*"))
    with pytest.raises(ValueError, match="position 5 is outside the trace's 5 positions"):
        logit_lens(model, t, position=5)
    with pytest.raises(TypeError, match="takes a Trace"):
        logit_lens(model, {"embed.sum": t["embed.sum"]})


def test_top_tokens(traced) -> None:
    class Letters:
        def decode(self, ids):
            return "".join(chr(ord("a") + i % 26) for i in ids)

    logits = np.log(np.array([0.1, 0.6, 0.05, 0.25], dtype=np.float32))
    top = top_tokens(logits, Letters(), k=3)
    assert [(i, s) for i, s, _ in top] == [(1, "b"), (3, "d"), (0, "a")]
    np.testing.assert_allclose([p for *_, p in top], [0.6, 0.25, 0.1], rtol=1e-6)
    assert len(top_tokens(logits, Letters(), k=10)) == 4
    with pytest.raises(ValueError, match="one row of logits"):
        top_tokens(logits[None], Letters())
    with pytest.raises(ValueError, match="k must be a positive int"):
        top_tokens(logits, Letters(), k=0)
