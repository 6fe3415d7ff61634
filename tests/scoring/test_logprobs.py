"""Scoring: log-probs against log-softmax of forward's logits (float64, computed here), the
strided window against HF's perplexity-guide loop (committed fixture, and live in the oracle
tier) and against a per-token recomputation, the batched path against the clear one window by
window, batches of texts, progress, and the argument checks."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

import gpt2np
from gpt2np import GPT2, Score
from gpt2np.scoring.logprobs import score, windows
from tests.helpers.tolerances import LOGITS32

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("fast", [False, True], ids=["clear", "fast"])
def test_nll_equals_log_softmax_of_forward(tiny_model, fast):
    """The clear path takes forward's own logits (so its log-softmax must agree to 1e-9); the
    batched one computes the head on fewer rows, whose float32 rounding differs slightly."""
    model = GPT2(tiny_model.hparams, tiny_model.params, fast=fast)
    ids = np.random.default_rng(0).integers(0, model.hparams.n_vocab, size=20)
    logits, _ = model.forward(ids)  # [T, V]
    expected = log_softmax64(logits)[np.arange(19), ids[1:]]
    s = score(model, ids)
    tol = 1e-5 if fast else 1e-9
    np.testing.assert_allclose(s.token_logprobs, expected, rtol=0, atol=tol)
    assert s.nll == pytest.approx(-expected.sum(), abs=20 * tol)
    assert s.perplexity == pytest.approx(np.exp(-s.token_logprobs.mean()), rel=1e-12)
    assert s.perplexity == pytest.approx(np.exp(-expected.mean()), rel=tol)
    assert s.mean_nll == pytest.approx(-expected.mean(), abs=tol)
    np.testing.assert_array_equal(s.context_len, np.arange(1, 20))
    assert s.n_tokens == 20 and s.n_scored == 19 and s.ids.tolist() == ids.tolist()


def test_strided_window_equals_hf_guide(fixture, fixture_model):
    s = score(fixture_model, fixture["score_ids"], stride=int(fixture["score_stride"]))
    np.testing.assert_allclose(s.token_logprobs, fixture["score_logprobs"], atol=2e-5)
    np.testing.assert_array_equal(s.context_len, fixture["score_context"])
    n = len(s.token_logprobs)  # the sum of n log-probs, each within 2e-5
    assert s.nll == pytest.approx(-fixture["score_logprobs"].sum(), abs=2e-5 * n)


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
        (np.zeros((2, 2, 2), int), {}, ValueError),
        ([[1, 2], [3]], {}, ValueError),  # a batch row of 1 token
        (["ab", [1, 2]], {}, TypeError),  # texts and ids mixed
        ([[1, 2], 3], {}, TypeError),
        (np.zeros((0, 3), int), {}, ValueError),
        ([1, 2, 3], dict(batch_size=0), ValueError),
        ([1, 2, 3], dict(batch_size=2.0), TypeError),
        ([1, 2, 3], dict(progress=1), TypeError),
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
    np.testing.assert_allclose(s.token_logprobs, expected, rtol=0, atol=1e-5)
    assert peak < 14 * 128 * 50257, peak / (128 * 50257)


# -- the batched path against the clear one, and batches of texts ------------------------------


def ragged_rows(model: GPT2, lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, model.hparams.n_vocab, n) for n in lengths]


@pytest.mark.parametrize("batch_size", [None, 1, 2, 5])
@pytest.mark.parametrize("max_len, stride", [(None, None), (12, 5), (7, 6)])
def test_batched_windows_equal_clear_window_by_window(tiny_model, batch_size, max_len, stride):
    """Rows shorter and longer than the window, several windows per pass (left-padded when
    their lengths differ): every row's Score is the clear path's, window by window."""
    clear = GPT2(tiny_model.hparams, tiny_model.params, fast=False)
    rows = ragged_rows(tiny_model, [2, 9, 40, 75, 13])
    kw = dict(max_len=max_len, stride=stride)
    got = score(tiny_model, rows, batch_size=batch_size, **kw)
    assert isinstance(got, list) and len(got) == len(rows)
    for s, ids in zip(got, rows):
        expected = score(clear, ids, **kw)
        np.testing.assert_array_equal(s.ids, ids)
        np.testing.assert_array_equal(s.context_len, expected.context_len)
        np.testing.assert_allclose(s.token_logprobs, expected.token_logprobs, atol=2e-5)
        assert s.perplexity == pytest.approx(expected.perplexity, rel=2e-5)


def test_batched_equals_clear_in_float64(tiny_model):
    fast64 = tiny_model.astype(np.float64)
    clear64 = GPT2(tiny_model.hparams, tiny_model.params, dtype=np.float64, fast=False)
    rows = ragged_rows(tiny_model, [70, 33, 5], seed=3)
    for s, ids in zip(score(fast64, rows, max_len=16, stride=6, batch_size=3), rows):
        expected = score(clear64, ids, max_len=16, stride=6)
        np.testing.assert_allclose(s.token_logprobs, expected.token_logprobs, atol=1e-10)


def test_a_batch_gives_what_each_row_gives_alone(tiny_model):
    rows = ragged_rows(tiny_model, [30, 3, 64], seed=1)
    alone = [score(tiny_model, ids, stride=10) for ids in rows]
    as_arrays = score(tiny_model, rows, stride=10)
    as_lists = score(tiny_model, [r.tolist() for r in rows], stride=10)
    rectangular = score(tiny_model, np.stack([r[:3] for r in rows]), stride=1)  # a 2-D array
    for a, b, c in zip(alone, as_arrays, as_lists):
        np.testing.assert_allclose(b.token_logprobs, a.token_logprobs, atol=2e-5)
        np.testing.assert_array_equal(c.token_logprobs, b.token_logprobs)
    for row, s in zip(rows, rectangular):
        np.testing.assert_allclose(s.token_logprobs, score(tiny_model, row[:3]).token_logprobs,
                                   atol=2e-5)  # fmt: skip
    assert score(tiny_model, (rows[0],), stride=10)[0].nll == pytest.approx(alone[0].nll, abs=1e-4)


def test_a_list_of_texts():
    """A list of texts is a batch of texts (it was once read as ids: `ids must be integers`)."""
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=16, n_head=2, n_layer=1)
    model = GPT2(hparams, gpt2np.init_params(hparams, seed=2))
    texts = ["Hello world, this is a test.", "Another, rather longer, sentence to score here."]
    got = model.score(texts)
    assert [s.ids.tolist() for s in got] == [model.tokenizer.encode(t) for t in texts]
    for s, text in zip(got, texts):
        np.testing.assert_allclose(s.token_logprobs, model.score(text).token_logprobs, atol=2e-5)
    with pytest.raises(ValueError, match="row 1 of the batch"):
        model.score(["Hello world", "Hi"])  # "Hi" is one token: nothing to score


def test_the_window_cache_holds_one_layer(tiny_model, monkeypatch):
    """Batched scoring's cache keeps one layer's keys and values, not L layers'."""
    from gpt2np.runtime.kvcache import KVCache

    made = []
    real_init = KVCache.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(KVCache, "__init__", init)
    tiny_model.score([np.arange(10) % 7, np.arange(3)], batch_size=2)
    assert made and all(c.one_pass and c.kv.shape[0] == 1 for c in made)
    assert tiny_model.hparams.n_layer > 1


