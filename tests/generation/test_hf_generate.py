"""model.hf.generate without torch: HF's defaults, inputs, output shapes, and the refusals.
What HF itself gives for the same calls is tests/generation/test_hf_generate_vs_hf.py (oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import gpt2np
from gpt2np.generation.hf import HF_DEFAULTS, HFGenerateOutput


class FakeTensor:
    """What a torch tensor offers NumPy: the array protocol (and nothing else NumPy knows)."""

    def __init__(self, data):
        self._data = np.asarray(data)

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)


@pytest.fixture
def eos_model(tiny_model):
    """The tiny model with a generation_config.json whose eos id is a token it makes early."""
    greedy = tiny_model.generate([5, 6, 7], 12, temperature=0, eos_token_id=[])
    eos = next(t for i, t in enumerate(greedy) if i >= 2 and t not in greedy[:i])
    model = tiny_model.copy()
    model.generation_config = {"eos_token_id": eos}
    return model, eos


def test_defaults_are_hfs_greedy_and_20_new_tokens(tiny_model):
    out = tiny_model.hf.generate([[5, 6, 7]])
    assert isinstance(out, np.ndarray) and out.dtype == np.int64 and out.shape == (1, 23)
    assert out[0, :3].tolist() == [5, 6, 7]
    assert out[0, 3:].tolist() == tiny_model.generate([5, 6, 7], 20, temperature=0)
    # transformers 5: 20 new tokens, within n_positions (n_ctx = 32 here)
    assert tiny_model.hf.generate([list(range(20))]).shape == (1, 32)
    # gpt2np's own generate keeps OpenAI's defaults: it samples, 50 new tokens, no prompt
    assert tiny_model.default_max_new_tokens([5, 6, 7]) == 50
    assert tiny_model.generate([5, 6, 7], 12, seed=0) != tiny_model.generate([5, 6, 7], 12, seed=1)


@pytest.mark.parametrize(
    "ids",
    [
        [5, 6, 7],
        [[5, 6, 7]],
        np.array([5, 6, 7]),
        np.array([[5, 6, 7]], dtype=np.int32),
        (5, 6, 7),
        FakeTensor([[5, 6, 7]]),
    ],
    ids=["list", "nested", "numpy", "int32", "tuple", "array-protocol"],
)
def test_any_array_like_of_ints_is_input_ids(tiny_model, ids):
    want = tiny_model.hf.generate([[5, 6, 7]], max_new_tokens=6)
    np.testing.assert_array_equal(tiny_model.hf.generate(ids, max_new_tokens=6), want)
    np.testing.assert_array_equal(tiny_model.hf.generate(inputs=ids, max_new_tokens=6), want)


def test_a_left_padded_batch_with_its_attention_mask_gives_each_row_as_alone(tiny_model):
    ids = FakeTensor([[9, 9, 3, 4], [1, 2, 3, 4]])  # 9: a tokenizer's pad, masked out
    mask = FakeTensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    out = tiny_model.hf.generate(ids, attention_mask=mask, max_new_tokens=7)
    assert out.shape == (2, 11) and out[0, :4].tolist() == [9, 9, 3, 4]
    np.testing.assert_array_equal(
        out[0, 4:], tiny_model.hf.generate([3, 4], max_new_tokens=7)[0, 2:]
    )
    np.testing.assert_array_equal(out[1], tiny_model.hf.generate([1, 2, 3, 4], max_new_tokens=7)[0])


def test_an_explicit_pad_token_in_the_ids_is_masked_as_hf_infers_it(tiny_model):
    """No attention_mask, pad_token_id given, in the ids and no eos id: HF masks it."""
    padded = tiny_model.hf.generate([[0, 0, 3, 4]], max_new_tokens=5, pad_token_id=0)
    alone = tiny_model.hf.generate([[3, 4]], max_new_tokens=5)
    np.testing.assert_array_equal(padded[0, 2:], alone[0])


@pytest.mark.parametrize(
    "mask, words",
    [([[1, 1, 0, 0]], "left padding"), ([[0, 0, 0, 0]], "left padding"),
     ([[1, 0, 1, 1]], "left padding"), ([[1, 1, 1]], "shape"), ([[2, 1, 1, 1]], "0s and 1s")],
)  # fmt: skip
def test_attention_masks_other_than_left_padding_are_refused(tiny_model, mask, words):
    with pytest.raises(ValueError, match=words):
        tiny_model.hf.generate([[1, 2, 3, 4]], attention_mask=mask, max_new_tokens=2)


@pytest.mark.parametrize(
    "ids, error, words",
    [("hello", TypeError, "token ids"), ([[1.5, 2.0]], TypeError, "integers"),
     ([[[1]]], ValueError, "shape"), ([[]], ValueError, "no tokens"),
     ([[1, 200]], ValueError, "200")],
)  # fmt: skip
def test_bad_input_ids_are_refused(tiny_model, ids, error, words):
    with pytest.raises(error, match=words):
        tiny_model.hf.generate(ids, max_new_tokens=2)


def test_lengths_follow_hf(tiny_model):
    assert tiny_model.hf.generate([[1, 2, 3]], max_length=8).shape == (1, 8)
    # max_new_tokens wins over max_length, as in HF
    assert tiny_model.hf.generate([[1, 2, 3]], max_length=8, max_new_tokens=2).shape == (1, 5)
    with pytest.raises(ValueError, match="Input length of input_ids is 3, but max_length"):
        tiny_model.hf.generate([[1, 2, 3]], max_length=3)
    with pytest.raises(ValueError, match="n_ctx=32"):
        tiny_model.hf.generate([[1, 2, 3]], max_new_tokens=31)


def test_rows_that_end_are_padded_with_the_eos_id_and_the_loop_stops(eos_model):
    model, eos = eos_model
    out = model.hf.generate([[5, 6, 7]], max_new_tokens=12)
    ended = np.flatnonzero(out[0, 3:] == eos)
    assert len(ended) and out.shape[1] == 3 + ended[0] + 1  # one row: it ends, so does the loop
    batch = model.hf.generate([[5, 6, 7], [1, 2, 3]], max_new_tokens=12, pad_token_id=0)
    row = batch[0, 3:]
    first = int(np.flatnonzero(row == eos)[0])
    assert (row[first + 1 :] == 0).all()  # HF's pad after the end


def test_return_dict_holds_sequences_scores_and_logits(tiny_model):
    out = tiny_model.hf.generate([[5, 6, 7], [1, 2, 3]], max_new_tokens=4,
                                 return_dict_in_generate=True, output_scores=True,
                                 output_logits=True)  # fmt: skip
    assert isinstance(out, HFGenerateOutput) and out.keys() == ["sequences", "scores", "logits"]
    assert out.sequences.shape == (2, 7) and out["sequences"] is out.sequences
    assert out[0] is out.sequences and list(out) == out.keys()
    assert len(out.scores) == len(out.logits) == 4
    assert all(s.shape == (2, 97) and s.dtype == np.float32 for s in out.scores + out.logits)
    first = tiny_model.forward([[5, 6, 7], [1, 2, 3]])[0][:, -1]
    np.testing.assert_allclose(out.logits[0], first, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out.scores[0], out.logits[0])  # greedy, no rules: the same
    assert out.hidden_states is None and out.attentions is None
    plain = tiny_model.hf.generate([[5, 6, 7]], max_new_tokens=2, return_dict_in_generate=True)
    assert plain.keys() == ["sequences"] and plain.scores is None


def test_sampling_applies_hfs_top_k_50_and_temperature(tiny_model):
    out = tiny_model.hf.generate([[5, 6, 7]], do_sample=True, temperature=0.5, max_new_tokens=3,
                                 seed=1, return_dict_in_generate=True, output_scores=True,
                                 output_logits=True)  # fmt: skip
    for scores, logits in zip(out.scores, out.logits):
        kept = np.isfinite(scores[0])
        assert kept.sum() == HF_DEFAULTS["top_k"] == 50
        np.testing.assert_allclose(scores[0][kept], logits[0][kept] / 0.5, rtol=1e-6)
        assert logits[0][kept].min() >= logits[0][~kept].max()
    again = tiny_model.hf.generate([[5, 6, 7]], do_sample=True, temperature=0.5,
                                   max_new_tokens=3, seed=1)  # fmt: skip
    np.testing.assert_array_equal(again, out.sequences)


def test_num_return_sequences_and_beams(tiny_model):
    out = tiny_model.hf.generate([[5, 6, 7], [1, 2, 3]], do_sample=True, num_return_sequences=3,
                                 max_new_tokens=4, seed=0)  # fmt: skip
    assert out.shape == (6, 7) and out[:3, :3].tolist() == [[5, 6, 7]] * 3
    beams = tiny_model.hf.generate([[5, 6, 7]], num_beams=3, num_return_sequences=2,
                                   max_new_tokens=5)  # fmt: skip
    own = tiny_model.generate([5, 6, 7], 5, num_beams=3, n=2)
    assert beams[:, 3:].tolist() == own
    with pytest.raises(ValueError, match="identical"):
        tiny_model.hf.generate([[5, 6, 7]], num_return_sequences=2, max_new_tokens=2)


def test_the_models_generation_config_gives_the_defaults(tiny_model):
    model = tiny_model.copy()
    model.generation_config = {"max_new_tokens": 4, "do_sample": True, "top_k": 1,
                               "transformers_version": "5.0"}  # fmt: skip
    out = model.hf.generate([[5, 6, 7]])
    assert out.tolist() == tiny_model.hf.generate([[5, 6, 7]], max_new_tokens=4).tolist()
    assert model.hf.generate([[5, 6, 7]], generation_config={"max_new_tokens": 2}).shape == (1, 5)


@pytest.mark.parametrize(
    "name, value, hint",
    [("low_memory", True, "beam search"), ("cache_implementation", "static", "KV cache"),
     ("streamer", object(), "stream=True"), ("assistant_model", object(), "assisted"),
     ("num_beam_groups", 2, "diverse"), ("penalty_alpha", 0.6, "contrastive"),
     ("renormalize_logits", True, "logprobs")],
)  # fmt: skip
def test_hf_keywords_not_supported_are_refused_by_name(tiny_model, name, value, hint):
    with pytest.raises(ValueError, match=f"does not support {name}=") as e:
        tiny_model.hf.generate([[1, 2]], max_new_tokens=2, **{name: value})
    assert hint in str(e.value)


def test_hf_keywords_at_values_that_change_nothing_are_accepted(tiny_model):
    want = tiny_model.hf.generate([[1, 2]], max_new_tokens=3)
    got = tiny_model.hf.generate([[1, 2]], max_new_tokens=3, output_hidden_states=False,
                                 output_attentions=False, use_cache=False, num_beam_groups=1,
                                 synced_gpus=False)  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_unknown_keywords_are_a_type_error_with_a_suggestion(tiny_model):
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        tiny_model.hf.generate([[1, 2]], temprature=0.5)
    with pytest.raises(TypeError, match="input_ids or inputs"):
        tiny_model.hf.generate([[1, 2]], inputs=[[1, 2]])
    with pytest.raises(ValueError, match="HF's beam outputs"):
        tiny_model.hf.generate([[1, 2]], num_beams=2, max_new_tokens=2,
                               return_dict_in_generate=True, output_scores=True)  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["input_ids", "inputs", "attention_mask", "return_dict_in_generate", "output_scores",
     "output_logits", "generation_config"],
)  # fmt: skip
def test_gpt2np_generate_points_hf_only_keywords_to_model_hf_generate(tiny_model, name):
    for call in (lambda: tiny_model.generate([1], **{name: 1}),
                 lambda: gpt2np.generate([1], model=tiny_model, **{name: 1})):  # fmt: skip
        with pytest.raises(TypeError, match=r"model\.hf\.generate"):
            call()


@pytest.mark.parametrize("name", ["output_hidden_states", "output_attentions"])
def test_gpt2np_generate_points_hidden_states_to_trace(tiny_model, name):
    with pytest.raises(TypeError, match=rf"HF's '{name}'.*model\.trace"):
        tiny_model.generate([1], **{name: True})


def test_gpt2np_generate_points_a_tensor_prompt_to_model_hf_generate(tiny_model):
    with pytest.raises(TypeError, match=r"model\.hf\.generate\(input_ids\)"):
        tiny_model.generate(FakeTensor([1, 2]), 2)


def test_hidden_states_and_attentions_come_from_trace_in_hfs_nesting(tiny_model):
    out = tiny_model.hf.generate([[5, 6, 7]], max_new_tokens=3, return_dict_in_generate=True,
                                 output_hidden_states=True, output_attentions=True)  # fmt: skip
    L, H, D = 2, 3, 24
    assert len(out.hidden_states) == len(out.attentions) == 3
    assert [len(step) for step in out.hidden_states] == [L + 1] * 3
    assert [h.shape for h in out.hidden_states[0]] == [(1, 3, D)] * (L + 1)
    assert [a.shape for a in out.attentions[2]] == [(1, H, 1, 5)] * L
    t = tiny_model.trace(out.sequences[:, :-1])  # the whole sequence at once, the same values
    np.testing.assert_allclose(out.hidden_states[1][-1][:, 0], t["ln_f"][:, 3], atol=1e-5)
    np.testing.assert_allclose(out.attentions[2][1][:, :, 0], t["h1.attn.probs"][:, :, 4],
                               atol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(
        out.sequences, tiny_model.hf.generate([[5, 6, 7]], max_new_tokens=3)
    )
    with pytest.raises(ValueError, match="left-padded"):
        tiny_model.hf.generate(
            [[1, 2], [3, 4]],
            attention_mask=[[0, 1], [1, 1]],
            return_dict_in_generate=True,
            output_hidden_states=True,
        )


def test_max_time_ends_every_row_after_the_step_that_passes_it(tiny_model, monkeypatch):
    from gpt2np.generation import loop

    ticks = iter(range(1000))
    monkeypatch.setattr(loop, "clock", lambda: float(next(ticks)))  # one second per reading
    out = tiny_model.hf.generate([[5, 6, 7], [1, 2, 3]], max_new_tokens=10, max_time=2.5)
    assert out.shape == (2, 3 + 3)  # read at 1, 2, 3 s after the start: 3 > 2.5 ends the run


def test_a_config_setting_gpt2np_does_not_apply_is_refused_by_name(tiny_model):
    model = tiny_model.copy()
    model.generation_config = {"num_beam_groups": 2, "transformers_version": "5.0"}
    with pytest.raises(ValueError, match=r"generation_config\.json's num_beam_groups=2"):
        model.hf.generate([[1, 2]], max_new_tokens=2)
    model.generation_config = {"num_beam_groups": 1, "min_length": 0}  # HF's values: nothing
    assert model.hf.generate([[1, 2]], max_new_tokens=2).shape == (1, 4)
