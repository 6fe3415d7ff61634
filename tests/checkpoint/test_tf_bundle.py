"""The TF tensor-bundle reader against checkpoints TensorFlow's Saver wrote
(scripts/make_tf_fixtures.py), and against damaged copies of them."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

from gpt2np import CheckpointError
from gpt2np.checkpoint import read_tf_checkpoint
from gpt2np.checkpoint.sstable import read_table
from gpt2np.checkpoint.tf_bundle import read_tf_index

TF = pathlib.Path(__file__).parent.parent / "fixtures" / "tf"
LEVELDB = pathlib.Path(__file__).parent.parent / "fixtures" / "leveldb"


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(TF / name / "expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def copy(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    out = tmp_path / name
    shutil.copytree(TF / name, out)
    return out


@pytest.mark.parametrize("name", ["small", "sharded", "dtypes"])
def test_reads_exactly_what_tensorflow_saved(name):
    got = read_tf_checkpoint(TF / name / "model.ckpt")
    want = expected(name)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key
        assert got[key].shape == value.shape, key
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_openai_shapes_are_kept_as_stored():
    got = read_tf_checkpoint(TF / "small" / "model.ckpt")
    assert got["model/h0/attn/c_attn/w"].shape == (1, 16, 48)
    assert got["model/h1/mlp/c_proj/w"].shape == (1, 64, 16)


def test_sharded_checkpoint_uses_both_shards():
    header, entries = read_tf_index(TF / "sharded" / "model.ckpt")
    assert header.num_shards == 2
    assert {e.shard_id for e in entries.values()} == {0, 1}


def test_index_spanning_several_blocks():
    stats: dict[str, int] = {}
    read_table(TF / "many" / "model.ckpt.index", stats)
    assert stats["data_blocks"] >= 3
    got = read_tf_checkpoint(TF / "many" / "model.ckpt")
    values = expected("many")["values"]  # [3000, 2], in variable order
    pad = "a_long_name_so_that_the_index_needs_several_blocks_" * 3  # as make_tf_fixtures.py
    assert len(got) == len(values)
    for i in (0, 1, 1499, 2999):
        np.testing.assert_array_equal(got[f"v{i:05d}/{pad}w"], values[i])
    np.testing.assert_array_equal(np.stack([got[k] for k in sorted(got)]), values)


def test_snappy_table_written_by_leveldb():
    stats: dict[str, int] = {}
    entries = read_table(LEVELDB / "snappy.ldb", stats)
    assert stats["snappy_blocks"] > 0
    want = json.loads((LEVELDB / "snappy.json").read_text())
    # LevelDB appends an 8-byte sequence number and type to every user key.
    assert [(k[:-8].decode(), v.decode()) for k, v in entries] == [tuple(p) for p in want]


def test_path_may_name_the_index_file():
    a = read_tf_checkpoint(TF / "small" / "model.ckpt.index")
    np.testing.assert_array_equal(a["model/wte"], expected("small")["model/wte"])


def test_partitioned_variable_is_refused():
    with pytest.raises(CheckpointError, match=r"model/wte.*slices.*not support"):
        read_tf_checkpoint(TF / "sliced" / "model.ckpt")


# --- damage -----------------------------------------------------------------------------------


def test_tensor_of_more_dims_than_numpy_holds_is_refused_by_name():
    """TensorFlow saved a [1] * 65 tensor (scripts/make_tf_deep_fixture.py); NumPy stops at 64."""
    with pytest.raises(CheckpointError, match=r"tensor deep in .*model\.ckpt\.index .*NumPy"):
        read_tf_checkpoint(TF / "deep" / "model.ckpt")


def test_flipped_byte_in_data_names_tensor(tmp_path):
    d = copy(tmp_path, "small")
    e = read_tf_index(d / "model.ckpt")[1]["model/h1/attn/c_proj/w"]
    data = d / "model.ckpt.data-00000-of-00001"
    blob = bytearray(data.read_bytes())
    blob[e.offset + 17] ^= 0x01
    data.write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match=r"checksum mismatch.*model/h1/attn/c_proj/w.*data-"):
        read_tf_checkpoint(d / "model.ckpt")
    assert read_tf_checkpoint(d / "model.ckpt", verify=False)["model/wte"].shape == (260, 16)


def test_truncated_data_file(tmp_path):
    d = copy(tmp_path, "small")
    data = d / "model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"truncated.*tensor model/"):
        read_tf_checkpoint(d / "model.ckpt")


def test_missing_shard(tmp_path):
    d = copy(tmp_path, "sharded")
    (d / "model.ckpt.data-00001-of-00002").unlink()
    with pytest.raises(CheckpointError, match=r"missing data file .*data-00001-of-00002"):
        read_tf_checkpoint(d / "model.ckpt")


def test_missing_index(tmp_path):
    with pytest.raises(CheckpointError, match=r"no checkpoint index .*nothing\.index"):
        read_tf_checkpoint(tmp_path / "nothing")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b"", "too short"),
        (lambda b: b[:-1], "magic"),
        (lambda b: b[:-48] + bytes(48), "magic"),
        (lambda b: b[:200] + bytes([b[200] ^ 0x40]) + b[201:], "CRC mismatch"),
        (lambda b: b[:10], "too short"),
        (lambda b: bytes(1000) + b[-48:], "runs past|CRC mismatch"),
    ],
    ids=["empty", "truncated", "no-footer", "flipped", "ten-bytes", "garbage-blocks"],
)
def test_corrupt_index(tmp_path, damage, message):
    d = copy(tmp_path, "small")
    index = d / "model.ckpt.index"
    index.write_bytes(damage(index.read_bytes()))
    with pytest.raises(CheckpointError, match=message) as info:
        read_tf_checkpoint(d / "model.ckpt")
    assert "model.ckpt.index" in str(info.value)


def test_every_single_byte_flip_in_index_is_caught(tmp_path):
    """Whatever byte of the index is damaged, the result is a CheckpointError or (for bytes
    that carry no information, like footer padding) the correct tensors — never garbage."""
    d = copy(tmp_path, "small")
    index = d / "model.ckpt.index"
    original = index.read_bytes()
    want = expected("small")
    for i in range(0, len(original), 7):
        index.write_bytes(original[:i] + bytes([original[i] ^ 0x10]) + original[i + 1 :])
        try:
            got = read_tf_checkpoint(d / "model.ckpt")
        except CheckpointError:
            continue
        assert sorted(got) == sorted(want), i
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("name", ["small", "sharded", "dtypes"])
def test_random_damage_to_index_gives_checkpoint_error_or_right_answer(tmp_path, name):
    """Seeded random overwrites, splices and truncations: only CheckpointError may escape."""
    rng = np.random.default_rng(11)
    d = copy(tmp_path, name)
    index = d / "model.ckpt.index"
    original = index.read_bytes()
    want = expected(name)
    for _ in range(60):
        b = bytearray(original)
        kind = rng.integers(3)
        if kind == 0:
            for i in rng.integers(0, len(b), rng.integers(1, 5)):
                b[i] = rng.integers(256)
        elif kind == 1:
            b = b[: rng.integers(len(b))]
        else:
            i = int(rng.integers(len(b)))
            b[i : i + int(rng.integers(1, 20))] = rng.bytes(int(rng.integers(0, 20)))
        index.write_bytes(bytes(b))
        try:
            got = read_tf_checkpoint(d / "model.ckpt")
        except CheckpointError:
            continue
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