def test_progress_is_tqdm_auto_and_follows_the_convention(tiny_model, monkeypatch):
    import tqdm.auto

    from gpt2np.scoring import logprobs as scoring

    made = []

    class Recorder(tqdm.auto.tqdm):  # widgets in Jupyter, text bars in a terminal
        def __init__(self, *args, **kwargs):
            made.append(kwargs["disable"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(scoring, "tqdm", Recorder)
    ids = np.arange(100) % tiny_model.hparams.n_vocab
    for progress in (True, False, None):  # None: not a TTY here
        tiny_model.score(ids, stride=8, progress=progress)
    assert made == [False, True, True]  # (drawn only past a second: tests/support/test_progress.py)


@pytest.mark.oracle
@pytest.mark.parametrize("stride", [24, 63])
def test_live_against_hf_perplexity_recipe(stride):
    """HF's "Perplexity of fixed-length models" loop on the same weights: every window's mean
    loss, and the perplexity, to float32 precision. The recipe weights a window's loss by
    num_valid_tokens - 1, which is one token short after the first window (the label shift
    drops only labels that are -100 there); here each window is weighted by the labels its
    loss really averaged, the token count that the definition of perplexity asks for."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gpt2np.checkpoint.convert import flat_from_hf

    torch.manual_seed(stride)
    hp = gpt2np.HParams(n_vocab=500, n_ctx=64, n_embd=64, n_head=4, n_layer=2)
    config = transformers.GPT2Config(
        vocab_size=hp.n_vocab, n_positions=hp.n_ctx, n_embd=hp.n_embd, n_layer=hp.n_layer,
        n_head=hp.n_head, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    flat = flat_from_hf({k: v.numpy() for k, v in hf.state_dict().items()}, hp, "the HF model")
    model = gpt2np.GPT2(hp, gpt2np.params.unflatten(flat, hp))
    ids = np.random.default_rng(stride).integers(0, hp.n_vocab, 700)

    encodings = torch.from_numpy(ids)[None]  # the recipe, as documented
    max_length, seq_len = config.n_positions, encodings.size(1)
    losses, counts, prev_end_loc = [], [], 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        input_ids = encodings[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            losses.append(hf(input_ids, labels=target_ids).loss.item())
        counts.append(int((target_ids[:, 1:] != -100).sum()))
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    hf_ppl = np.exp(np.dot(losses, counts) / sum(counts))

    s = model.score(ids, stride=stride)
    window_ends = np.cumsum(counts)
    ours = [-s.token_logprobs[a:z].mean() for a, z in zip(window_ends - counts, window_ends)]
    # float32 in two libraries (OpenBLAS here, MKL in torch): each loss is a mean of log-probs
    np.testing.assert_allclose(ours, losses, rtol=LOGITS32)
    assert s.n_scored == sum(counts) == len(ids) - 1
    assert s.perplexity == pytest.approx(hf_ppl, rel=LOGITS32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_batched_log_softmax_is_the_float64_one(dtype):
    """The batched path's exp in the logits' dtype, summed in float64, against the float64
    log-softmax of the same logits (which the clear path takes)."""
    from gpt2np.scoring.logprobs import _log_softmax_at, _log_softmax_at_in_place

    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((300, 50257)) * 4).astype(dtype)
    logits[0, :] = 0.0  # a flat row
    logits[1, 7] = 80.0  # a row whose mass is on one token
    targets = rng.integers(0, 50257, 300)
    targets[1] = 7
    expected = log_softmax64(logits)[np.arange(300), targets]
    np.testing.assert_allclose(_log_softmax_at(logits, targets), expected, rtol=0, atol=1e-12)
    got = _log_softmax_at_in_place(logits.copy(), targets)
    np.testing.assert_allclose(got, expected, rtol=0, atol=3e-7 if dtype == np.float32 else 1e-12)
    assert got[1] == pytest.approx(0.0, abs=1e-7) and got[0] == pytest.approx(-np.log(50257))


@pytest.mark.parametrize(
    "settings",
    [
        dict(tie_word_embeddings=False),
        dict(layer_norm_epsilon=0.3, activation_function="relu"),
        dict(scale_attn_weights=False, scale_attn_by_inverse_layer_idx=True),
    ],
    ids=["untied head", "eps and relu", "attention scale"],
)
def test_batched_windows_run_the_family_settings_of_the_clear_path(settings):
    """The batched path composes its own pass (a one-layer cache, its own head): it must run an
    HF family model's lm_head, epsilon, activation and attention scale as the clear path does."""
    h = gpt2np.HParams(n_vocab=23, n_ctx=16, n_embd=8, n_head=2, n_layer=2, **settings)
    params = gpt2np.init_params(h, seed=4, std=0.4)
    fast = GPT2(h, params, dtype=np.float64)
    clear = GPT2(h, params, dtype=np.float64, fast=False)
    rows = ragged_rows(fast, [30, 9], seed=2)
    for s, ids in zip(score(fast, rows, max_len=10, stride=4, batch_size=2), rows):
        expected = score(clear, ids, max_len=10, stride=4)
        np.testing.assert_allclose(s.token_logprobs, expected.token_logprobs, atol=1e-10)


def test_a_score_shows_as_a_short_repr_and_an_html_table(tiny_model):
    """Not the arrays: a line in a console, a table of the first 20 tokens in a notebook."""
    s = score(tiny_model, list(range(1, 31)))
    assert repr(s) == f"Score(n_tokens=30, nll={s.nll:.4f}, perplexity={s.perplexity:.4f})"
    page = s._repr_html_()
    assert page.startswith("<table><caption>30 tokens, 29 scored: NLL")
    assert page.count("<tr>") == 1 + 20 + 1 and "… 9 more" in page
    assert f"<td>{s.token_logprobs[0]:.3f}</td>" in page and "<td>2</td>" in page
