"""Beam search over the in-place cache: each hypothesis is what a fresh forward pass over its
tokens gives (the cache rows were reordered right), the scores follow their definition, a
wide enough beam is exhaustive search, and the cache is reordered in place, never refilled.
(Equality with HF's beam search, ties and <|endoftext|> included: test_generate_vs_hf.py.)"""

from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

from gpt2np import GPT2
from gpt2np.generation.beam import beam_search
from gpt2np.generation.loop import generate
from gpt2np.generation.sampling import log_softmax
from gpt2np.runtime.kvcache import KVCache


def with_eot(model: GPT2, eot: int) -> GPT2:
    return GPT2(model.hparams, model.params, tokenizer=types.SimpleNamespace(eot_token=eot))


@pytest.mark.parametrize("length_penalty", [1.0, 0.0, 2.0])
def test_each_hypothesis_is_what_its_tokens_give_run_afresh(tiny_model, length_penalty):
    prompt = [3, 1, 4, 1]
    kw = dict(max_new_tokens=10, num_beams=4, n=4, logprobs=0, length_penalty=length_penalty,
              logprobs_mode="raw")  # fmt: skip
    free = generate(prompt, tiny_model, **kw)
    for eot in dict.fromkeys(t for c in free for t in c.ids[1:] if t not in prompt):
        model = with_eot(tiny_model, eot)  # an id the beams like: some end with it
        out = generate(prompt, model, **kw)
        if any(c.finish_reason == "eot" for c in out):
            break
    assert [c.score for c in out] == sorted((c.score for c in out), reverse=True)
    assert any(c.finish_reason == "eot" for c in out) and any(
        c.ids != d.ids for c, d in zip(out, free)
    )
    for c in out:
        ended = c.finish_reason == "eot"
        seq = prompt + c.ids + ([eot] if ended else [])
        lp = log_softmax(tiny_model.forward(seq)[0])  # no cache at all
        steps = lp[np.arange(len(prompt) - 1, len(seq) - 1), seq[len(prompt) :]]
        np.testing.assert_allclose(c.token_logprobs, steps[: len(c.ids)], atol=1e-5)
        length = len(c.ids) + ended  # <|endoftext|> counts
        assert c.score == pytest.approx(steps.sum() / length**length_penalty, abs=1e-5)
        assert eot not in c.ids and (ended or len(c.ids) == 10)


def test_a_beam_as_wide_as_the_vocabulary_is_exhaustive_search(tiny_model):
    prompt, V = [5, 9], tiny_model.hparams.n_vocab
    lp1 = log_softmax(tiny_model.forward(prompt)[0][-1])  # [V]
    seqs = np.array([[*prompt, a] for a in range(V)])
    lp2 = log_softmax(tiny_model.forward(seqs)[0][:, -1])  # [V, V]
    total = lp1[:, None] + lp2
    best = sorted(itertools.product(range(V), range(V)), key=lambda ab: -total[ab])[:5]
    out = generate(prompt, tiny_model, max_new_tokens=2, num_beams=V, n=5, logprobs=0)
    assert [tuple(c.ids) for c in out] == best
    np.testing.assert_allclose([c.score for c in out], [total[ab] / 2 for ab in best], atol=1e-5)


def test_with_two_end_ids_a_beam_ends_at_either(tiny_model):
    """Exhaustive search over two steps where ids a and b both end a hypothesis: a hypothesis
    that takes either first ends there (scored over one token), the others run two."""
    prompt, V = [5, 9], tiny_model.hparams.n_vocab
    lp1 = log_softmax(tiny_model.forward(prompt)[0][-1])  # [V]
    seqs = np.array([[*prompt, a] for a in range(V)])
    lp2 = log_softmax(tiny_model.forward(seqs)[0][:, -1])  # [V, V]
    ends = [int(t) for t in np.argsort(-lp1)[[1, 3]]]  # ids the first step likes
    scores = {(a,): lp1[a] for a in ends}  # ended after one token, length 1
    scores.update({(a, b): (lp1[a] + lp2[a, b]) / 2 for a in range(V) if a not in ends
                   for b in range(V)})  # fmt: skip
    best = sorted(scores, key=lambda h: -scores[h])[:4]
    out = generate(prompt, tiny_model, max_new_tokens=2, num_beams=V, n=4, logprobs=0,
                   eos_token_id=ends)  # fmt: skip
    want = [(h[:-1], "eot") if h[-1] in ends else (h, "length") for h in best]
    assert [(tuple(c.ids), c.finish_reason) for c in out] == want
    np.testing.assert_allclose([c.score for c in out], [scores[h] for h in best], atol=1e-5)
    assert {c.finish_reason for c in out} == {"eot", "length"}


