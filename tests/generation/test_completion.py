"""logprobs=k: the Completion result type, which distribution it reports, echo, finish reasons,
and how it prints. (Equality of the log-probs with HF's compute_transition_scores is in
test_generate_vs_hf; here they are checked against the model's own forward pass.)"""

from __future__ import annotations

import types

import numpy as np
import pytest

import gpt2np
from gpt2np import GPT2, Completion
from gpt2np.generation.loop import generate
from gpt2np.generation.sampling import log_softmax
from tests.helpers.tolerances import logprob32


@pytest.fixture(scope="module")
def text_model() -> GPT2:
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=32, n_head=2, n_layer=2)
    return GPT2(hparams, gpt2np.init_params(hparams, seed=1, std=0.2))


def forward_logprobs(model: GPT2, ids: list[int]) -> np.ndarray:
    """log_softmax of an uncached forward pass: row t predicts token t + 1.  -> [T, V]"""
    logits, _ = model.forward(ids)
    return log_softmax(logits)


def test_raw_logprobs_are_the_models_own_at_each_step(tiny_model):
    prompt = [3, 1, 4]
    for kw in (dict(temperature=0), dict(temperature=0.7, top_k=5, seed=2)):
        c = generate(prompt, tiny_model, max_new_tokens=10, logprobs=3, logprobs_mode="raw", **kw)
        assert isinstance(c, Completion) and c.text is None and c.finish_reason == "length"
        lp = forward_logprobs(tiny_model, prompt + c.ids)
        steps = lp[len(prompt) - 1 : -1]  # the distributions the new tokens came from
        np.testing.assert_allclose(c.token_logprobs, steps[np.arange(10), c.ids], atol=1e-5)
        for t, top in enumerate(c.top_logprobs):
            assert [i for i, _ in top] == list(np.argsort(-steps[t], kind="stable")[:3])
            np.testing.assert_allclose([v for _, v in top], np.sort(steps[t])[::-1][:3], atol=1e-5)
        assert c.ids == generate(prompt, tiny_model, max_new_tokens=10, **kw)  # same draws


def test_processed_logprobs_are_the_distribution_each_token_was_drawn_from(tiny_model):
    prompt, kw = [7, 7], dict(temperature=0.5, top_k=4, top_p=0.8, seed=3, max_new_tokens=8)
    c = generate(prompt, tiny_model, logprobs=10, **kw)
    lp = forward_logprobs(tiny_model, prompt + c.ids)[len(prompt) - 1 : -1]
    for t, token in enumerate(c.ids):
        z = lp[t] / 0.5  # temperature (log_softmax shifts z: the filters do not mind)
        kept = np.flatnonzero(np.isfinite(gpt2np.generation.sampling.filter_logits(z, 1.0, 4, 0.8)))
        want = log_softmax(z[kept])
        assert sorted(i for i, _ in c.top_logprobs[t]) == sorted(kept)  # no -inf alternatives
        assert c.token_logprobs[t] == pytest.approx(
            want[list(kept).index(token)], abs=logprob32(temperature=0.5)
        )
    assert all(lp_ <= 0 for lp_ in c.token_logprobs) and c.logprob == pytest.approx(
        sum(c.token_logprobs)
    )


def test_processed_and_raw_agree_when_nothing_changes_the_logits(tiny_model):
    kw = dict(max_new_tokens=6, seed=5, logprobs=2)  # temperature 1, no filter, no penalty
    a = generate([2, 9], tiny_model, **kw)
    b = generate([2, 9], tiny_model, logprobs_mode="raw", **kw)
    assert a.ids == b.ids
    np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-9)


