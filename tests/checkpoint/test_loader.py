"""Loading, the conversion cache and save: OpenAI-layout and HF-layout directories written by
TensorFlow and transformers (scripts/make_tf_fixtures.py, scripts/make_hf_fixtures.py).

Most tests load through ``gpt2np.load`` (the reader, :func:`gpt2np.checkpoint.load_dir`, plus
the model built from what it read); a few check the reader's own result."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil

import numpy as np
import pytest

import gpt2np
from gpt2np import CheckpointError, load, save
from gpt2np.checkpoint import Checkpoint, load_dir, read_safetensors, write_safetensors
from gpt2np.params import flatten

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
TF_SMALL = FIXTURES / "tf" / "small"
HF_SMALL = FIXTURES / "hf" / "small"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Keep every cache of these tests inside tmp_path."""
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def npz(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def assert_matches_openai(model, expected):
    """Every params tensor equals the TF value with the leading 1 squeezed."""
    flat = flatten(model.params)
    assert len(flat) == len(expected)
    for name, a in flat.items():
        parts = name.split(".")
        if parts[0] == "blocks":
            parts = [f"h{parts[1]}", *parts[2:]]
        want = expected["model/" + "/".join(parts)]
        np.testing.assert_array_equal(a, want[0] if want.ndim == 3 else want, err_msg=name)


def copy(tmp_path, src, name="m") -> pathlib.Path:
    out = tmp_path / name
    shutil.copytree(src, out)
    return out


# --- OpenAI's layout and the cache ------------------------------------------------------------


def test_openai_dir_loads_weights_hparams_and_tokenizer(home):
    model = load(TF_SMALL)
    assert model.hparams == gpt2np.HParams(n_vocab=260, n_ctx=16, n_embd=16, n_head=2, n_layer=2)
    assert_matches_openai(model, npz(TF_SMALL / "expected.npz"))
    assert model.params["blocks"][0]["attn"]["c_attn"]["w"].shape == (16, 48)
    # The directory's own vocabulary: 256 bytes + merges "Ġt", "he", "Ġthe".
    assert model.tokenizer.encode(" the") == [258]
    assert os.listdir(home / "cache")  # converted into the default cache


def test_sharded_openai_dir():
    assert_matches_openai(
        load(FIXTURES / "tf" / "sharded"), npz(FIXTURES / "tf/sharded/expected.npz")
    )


def test_gpt2np_home_with_a_tilde_is_expanded(tmp_path, monkeypatch):
    """GPT2NP_HOME="~/gh" (set from Python or a .env file, where no shell expands it) puts the
    cache in the home directory, as download() puts the models, not in ./~/gh."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("GPT2NP_HOME", "~/gh")
    monkeypatch.chdir(tmp_path)
    load(TF_SMALL)
    assert len(os.listdir(tmp_path / "user" / "gh" / "cache")) == 1
    assert not (tmp_path / "~").exists()


def test_use_cache_false_writes_nothing(tmp_path, home):
    model = load(TF_SMALL, use_cache=False)
    assert_matches_openai(model, npz(TF_SMALL / "expected.npz"))
    assert not (home / "cache").exists()


def test_index_file_path_honours_cache_dir_and_use_cache(tmp_path, home):
    index = TF_SMALL / "model.ckpt.index"
    load(index, use_cache=False, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists() and not (home / "cache").exists()
    model = load(index, cache_dir=tmp_path / "c")
    assert_matches_openai(model, npz(TF_SMALL / "expected.npz"))
    assert len(os.listdir(tmp_path / "c")) == 1 and not (home / "cache").exists()


def test_dtype_cast():
    assert load(TF_SMALL, dtype=np.float64).dtype == np.float64


def test_hparams_missing_key(tmp_path):
    d = copy(tmp_path, TF_SMALL)
    (d / "hparams.json").write_text(json.dumps({"n_vocab": 260, "n_ctx": 16, "n_embd": 16}))
    with pytest.raises(CheckpointError, match=r"hparams\.json.*n_head"):
        load(d)


def test_hparams_disagreeing_with_shapes_names_tensor(tmp_path):
    d = copy(tmp_path, TF_SMALL)
    (d / "hparams.json").write_text(
        json.dumps({"n_vocab": 260, "n_ctx": 16, "n_embd": 16, "n_head": 2, "n_layer": 3})
    )
    with pytest.raises(CheckpointError, match=r"no tensor model/h2/ln_1/g"):
        load(d)
    (d / "hparams.json").write_text(
        json.dumps({"n_vocab": 300, "n_ctx": 16, "n_embd": 16, "n_head": 2, "n_layer": 2})
    )
    with pytest.raises(CheckpointError, match=r"model/wte.*\[260, 16\].*\[300, 16\]"):
        load(d)


def test_missing_hparams_and_bad_json(tmp_path):
    d = copy(tmp_path, TF_SMALL)
    (d / "hparams.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"hparams\.json"):
        load(d)
    (d / "hparams.json").unlink()
    with pytest.raises(CheckpointError, match=r"missing .*hparams\.json"):
        load(d)


@pytest.mark.parametrize("name", ["hparams.json", "config.json"])
def test_deeply_nested_json_names_the_file(tmp_path, name):
    d = copy(tmp_path, TF_SMALL if name == "hparams.json" else HF_SMALL)
    (d / name).write_text("[" * 100_000)  # json.load's recursion limit, not a ValueError
    with pytest.raises(CheckpointError, match=name):
        load(d, cache_dir=tmp_path / "c")


def test_checkpoint_file_naming_another_machine(tmp_path):
    d = copy(tmp_path, TF_SMALL)
    (d / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/models/model.ckpt"\n')
    assert load(d, use_cache=False).hparams.n_layer == 2
    (d / "checkpoint").write_text('model_checkpoint_path: "other.ckpt"\n')
    with pytest.raises(CheckpointError, match=r"other\.ckpt"):
        load(d)


def test_relative_checkpoint_path_is_relative_to_the_directory(tmp_path, monkeypatch):
    """TensorFlow resolves a relative model_checkpoint_path against the checkpoint file's
    directory; the working directory (here holding another checkpoint) must play no part."""
    d = tmp_path / "m"
    shutil.copytree(TF_SMALL, d / "sub")
    shutil.move(d / "sub" / "hparams.json", d / "hparams.json")
    (d / "checkpoint").write_text('model_checkpoint_path: "sub/model.ckpt"\n')
    assert_matches_openai(load(d, use_cache=False), npz(TF_SMALL / "expected.npz"))
    decoy = copy(tmp_path, FIXTURES / "tf" / "sharded", "cwd")
    shutil.copytree(decoy, decoy / "sub")  # a sub/model.ckpt.index under the working directory
    shutil.rmtree(d / "sub")
    monkeypatch.chdir(decoy)
    with pytest.raises(CheckpointError, match=r"sub/model\.ckpt"):
        load(d, use_cache=False)


def test_truncated_checkpoint_through_load_dir(tmp_path):
    d = copy(tmp_path, TF_SMALL)
    data = d / "model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"data-00000-of-00001 is truncated: tensor model/"):
        load(d)


def test_empty_and_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="empty"):
        load(tmp_path)
    with pytest.raises(CheckpointError, match="no such"):
        load(tmp_path / "absent")
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(CheckpointError, match="neither"):
        load(tmp_path)


def test_empty_index_through_load_dir(tmp_path):
    d = copy(tmp_path, TF_SMALL)
    (d / "model.ckpt.index").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"model\.ckpt\.index"):
        load(d)


# --- HF's layout ------------------------------------------------------------------------------


def test_hf_dir_gives_the_logits_torch_computed():
    model = load(HF_SMALL)
    ref = npz(HF_SMALL / "logits.npz")
    logits, _ = model.forward(ref["ids"])
    np.testing.assert_allclose(logits, ref["logits"], atol=1e-5, rtol=1e-5)
    want = npz(HF_SMALL / "expected.npz")
    np.testing.assert_array_equal(model.params["blocks"][1]["mlp"]["c_fc"]["w"],
                                  want["transformer.h.1.mlp.c_fc.weight"])  # fmt: skip


def test_hf_keys_without_prefix_and_safetensors_file_path(tmp_path):
    bare = load(FIXTURES / "hf" / "noprefix")
    by_file = load(HF_SMALL / "model.safetensors")
    for name, a in flatten(bare.params).items():
        np.testing.assert_array_equal(a, flatten(by_file.params)[name], err_msg=name)


def test_hf_sharded_dir_equals_the_single_file(tmp_path):
    """save_pretrained(max_shard_size=...) wrote two shards and an index: the same model."""
    sharded = FIXTURES / "hf" / "sharded"
    assert len(list(sharded.glob("model-*-of-*.safetensors"))) == 2
    one, two = load(HF_SMALL), load(sharded)
    for name, a in flatten(one.params).items():
        np.testing.assert_array_equal(a, flatten(two.params)[name], err_msg=name)
    # A tensor found in two of the files the index names: which one is meant is not ours to
    # guess. (The third file is a byte copy of the first shard, listed for one more tensor.)
    d = copy(tmp_path, sharded)
    shutil.copy(d / "model-00001-of-00002.safetensors", d / "model-00003-of-00003.safetensors")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    second = "model-00002-of-00002.safetensors"
    name = next(n for n, f in index["weight_map"].items() if f == second)
    index["weight_map"][name] = "model-00003-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"tensor \S+ is in both .*00001-of-00002.*00003"):
        load(d)


def test_hf_sharded_index_with_an_empty_weight_map_is_refused(tmp_path):
    """The fuzz tier found an empty weight_map raising IndexError."""
    d = copy(tmp_path, FIXTURES / "hf" / "sharded")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"] = {}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="empty weight_map"):
        load(d)


def hf_copy_with(tmp_path, change):
    d = copy(tmp_path, HF_SMALL)
    tensors = {k: np.array(v) for k, v in read_safetensors(d / "model.safetensors").items()}
    change(tensors)
    write_safetensors(d / "model.safetensors", tensors)
    return d


def test_hf_tied_lm_head_and_mask_buffers_are_accepted(tmp_path):
    def add(t):
        t["lm_head.weight"] = t["transformer.wte.weight"].copy()
        t["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
        t["transformer.h.0.attn.masked_bias"] = np.array(-1e4, np.float32)

    with_extras = flatten(load(hf_copy_with(tmp_path, add)).params)
    plain = flatten(load(HF_SMALL).params)
    assert list(with_extras) == list(plain)  # the head and the mask buffers are not weights
    for name, a in plain.items():
        np.testing.assert_array_equal(with_extras[name], a, err_msg=name)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.update({"lm_head.weight": t["transformer.wte.weight"] + 1}), "lm_head"),
        (lambda t: t.pop("transformer.h.1.ln_2.bias"), r"no tensor h\.1\.ln_2\.bias"),
        (lambda t: t.update({"score.weight": np.zeros(2, np.float32)}), "score.weight"),
        (lambda t: t.update({"h.0.ln_1.weight": t["transformer.h.0.ln_1.weight"]}), "twice"),
        (
            lambda t: t.update({"transformer.wpe.weight": np.zeros((8, 16), np.float32)}),
            r"wpe\.weight.*\[8, 16\]",
        ),
    ],
)
def test_hf_bad_tensors(tmp_path, change, message):
    with pytest.raises(CheckpointError, match=message):
        load(hf_copy_with(tmp_path, change))


@pytest.mark.parametrize("layout", ["openai", "hf"])
def test_absurd_n_layer_costs_nothing(tmp_path, layout):
    """n_layer = 10**12 in hparams.json / config.json: refused at once, without listing the
    shapes of 10**12 blocks first."""
    d = copy(tmp_path, TF_SMALL if layout == "openai" else HF_SMALL)
    name = "hparams.json" if layout == "openai" else "config.json"
    config = json.loads((d / name).read_text())
    (d / name).write_text(json.dumps({**config, "n_layer": 10**12}))
    with pytest.raises(CheckpointError, match=r"too few for the n_layer=1000000000000"):
        load(d, cache_dir=tmp_path / "c")


def test_hf_config_problems(tmp_path):
    d = copy(tmp_path, HF_SMALL)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "activation_function": "quick_gelu"}))
    with pytest.raises(CheckpointError, match="activation_function"):
        load(d)
    (d / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "n_embd"}))
    with pytest.raises(CheckpointError, match="n_embd"):
        load(d)
    # n_inner is compared with 4 * n_embd: a non-int n_embd must be refused, not multiplied
    (d / "config.json").write_text(json.dumps({**config, "n_embd": {}, "n_inner": {}}))
    with pytest.raises(CheckpointError, match=r"config\.json.*n_embd"):
        load(d)
    # an untied head must be in the file: HF would make a random one (tests/checkpoint/test_hf.py
    # runs the settings of GPT2Config that change the maths)
    (d / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(CheckpointError, match=r"lm_head"):
        load(d)
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"missing .*config\.json"):
        load(d)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "model.ckpt"])
def test_pickle_files_are_refused(tmp_path, name):
    # A pickle whose loading would run code; it must never be opened as a pickle.
    payload = b"\x80\x04cos\nsystem\n(S'touch pwned'\ntR."
    (tmp_path / name).write_bytes(payload)
    with pytest.raises(CheckpointError, match="never unpickles"):
        load(tmp_path)
    with pytest.raises(CheckpointError, match="never unpickles"):
        load(tmp_path / name)
    assert not (tmp_path / "pwned").exists()


def test_the_reader_returns_arrays_and_vocabulary_paths_not_a_model(tmp_path):
    read = load_dir(TF_SMALL, cache_dir=tmp_path / "c")
    assert type(read) is Checkpoint
    assert read.hparams == load(TF_SMALL, cache_dir=tmp_path / "c").hparams
    assert read.vocabulary == (str(TF_SMALL / "encoder.json"), str(TF_SMALL / "vocab.bpe"))
    assert_matches_openai(read, npz(TF_SMALL / "expected.npz"))
    hf = load_dir(HF_SMALL)
    assert hf.vocabulary is None and not (HF_SMALL / "vocab.json").exists()


# --- save -------------------------------------------------------------------------------------


def test_save_then_load_gives_identical_arrays(tmp_path):
    model = load(TF_SMALL)
    save(model, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == [
        "config.json", "merges.txt", "model.safetensors", "vocab.json"
    ]  # fmt: skip
    # the vocabulary travels with the weights, under HF's names, byte for byte
    assert (tmp_path / "out" / "vocab.json").read_bytes() == (
        TF_SMALL / "encoder.json"
    ).read_bytes()
    assert (tmp_path / "out" / "merges.txt").read_bytes() == (TF_SMALL / "vocab.bpe").read_bytes()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    assert (config["vocab_size"], config["n_positions"], config["n_embd"]) == (260, 16, 16)
    keys = set(read_safetensors(tmp_path / "out" / "model.safetensors"))
    assert "wte.weight" in keys and "h.0.attn.c_attn.weight" in keys
    back = load(tmp_path / "out")
    assert back.hparams == model.hparams
    for name, a in flatten(model.params).items():
        b = flatten(back.params)[name]
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert gpt2np.save is save
    assert back.tokenizer.encode("hello") == model.tokenizer.encode("hello")


def test_save_of_a_model_whose_vocabulary_file_is_damaged_says_so_and_writes_nothing(tmp_path):
    """The tokenizer is parsed on first use; save() uses it, so a damaged encoder.json found
    only then must fail save() (naming the file), not yield a directory without vocabulary."""
    d = copy(tmp_path, TF_SMALL)
    model = load(d, cache_dir=tmp_path / "c")
    (d / "encoder.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"encoder\.json"):
        save(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_save_copies_the_bundled_vocabulary_for_gpt2_sized_models(tmp_path):
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=8, n_embd=4, n_head=1, n_layer=1)
    save(gpt2np.GPT2(hp, gpt2np.init_params(hp)), tmp_path)
    bundled = gpt2np.Tokenizer().files
    assert (tmp_path / "vocab.json").read_bytes() == open(bundled[0], "rb").read()
    assert (tmp_path / "merges.txt").read_bytes() == open(bundled[1], "rb").read()
    assert load(tmp_path).tokenizer.encode("Hello world") == [15496, 995]


def test_save_random_model_round_trip(tmp_path):
    hp = gpt2np.HParams(n_vocab=50, n_ctx=8, n_embd=12, n_head=3, n_layer=1)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=3))
    save(model, tmp_path)
    back = load(tmp_path)
    ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(back.forward(ids)[0], model.forward(ids)[0])


@pytest.mark.oracle
def test_transformers_loads_what_save_wrote(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = load(TF_SMALL)  # (its conversion cache lands in tmp_path/home: save elsewhere)
    save(model, tmp_path / "out")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "out").eval()
    ids = np.array([[5, 9, 200, 17, 3, 259, 0, 42]])
    with torch.no_grad():
        hf_logits = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(hf_logits, model.forward(ids)[0], atol=1e-4, rtol=1e-4)


def test_vocabulary_is_parsed_on_first_use_and_its_errors_name_the_file(tmp_path, monkeypatch):
    shutil.copytree(TF_SMALL, tmp_path / "m")
    expected = load(TF_SMALL).tokenizer.encode("hello")
    calls = []
    real = gpt2np.Tokenizer.from_files
    monkeypatch.setattr(gpt2np.Tokenizer, "from_files", lambda *a: calls.append(a) or real(*a))
    model = load(tmp_path / "m", cache_dir=tmp_path / "c")
    assert calls == []  # loading the weights did not parse the vocabulary
    assert model.tokenizer.encode("hello") == expected
    assert len(calls) == 1 and model.tokenizer is model.tokenizer
    (tmp_path / "m" / "encoder.json").write_text("{not json")
    broken = load(tmp_path / "m", cache_dir=tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"encoder\.json"):
        _ = broken.tokenizer


@pytest.mark.parametrize("src, gone", [("tf", "vocab.bpe"), ("tf", "encoder.json"),
                                       ("hf", "merges.txt")])  # fmt: skip
def test_half_a_vocabulary_is_an_error_on_first_use_not_the_bundled_one(tmp_path, src, gone):
    if src == "tf":
        d = copy(tmp_path, TF_SMALL)
        (d / gone).unlink()
    else:  # HF's names for the same two files; the fixture has neither, give it one
        d = copy(tmp_path, HF_SMALL)
        shutil.copy(TF_SMALL / "encoder.json", d / "vocab.json")
    model = load(d, cache_dir=tmp_path / "c")  # the weights load
    assert model.forward([[1, 2]])[0].shape[-1] == model.hparams.n_vocab
    with pytest.raises(
        CheckpointError, match=rf"{gone} is missing but .* is there: a vocabulary needs both"
    ):
        _ = model.tokenizer


def bitwise_masked_crc32c(data: bytes) -> int:
    """TF's masked CRC-32C by its definition (independent of gpt2np.checkpoint.crc32c)."""
    from tests.checkpoint.test_crc32c import bitwise_crc32c

    crc = bitwise_crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_index_claiming_billions_of_shards_costs_nothing(tmp_path):
    """A well-formed index whose bundle header says num_shards = 2**31 - 1: the loader must
    report the missing shard, not build a list of two billion file names."""
    d = copy(tmp_path, TF_SMALL)
    index = bytearray((d / "model.ckpt.index").read_bytes())
    # the first entry of the first data block: key "" (shared 0, non_shared 0, value 6 bytes),
    # value BundleHeaderProto {num_shards: 1, version {producer: 1}}
    assert index[:9] == b"\x00\x00\x06\x08\x01\x1a\x02\x08\x01"
    index[3:9] = b"\x08\xff\xff\xff\xff\x07"  # num_shards: 2**31 - 1, the same 6 bytes
    block_size = 852  # the fixture's one data block, at offset 0 (else its CRC check fails)
    index[block_size + 1 : block_size + 5] = bitwise_masked_crc32c(
        bytes(index[: block_size + 1])
    ).to_bytes(4, "little")
    (d / "model.ckpt.index").write_bytes(bytes(index))
    with pytest.raises(CheckpointError, match=r"missing data file .*of-2147483647"):
        load(d, cache_dir=tmp_path / "c")


# --- consistency and confinement ----------------------------------------------------------------


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no cache"])
def test_hparams_must_name_exactly_the_checkpoints_tensors(tmp_path, use_cache):
    """n_layer 1 for a 2-layer checkpoint loaded a 1-layer model silently (the index holds a
    layer more than the hparams ask for); the safetensors path already refused it."""
    d = copy(tmp_path, TF_SMALL)
    hp = json.loads((d / "hparams.json").read_text())
    (d / "hparams.json").write_text(json.dumps({**hp, "n_layer": 1}))
    with pytest.raises(CheckpointError, match=r"n_layer=1 does not: model/h1/attn"):
        load(d, cache_dir=tmp_path / "c", use_cache=use_cache)
    h = copy(tmp_path, HF_SMALL, "hf")
    config = json.loads((h / "config.json").read_text())
    (h / "config.json").write_text(json.dumps({**config, "n_layer": 1}))
    with pytest.raises(CheckpointError, match=r"tensors a GPT-2 LM does not: .*h\.1\."):
        load(h)


@pytest.mark.parametrize(
    "named", ["/elsewhere/other/model.ckpt", "../other/model.ckpt", "sub/../../other/model.ckpt"]
)
def test_the_checkpoint_file_cannot_lead_out_of_its_directory(tmp_path, named):
    """With the local index gone, an absolute or ../ path loaded another directory's weights
    with this directory's hparams."""
    d = copy(tmp_path, TF_SMALL)
    other = copy(tmp_path, FIXTURES / "tf" / "sharded", "other")
    for f in d.glob("model.ckpt*"):
        f.unlink()
    named = named.replace("/elsewhere/other", str(other))
    (d / "sub").mkdir()
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\n')
    assert (d / named).with_suffix(".ckpt.index").exists() or os.path.isabs(named)
    with pytest.raises(CheckpointError, match=r"outside .*reads only a checkpoint inside"):
        load(d, cache_dir=tmp_path / "c")


@pytest.mark.parametrize(
    "layout, name",
    [
        ("tf", "hparams.json"),
        ("tf", "checkpoint"),
        ("tf", "model.ckpt.index"),
        ("hf", "config.json"),
    ],
)
@pytest.mark.parametrize("kind", ["/dev/zero", "FIFO", "directory", "too big"])
def test_small_files_are_read_bounded(tmp_path, layout, name, kind):
    """hparams.json -> /dev/zero was read until 2.9 GB and a MemoryError; as a FIFO it hung.
    Run in a child with a timeout so that a regression fails instead of hanging the suite."""
    import subprocess
    import sys

    d = copy(tmp_path, TF_SMALL if layout == "tf" else HF_SMALL)
    (d / name).unlink()
    if kind == "/dev/zero":
        (d / name).symlink_to("/dev/zero")
    elif kind == "FIFO":
        os.mkfifo(d / name)
    elif kind == "directory":
        (d / name).mkdir()
    else:
        (d / name).write_bytes(b" " * (17 << 20) + b"{}")
    code = (
        "import resource,sys,gpt2np\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "try: gpt2np.load(sys.argv[1], cache_dir=sys.argv[2])\n"
        "except gpt2np.CheckpointError as e: print('CheckpointError', e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(d), str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("CheckpointError") and name in run.stdout, run.stdout


def test_an_unknown_users_home_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"'~nouser_gpt2np/x'.*user 'nouser_gpt2np'"):
        load("~nouser_gpt2np/x")
    with pytest.raises(ValueError, match=r"cache_dir '~nouser_gpt2np/c'"):
        load(TF_SMALL, cache_dir="~nouser_gpt2np/c")
    monkeypatch.setenv("GPT2NP_HOME", "~nouser_gpt2np")
    with pytest.raises(ValueError, match=r"GPT2NP_HOME '~nouser_gpt2np'"):
        load(TF_SMALL)


# --- save on a full disk: nothing half-written is left -----------------------------------------


def _gpt2_vocab_model():
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=8, n_embd=4, n_head=1, n_layer=1)
    return gpt2np.GPT2(hp, gpt2np.init_params(hp))  # GPT-2's bundled vocabulary: 1.5 MB


