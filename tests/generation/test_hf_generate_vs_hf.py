"""model.hf.generate against transformers' GPT2LMHeadModel.generate on the same weights: typical
HF calls, copied literally (``model.generate(...)`` with ``model`` HF's, then the same text with
``model.hf.generate(...)``), give HF's ids and, with return_dict_in_generate, HF's scores and
logits (oracle tier: needs torch and transformers).

The models: HF's random GPT-2 (3 layers, 300 tokens; weights far from uniform so decisions are
far from ties) saved with ``save_pretrained`` and loaded with ``gpt2np.load``, so that gpt2np
reads HF's config.json and generation_config.json (its eos id, a token this model likes, so
that rows end early). Sampling: torch's RNG is not NumPy's, so HF's ``torch.multinomial`` is
replaced by the inverse-CDF draw gpt2np makes from the same uniform numbers
(``np.random.default_rng([seed, j])`` for sample j of each prompt, gpt2np's ``seed=``); the
distributions drawn from stay HF's, and the draws' margins are checked to be far from a flip.

Tolerances: the scores are float32 logits of two implementations of the same float32 forward
pass (atol 2e-5, rtol 1e-4 as tests/test_model_vs_hf.py), then processed in float32 (HF) and
float64 (gpt2np): the same bound holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import gpt2np

pytestmark = pytest.mark.oracle

ATOL, RTOL = 2e-5, 1e-4
SEED = 7

#: name -> (HF's keyword arguments, copied literally, batch?) — the "typical calls".
CALLS: dict[str, tuple[dict[str, Any], bool]] = {
    "default_length": ({}, True),
    "default_length_long_prompt": ({}, "long"),
    "max_new_tokens": ({"max_new_tokens": 12}, False),
    "max_length": ({"max_length": 25}, True),
    "greedy_explicit": ({"max_new_tokens": 12, "do_sample": False}, False),
    "batch_left_padding": ({"max_new_tokens": 12}, True),
    "pad_is_eos": ({"max_new_tokens": 12, "pad_token_id": "EOS"}, True),
    "pad_token_id_0": ({"max_new_tokens": 12, "pad_token_id": 0}, True),
    "eos_token_id_other": ({"max_new_tokens": 12, "eos_token_id": 7}, True),
    "eos_list": ({"max_new_tokens": 12, "eos_token_id": ["EOS", 7]}, True),
    "repetition_penalty": ({"max_new_tokens": 12, "repetition_penalty": 1.3}, True),
    "no_repeat_ngram_size": ({"max_new_tokens": 15, "no_repeat_ngram_size": 2}, True),
    "min_new_tokens": ({"max_new_tokens": 12, "min_new_tokens": 8}, True),
    "min_length": ({"max_new_tokens": 12, "min_length": 12}, True),
    "min_length_and_min_new_tokens": ({"max_new_tokens": 12, "min_length": 16,
                                       "min_new_tokens": 2}, True),
    "bad_words_ids": ({"max_new_tokens": 12, "bad_words_ids": [[5], [9, 10]]}, True),
    "bad_words_eos": ({"max_new_tokens": 12, "bad_words_ids": [["EOS"], [5]]}, True),
    "suppress_tokens": ({"max_new_tokens": 12, "suppress_tokens": [1, 2, 3]}, True),
    "forced_eos_token_id": ({"max_new_tokens": 8, "forced_eos_token_id": 4}, True),
    "exponential_decay": ({"max_new_tokens": 12, "exponential_decay_length_penalty": (3, 1.5)},
                          True),
    "sequence_bias": ({"max_new_tokens": 12, "sequence_bias": {(11,): 5.0}}, True),
    "top_k_1": ({"max_new_tokens": 12, "do_sample": True, "top_k": 1}, True),
    "sample_temperature": ({"max_new_tokens": 12, "do_sample": True, "temperature": 0.7}, True),
    "sample_top_p": ({"max_new_tokens": 12, "do_sample": True, "top_k": 0, "top_p": 0.9}, True),
    "sample_top_k_top_p": ({"max_new_tokens": 12, "do_sample": True, "top_k": 50,
                            "top_p": 0.95}, True),
    "sample_n3": ({"max_new_tokens": 10, "do_sample": True, "num_return_sequences": 3}, True),
    "sample_min_p": ({"max_new_tokens": 10, "do_sample": True, "min_p": 0.05}, True),
    "sample_typical_p": ({"max_new_tokens": 10, "do_sample": True, "typical_p": 0.8}, False),
    "beams": ({"max_new_tokens": 12, "num_beams": 4}, True),
    "beams_early_stopping": ({"max_new_tokens": 12, "num_beams": 5, "early_stopping": True},
                             True),
    "beams_no_repeat_n": ({"max_new_tokens": 12, "num_beams": 5, "no_repeat_ngram_size": 2,
                           "num_return_sequences": 3, "early_stopping": True}, True),
    "beams_length_penalty": ({"max_new_tokens": 12, "num_beams": 3, "length_penalty": 2.0,
                              "num_return_sequences": 2}, True),
    "dict_scores": ({"max_new_tokens": 12, "return_dict_in_generate": True,
                     "output_scores": True}, True),
    "dict_logits": ({"max_new_tokens": 12, "return_dict_in_generate": True,
                     "output_scores": True, "output_logits": True}, True),
    "dict_sampling_scores": ({"max_new_tokens": 10, "do_sample": True, "temperature": 0.8,
                              "return_dict_in_generate": True, "output_scores": True,
                              "output_logits": True}, True),
}  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, gpt2np.GPT2, int]:
    """(HF's model, gpt2np's of the same files, the eos id): HF's random GPT-2 with an eos id
    the model makes a few tokens into the first prompt, saved with save_pretrained and loaded
    by gpt2np."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.helpers.hf_reference import random_hf_model

    hparams = gpt2np.HParams(n_vocab=300, n_ctx=64, n_embd=48, n_head=4, n_layer=3)
    hf = random_hf_model(hparams, 2, std=0.12)
    plain_dir = tmp_path_factory.mktemp("hf_plain")
    hf.save_pretrained(plain_dir)
    plain = gpt2np.load(plain_dir)
    greedy = plain.generate(PROMPTS[0], 12, temperature=0, eos_token_id=[])
    eos = next(t for i, t in enumerate(greedy) if i >= 4 and t not in greedy[:i])  # a late one
    hf.config.eos_token_id = hf.config.bos_token_id = eos
    hf.generation_config.eos_token_id = hf.generation_config.bos_token_id = eos
    directory = tmp_path_factory.mktemp("hf_eos")
    hf.save_pretrained(directory)
    return hf, gpt2np.load(directory), eos