def test_greedy_processed_logprobs_are_the_penalised_softmax(tiny_model):
    prompt = [1, 2, 1]
    c = generate(prompt, tiny_model, max_new_tokens=5, temperature=0, logprobs=0,
                 repetition_penalty=2.0)  # fmt: skip
    seq = prompt + c.ids
    for t, token in enumerate(c.ids):
        z = tiny_model.forward(seq[: len(prompt) + t])[0][-1].astype(np.float64)
        for j in set(seq[: len(prompt) + t]):
            z[j] = z[j] / 2.0 if z[j] > 0 else z[j] * 2.0
        assert token == int(np.argmax(z))
        assert c.token_logprobs[t] == pytest.approx(log_softmax(z)[token], abs=1e-5)
        assert c.top_logprobs[t] == []  # logprobs=0: the chosen tokens' only


def test_echo_scores_the_prompt_as_model_score_does(text_model):
    prompt = "The quick brown fox jumps"
    c = text_model.generate(prompt, 4, temperature=0, echo=True, logprobs=2)
    n = c.n_prompt
    assert c.text.startswith(prompt) and c.text == prompt + text_model.generate(
        prompt, 4, temperature=0
    )
    assert c.ids[:n] == text_model.tokenizer.encode(prompt) and len(c.new_ids) == 4
    assert c.token_logprobs[0] is None and c.top_logprobs[0] == []
    score = text_model.score(prompt)
    np.testing.assert_allclose(c.token_logprobs[1:n], score.token_logprobs, atol=1e-5)
    assert c.logprob == pytest.approx(sum(c.token_logprobs[n:]))  # the continuation's only
    assert c.tokens[:n] == [text_model.tokenizer.decode([i]) for i in c.ids[:n]]


def test_echo_with_no_new_tokens_scores_the_prompt_alone(text_model):
    c = text_model.generate("The quick brown fox", 0, echo=True, logprobs=1)
    assert c.text == "The quick brown fox" and c.new_ids == [] and c.finish_reason == "length"
    np.testing.assert_allclose(c.token_logprobs[1:], text_model.score(c.text).token_logprobs,
                               atol=1e-5)  # fmt: skip


def test_echo_without_logprobs_returns_prompt_and_continuation(text_model, tiny_model):
    assert text_model.generate("Hi there", 3, temperature=0, echo=True) == (
        "Hi there" + text_model.generate("Hi there", 3, temperature=0)
    )
    new = generate([5, 6], tiny_model, max_new_tokens=3, temperature=0)
    assert generate([5, 6], tiny_model, max_new_tokens=3, temperature=0, echo=True) == [5, 6, *new]
    pieces = list(text_model.generate("Hi there", 3, temperature=0, echo=True, stream=True))
    assert pieces[0] == "Hi there" and "".join(pieces) == text_model.generate(
        "Hi there", 3, temperature=0, echo=True
    )


def test_finish_reasons(tiny_model, text_model):
    free = generate([1, 2, 3], tiny_model, max_new_tokens=12, temperature=0)
    k = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    model = GPT2(tiny_model.hparams, tiny_model.params,
                 tokenizer=types.SimpleNamespace(eot_token=free[k]))  # fmt: skip
    ended = generate([1, 2, 3], model, max_new_tokens=12, temperature=0, logprobs=1)
    assert ended.finish_reason == "eot" and ended.ids == free[:k]
    assert len(ended.token_logprobs) == len(ended.top_logprobs) == k  # not <|endoftext|>'s
    short = generate([1, 2, 3], model, max_new_tokens=k, temperature=0, logprobs=1)
    assert short.finish_reason == "length" and short.ids == free[:k]
    full = text_model.generate("Once", 20, temperature=0)
    stop = full[5:8]
    c = text_model.generate("Once", 20, temperature=0, stop=stop, logprobs=1)
    assert c.finish_reason == "stop" and c.text == full[: full.find(stop)]
    assert text_model.tokenizer.decode(c.ids).startswith(c.text + stop)  # ids keep the tokens


