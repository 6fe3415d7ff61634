"""Writable weights on request: a loaded model's weights are read-only memory maps;
``load(..., mmap=False)`` and ``model.copy()`` give writable ones. Plus the classic exercise
they enable: ablating a head."""

from __future__ import annotations

import copy
import pathlib
import pickle

import numpy as np
import pytest

import gpt2np
from gpt2np.params import flatten
from tests.helpers.tolerances import LOGITS32

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TF_SMALL = FIXTURES / "tf" / "small"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> pathlib.Path:
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(params=["tf", "hf"])
def saved(request, tmp_path) -> pathlib.Path:
    """A model directory: OpenAI's TF layout (cached by a linked, memory-mapped entry), or HF's
    config.json + model.safetensors (memory-mapped as it is)."""
    if request.param == "tf":
        return TF_SMALL
    h = gpt2np.HParams(n_vocab=50257, n_ctx=32, n_embd=16, n_head=2, n_layer=2)
    gpt2np.save(gpt2np.GPT2(h, gpt2np.init_params(h, seed=1, std=0.2)), tmp_path / "hf")
    return tmp_path / "hf"


def c_proj_w(model: gpt2np.GPT2, layer: int = 1) -> np.ndarray:
    return model.params["blocks"][layer]["attn"]["c_proj"]["w"]


def test_loaded_weights_are_read_only_so_no_write_reaches_the_files(saved) -> None:
    model = gpt2np.load(saved)
    w = c_proj_w(model)
    assert not w.flags.writeable
    writes = {
        "item": lambda: w.__setitem__((slice(0, 2), slice(None)), 0.0),
        "in place": lambda: w.__imul__(0.0),
        "a view": lambda: w[:2].__imul__(0.0),
        "transposed": lambda: w.T.__setitem__(0, 1.0),
        "ufunc out": lambda: np.multiply(w, 0.0, out=w),
        "embedding": lambda: model.params["wte"].__setitem__(5, 0.0),
    }
    for what, write in writes.items():
        with pytest.raises(ValueError, match="read-only"):
            write()
            pytest.fail(f"{what}: the write went through")
    np.testing.assert_array_equal(c_proj_w(model), c_proj_w(gpt2np.load(saved, mmap=False)))


def test_mmap_false_gives_writable_plain_arrays_with_the_same_values(saved) -> None:
    mapped = gpt2np.load(saved)
    model = gpt2np.load(saved, mmap=False)
    for name, a in flatten(model.params).items():
        assert type(a) is np.ndarray and a.flags.writeable and a.flags.owndata, name
        np.testing.assert_array_equal(a, flatten(mapped.params)[name], err_msg=name)
    c_proj_w(model)[:] = 0  # no error, and the files are untouched
    assert np.any(c_proj_w(gpt2np.load(saved)) != 0)
    with pytest.raises(TypeError, match="mmap must be True or False"):
        gpt2np.load(saved, mmap="no")


def test_copy_is_writable_and_independent(saved) -> None:
    model = gpt2np.load(saved)
    ablated = model.copy()
    assert ablated.fast == model.fast and ablated.hparams == model.hparams
    assert ablated.tokenizer.encode("Hello") == model.tokenizer.encode("Hello")
    before = c_proj_w(model).copy()
    c_proj_w(ablated)[:] = 0
    np.testing.assert_array_equal(c_proj_w(model), before)
    for a in flatten(ablated.params).values():
        assert type(a) is np.ndarray and a.flags.writeable
    assert gpt2np.GPT2(model.hparams, model.params, fast=False).copy().fast is False