def _enospc_on(monkeypatch, target):
    """os.fsync of a file named ``target`` fails as on a full disk (ext4 reports delayed
    allocation failures there)."""
    real = os.fsync

    def fsync(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == target:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("target", ["config.json", "merges.txt"])
@pytest.mark.parametrize("existing", [False, True], ids=["new dir", "existing dir"])
def test_save_on_a_full_disk_leaves_nothing(tmp_path, monkeypatch, target, existing):
    out = tmp_path / "deep" / "out"
    if existing:
        out.mkdir(parents=True)
        (out / "config.json").write_text("old")
        (out / "merges.txt").write_text("old")
    _enospc_on(monkeypatch, target)
    with pytest.raises(OSError, match="No space left"):
        save(_gpt2_vocab_model(), out)
    if existing:
        assert sorted(os.listdir(out)) == ["config.json", "merges.txt"]
        assert (out / "config.json").read_text() == "old"
        assert os.listdir(tmp_path / "deep") == ["out"]
    else:
        assert os.listdir(tmp_path) == []  # not even the parent it made


def test_save_into_an_existing_directory_replaces_the_model_and_refuses_other_files(tmp_path):
    """Over another model, the whole directory is replaced (its vocabulary does not stay
    beside the new weights); a directory holding a file of the user's is refused, untouched."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "vocab.json").write_text("another model's")
    (out / "merges.txt").write_text("another model's")
    (out / "notes.txt").write_text("mine")
    hp = gpt2np.HParams(n_vocab=50, n_ctx=8, n_embd=12, n_head=3, n_layer=1)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=3))  # no vocabulary to copy
    with pytest.raises(ValueError, match=r"refusing to save into .*out: it holds notes.txt"):
        save(model, out)
    assert sorted(os.listdir(out)) == ["merges.txt", "notes.txt", "vocab.json"]
    (out / "notes.txt").unlink()
    save(model, out)
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    assert os.listdir(tmp_path) == ["out"]
    with pytest.raises(ValueError, match="not a directory"):
        save(model, out / "config.json")


@pytest.mark.parametrize("point", ["gpt2np.support.atomic.exchange", "shutil.rmtree"])
def test_a_save_over_another_model_killed_at_any_step_leaves_one_model_whole(tmp_path, point):
    """SIGKILL just before the new directory is swapped in, and just after (before the old one
    is removed): the directory holds the old model or the new one, each whole, never the new
    weights beside the old vocabulary."""
    from tests.helpers.killpoints import Kill, kill_all

    old = load(TF_SMALL, use_cache=False)
    out = tmp_path / "out"
    save(old, out)  # with vocab.json + merges.txt
    setup = ("import gpt2np; hp = gpt2np.HParams(n_vocab=50, n_ctx=8, n_embd=12, n_head=3, "
             "n_layer=1); m = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=3))")  # fmt: skip
    kill_all([Kill(setup, f"gpt2np.save(m, {str(out)!r})", point)])
    files = sorted(os.listdir(out))
    got = flatten(load(out).params)
    if files == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]:
        assert all(np.array_equal(a, got[k]) for k, a in flatten(old.params).items())
    else:
        assert files == ["config.json", "model.safetensors"]
        hp = gpt2np.HParams(n_vocab=50, n_ctx=8, n_embd=12, n_head=3, n_layer=1)
        new = flatten(gpt2np.init_params(hp, seed=3))
        assert all(np.array_equal(a, got[k]) for k, a in new.items())
    assert files == (["config.json", "model.safetensors"] if point == "shutil.rmtree" else
                     ["config.json", "merges.txt", "model.safetensors", "vocab.json"])  # fmt: skip


def test_a_saved_directory_stays_locked_until_it_is_in_place(tmp_path, monkeypatch):
    """Between the end of the writing and the rename, a sweep from a process that cannot see
    the writer's pid (another pid namespace: os.kill says no such process) finds the temporary
    directory still locked, and leaves it."""
    import subprocess
    import sys

    sweeper = (
        "import os, sys\n"
        "def gone(pid, sig):\n    raise ProcessLookupError(pid)\n"
        "os.kill = gone\n"
        "from gpt2np.support.atomic import sweep\n"
        "sweep(sys.argv[1])\n"
    )
    real_rename, swept = os.rename, []

    def rename(src, dst):  # the window: everything written, not yet renamed
        subprocess.run([sys.executable, "-c", sweeper, str(tmp_path)], check=True, timeout=60)
        swept.append(os.path.isdir(src))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    hp = gpt2np.HParams(n_vocab=50, n_ctx=8, n_embd=12, n_head=3, n_layer=1)
    save(gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=3)), tmp_path / "out")
    assert swept == [True]
    assert sorted(os.listdir(tmp_path / "out")) == ["config.json", "model.safetensors"]


def test_save_on_a_really_full_file_system(tmp_path):
    """A 1.6 MB tmpfs: model.safetensors and config.json fit, the vocabulary does not."""
    import subprocess

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1600k", "tmpfs", str(mnt)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with pytest.raises(OSError) as e:
            save(_gpt2_vocab_model(), mnt / "out")
        assert e.value.errno == errno.ENOSPC
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_what_a_killed_save_leaves_the_next_save_removes(tmp_path):
    """SIGKILL while model.safetensors is written, just before the directory is renamed into
    place, and halfway through replacing an existing directory's files: the next save of the
    same model leaves exactly the saved files, and they load."""
    from tests.helpers.killpoints import Kill, kill_all

    cases = {  # name: (out exists already, the call where it is killed)
        "writing": (False, "os.fsync", 1),
        "renaming": (False, "os.rename", 1),
        "swapping": (True, "gpt2np.support.atomic.exchange", 1),
    }
    kills = []
    for name, (existing, point, nth) in cases.items():
        out = tmp_path / name / "out"
        out.mkdir(parents=True, exist_ok=existing) if existing else out.parent.mkdir()
        setup = f"import gpt2np; m = gpt2np.load({str(TF_SMALL)!r}, use_cache=False)"
        kills.append(Kill(setup, f"gpt2np.save(m, {str(out)!r})", point, nth))
    kill_all(kills)
    for name in cases:
        assert any(n.startswith(".out.") for n in os.listdir(tmp_path / name)), name  # left
    model = load(TF_SMALL, use_cache=False)
    for name in cases:
        save(model, tmp_path / name / "out")
        assert os.listdir(tmp_path / name) == ["out"], name
        files = ["config.json", "merges.txt", "model.safetensors", "vocab.json"]
        assert sorted(os.listdir(tmp_path / name / "out")) == files, name
        got = flatten(load(tmp_path / name / "out").params)
        assert all(np.array_equal(a, got[k]) for k, a in flatten(model.params).items())


def test_a_save_that_cannot_write_names_the_destination_not_its_temporary(tmp_path, capsys):
    """/proc takes no new directories: the error names the destination the user gave."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    with pytest.raises(OSError) as e:
        save(load(TF_SMALL, use_cache=False), "/proc/gpt2np-forbidden")
    assert "/proc/gpt2np-forbidden" in str(e.value) and ".tmp" not in str(e.value)
    from gpt2np.cli.app import main

    assert main(["convert", str(TF_SMALL), "/proc/gpt2np-forbidden/sub"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: ") and err.count("\n") == 1
    assert "/proc/gpt2np-forbidden" in err and ".tmp" not in err