PROMPTS = [np.array([17, 4, 200, 31, 8, 99]), np.array([250, 3, 42])]


def batch_of(batch: bool) -> tuple[Any, Any]:
    """What HF's tokenizer gives with padding_side='left': torch input_ids and attention_mask
    (pad id 0 in the padding, as a tokenizer whose pad is another token would put it)."""
    import torch

    prompts = PROMPTS if batch is True else PROMPTS[:1]
    if batch == "long":  # 20 new tokens do not fit in n_ctx = 64: HF makes n_ctx - T
        prompts = [np.arange(50) % 300 + 100, PROMPTS[1]]
    T = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), T), dtype=np.int64)
    mask = np.zeros((len(prompts), T), dtype=np.int64)
    for b, p in enumerate(prompts):
        ids[b, T - len(p) :], mask[b, T - len(p) :] = p, 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


@contextlib.contextmanager
def numpy_draws(n_rows_per_prompt: int, prompts: int, seed: int) -> Iterator[list[float]]:
    """HF's torch.multinomial replaced by gpt2np's inverse-CDF draw from the rows' NumPy
    streams; yields the draws' margins (distance of u from the nearest cdf boundary)."""
    import torch

    from tests.helpers.hf_reference import inverse_cdf_draws

    rngs = [np.random.default_rng([seed, j]) for _ in range(prompts)
            for j in range(n_rows_per_prompt)]  # fmt: skip
    margins: list[float] = []

    def multinomial(probs: Any, num_samples: int = 1, *args: Any, **kwargs: Any) -> Any:
        assert num_samples == 1 and probs.shape[0] == len(rngs)
        return inverse_cdf_draws(probs, rngs, margins)

    saved = torch.multinomial
    torch.multinomial = multinomial
    try:
        yield margins
    finally:
        torch.multinomial = saved


def literal(kwargs: dict[str, Any], eos: int) -> dict[str, Any]:
    """The call's arguments with "EOS" standing for the model's eos id."""

    def swap(v: Any) -> Any:
        return [swap(x) for x in v] if isinstance(v, list) else eos if v == "EOS" else v

    return {k: swap(v) for k, v in kwargs.items()}


def run_both(models: tuple, kwargs: dict[str, Any], batch: bool) -> tuple[Any, Any, list]:
    """HF's output and ours for the same literal call (sampling from the same uniforms)."""
    import torch

    hf, ours, eos = models
    kwargs = literal(kwargs, eos)
    input_ids, attention_mask = batch_of(batch)
    n = kwargs.get("num_return_sequences", 1)
    with numpy_draws(n, len(input_ids), SEED) as margins, torch.no_grad():
        expected = hf.generate(input_ids, attention_mask=attention_mask, **kwargs)
    extra = {"seed": SEED} if kwargs.get("do_sample") else {}
    got = ours.hf.generate(input_ids, attention_mask=attention_mask, **kwargs, **extra)
    return expected, got, margins


def assert_same(expected: Any, got: Any) -> None:
    if not hasattr(expected, "sequences"):
        assert isinstance(got, np.ndarray) and got.dtype == np.int64
        np.testing.assert_array_equal(got, expected.numpy())
        return
    np.testing.assert_array_equal(got.sequences, expected.sequences.numpy())
    for name in ("scores", "logits"):
        want = getattr(expected, name)
        if want is None:
            assert getattr(got, name) is None, name
            continue
        have = getattr(got, name)
        assert len(have) == len(want), name
        for step, (a, b) in enumerate(zip(have, want)):
            assert a.dtype == np.float32 and a.shape == tuple(b.shape), (name, step)
            np.testing.assert_allclose(
                a, b.numpy(), atol=ATOL, rtol=RTOL, err_msg=f"{name}[{step}]"
            )


