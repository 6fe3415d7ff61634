"""gpt2np's decoding against HF transformers' ``generate``, id for id and log-prob for log-prob.

The committed fixture (scripts/make_generate_fixture.py, run with transformers and torch) holds
HF's results for every case of its CASES table: sampling from a fixed seed stream (HF's
``torch.multinomial`` replaced by the inverse-CDF draw from the same uniforms, see
tests/helpers/hf_reference.py), greedy decoding with repetition penalties, n-gram and bad-word bans
and min_new_tokens, unconditional samples, beam search (length penalties, the three
``early_stopping`` modes, beams ended by <|endoftext|>, a batch), HF's warpers min_p,
typical_p, epsilon_cutoff, eta_cutoff and min_tokens_to_keep, its processors suppress_tokens,
sequence_bias, forced_eos_token_id and exponential_decay_length_penalty, several end ids, a
stopping criterion, max_time, HF's keyword names, and a generation_config.json's defaults.
Each case is run here with gpt2np, with ``logprobs_mode`` "processed" (HF's
``compute_transition_scores``) and "raw" (log_softmax of HF's ``output_logits``). The
``oracle`` tests run fresh cases live.

The "tie" model has two tokens with the same embedding, so their logits are exactly equal at
every step: greedy takes the lower id on both sides (torch.argmax and numpy.argmax); beam search
orders equal candidates differently (HF by torch.topk's unspecified order, gpt2np by index), so
its results are compared with the two tokens identified, which is all a tie allows.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import gpt2np
from gpt2np.params import unflatten
from tests.helpers.hf_reference import EotOnly, assert_equal_to_hf, run_hf, run_ours

TIE = (50, 119)  # scripts/make_generate_fixture.py: wte[50] := wte[119] in the "tie" model


def cases() -> list[str]:
    with np.load(pathlib.Path(__file__).parent.parent / "fixtures" / "generate_tiny.npz") as z:
        return sorted({k.split("/")[1] for k in z.files if k.startswith("case/")})


CASES = cases()


def fixture_case(fixture: dict, name: str) -> tuple[dict, dict]:
    spec = json.loads(bytes(fixture[f"case/{name}/spec"]))
    hf = {k.split("/")[-1]: v for k, v in fixture.items() if k.startswith(f"case/{name}/")}
    return spec, hf


def model_for(fixture: dict, which: str, eos: int | None, fast: bool = True) -> gpt2np.GPT2:
    hparams = gpt2np.HParams(**json.loads(bytes(fixture["hparams"])))
    flat = {k.removeprefix("param/"): v for k, v in fixture.items() if k.startswith("param/")}
    params = unflatten(flat, hparams)
    if which == "tie":
        params["wte"] = params["wte"].copy()
        params["wte"][TIE[0]] = params["wte"][TIE[1]]
    return gpt2np.GPT2(hparams, params, tokenizer=EotOnly(eos), fast=fast)


def test_the_fixture_has_every_kind_of_case():
    kinds = {name.split("_")[0] for name in CASES}
    assert {"sample", "greedy", "beam3", "beam4", "unconditional", "tie", "config"} <= kinds
    options = {k for name in CASES for k in fixture_spec(name)["kwargs"]}
    options |= {k for name in CASES for k in (fixture_spec(name)["config"] or {})}
    assert set(NEW_OPTIONS) | {"do_sample", "max_length", "num_return_sequences"} <= options
    assert len(CASES) >= 35


def fixture_spec(name: str) -> dict:
    with np.load(pathlib.Path(__file__).parent.parent / "fixtures" / "generate_tiny.npz") as z:
        return json.loads(bytes(z[f"case/{name}/spec"]))


def prompts_of(fixture: dict, spec: dict) -> list:
    if spec["prompts"] == "unconditional":
        return []
    return [fixture[f"prompt_{i}"] for i in spec["prompts"]]


@pytest.mark.parametrize("mode", ["processed", "raw"])
@pytest.mark.parametrize("name", CASES)
def test_case_equals_hf(fixture, name, mode):
    spec, hf = fixture_case(fixture, name)
    model = model_for(fixture, spec["model"], spec["eos"])
    ours = run_ours(model, prompts_of(fixture, spec), spec["kwargs"], mode, spec["config"])
    same = {TIE[0]: TIE[1]} if spec["model"] == "tie" and "num_beams" in spec["kwargs"] else None
    stop_on = spec["kwargs"].get("stop_on", ())
    assert_equal_to_hf(ours, hf, spec["ends"], mode, same, stop_on)


#: The options each case of the fixture is about: without it, gpt2np's ids must differ (so the
#: case exercises it). ``stop_on`` stands for stopping_criteria, ``clock_ticks`` for max_time.
NEW_OPTIONS = {
    "min_p": "sample_min_p", "typical_p": "sample_typical", "epsilon_cutoff": "sample_epsilon",
    "eta_cutoff": "sample_eta", "min_tokens_to_keep": "sample_min_keep",
    "suppress_tokens": "greedy_suppress", "sequence_bias": "greedy_sequence_bias",
    "forced_eos_token_id": "greedy_forced_eos", "exponential_decay_length_penalty":
    "greedy_decay", "eos_token_id": "greedy_eos_list", "stop_on": "greedy_stop_on",
    "max_time": "greedy_max_time",
}  # fmt: skip


@pytest.mark.parametrize("option", NEW_OPTIONS)
def test_each_new_options_case_depends_on_it(fixture, option):
    """Without the option the case's ids differ: the equality with HF tests the option."""
    spec, hf = fixture_case(fixture, NEW_OPTIONS[option])
    model = model_for(fixture, spec["model"], spec["eos"])
    without = {k: v for k, v in spec["kwargs"].items() if k != option}
    ours = run_ours(model, prompts_of(fixture, spec), without, "processed", spec["config"])
    expected = [[int(t) for t in row if t >= 0] for row in hf["ids"]]
    assert [list(c.ids) for c in ours] != [
        row[:-1] if row and row[-1] in spec["ends"] else row for row in expected
    ]


