"""GPT2.forward: shapes, causality, cached == uncached, dtypes, and argument checking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpt2np
from gpt2np.model import past_shape


def ids_for(model: gpt2np.GPT2, B: int, T: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, model.hparams.n_vocab, (B, T))


def test_shapes(tiny_model) -> None:
    h = tiny_model.hparams
    logits, present = tiny_model.forward(ids_for(tiny_model, 2, 5))
    assert logits.shape == (2, 5, h.n_vocab)
    assert present.shape == (2, h.n_layer, 2, h.n_head, 5, h.d_head)
    assert present.shape == past_shape(h, 2, 5)
    assert logits.dtype == present.dtype == np.float32


def test_one_dimensional_ids(tiny_model) -> None:
    ids = ids_for(tiny_model, 1, 6)
    logits1, present1 = tiny_model.forward(ids[0].tolist())
    logits2, present2 = tiny_model.forward(ids)
    assert logits1.shape == (6, tiny_model.hparams.n_vocab)
    assert present1.shape[0] == 1
    np.testing.assert_array_equal(logits1, logits2[0])
    np.testing.assert_array_equal(present1, present2)


@settings(max_examples=25, deadline=None)
@given(t=st.integers(0, 9), new=st.integers(0, 96))
def test_causal_changing_token_t_changes_nothing_before_t(tiny_model, t: int, new: int) -> None:
    ids = ids_for(tiny_model, 1, 10, seed=t)
    changed = ids.copy()
    changed[0, t] = new
    a, pa = tiny_model.forward(ids)
    b, pb = tiny_model.forward(changed)
    np.testing.assert_array_equal(a[:, :t], b[:, :t])
    np.testing.assert_array_equal(pa[..., :t, :], pb[..., :t, :])
    if new != ids[0, t]:
        assert not np.array_equal(a[:, t:], b[:, t:])


@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("split", [1, 4, 11])
def test_cached_equals_uncached(tiny_model, B: int, split: int) -> None:
    ids = ids_for(tiny_model, B, 12, seed=split)
    full, present = tiny_model.forward(ids)
    first, past = tiny_model.forward(ids[:, :split])
    rest, new_present = tiny_model.forward(ids[:, split:], past=past)
    np.testing.assert_allclose(np.concatenate([first, rest], 1), full, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(
        np.concatenate([past, new_present], axis=-2), present, atol=1e-5, rtol=1e-5
    )


def test_token_by_token_with_concatenated_pasts(tiny_model) -> None:
    ids = ids_for(tiny_model, 2, 8, seed=9)
    full, _ = tiny_model.forward(ids)
    past = None
    for t in range(8):
        logits, present = tiny_model.forward(ids[:, t : t + 1], past=past)
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)
        past = present if past is None else np.concatenate([past, present], axis=-2)


def test_forward_cached_equals_forward_and_writes_in_place(tiny_model) -> None:
    ids = ids_for(tiny_model, 2, 9, seed=2)
    full, present = tiny_model.forward(ids)
    cache = tiny_model.new_cache(batch=2)
    buffer = cache.kv
    np.testing.assert_allclose(tiny_model.forward_cached(ids[:, :5], cache), full[:, :5], atol=1e-5)
    for t in range(5, 9):
        last = tiny_model.forward_cached(ids[:, t : t + 1], cache, last_only=True)
        assert last.shape == (2, 1, tiny_model.hparams.n_vocab)
        np.testing.assert_allclose(last[:, 0], full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.kv is buffer and cache.length == 9
    np.testing.assert_allclose(cache.present(), present, atol=1e-5, rtol=1e-5)


def test_left_padded_rows_equal_each_prompt_alone(tiny_model) -> None:
    a = [5, 17, 3, 80, 2, 9]
    b = [44, 1]
    pad = [0, len(a) - len(b)]
    ids = np.array([a, [0] * pad[1] + b])
    cache = tiny_model.new_cache(batch=2, pad=pad)
    logits = tiny_model.forward_cached(ids, cache, last_only=True)
    step = tiny_model.forward_cached([[7], [7]], cache)
    for row, prompt in enumerate([a, b]):
        alone, _ = tiny_model.forward([*prompt, 7])
        np.testing.assert_allclose(logits[row, 0], alone[-2], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(step[row, 0], alone[-1], atol=1e-5, rtol=1e-5)


def test_float64_agrees_with_float32(tiny_model) -> None:
    ids = ids_for(tiny_model, 2, 10, seed=3)
    l32, _ = tiny_model.forward(ids)
    model64 = tiny_model.astype(np.float64)
    assert model64.dtype == np.float64
    l64, p64 = model64.forward(ids)
    assert l64.dtype == p64.dtype == np.float64
    np.testing.assert_allclose(l32, l64, atol=1e-5, rtol=1e-5)
    assert gpt2np.GPT2(tiny_model.hparams, tiny_model.params, dtype="float64").dtype == np.float64


def test_float16_ragged_batch_is_finite(tiny_model) -> None:
    """MASKED_SCORE (-1e10) is -inf in float16; padded rows must still give numbers, not NaN."""
    half = tiny_model.astype(np.float16)
    cache = half.new_cache(batch=2, pad=[0, 3])
    logits = half.forward_cached([[5, 6, 7, 8, 9], [0, 0, 0, 8, 9]], cache)
    assert np.isfinite(logits[0]).all() and np.isfinite(logits[1, 3:]).all()
    expected, _ = tiny_model.forward([8, 9])
    np.testing.assert_allclose(logits[1, 3:], expected, rtol=0, atol=0.05)


def test_float32_never_upcasts(tiny_model) -> None:
    past = tiny_model.forward([1, 2])[1]
    logits, present = tiny_model.forward([[3]], past=past.astype(np.float64))
    assert logits.dtype == present.dtype == np.float32


def test_full_context(tiny_model) -> None:
    n_ctx = tiny_model.hparams.n_ctx
    logits, _ = tiny_model.forward(np.arange(n_ctx) % tiny_model.hparams.n_vocab)
    assert logits.shape == (n_ctx, tiny_model.hparams.n_vocab)


@pytest.mark.parametrize(
    "ids, error, match",
    [
        ([[1, 97]], ValueError, r"token id 97 at index \(0, 1\) is outside \[0, 97\)"),
        ([-1, 3], ValueError, "token id -1"),
        ([1.0, 2.0], TypeError, "integers"),
        ([True, False], TypeError, "integers"),
        ("hello", TypeError, "tokenizer"),
        (np.zeros((1, 1, 2), int), ValueError, "3 dims"),
        ([], ValueError, "empty"),
        (np.zeros((2, 0), int), ValueError, "empty"),
        ([[1, 2], [3]], ValueError, "rectangular"),
        (list(range(33)), ValueError, "exceed n_ctx=32"),
    ],
)
def test_bad_ids(tiny_model, ids, error, match) -> None:
    with pytest.raises(error, match=match):
        tiny_model.forward(ids)


@pytest.mark.parametrize(
    "ids, error, match",
    [
        ([2**64], ValueError, r"token id 18446744073709551616 at index \(0,\) is outside"),
        (np.array([[1, 2**70]], dtype=object), ValueError, r"token id \d+ at index \(0, 1\)"),
        (np.array([1, "a"], dtype=object), TypeError, r"got str 'a' at \(1,\)"),
        (np.array([1, True], dtype=object), TypeError, "got bool"),
        (np.array([[1, 2], [3]], dtype=object), ValueError, "rectangular"),
    ],
)
def test_bad_object_ids_name_the_element(tiny_model, ids, error, match) -> None:
    with pytest.raises(error, match=match):
        tiny_model.check_ids(ids)


def test_object_ids_of_python_ints_are_accepted(tiny_model) -> None:
    ids = np.array([[3, 5], [7, 96]], dtype=object)  # e.g. from pandas or a list of big ints
    assert tiny_model.check_ids(ids).dtype == np.int64
    np.testing.assert_array_equal(tiny_model.forward(ids)[0], tiny_model.forward(ids.tolist())[0])


def test_a_tokenizer_class_is_made_on_first_use_when_given_as_load_tokenizer(tiny_model) -> None:
    class Encoder:
        def encode(self, text: str) -> list[int]:
            return [len(text)]

    model = gpt2np.GPT2(tiny_model.hparams, tiny_model.params, load_tokenizer=Encoder)
    assert isinstance(model.tokenizer, Encoder) and model.tokenizer.encode("abc") == [3]
    with pytest.raises(TypeError, match="load_tokenizer=Encoder"):
        gpt2np.GPT2(tiny_model.hparams, tiny_model.params, tokenizer=Encoder)


def test_bad_past(tiny_model) -> None:
    h = tiny_model.hparams
    _, past = tiny_model.forward(ids_for(tiny_model, 2, 30))
    with pytest.raises(ValueError, match="exceed n_ctx"):
        tiny_model.forward(ids_for(tiny_model, 2, 3), past=past)
    good = np.zeros(past_shape(h, 2, 4), np.float32)
    cases = {
        "batch is 2, expected 1": good,
        "n_layer is 3": np.zeros((2, 3, 2, h.n_head, 4, h.d_head)),
        "n_head is 4": np.zeros((2, h.n_layer, 2, 4, 4, h.d_head)),
        "d_head is 7": np.zeros((2, h.n_layer, 2, h.n_head, 4, 7)),
        "6 dims": np.zeros((2, 2, 4)),
    }
    for match, past in cases.items():
        ids = [1, 2] if match.startswith("batch") else [[1, 2], [3, 4]]
        with pytest.raises(ValueError, match=match):
            tiny_model.forward(ids, past=past)
    with pytest.raises(TypeError, match="numpy array"):
        tiny_model.forward([1], past=[[1.0]])


def test_cache_arguments(tiny_model) -> None:
    cache = tiny_model.new_cache(batch=1, max_len=4)
    tiny_model.forward_cached([[1, 2, 3]], cache)
    with pytest.raises(ValueError, match="do not fit"):
        tiny_model.forward_cached([[1, 2]], cache)
    with pytest.raises(ValueError, match="batch 2"):
        tiny_model.forward_cached([[1], [2]], cache)
    with pytest.raises(ValueError, match="max_len"):
        tiny_model.new_cache(max_len=33)
    with pytest.raises(ValueError, match="pad"):
        tiny_model.new_cache(batch=2, pad=[1])
    for kwargs in (
        {"max_len": 5.7},
        {"batch": 2.0},
        {"batch": "2"},
        {"batch": None},
        {"max_len": True},
    ):
        with pytest.raises(TypeError, match=f"{next(iter(kwargs))} must be an int"):
            tiny_model.new_cache(**kwargs)
    assert tiny_model.new_cache(np.int64(2), max_len=np.int32(4)).kv.shape[1::3] == (2, 4)
    for pad in ([1.5, 0], [True, False], ["a", 0], [4, 0], [-1, 0]):
        with pytest.raises(ValueError, match=r"pad must be 2 ints in \[0, max_len=4\)"):
            tiny_model.new_cache(batch=2, max_len=4, pad=pad)
    cache = tiny_model.new_cache(batch=2, max_len=4, pad=np.array([3, 0], np.uint8))
    assert cache.pad.tolist() == [3, 0] and cache.pad.dtype == np.int64


def test_cache_of_another_model_is_refused(tiny_model) -> None:
    h = tiny_model.hparams
    for other in (
        gpt2np.HParams(h.n_vocab, h.n_ctx, h.n_embd, h.n_head, h.n_layer - 1),  # skips a block
        gpt2np.HParams(h.n_vocab, h.n_ctx, h.n_embd, 1, h.n_layer),
        gpt2np.HParams(h.n_vocab, 2 * h.n_ctx, h.n_embd, h.n_head, h.n_layer),
    ):
        cache = gpt2np.KVCache(other, 1, max_len=other.n_ctx)
        with pytest.raises(ValueError, match="was not made for this model"):
            tiny_model.forward_cached([[1, 2, 3]], cache)
    with pytest.raises(TypeError, match="KVCache"):
        tiny_model.forward_cached([[1, 2, 3]], None)


def test_constructor_checks(tiny_hparams, tiny_model) -> None:
    with pytest.raises(TypeError, match="HParams"):
        gpt2np.GPT2({"n_layer": 2}, tiny_model.params)
    params = gpt2np.init_params(tiny_hparams)
    params["blocks"][1]["attn"]["c_attn"]["w"] = np.zeros((24, 24), np.float32)
    with pytest.raises(ValueError, match=r"blocks.1.attn.c_attn.w has shape \[24, 24\]"):
        gpt2np.GPT2(tiny_hparams, params)
    params = gpt2np.init_params(tiny_hparams)
    del params["ln_f"]["b"]
    with pytest.raises(ValueError, match=r"missing tensor ln_f\.b"):
        gpt2np.GPT2(tiny_hparams, params)
    params = gpt2np.init_params(tiny_hparams)
    params["blocks"].pop()
    with pytest.raises(ValueError, match="1 blocks"):
        gpt2np.GPT2(tiny_hparams, params)
    params = gpt2np.init_params(tiny_hparams)
    params["wte"] = params["wte"].astype(np.float64)
    with pytest.raises(TypeError, match="mix dtypes"):
        gpt2np.GPT2(tiny_hparams, params)
    for dtype in (np.int32, bool, np.complex64):
        with pytest.raises(TypeError, match="dtype must be a float type"):
            gpt2np.GPT2(tiny_hparams, tiny_model.params, dtype=dtype)
        with pytest.raises(TypeError, match="dtype must be a float type"):
            tiny_model.astype(dtype)


def test_tokenizer_needs_gpt2_vocab(tiny_model) -> None:
    with pytest.raises(ValueError, match="n_vocab=97"):
        _ = tiny_model.tokenizer


def test_repr(tiny_model) -> None:
    assert "n_layer=2" in repr(tiny_model) and "float32" in repr(tiny_model)


def test_every_use_runs_the_one_composition(tiny_model, monkeypatch, tmp_path) -> None:
    """GPT2.forward (fast and clear), forward_cached, generation, scoring, tracing and dump all
    run gpt2np.model.forward's blocks: the path that runs is the path that is taught."""
    import gpt2np.model

    calls = []
    real = gpt2np.model.block

    def counting(*args, **kwargs):
        calls.append(kwargs["kernels"])
        return real(*args, **kwargs)

    monkeypatch.setattr(gpt2np.model, "block", counting)
    L = tiny_model.hparams.n_layer
    clear = gpt2np.GPT2(tiny_model.hparams, tiny_model.params, fast=False)
    uses = {
        "forward": lambda: tiny_model.forward([[1, 2, 3]]),
        "forward (clear)": lambda: clear.forward([[1, 2, 3]]),
        "forward_cached": lambda: tiny_model.forward_cached([[1, 2]], tiny_model.new_cache(1)),
        "generate": lambda: tiny_model.generate([1, 2], 3, temperature=0),
        "score": lambda: tiny_model.score([1, 2, 3, 4]),
        "score (batch)": lambda: tiny_model.score([[1, 2, 3], [4, 5, 6, 7]]),
        "trace": lambda: gpt2np.trace(tiny_model, [[1, 2, 3]]),
        "dump": lambda: gpt2np.dump(tiny_model, [[1, 2, 3]], tmp_path / "g.npz"),
    }
    for name, use in uses.items():
        calls.clear()
        use()
        assert calls and len(calls) % L == 0, name
    assert calls  # and the fast model runs the fast kernels through it
    calls.clear()
    tiny_model.forward([[1, 2]])
    assert all(k is tiny_model.kernels for k in calls) and tiny_model.kernels is not clear.kernels