@pytest.mark.parametrize("name", list(CALLS))
def test_typical_hf_call_gives_hfs_output(models, name):
    kwargs, batch = CALLS[name]
    expected, got, margins = run_both(models, kwargs, batch)
    assert min(margins, default=1.0) > 1e-5, "a draw too close to a flip to compare"
    assert_same(expected, got)


def test_rows_end_early_and_are_padded_as_hf_pads_them(models):
    """The eos id is a token the model likes: some row ends before the last step, and HF's
    padding after it (pad = eos) is what model.hf.generate returns."""
    expected, got, _ = run_both(models, {"max_new_tokens": 20}, True)
    eos = models[2]
    new = got[:, 6:]
    ends = [int(np.flatnonzero(row == eos)[0]) for row in new if (row == eos).any()]
    assert ends and 0 < min(ends) < new.shape[1] - 1
    assert (new[0, ends[0] :] == eos).all()
    np.testing.assert_array_equal(got, expected.numpy())


def test_keyword_inputs_and_generation_config_as_hf_takes_them(models):
    """``model.generate(**inputs, ...)``, ``inputs=`` and ``generation_config=`` as HF's."""
    import torch
    from transformers import GenerationConfig

    hf, ours, _ = models
    input_ids, attention_mask = batch_of(True)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    config = GenerationConfig(max_new_tokens=9, no_repeat_ngram_size=3, eos_token_id=models[2],
                              pad_token_id=models[2])  # fmt: skip
    with torch.no_grad():
        want_a = hf.generate(**inputs, max_new_tokens=10, repetition_penalty=1.2)
        want_b = hf.generate(inputs=input_ids[:1], max_new_tokens=10)
        want_c = hf.generate(**inputs, generation_config=config)
    np.testing.assert_array_equal(
        ours.hf.generate(**inputs, max_new_tokens=10, repetition_penalty=1.2), want_a.numpy()
    )
    np.testing.assert_array_equal(
        ours.hf.generate(inputs=input_ids[:1], max_new_tokens=10), want_b.numpy()
    )
    np.testing.assert_array_equal(ours.hf.generate(**inputs, generation_config=config),
                                  want_c.numpy())  # fmt: skip


def test_an_hf_stopping_criterion_and_logits_processor_give_hfs_ids(models):
    import torch
    from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
    from transformers.generation import LogitsProcessor

    class PenalizeLast(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores.scatter_add(1, input_ids[:, -1:], torch.full_like(scores[:, :1], -2.0))

    class StopOn(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.isin(input_ids[:, -1], torch.tensor([3, 4, 5]))

    hf, ours, _ = models
    input_ids, attention_mask = batch_of(True)
    kwargs = dict(max_new_tokens=14, logits_processor=LogitsProcessorList([PenalizeLast()]),
                  stopping_criteria=StoppingCriteriaList([StopOn()]))  # fmt: skip
    with torch.no_grad():
        want = hf.generate(input_ids, attention_mask=attention_mask, **kwargs)
    got = ours.hf.generate(input_ids, attention_mask=attention_mask, **kwargs)
    np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("n", [1, 2])
def test_hidden_states_and_attentions_are_hfs(models, n):
    """From gpt2np.trace, in HF's nesting: per step, per layer (hidden states: the embeddings,
    each block's output but the last, then ln_f of the last). HF returns attentions with its
    eager attention (sdpa gives none), as one loads it for them."""
    import torch

    hf, ours, _ = models
    saved = hf.config._attn_implementation
    hf.set_attn_implementation("eager")
    input_ids = torch.tensor([[17, 4, 200, 31, 8, 99], [250, 3, 42, 7, 7, 1]])
    kwargs = dict(max_new_tokens=5, return_dict_in_generate=True, output_hidden_states=True,
                  output_attentions=True, output_scores=True)  # fmt: skip
    if n > 1:
        kwargs.update(do_sample=True, num_return_sequences=n)
    try:
        with numpy_draws(n, 2, SEED), torch.no_grad():
            want = hf.generate(input_ids, **kwargs)
    finally:
        hf.set_attn_implementation(saved)
    got = ours.hf.generate(input_ids, **kwargs, **({"seed": SEED} if n > 1 else {}))
    assert_same(want, got)
    for name in ("hidden_states", "attentions"):
        have, expected = getattr(got, name), getattr(want, name)
        assert len(have) == len(expected)
        for step, (ours_step, hf_step) in enumerate(zip(have, expected)):
            assert len(ours_step) == len(hf_step)
            for layer, (a, b) in enumerate(zip(ours_step, hf_step)):
                np.testing.assert_allclose(a, b.numpy(), atol=ATOL, rtol=RTOL,
                                           err_msg=f"{name}[{step}][{layer}]")  # fmt: skip