def test_the_configs_defaults_are_what_the_call_would_give(fixture):
    """A generation_config.json's settings act as the call's keyword arguments would, and the
    call's own arguments override them."""
    spec, _ = fixture_case(fixture, "config_sample")
    model = model_for(fixture, spec["model"], spec["eos"])
    prompt = fixture["prompt_0"]
    explicit = model.generate(prompt, **spec["kwargs"], **spec["config"])
    model.generation_config = dict(spec["config"])
    assert model.generate(prompt, **spec["kwargs"]) == explicit
    assert model.generate(prompt, **spec["kwargs"], top_k=0) != explicit  # the call wins
    greedy = model.generate(prompt, max_new_tokens=16, temperature=0)
    assert greedy == model.generate(prompt, max_new_tokens=16, do_sample=False)


def test_the_tie_model_really_ties_and_greedy_takes_the_lower_id(fixture):
    model = model_for(fixture, "tie", None)
    for fast in (True, False):
        logits, _ = model_for(fixture, "tie", None, fast).forward(fixture["prompt_0"])
        assert (logits[:, TIE[0]] == logits[:, TIE[1]]).all()  # exactly, at every position
    _, hf = fixture_case(fixture, "tie_greedy")
    assert TIE[0] in hf["ids"][0] and TIE[1] not in hf["ids"][0]
    got = model.generate(fixture["prompt_0"], 20, temperature=0)
    assert got == hf["ids"][0].tolist()


def test_beam_ties_are_broken_by_index_where_hf_uses_torch_topk(fixture):
    """On the tie model HF returns three beams that differ only by which of the two equal
    tokens they took, in torch.topk's order; gpt2np takes the lower id (50) first each time."""
    spec, hf = fixture_case(fixture, "tie_beam4")
    model = model_for(fixture, "tie", spec["eos"])
    ours = model.generate(fixture["prompt_0"], **spec["kwargs"], logprobs=0)
    scores = [c.score for c in ours]
    np.testing.assert_allclose(scores, hf["scores"], atol=2e-5)
    tied = [c.ids for c, s in zip(ours, scores) if np.isclose(s, scores[1])]
    assert len(tied) == 3 and len({tuple(t) for t in tied}) == 3  # three distinct beams
    assert tied == sorted(tied) and TIE[1] not in tied[0]  # 50 before 119, step after step
    hf_tied = [[t for t in row if t >= 0] for row in hf["ids"][1:]]
    assert hf_tied != sorted(hf_tied) or TIE[1] in hf_tied[0]  # HF's order is not by index


# -- live: fresh weights and cases, HF run now -------------------------------------------------