def test_memory_mapped_and_in_memory_weights_give_the_same_results(saved) -> None:
    """Every result is a plain, writable ndarray, equal bit for bit to what the same weights in
    memory give."""
    mapped, plain = gpt2np.load(saved), gpt2np.load(saved, mmap=False)
    ids = [[5, 17, 42, 7], [1, 2, 3, 4]]
    for fast in (True, False):
        a = gpt2np.GPT2(mapped.hparams, mapped.params, fast=fast)
        b = gpt2np.GPT2(plain.hparams, plain.params, fast=fast)
        for x, y in zip(a.forward(ids), b.forward(ids)):
            assert type(x) is np.ndarray and x.flags.writeable
            np.testing.assert_array_equal(x, y)
        cache_a, cache_b = a.new_cache(2, 8), b.new_cache(2, 8)
        x, y = a.forward_cached(ids, cache_a), b.forward_cached(ids, cache_b)
        assert type(x) is np.ndarray
        np.testing.assert_array_equal(x, y)
    t = gpt2np.trace(mapped, ids)
    assert all(type(v) is np.ndarray for v in t.values())
    for name, v in gpt2np.trace(plain, ids).items():
        np.testing.assert_array_equal(t[name], v, err_msg=name)
    kw = dict(max_new_tokens=5, temperature=0)
    assert mapped.generate([5, 17], **kw) == plain.generate([5, 17], **kw)
    assert mapped.score([5, 17, 42, 7]).nll == plain.score([5, 17, 42, 7]).nll


def test_copies_casts_and_pickles_of_a_read_only_weight_are_plain(saved) -> None:
    w = c_proj_w(gpt2np.load(saved))
    for made in (w.copy(), np.array(w), copy.copy(w), copy.deepcopy(w), w.astype(np.float64),
                 pickle.loads(pickle.dumps(w)), w + 0, w[[0, 1]]):  # fmt: skip
        assert type(made) is np.ndarray and made.flags.writeable
        np.testing.assert_array_equal(made, w[[0, 1]] if len(made) == 2 else w)
    assert not np.asarray(w).flags.writeable  # a view stays read-only
    assert gpt2np.load(saved).astype(np.float64).params["wte"].flags.writeable


def test_ablating_a_head_removes_exactly_its_share_of_the_attention_output(saved) -> None:
    """Zeroing rows h·Dh … (h+1)·Dh of c_proj's weight removes head h: the merged heads enter
    c_proj side by side, so the attention output loses merged[..., head h] · W[rows of h]."""
    model = gpt2np.load(saved)
    layer, head, Dh = 1, 1, model.hparams.d_head
    rows = slice(head * Dh, (head + 1) * Dh)
    ablated = model.copy()
    c_proj_w(ablated, layer)[rows] = 0
    ids = [[5, 17, 42, 7]]
    t, u = gpt2np.trace(model, ids), gpt2np.trace(ablated, ids)
    share = t[f"h{layer}.attn.merged"][..., rows] @ c_proj_w(model, layer)[rows]
    np.testing.assert_allclose(
        u[f"h{layer}.attn.c_proj"], t[f"h{layer}.attn.c_proj"] - share, rtol=LOGITS32, atol=LOGITS32
    )
    np.testing.assert_array_equal(u["h0.out"], t["h0.out"])  # earlier layers untouched
    assert not np.allclose(u.logits, t.logits)


def test_a_checkpoint_overwritten_in_place_changes_a_mapped_model_not_a_private_copy(
    tmp_path,
) -> None:
    """What the docs warn of, where mmap is explained: the mapped arrays are the file's bytes,
    so a write in place reaches a loaded model; mmap=False is a private copy."""
    import inspect
    import shutil

    d = tmp_path / "m"
    shutil.copytree(TF_SMALL, d)
    mapped, private = gpt2np.load(d), gpt2np.load(d, mmap=False)
    before = mapped.params["wte"].copy()
    data = d / "model.ckpt.data-00000-of-00001"
    with open(data, "r+b") as f:  # what `cp other data` does: the same inode, new bytes
        f.write(b"\0" * data.stat().st_size)
    assert not np.array_equal(mapped.params["wte"], before)  # the loaded model changed
    np.testing.assert_array_equal(private.params["wte"], before)
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    loading = (pathlib.Path(__file__).parent.parent / "docs" / "loading.md").read_text()
    for doc in (inspect.getdoc(gpt2np.load), readme, loading):
        assert "overwritten in place" in doc or "overwriting a loaded checkpoint" in doc
        assert "SIGBUS" in doc and "mmap=False" in doc


def test_score_is_declared_once() -> None:
    """model.score is gpt2np.scoring.logprobs.score itself, overloads and all: one declaration
    of its arguments, not a second copy that could drift."""
    from gpt2np.scoring import logprobs

    assert gpt2np.GPT2.score is logprobs.score