def test_the_cache_is_reordered_in_place_after_one_prefill(tiny_model, monkeypatch):
    reorders, buffers = [], []
    real = KVCache.reorder

    def spy(self, rows):
        reorders.append(list(rows))
        real(self, rows)
        buffers.append(self.kv)

    monkeypatch.setattr(KVCache, "reorder", spy)
    prompt = [2, 7, 1]
    cache = tiny_model.new_cache(1, max_len=3 + 5)
    logits = tiny_model.forward_cached([prompt], cache, last_only=True)[:, 0]
    found = beam_search(tiny_model, cache, logits, [prompt], num_beams=3, max_new_tokens=6,
                        num_return=3)  # fmt: skip
    assert reorders[0] == [0, 0, 0]  # the prompt's row copied to the three beams, once
    assert len(reorders) == 6 and all(len(r) == 3 for r in reorders)  # then one per step
    assert all(b is buffers[0] for b in buffers[1:])  # the same buffer, written in place
    assert cache.length == 3 + 5 and len(found[0]) == 3


def test_a_batch_equals_each_prompt_alone_and_drops_finished_prompts(tiny_model):
    prompts = [[1, 2, 3], [40], [7, 7, 7, 7, 7]]
    free = [generate(p, tiny_model, max_new_tokens=3, temperature=0) for p in prompts]
    model = with_eot(tiny_model, free[1][0])  # prompt 1's beams may end at once
    kw = dict(max_new_tokens=8, num_beams=3, n=2, logprobs=0)
    batch = generate(prompts, model, **kw)
    alone = [generate(p, model, **kw) for p in prompts]
    for b_batch, b_alone in zip(batch, alone):
        assert [c.ids for c in b_batch] == [c.ids for c in b_alone]
        np.testing.assert_allclose([c.score for c in b_batch], [c.score for c in b_alone],
                                   atol=1e-5)  # fmt: skip


def test_beam_search_returns_text_and_the_best_first(text_model_small):
    out = text_model_small.generate("Hello there", 6, num_beams=3)
    assert isinstance(out, str)
    assert out == text_model_small.generate("Hello there", 6, num_beams=3, n=3)[0]
    echoed = text_model_small.generate("Hello there", 6, num_beams=3, echo=True, logprobs=1)
    assert echoed.text == "Hello there" + out and "beam score" in str(echoed)
    assert echoed.token_logprobs[0] is None and echoed.n_prompt == 2


def test_zero_new_tokens(tiny_model):
    assert generate([1], tiny_model, max_new_tokens=0, num_beams=3, n=2) == [[], []]


@pytest.fixture(scope="module")
def text_model_small() -> GPT2:
    import gpt2np

    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=32, n_embd=16, n_head=2, n_layer=1)
    return GPT2(hparams, gpt2np.init_params(hparams, seed=4, std=0.3))


@pytest.mark.parametrize("length_penalty", [1e9, -1e9, 1e300])
def test_a_length_penalty_beyond_float_range_scores_as_hf_does(tiny_model, length_penalty):
    """length ** length_penalty past float64's range is inf or 0 (HF's tensors), not Python's
    OverflowError or ZeroDivisionError: a model's generation_config.json may hold such a value."""
    out = tiny_model.generate([1, 2, 3], num_beams=2, max_new_tokens=3,
                              length_penalty=length_penalty)  # fmt: skip
    assert len(out) == 3
