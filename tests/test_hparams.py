"""HParams and the published sizes (Radford et al., 2019, Table 2)."""

from __future__ import annotations

import json

import pytest

import gpt2np
from gpt2np.params import expected_shapes, flatten, init_params, unflatten


@pytest.mark.parametrize(
    "name, layers, width, heads, n_params",
    [
        # parameter counts as HF reports num_parameters() for gpt2, gpt2-medium/-large/-xl
        ("124M", 12, 768, 12, 124_439_808),
        ("355M", 24, 1024, 16, 354_823_168),
        ("774M", 36, 1280, 20, 774_030_080),
        ("1558M", 48, 1600, 25, 1_557_611_200),
    ],
)
def test_published_sizes(name, layers, width, heads, n_params) -> None:
    h = gpt2np.HPARAMS[name]
    assert (h.n_layer, h.n_embd, h.n_head, h.n_vocab, h.n_ctx) == (
        layers,
        width,
        heads,
        50257,
        1024,
    )
    assert h.d_head == 64
    assert h.n_params == n_params
    assert sum(int(__import__("math").prod(s)) for s in expected_shapes(h).values()) == n_params


def test_from_json_and_errors(tmp_path) -> None:
    path = tmp_path / "hparams.json"
    path.write_text(json.dumps({"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12,
                                "n_layer": 12}))  # fmt: skip
    assert gpt2np.HParams.from_json(path) == gpt2np.HPARAMS["124M"]
    with pytest.raises(ValueError, match="missing n_layer"):
        gpt2np.HParams.from_dict({"n_vocab": 1, "n_ctx": 1, "n_embd": 4, "n_head": 1})
    with pytest.raises(ValueError, match="divisible"):
        gpt2np.HParams(n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="positive"):
        gpt2np.HParams(n_layer=0)
    with pytest.raises(TypeError, match="int"):
        gpt2np.HParams(n_ctx=10.5)


def test_from_json_names_the_file_and_wants_an_object(tmp_path) -> None:
    path = tmp_path / "hparams.json"
    for content, error, match in [
        ("{not json", ValueError, "Expecting property name"),
        ('"n_vocab n_ctx n_embd n_head n_layer"', TypeError, r"a JSON object\), got str"),
        ('{"n_vocab": 5, "n_ctx": 4, "n_embd": 4, "n_head": 2}', ValueError, "missing n_layer"),
    ]:
        path.write_text(content)
        with pytest.raises(error, match=match) as e:
            gpt2np.HParams.from_json(path)
        assert str(path) in str(e.value)
    with pytest.raises(TypeError, match="must be a dict"):
        gpt2np.HParams.from_dict(None)


def test_numpy_integers_are_taken_as_ints_and_numpy_bools_refused() -> None:
    np = pytest.importorskip("numpy")
    h = gpt2np.HParams(*np.array([50257, 1024, 768, 12, 12]))  # values read from an array
    assert h == gpt2np.HPARAMS["124M"] and type(h.n_layer) is int and hash(h)
    assert json.loads(json.dumps(h.to_dict())) == h.to_dict()  # plain ints serialise
    with pytest.raises(TypeError, match="n_layer must be an int"):
        gpt2np.HParams(n_layer=np.bool_(True))
    with pytest.raises(TypeError, match="n_ctx must be an int"):
        gpt2np.HParams(n_ctx=np.float32(8))


def test_deeply_nested_json_is_a_value_error_naming_the_file(tmp_path) -> None:
    path = tmp_path / "hparams.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply") as e:
        gpt2np.HParams.from_json(path)
    assert str(path) in str(e.value)


def test_flatten_unflatten_round_trip() -> None:
    h = gpt2np.HParams(n_vocab=10, n_ctx=8, n_embd=8, n_head=2, n_layer=2)
    params = init_params(h)
    flat = flatten(params)
    assert list(flat) == list(expected_shapes(h))  # forward order
    assert flatten(unflatten(flat, h)).keys() == flat.keys()
    assert {k: v.shape for k, v in flat.items()} == expected_shapes(h)


