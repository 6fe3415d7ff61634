"""safetensors: files written by HF (scripts/make_hf_fixtures.py), our writer's output read
back, headers that lie, and (oracle tier) HF's own safetensors library reading our output."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import tracemalloc

import numpy as np
import pytest

from gpt2np import CheckpointError
from gpt2np.checkpoint import read_safetensors, write_safetensors

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "small"


def expected() -> dict[str, np.ndarray]:
    with np.load(HF / "expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("mmap", [True, False])
def test_reads_what_transformers_saved(mmap):
    got = read_safetensors(HF / "model.safetensors", mmap=mmap)
    want = expected()
    stored = {k for k in want if k != "lm_head.weight"}  # tied: HF does not store it
    assert set(got) == stored
    for k in stored:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_mmap_arrays_are_read_only_views():
    got = read_safetensors(HF / "model.safetensors")
    a = got["transformer.wte.weight"]
    assert type(a) is np.ndarray and not a.flags.writeable and not a.flags.owndata


def sample() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((3, 5)).astype(np.float32),
        "h": rng.standard_normal(7).astype(np.float16),
        "d": rng.standard_normal((2, 2)),
        "i": np.arange(6, dtype=np.int64).reshape(2, 3),
        "b": np.array([True, False]),
        "s": np.float32(3.5),
        "t": np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not contiguous
        "big": np.arange(5, dtype=">f4"),  # big-endian input is stored little-endian
        "empty": np.zeros((0, 4), np.float32),
    }


def test_round_trip(tmp_path):
    path = tmp_path / "x.safetensors"
    write_safetensors(path, sample(), {"format": "pt", "note": "hi"})
    for mmap in (True, False):
        got = read_safetensors(path, mmap=mmap)
        for k, v in sample().items():
            assert got[k].shape == v.shape, k
            np.testing.assert_array_equal(got[k], v, err_msg=k)
    assert os.listdir(tmp_path) == ["x.safetensors"]  # no temporary left behind
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8 : 8 + n])
    assert header["__metadata__"] == {"format": "pt", "note": "hi"}
    assert (8 + n) % 8 == 0
    for info in header.values():  # every tensor starts aligned to its item size
        if "dtype" in info:
            size = {"F64": 8, "I64": 8, "F32": 4, "F16": 2, "BOOL": 1}[info["dtype"]]
            assert info["data_offsets"][0] % size == 0


def test_writer_refuses_what_it_cannot_store(tmp_path):
    with pytest.raises(TypeError, match="obj"):
        write_safetensors(tmp_path / "x.safetensors", {"o": np.array([None])})
    with pytest.raises(TypeError, match="metadata"):
        write_safetensors(tmp_path / "x.safetensors", {}, {"k": 1})
    assert os.listdir(tmp_path) == []


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {"a": np.ones(3, np.float32)})
    before = path.read_bytes()

    class Boom(Exception):
        pass

    def boom(*args, **kwargs):
        raise Boom

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(Boom):
        write_safetensors(path, {"a": np.zeros(1000, np.float32)})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["x.safetensors"]


# --- headers that lie -------------------------------------------------------------------------


def raw_file(tmp_path, header, data=b"", length=None) -> pathlib.Path:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(blob) if length is None else length
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", n) + blob + data)
    return path


F32_2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    "header, data, length, message",
    [
        (b"{}", b"", 2**60, "claims"),
        (b"{}", b"", 2**64 - 1, "claims"),
        (b"not json", b"", None, "not valid JSON"),
        (b"\xff\xfe{}", b"", None, "not valid JSON"),
        (b"[1, 2]", b"", None, "not a JSON object"),
        ({"a": {**F32_2, "data_offsets": [0, 8000]}}, bytes(8), None, "outside"),
        ({"a": {**F32_2, "data_offsets": [2**62, 2**62 + 8]}}, bytes(8), None, "outside"),
        ({"a": {**F32_2, "data_offsets": [8, 0]}}, bytes(8), None, "outside"),
        ({"a": {**F32_2, "dtype": "Q9"}}, bytes(8), None, "unknown dtype"),
        ({"a": {**F32_2, "shape": [3]}}, bytes(8), None, "bytes for shape"),
        ({"a": {**F32_2, "shape": [-2]}}, bytes(8), None, "shape"),
        ({"a": {**F32_2, "shape": [2**40, 2**40]}}, bytes(8), None, "bytes for shape"),
        ({"a": F32_2, "b": {**F32_2, "data_offsets": [4, 12]}}, bytes(12), None, "overlaps|bytes"),
        ({"a": F32_2, "b": {**F32_2, "data_offsets": [0, 8]}}, bytes(8), None, "overlaps"),
        ({"a": {**F32_2, "data_offsets": [4, 12]}}, bytes(12), None, "hole"),
        ({"a": F32_2}, bytes(12), None, "cover"),
        ({"a": {"dtype": "F32", "shape": [2]}}, bytes(8), None, "exactly"),
        ({"a": {**F32_2, "data_offsets": [0, True]}}, bytes(8), None, "data_offsets"),
        ({"__metadata__": {"k": 1}}, b"", None, "__metadata__"),
        (b'{"a": 1, "a": 2}', b"", None, "duplicate"),
        (b"[" * 100_000, b"", None, "not valid JSON"),  # too deep for json: RecursionError
        ({"a": {**F32_2, "dtype": ["F32"]}}, bytes(8), None, "unknown dtype"),
        ({"a": {"dtype": "F32", "shape": [0, 2**63], "data_offsets": [0, 0]}}, b"", None, "shape"),
        (
            {"a": {"dtype": "F32", "shape": [0, 2**62, 2**62], "data_offsets": [0, 0]}},
            b"",
            None,
            "shape",
        ),
        (
            {"a": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}},
            bytes(4),
            None,
            "shape",
        ),
    ],
)
def test_lying_header(tmp_path, header, data, length, message):
    path = raw_file(tmp_path, header, data, length)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=message) as info:
            read_safetensors(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "bad.safetensors" in str(info.value)
    assert peak < 1 << 20  # nothing allocated in proportion to what the header claims


def test_too_short_and_missing(tmp_path):
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x00")
    with pytest.raises(CheckpointError, match="too short"):
        read_safetensors(tmp_path / "short.safetensors")
    with pytest.raises(CheckpointError, match="cannot read"):
        read_safetensors(tmp_path / "absent.safetensors")


def test_truncated_real_file(tmp_path):
    data = (HF / "model.safetensors").read_bytes()
    path = tmp_path / "model.safetensors"
    path.write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        read_safetensors(path)


@pytest.mark.oracle
def test_hf_safetensors_library_reads_our_output(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "x.safetensors"
    tensors = {k: v for k, v in sample().items() if k != "t"}
    write_safetensors(path, tensors, {"format": "np"})
    got = st.load_file(str(path))
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_bf16_is_widened_to_float32(tmp_path):
    # bfloat16 is the top half of a float32: 0x3F80 = 1.0, 0xC000 = -2.0, 0x4049 = 3.140625.
    header = {"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}
    path = raw_file(tmp_path, header, struct.pack("<3H", 0x3F80, 0xC000, 0x4049))
    got = read_safetensors(path)["x"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [1.0, -2.0, 3.140625])