LIVE_CASES = [
    dict(max_new_tokens=16, temperature=0, repetition_penalty=1.4, no_repeat_ngram_size=3),
    dict(max_new_tokens=12, min_p=0.08, typical_p=0.9, seed=4, n=2),
    dict(max_new_tokens=12, epsilon_cutoff=0.005, eta_cutoff=0.004, temperature=1.2, seed=5),
    dict(max_new_tokens=12, top_p=0.4, min_tokens_to_keep=3, seed=7, n=2),
    dict(
        max_new_tokens=14,
        temperature=0,
        suppress_tokens=[5, 6],
        forced_eos_token_id=7,
        sequence_bias=[[[5, 9], 2.0], [[11], -1.5]],
    ),
    dict(max_new_tokens=14, temperature=0, exponential_decay_length_penalty=[2, 1.8]),
    dict(max_new_tokens=14, temperature=0, stop_on=[3, 4, 5], max_time=6.5, clock_ticks=True),
    dict(max_length=14, do_sample=True, top_k=40, num_return_sequences=2, seed=8),
    dict(max_new_tokens=16, temperature=0.7, top_k=20, top_p=0.95, seed=3, n=3),
    dict(max_new_tokens=12, top_p=0.7, repetition_penalty=0.9, seed=9, n=2),
    dict(max_new_tokens=12, num_beams=4, n=4),
    dict(max_new_tokens=12, num_beams=3, n=2, length_penalty=1.5, early_stopping="never"),
    dict(max_new_tokens=12, num_beams=5, n=1, early_stopping=True, no_repeat_ngram_size=2),
]


def live_model(seed: int) -> tuple:
    """HF's random model, gpt2np's of the same weights (its end id a token the model likes),
    two prompts, and that end id."""
    from tests.helpers.hf_reference import gpt2np_params_of, random_hf_model

    hparams = gpt2np.HParams(n_vocab=300, n_ctx=40, n_embd=48, n_head=4, n_layer=3)
    hf = random_hf_model(hparams, seed, std=0.12)
    params = gpt2np_params_of(hf, hparams)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, hparams.n_vocab, size=n) for n in (6, 3)]
    plain = gpt2np.GPT2(hparams, params)
    eos = int(np.argmax(plain.forward(prompts[0])[0][-1]))  # a token the model likes
    return hf, gpt2np.GPT2(hparams, params, tokenizer=EotOnly(eos)), prompts, eos


def assert_live_cases_equal_hf(seed: int, cases: list) -> None:
    from tests.helpers.hf_reference import ends_of, min_margin

    hf, model, prompts, eos = live_model(seed)
    for case in cases:
        for rows in ([prompts[0]], prompts):
            expected = run_hf(hf, rows, case, eos)
            assert expected["margin"] > min_margin(case), (case, expected["margin"])
            for mode in ("processed", "raw"):
                ours = run_ours(model, rows, case, mode)
                assert_equal_to_hf(ours, expected, ends_of(case, eos), mode,
                                   stop_on=case.get("stop_on", ()))  # fmt: skip


@pytest.mark.oracle
@pytest.mark.parametrize("seed", [2, 3])  # weights whose decisions are all > min_margin from a tie
def test_live_cases_equal_hf(seed):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    assert_live_cases_equal_hf(seed, LIVE_CASES)


@pytest.mark.oracle
@pytest.mark.parametrize("seed", [2, 3])
def test_live_hf_processor_and_criterion_objects_give_hfs_ids(seed):
    """HF's own objects handed to both: an HF LogitsProcessor subclass of the user's and an HF
    StoppingCriteria go into gpt2np's generate as they are, and give HF's ids."""
    torch = pytest.importorskip("torch")
    from transformers.generation import LogitsProcessor

    class PenalizeTheLastToken(LogitsProcessor):  # a user's HF processor: batched, torch
        def __call__(self, input_ids, scores):
            return scores.scatter_add(1, input_ids[:, -1:], torch.full_like(scores[:, :1], -2.0))

    cases = [dict(max_new_tokens=14, temperature=0, logits_processors=[PenalizeTheLastToken()],
                  stop_on=[3, 4, 5], hf_objects=True),
             dict(max_new_tokens=10, seed=2, n=2, logits_processors=[PenalizeTheLastToken()],
                  hf_objects=True)]  # fmt: skip
    assert_live_cases_equal_hf(seed, cases)


@pytest.mark.oracle
@pytest.mark.slow
def test_live_beam_search_on_a_124m_shaped_model():
    """The shapes of OpenAI's 124M (random weights): beam search and greedy with a penalty."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.helpers.hf_reference import gpt2np_params_of, min_margin, random_hf_model

    hparams = gpt2np.HPARAMS["124M"]
    hf = random_hf_model(hparams, 0, std=0.05)
    model = gpt2np.GPT2(hparams, gpt2np_params_of(hf, hparams), tokenizer=EotOnly(50256))
    prompt = np.array([464, 3290, 318, 257])
    for case in (dict(max_new_tokens=8, num_beams=4, n=4),
                 dict(max_new_tokens=8, temperature=0, repetition_penalty=1.3)):  # fmt: skip
        expected = run_hf(hf, [prompt], case, 50256)
        assert expected["margin"] > min_margin(case), (case, expected["margin"])
        assert_equal_to_hf(run_ours(model, [prompt], case, "processed"), expected, 50256,
                           "processed")  # fmt: skip
