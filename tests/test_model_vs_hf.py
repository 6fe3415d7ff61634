"""gpt2np against HF transformers (PyTorch): the committed fixture, and a live oracle tier."""

from __future__ import annotations

import numpy as np
import pytest

import gpt2np
from gpt2np.checkpoint.convert import flat_from_hf


def test_logits_and_present_match_hf(golden, golden_model) -> None:
    logits, present = golden_model.forward(golden["ids"])
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, golden["logits"], atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(present, golden["present"], atol=2e-5, rtol=1e-4)
    # the fixture is not trivially flat: argmax differs across positions
    assert len(set(golden["logits"].argmax(-1).ravel().tolist())) > 5


def test_forward_with_past_matches_hf_cache(golden, golden_model) -> None:
    split = int(golden["split"])
    _, past = golden_model.forward(golden["ids"][:, :split])
    logits, _ = golden_model.forward(golden["ids"][:, split:], past=past)
    np.testing.assert_allclose(logits, golden["logits_rest"], atol=2e-5, rtol=1e-4)


def test_cached_forward_matches_hf(golden, golden_model) -> None:
    split = int(golden["split"])
    cache = golden_model.new_cache(batch=2)
    golden_model.forward_cached(golden["ids"][:, :split], cache)
    logits = golden_model.forward_cached(golden["ids"][:, split:], cache)
    np.testing.assert_allclose(logits, golden["logits_rest"], atol=2e-5, rtol=1e-4)


def test_float64_matches_hf_float64(golden, golden_model) -> None:
    logits, _ = golden_model.astype(np.float64).forward(golden["ids"])
    assert logits.dtype == np.float64
    np.testing.assert_allclose(logits, golden["logits64"], atol=1e-11, rtol=1e-11)


@pytest.mark.oracle
@pytest.mark.parametrize("B,T,split", [(1, 9, 4), (3, 16, 1)])
def test_live_against_transformers(B: int, T: int, split: int) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(B * 100 + T)
    hp = gpt2np.HParams(n_vocab=300, n_ctx=40, n_embd=48, n_head=6, n_layer=3)
    config = transformers.GPT2Config(
        vocab_size=hp.n_vocab, n_positions=hp.n_ctx, n_embd=hp.n_embd, n_layer=hp.n_layer,
        n_head=hp.n_head, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(config).eval().double()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    flat = flat_from_hf(sd, hp, "the HF model")  # the loader's name mapping, shapes checked
    model = gpt2np.GPT2(hp, gpt2np.params.unflatten(flat, hp))
    ids = np.random.default_rng(T).integers(0, hp.n_vocab, (B, T))
    with torch.no_grad():
        expected = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(model.forward(ids)[0], expected, atol=1e-10, rtol=1e-10)
    _, past = model.forward(ids[:, :split])
    np.testing.assert_allclose(
        model.forward(ids[:, split:], past=past)[0], expected[:, split:], atol=1e-10, rtol=1e-10
    )
    model32 = model.astype(np.float32)
    np.testing.assert_allclose(model32.forward(ids)[0], expected, atol=5e-5, rtol=1e-4)