def test_it_prints_as_a_table(text_model):
    c = text_model.generate("Hello world", 3, temperature=0, logprobs=2, echo=True)
    table = str(c)
    lines = table.splitlines()
    assert "finish_reason=length" in lines[0] and "processed distribution" in lines[0]
    assert lines[1] == repr(c.text)
    assert "top 2" in lines[2] and len(lines) == 3 + len(c.ids)
    assert lines[3].lstrip().startswith("p0") and "'Hello'" in lines[3] and " - " in lines[3]
    for line, token, lp in zip(lines[5:], c.new_ids, c.token_logprobs[c.n_prompt :]):
        p = np.exp(lp)
        assert str(token) in line and f"{lp:.3f}" in line
        assert (f"{p:.2%}" if p >= 5e-5 else f"{p:.1e}") in line
    assert c.table(max_rows=2).endswith(f"... {len(c.ids) - 2} more")
    printed = []
    c._repr_pretty_(types.SimpleNamespace(text=printed.append), False)  # what Jupyter shows
    assert printed == [table]
    assert repr(c).startswith("Completion(text='Hello world") and "\n" not in repr(c)


def test_n_samples_and_batches_give_one_completion_each(tiny_model):
    out = generate([[1], [2, 3]], tiny_model, max_new_tokens=4, n=2, seed=0, logprobs=1)
    assert [len(per_prompt) for per_prompt in out] == [2, 2]
    assert all(isinstance(c, Completion) for per_prompt in out for c in per_prompt)
    assert out[0][1].ids == generate([1], tiny_model, max_new_tokens=4, n=2, seed=0)[1]


@pytest.mark.parametrize(
    "kw", [dict(logprobs=-1), dict(logprobs=1.0), dict(logprobs_mode="sampled"), dict(echo=1)]
)
def test_bad_logprob_arguments(tiny_model, kw):
    with pytest.raises((ValueError, TypeError)):
        generate([1], tiny_model, max_new_tokens=2, **kw)
    with pytest.raises(ValueError, match="n_vocab"):
        generate([1], tiny_model, max_new_tokens=2, logprobs=98)


def test_a_completion_as_json(tiny_model, text_model):
    """to_dict is JSON as it is (no NaN or infinity: a log-prob of −∞ is null), with the
    tokens' text when the model has a tokenizer."""
    import json

    c = generate("The dog", text_model, max_new_tokens=4, seed=1, top_k=3, logprobs=5, echo=True)
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["text"] == c.text and d["ids"] == c.ids and d["n_prompt"] == c.n_prompt == 2
    assert d["tokens"] == c.tokens and d["tokens"][0] == "The"
    assert d["token_logprobs"][0] is None and d["token_logprobs"][2:] == c.token_logprobs[2:]
    assert d["top_logprobs"][2] == [[t, v] for t, v in c.top_logprobs[2]]
    assert d["finish_reason"] == c.finish_reason and d["logprob"] == pytest.approx(c.logprob)
    ids = generate([1, 2], tiny_model, max_new_tokens=3, seed=1, logprobs=0).to_dict()
    assert ids["text"] is None and ids["tokens"] is None and ids["score"] is None


def test_a_completion_shows_as_a_short_repr_and_an_html_table(text_model):
    c = text_model.generate("The dog", 30, temperature=0, logprobs=2)
    assert repr(c) == (f"Completion(text={c.text[:60] + '…'!r}, 30 ids, finish_reason='length', "
                       f"logprob={c.logprob:.4f})")  # fmt: skip
    page = c._repr_html_()
    assert page.startswith("<table><caption>finish_reason=length  30 tokens")
    assert page.count("<tr>") == 1 + 20 + 1  # the header, 20 tokens, "… 10 more"
    assert "… 10 more" in page and "<th>top 2</th>" in page
    first = c.top_logprobs[0][0]
    assert f"<td>{c.ids[0]}</td>" in page and f"{first[1]:.3f}" in page
    assert "<script>" not in Completion("<script>", [1], [-0.5], [[]], "length")._repr_html_()
