"""The GPT-2 family's config space: every GPT2Config setting that changes the maths either runs
equal to HF transformers or is refused naming the field and value.

The default tier compares with tests/fixtures/hf/variants/ (checkpoints and logits written by
transformers, scripts/make_hf_variants.py); the oracle tier builds each variant live.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import gpt2np
from gpt2np import CheckpointError
from gpt2np.params import flatten

VARIANTS = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "variants"
NAMES = sorted(p.name for p in VARIANTS.iterdir())


def logits_npz(name: str) -> dict[str, np.ndarray]:
    with np.load(VARIANTS / name / "logits.npz") as z:
        return {k: z[k] for k in z.files}


def test_every_variant_is_there() -> None:
    assert len(NAMES) == 14, NAMES


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "clear"])
@pytest.mark.parametrize("name", NAMES)
def test_variant_gives_the_logits_transformers_computed(name: str, fast: bool) -> None:
    expected = logits_npz(name)
    model = gpt2np.load(VARIANTS / name, fast=fast)
    logits, _ = model.forward(expected["ids"])
    np.testing.assert_allclose(logits, expected["logits"], rtol=1e-4, atol=1e-4)
    if "logits64" in expected:
        logits64, _ = model.astype(np.float64).forward(expected["ids"])
        np.testing.assert_allclose(logits64, expected["logits64"], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "clear"])
@pytest.mark.parametrize("name", NAMES)
def test_variant_step_by_step_through_the_cache_equals_one_pass(name: str, fast: bool) -> None:
    """Generation's path (KVCache, forward_cached) and the functional past follow the variant:
    a prompt then one token at a time gives the logits of one pass over everything."""
    ids = logits_npz(name)["ids"]
    model = gpt2np.load(VARIANTS / name, fast=fast).astype(np.float64)
    whole, _ = model.forward(ids)
    cache = model.new_cache(batch=ids.shape[0])
    steps = [model.forward_cached(ids[:, :4], cache)]
    steps += [model.forward_cached(ids[:, t : t + 1], cache) for t in range(4, ids.shape[1])]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), whole, rtol=1e-10, atol=1e-10)
    first, present = model.forward(ids[:, :6])
    rest, _ = model.forward(ids[:, 6:], past=present)
    np.testing.assert_allclose(np.concatenate([first, rest], axis=1), whole, rtol=1e-10, atol=1e-10)


def test_the_settings_are_read_into_hparams() -> None:
    h = gpt2np.load(VARIANTS / "combined").hparams
    assert (h.layer_norm_epsilon, h.n_inner, h.activation_function) == (1e-3, 24, "silu")
    assert (h.scale_attn_weights, h.scale_attn_by_inverse_layer_idx) == (False, True)
    assert h.tie_word_embeddings is False and h.d_ff == 24
    model = gpt2np.load(VARIANTS / "untied")
    assert model.params["lm_head"].shape == model.params["wte"].shape
    assert not np.array_equal(model.params["lm_head"], model.params["wte"])


@pytest.mark.parametrize("name", ["untied", "combined", "n_inner", "gelu", "no_scale"])
def test_save_then_load_keeps_the_variant(tmp_path, name: str) -> None:
    model = gpt2np.load(VARIANTS / name)
    gpt2np.save(model, tmp_path / "out")
    again = gpt2np.load(tmp_path / "out")
    assert again.hparams == model.hparams
    flat, flat_again = flatten(model.params), flatten(again.params)
    assert flat.keys() == flat_again.keys()
    assert all(np.array_equal(flat[k], flat_again[k]) for k in flat)
    ids = logits_npz(name)["ids"]
    np.testing.assert_array_equal(again.forward(ids)[0], model.forward(ids)[0])


def with_config(tmp_path: pathlib.Path, name: str, **changes) -> pathlib.Path:
    d = tmp_path / name
    shutil.copytree(VARIANTS / name, d)
    config = json.loads((d / "config.json").read_text())
    config.update(changes)
    (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"add_cross_attention": True}, "add_cross_attention=True"),
        ({"activation_function": "quick_gelu"}, "activation_function='quick_gelu'"),
        ({"activation_function": "gelu_fast"}, "activation_function='gelu_fast'"),
        ({"activation_function": None}, "activation_function=None"),
        ({"pruned_heads": {"0": [1]}}, "pruned_heads"),
        ({"scale_attn_weights": "yes"}, "scale_attn_weights='yes'"),
        ({"scale_attn_by_inverse_layer_idx": 1}, "scale_attn_by_inverse_layer_idx=1"),
        ({"reorder_and_upcast_attn": None}, "reorder_and_upcast_attn=None"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings='false'"),
        ({"layer_norm_epsilon": 0}, "layer_norm_epsilon=0"),
        ({"layer_norm_epsilon": -1e-5}, "layer_norm_epsilon=-1e-05"),
        ({"layer_norm_epsilon": float("nan")}, "layer_norm_epsilon=nan"),
        ({"layer_norm_epsilon": "1e-5"}, "layer_norm_epsilon='1e-5'"),
        ({"layer_norm_epsilon": 10**400}, "layer_norm_epsilon=10000000000"),
        ({"activation_function": {}}, "activation_function={}"),
        ({"activation_function": [1]}, "activation_function=[1]"),
        ({"n_inner": 0}, "n_inner=0"),
        ({"n_inner": 4.5}, "n_inner=4.5"),
        ({"n_inner": True}, "n_inner=True"),
    ],
)
def test_a_setting_gpt2np_does_not_run_is_refused_naming_field_and_value(
    tmp_path, changes, message
) -> None:
    d = with_config(tmp_path, "layer_norm_epsilon", **changes)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace("[", r"\[")) as e:
        gpt2np.load(d)
    assert str(d / "config.json") in str(e.value)


def test_untied_config_without_its_head_and_tied_config_with_a_different_head(tmp_path) -> None:
    untied_config = with_config(tmp_path, "layer_norm_epsilon", tie_word_embeddings=False)
    with pytest.raises(CheckpointError, match=r"no tensor lm_head\.weight"):
        gpt2np.load(untied_config)
    tied_config = with_config(tmp_path, "untied", tie_word_embeddings=True)
    with pytest.raises(CheckpointError, match=r"lm_head\.weight .* differs from wte\.weight"):
        gpt2np.load(tied_config)


def test_reorder_and_upcast_attn_refuses_a_half_precision_model() -> None:
    model = gpt2np.load(VARIANTS / "reorder_and_upcast_attn")
    with pytest.raises(ValueError, match=r"reorder_and_upcast_attn.*float16"):
        model.astype(np.float16)
    assert model.astype(np.float64).dtype == np.float64


def test_the_golden_weights_hash_covers_an_untied_head() -> None:
    from gpt2np.golden import weights_sha256

    model = gpt2np.load(VARIANTS / "untied")
    before = weights_sha256(model.params, model.hparams)
    params = {**model.params, "lm_head": model.params["lm_head"] + 1}
    assert weights_sha256(params, model.hparams) != before


# -- oracle tier: each variant built live by transformers ------------------------------------


@pytest.mark.oracle
def test_every_gpt2config_field_is_classified() -> None:
    """A field transformers adds to GPT2Config must be placed by hand: run, refused or inert."""
    transformers = pytest.importorskip("transformers")
    from gpt2np.checkpoint.convert import (
        CONFIG_FIELDS_INERT,
        CONFIG_FIELDS_MATHS,
        CONFIG_FIELDS_REFUSED,
    )

    fields = set(transformers.GPT2Config().to_dict())
    known = set(CONFIG_FIELDS_MATHS) | set(CONFIG_FIELDS_REFUSED) | CONFIG_FIELDS_INERT
    assert fields - known == set()


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES)
def test_variant_built_live_by_transformers(tmp_path, name: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    written = json.loads((VARIANTS / name / "config.json").read_text())
    fields = set(GPT2Config().to_dict()) - {"transformers_version", "dtype"}
    settings = {k: v for k, v in written.items() if k in fields}
    torch.manual_seed(1)
    config = GPT2Config(**settings)
    config._attn_implementation = "eager"
    hf = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    hf.save_pretrained(tmp_path, safe_serialization=True)
    ids = np.array([[5, 1, 4, 7, 2, 9, 3]])
    with torch.no_grad():
        want = hf(torch.from_numpy(ids)).logits.numpy()
    for fast in (True, False):
        got, _ = gpt2np.load(tmp_path, fast=fast).forward(ids)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
