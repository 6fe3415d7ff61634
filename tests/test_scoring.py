"""Scoring: log-probs against log-softmax of forward's logits (float64, computed here), the
strided window against HF's perplexity-guide loop (committed fixture) and against a per-token
recomputation, and the argument checks."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

import gpt2np
from gpt2np import GPT2, Score
from gpt2np.scoring import score, windows

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_nll_equals_log_softmax_of_forward(tiny_model):
    ids = np.random.default_rng(0).integers(0, tiny_model.hparams.n_vocab, size=20)
    logits, _ = tiny_model.forward(ids)  # [T, V]
    expected = log_softmax64(logits)[np.arange(19), ids[1:]]
    s = score(tiny_model, ids)
    np.testing.assert_allclose(s.token_logprobs, expected, rtol=0, atol=1e-9)
    assert s.nll == pytest.approx(-expected.sum(), abs=1e-9)
    assert s.perplexity == pytest.approx(np.exp(-expected.mean()), rel=1e-12)
    assert s.mean_nll == pytest.approx(-expected.mean())
    np.testing.assert_array_equal(s.context_len, np.arange(1, 20))
    assert s.n_tokens == 20 and s.n_scored == 19 and s.ids.tolist() == ids.tolist()


def test_strided_window_equals_hf_guide(fixture, fixture_model):
    s = score(fixture_model, fixture["score_ids"], stride=int(fixture["score_stride"]))
    np.testing.assert_allclose(s.token_logprobs, fixture["score_logprobs"], atol=2e-5)
    np.testing.assert_array_equal(s.context_len, fixture["score_context"])
    assert s.nll == pytest.approx(-fixture["score_logprobs"].sum(), rel=1e-6)


def test_stride_one_gives_every_token_the_longest_context(tiny_model):
    n_ctx = tiny_model.hparams.n_ctx
    ids = np.random.default_rng(1).integers(0, tiny_model.hparams.n_vocab, size=2 * n_ctx + 5)
    s = score(tiny_model, ids, stride=1)
    for t in range(1, len(ids)):  # each token with the (at most n_ctx - 1) tokens before it
        begin = max(0, t - (n_ctx - 1))
        logits, _ = tiny_model.forward(ids[begin:t])
        expected = log_softmax64(logits[-1])[ids[t]]
        assert s.token_logprobs[t - 1] == pytest.approx(expected, abs=1e-5)  # float32 forward
        assert s.context_len[t - 1] == t - begin


@pytest.mark.parametrize("n, max_len, stride", [(100, 32, 16), (33, 32, 31), (7, 4, 1), (5, 5, 2)])
def test_windows_score_every_token_once(n, max_len, stride):
    scored = []
    for begin, end, first in windows(n, max_len, stride):
        assert 0 <= begin < first <= end <= n and end - begin <= max_len
        scored += range(first, end)
    assert scored == list(range(1, n))


def test_default_stride_and_window(tiny_model):
    n_ctx = tiny_model.hparams.n_ctx
    ids = np.arange(3 * n_ctx) % tiny_model.hparams.n_vocab
    s = score(tiny_model, ids)
    assert s.context_len.max() == n_ctx - 1 and s.context_len[n_ctx:].min() >= n_ctx // 2
    t = score(tiny_model, ids, stride=n_ctx // 2, max_len=n_ctx)
    np.testing.assert_array_equal(s.token_logprobs, t.token_logprobs)


def test_text_and_model_method():
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=16, n_head=2, n_layer=1)
    text_model = GPT2(hparams, gpt2np.init_params(hparams, seed=2))
    text = "Hello world, this is a test."
    ids = text_model.tokenizer.encode(text)
    by_text = text_model.score(text)
    np.testing.assert_array_equal(by_text.ids, ids)
    np.testing.assert_array_equal(by_text.token_logprobs, score(text_model, ids).token_logprobs)


def test_score_is_frozen(tiny_model):
    s = score(tiny_model, [1, 2, 3])
    assert isinstance(s, Score)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.nll = 0.0
    with pytest.raises(ValueError):
        s.token_logprobs[0] = 0.0


@pytest.mark.parametrize(
    "ids, kw, error",
    [
        ([5], {}, ValueError),
        ([], {}, ValueError),
        ([[1, 2], [3, 4]], {}, ValueError),
        ([1, 2, 3], dict(stride=0), ValueError),
        ([1, 2, 3], dict(max_len=8, stride=8), ValueError),
        ([1, 2, 3], dict(max_len=33), ValueError),
        ([1, 2, 3], dict(max_len=1), ValueError),
        ([1, 2, 3], dict(stride=2.5), TypeError),
        ([1, 200], {}, ValueError),
        ([1.0, 2.0], {}, TypeError),
        (3, {}, ValueError),
    ],
)
def test_bad_arguments(tiny_model, ids, kw, error):
    with pytest.raises(error):
        score(tiny_model, ids, **kw)


def test_peak_memory_is_one_float64_copy_of_the_logits():
    # Scoring a 1024-token window of 124M held float32 logits, their float64 copy, x - max and
    # exp(x - max) at once: 28 bytes per logit, 1.4 GB. Now the float32 logits and one float64.
    import tracemalloc

    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=128, n_embd=16, n_head=2, n_layer=1)
    model = GPT2(hparams, gpt2np.init_params(hparams, seed=0))
    ids = np.arange(128) * 7 % 50257
    expected = log_softmax64(model.forward(ids)[0])[np.arange(127), ids[1:]]
    tracemalloc.start()
    try:
        s = score(model, ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(s.token_logprobs, expected, rtol=0, atol=1e-9)
    assert peak < 14 * 128 * 50257, peak / (128 * 50257)