def test_one_function_in_src_loops_over_the_blocks_up_to_ln_f() -> None:
    """Only gpt2np.model.forward composes embed -> blocks -> ln_f -> head."""
    import ast
    import pathlib

    src = pathlib.Path(gpt2np.__file__).parent
    composers = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.unparse(node)
                loops = any(isinstance(n, ast.For) and "blocks" in ast.unparse(n.iter)
                            for n in ast.walk(node))  # fmt: skip
                if loops and "ln_f" in text:
                    composers.append(f"{path.relative_to(src)}:{node.name}")
    assert composers == ["model.py:forward"]


def test_a_tokenizer_is_used_as_given_and_load_tokenizer_is_called_once_on_first_use(
    tiny_model,
) -> None:
    """No guessing whether ``tokenizer`` is a factory: a callable tokenizer object is used as it
    is, and only ``load_tokenizer`` is called (once, when text is first needed)."""

    class CallableTokenizer:  # as HF's tokenizers are: callable, with encode
        eot_token = 0

        def __call__(self, *a):
            raise AssertionError("a tokenizer object must not be called")

        def encode(self, text, **kw):
            return [1, 2]

        def decode(self, ids):
            return "x" * len(ids)

    given = CallableTokenizer()
    model = gpt2np.GPT2(tiny_model.hparams, tiny_model.params, tokenizer=given)
    assert model.tokenizer is given
    calls = []
    lazy = gpt2np.GPT2(tiny_model.hparams, tiny_model.params,
                       load_tokenizer=lambda: calls.append(1) or given)  # fmt: skip
    assert calls == [] and lazy.copy().astype(np.float64) is not None and calls == []
    assert lazy.tokenizer is given and lazy.tokenizer is given and calls == [1]
