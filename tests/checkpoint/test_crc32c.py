"""CRC-32C: published check values, a bit-by-bit reference written from the definition, and
(oracle tier) Google's C implementation."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt2np.checkpoint.crc32c import crc32c, crc32c_combine, mask, unmask

# The package re-exports the function under the module's name; fetch the module itself.
crc_module = importlib.import_module("gpt2np.checkpoint.crc32c")


def bitwise_crc32c(data: bytes) -> int:
    """The definition: reflected register, polynomial 0x82F63B78, init and final XOR ~0."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize(
    "data, expected",
    [  # RFC 3720 appendix B.4, and the usual "123456789" check value
        (b"123456789", 0xE3069283),
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
        (b"", 0),
    ],
)
def test_published_check_values(data, expected):
    assert crc32c(data) == expected


@pytest.mark.parametrize("n", [1, 3, 4, 1023, 1024, 1025, 4097, 65536 + 7, 262144 + 5])
def test_matches_bitwise_reference_across_lane_boundaries(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    # The bitwise reference is slow; check big inputs through a prefix-continuation instead.
    if n <= 70000:
        assert crc32c(data) == bitwise_crc32c(data)
    else:
        head = crc32c(data[:1000])
        assert head == bitwise_crc32c(data[:1000])
        assert crc32c(data) == crc32c(data[1000:], head)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_continuation_and_reference(a, b):
    assert crc32c(a) == bitwise_crc32c(a)
    assert crc32c(a + b) == crc32c(b, crc32c(a))


def test_array_input_reads_raw_bytes():
    a = np.arange(1000, dtype=np.float32).reshape(10, 100)
    assert crc32c(a) == bitwise_crc32c(a.tobytes())
    assert crc32c(a.T) == bitwise_crc32c(np.ascontiguousarray(a.T).tobytes())


def test_threaded_split_equals_single_thread(monkeypatch):
    data = np.random.default_rng(1).integers(0, 256, 300_001, dtype=np.uint8)
    single = crc32c(data)
    monkeypatch.setattr(crc_module, "_PARALLEL_MIN", 1)
    assert crc32c(data) == single == crc32c(data[5:], bitwise_crc32c(data[:5].tobytes()))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=2000))
def test_combine_equals_the_reference_of_the_concatenation(a, b):
    assert crc32c_combine(bitwise_crc32c(a), bitwise_crc32c(b), len(b)) == bitwise_crc32c(a + b)


def test_combine_over_many_pieces_and_long_lengths():
    data = np.random.default_rng(3).integers(0, 256, 3 * 2**20 + 11, dtype=np.uint8)
    cuts = [0, 1, 4096, 2**20 + 3, 2**21, data.size]
    crc = crc32c(data[: cuts[1]])
    for lo, hi in zip(cuts[1:-1], cuts[2:]):
        crc = crc32c_combine(crc, crc32c(data[lo:hi]), hi - lo)
    assert crc == crc32c(data) == crc32c(data[1000:], bitwise_crc32c(data[:1000].tobytes()))
    with pytest.raises(ValueError, match="len_b"):
        crc32c_combine(1, 2, -1)


def test_mask_round_trip_and_known_value():
    # LevelDB's mask: rotate right 15, add 0xa282ead8.
    assert mask(0) == 0xA282EAD8
    assert mask(0x12345678) == ((((0x12345678 >> 15) | (0x12345678 << 17)) + 0xA282EAD8) % 2**32)
    for c in [0, 1, 0xFFFFFFFF, 0xE3069283]:
        assert unmask(mask(c)) == c


@pytest.mark.oracle
def test_against_google_crc32c():
    google_crc32c = pytest.importorskip("google_crc32c")
    rng = np.random.default_rng(7)
    for n in [0, 5, 1024, 99_999, 3_000_003]:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == google_crc32c.value(data)
