"""Shared fixtures: a small random-weights model and the HF-produced golden fixture."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import gpt2np
from gpt2np.params import unflatten

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def tiny_hparams() -> gpt2np.HParams:
    return gpt2np.HParams(n_vocab=97, n_ctx=32, n_embd=24, n_head=3, n_layer=2)


@pytest.fixture(scope="session")
def tiny_model(tiny_hparams: gpt2np.HParams) -> gpt2np.GPT2:
    """Random weights; larger than GPT-2's init so that logits differ visibly between tokens."""
    return gpt2np.GPT2(tiny_hparams, gpt2np.init_params(tiny_hparams, seed=0, std=0.2))


@pytest.fixture(scope="session")
def golden() -> dict[str, np.ndarray]:
    """tests/fixtures/golden_tiny.npz, written by scripts/make_golden_fixture.py with HF
    transformers (PyTorch): weights, ids, and HF's logits and presents."""
    with np.load(FIXTURES / "golden_tiny.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session", params=[True, False], ids=["fast", "clear"])
def golden_model(request: pytest.FixtureRequest, golden: dict[str, np.ndarray]) -> gpt2np.GPT2:
    """The fixture's weights, once with the fast attention kernel and once with the clear one."""
    return model_from_fixture(golden, fast=request.param)


def model_from_fixture(arrays: dict[str, np.ndarray], fast: bool = True) -> gpt2np.GPT2:
    """A GPT2 from a fixture's ``hparams`` (JSON as uint8) and ``param/<flat name>`` arrays."""
    hparams = gpt2np.HParams(**json.loads(bytes(arrays["hparams"])))
    flat = {k.removeprefix("param/"): v for k, v in arrays.items() if k.startswith("param/")}
    return gpt2np.GPT2(hparams, unflatten(flat, hparams), fast=fast)


@pytest.fixture(scope="session")
def fixture() -> dict[str, np.ndarray]:
    """tests/fixtures/generate_tiny.npz, written by scripts/make_generate_fixture.py with HF:
    weights, prompts, HF's greedy continuations and strided log-probs."""
    with np.load(FIXTURES / "generate_tiny.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session")
def fixture_model(fixture: dict[str, np.ndarray]) -> gpt2np.GPT2:
    return model_from_fixture(fixture)
