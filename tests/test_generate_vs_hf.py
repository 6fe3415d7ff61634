"""gpt2np's decoding against HF transformers' ``generate``, id for id and log-prob for log-prob.

The committed fixture (scripts/make_generate_fixture.py, run with transformers and torch) holds
HF's results for every case of its CASES table: sampling from a fixed seed stream (HF's
``torch.multinomial`` replaced by the inverse-CDF draw from the same uniforms, see
tests/hf_reference.py), greedy decoding with repetition penalties, n-gram and bad-word bans and
min_new_tokens, unconditional samples, and beam search (length penalties, the three
``early_stopping`` modes, beams ended by <|endoftext|>, a batch). Each case is run here with
gpt2np, with ``logprobs_mode`` "processed" (HF's ``compute_transition_scores``) and "raw"
(log_softmax of HF's ``output_logits``). The ``oracle`` tests run fresh cases live.

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
from hf_reference import EotOnly, assert_equal_to_hf, run_hf, run_ours

TIE = (50, 119)  # scripts/make_generate_fixture.py: wte[50] := wte[119] in the "tie" model


def cases() -> list[str]:
    with np.load(pathlib.Path(__file__).parent / "fixtures" / "generate_tiny.npz") as z:
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
    assert {"sample", "greedy", "beam3", "beam4", "unconditional", "tie"} <= kinds
    assert len(CASES) >= 20


@pytest.mark.parametrize("mode", ["processed", "raw"])
@pytest.mark.parametrize("name", CASES)
def test_case_equals_hf(fixture, name, mode):
    spec, hf = fixture_case(fixture, name)
    model = model_for(fixture, spec["model"], spec["eos"])
    prompts = [] if spec["prompts"] == "unconditional" else [
        fixture[f"prompt_{i}"] for i in spec["prompts"]
    ]  # fmt: skip
    ours = run_ours(model, prompts, spec["kwargs"], mode)
    same = {TIE[0]: TIE[1]} if spec["model"] == "tie" and "num_beams" in spec["kwargs"] else None
    assert_equal_to_hf(ours, hf, spec["eos"], mode, same)


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
    dict(max_new_tokens=16, temperature=0.7, top_k=20, top_p=0.95, seed=3, n=3),
    dict(max_new_tokens=12, top_p=0.7, repetition_penalty=0.9, seed=9, n=2),
    dict(max_new_tokens=12, num_beams=4, n=4),
    dict(max_new_tokens=12, num_beams=3, n=2, length_penalty=1.5, early_stopping="never"),
    dict(max_new_tokens=12, num_beams=5, n=1, early_stopping=True, no_repeat_ngram_size=2),
]


@pytest.mark.oracle
@pytest.mark.parametrize("seed", [2, 3])  # weights whose decisions are all > min_margin from a tie
def test_live_cases_equal_hf(seed):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hf_reference import gpt2np_params_of, min_margin, random_hf_model

    hparams = gpt2np.HParams(n_vocab=300, n_ctx=40, n_embd=48, n_head=4, n_layer=3)
    hf = random_hf_model(hparams, seed, std=0.12)
    params = gpt2np_params_of(hf, hparams)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, hparams.n_vocab, size=n) for n in (6, 3)]
    plain = gpt2np.GPT2(hparams, params)
    eos = int(np.argmax(plain.forward(prompts[0])[0][-1]))  # a token the model likes
    model = gpt2np.GPT2(hparams, params, tokenizer=EotOnly(eos))
    for case in LIVE_CASES:
        for rows in ([prompts[0]], prompts):
            expected = run_hf(hf, rows, case, eos)
            assert expected["margin"] > min_margin(case), (case, expected["margin"])
            for mode in ("processed", "raw"):
                assert_equal_to_hf(run_ours(model, rows, case, mode), expected, eos, mode)


@pytest.mark.oracle
@pytest.mark.slow
def test_live_beam_search_on_a_124m_shaped_model():
    """The shapes of OpenAI's 124M (random weights): beam search and greedy with a penalty."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hf_reference import gpt2np_params_of, min_margin, random_hf_model

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