def test_unflatten_names_a_missing_tensor() -> None:
    h = gpt2np.HParams(n_vocab=10, n_ctx=8, n_embd=8, n_head=2, n_layer=2)
    flat = flatten(init_params(h))
    del flat["blocks.1.mlp.c_fc.w"]
    with pytest.raises(ValueError, match=r"lack tensor blocks\.1\.mlp\.c_fc\.w \[8, 32\]"):
        unflatten(flat, h)


def test_the_family_settings_default_to_gpt2_and_stay_out_of_to_dict() -> None:
    h = gpt2np.HPARAMS["124M"]
    assert h.to_dict() == {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12,
                           "n_layer": 12}  # fmt: skip
    assert h.extras() == {} and h.d_ff == 3072 and h.tie_word_embeddings
    assert repr(h) == "HParams(n_vocab=50257, n_ctx=1024, n_embd=768, n_head=12, n_layer=12)"
    v = gpt2np.HParams(n_vocab=10, n_ctx=8, n_embd=8, n_head=2, n_layer=2, n_inner=12,
                       activation_function="silu", tie_word_embeddings=False)  # fmt: skip
    assert v.to_dict() == {"n_vocab": 10, "n_ctx": 8, "n_embd": 8, "n_head": 2, "n_layer": 2,
                           "n_inner": 12, "activation_function": "silu",
                           "tie_word_embeddings": False}  # fmt: skip
    assert gpt2np.HParams.from_dict(json.loads(json.dumps(v.to_dict()))) == v
    assert "n_inner=12" in repr(v) and v.d_ff == 12


def test_n_params_counts_n_inner_and_an_untied_head() -> None:
    import math

    for h in [
        gpt2np.HParams(n_vocab=10, n_ctx=8, n_embd=8, n_head=2, n_layer=3, n_inner=5),
        gpt2np.HParams(
            n_vocab=10, n_ctx=8, n_embd=8, n_head=2, n_layer=3, tie_word_embeddings=False
        ),
    ]:
        shapes = expected_shapes(h)
        assert h.n_params == sum(math.prod(s) for s in shapes.values())
        params = init_params(h)
        assert list(flatten(params)) == list(shapes)
        gpt2np.GPT2(h, params)  # the tree checks out
    assert list(shapes)[-1] == "lm_head" and shapes["lm_head"] == (10, 8)


@pytest.mark.parametrize(
    "settings, error, message",
    [
        ({"layer_norm_epsilon": 0.0}, ValueError, "layer_norm_epsilon must be a positive"),
        ({"layer_norm_epsilon": float("inf")}, ValueError, "layer_norm_epsilon"),
        ({"layer_norm_epsilon": True}, ValueError, "layer_norm_epsilon"),
        ({"n_inner": 0}, ValueError, "n_inner must be positive"),
        ({"n_inner": 2.0}, TypeError, "n_inner must be an int"),
        ({"activation_function": "quick_gelu"}, ValueError, "'quick_gelu' is not one"),
        ({"activation_function": {}}, ValueError, "activation_function={} is not one"),
        ({"layer_norm_epsilon": 10**400}, ValueError, "layer_norm_epsilon must be a positive"),
        ({"scale_attn_weights": 1}, TypeError, "scale_attn_weights must be True or False"),
        ({"tie_word_embeddings": None}, TypeError, "tie_word_embeddings must be True or False"),
    ],
)
def test_family_settings_are_checked(settings, error, message) -> None:
    with pytest.raises(error, match=message):
        gpt2np.HParams(**settings)


def test_params_with_an_unused_lm_head_are_refused() -> None:
    h = gpt2np.HParams(n_vocab=10, n_ctx=8, n_embd=8, n_head=2, n_layer=1)
    params = init_params(h)
    params["lm_head"] = params["wte"] + 1
    with pytest.raises(ValueError, match=r"lm_head, which these hparams do not use .*tie"):
        gpt2np.GPT2(h, params)
