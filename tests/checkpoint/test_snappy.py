"""Snappy: blocks compressed by a real tool (cramjam, see scripts/make_snappy_fixtures.py),
elements hand-assembled from the format description, and malformed input."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from gpt2np.checkpoint.snappy import SnappyError, decompress

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "snappy"


@pytest.mark.parametrize("name", ["empty", "random", "text", "runs"])
def test_decompresses_what_cramjam_compressed(name):
    compressed = (FIXTURES / f"{name}.snappy").read_bytes()
    expected = (FIXTURES / f"{name}.raw").read_bytes()
    assert decompress(compressed) == expected


def test_runs_fixture_really_uses_compression():
    # Overlapping copies turn 6900 bytes of runs into a few hundred.
    assert len((FIXTURES / "runs.snappy").read_bytes()) < 1000


def test_every_element_kind_by_hand():
    # length 16 (varint 0x10); literal "abcd" (tag (4-1)<<2); 1-byte-offset copy, len 4 + 0,
    # offset 4 (tag 0b000_000_01, byte 4); 2-byte-offset copy, len 4, offset 8
    # (tag (4-1)<<2 | 2); 4-byte-offset copy, len 4, offset 12 (tag (4-1)<<2 | 3).
    stream = bytes([16, 3 << 2]) + b"abcd" + bytes([0b01, 4])
    stream += bytes([(3 << 2) | 2, 8, 0]) + bytes([(3 << 2) | 3, 12, 0, 0, 0])
    assert decompress(stream) == b"abcd" * 4


def test_long_literal_length_bytes():
    data = bytes(range(256)) * 2  # a 512-byte literal: tag 61 says two bytes hold length - 1
    stream = bytes([0x80, 0x04]) + bytes([61 << 2]) + (511).to_bytes(2, "little") + data
    assert decompress(stream) == data


def test_overlapping_copy_repeats_pattern():
    stream = bytes([10, 1 << 2]) + b"xy" + bytes([(7 << 2) | 2, 2, 0])  # copy 8 from 2 back
    assert decompress(stream) == b"xy" * 5


@pytest.mark.parametrize(
    "stream, message",
    [
        (b"", "varint"),
        (bytes([5, 3 << 2]) + b"ab", "ends inside"),  # literal of 4 with 2 bytes
        (bytes([4, 0b01, 9]), "offset"),  # copy before any output
        (bytes([8, 1 << 2]) + b"ab", "declared"),  # produces 2, declares 8
        (bytes([1, 1 << 2]) + b"ab", "exceeds"),  # produces 2, declares 1
        (bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]), "more than"),  # claims 4 GiB
    ],
)
def test_malformed_input_raises(stream, message):
    with pytest.raises(SnappyError, match=message):
        decompress(stream)


def test_random_damage_raises_snappy_error_only():
    rng = np.random.default_rng(3)
    original = (FIXTURES / "text.snappy").read_bytes()
    for _ in range(200):
        b = bytearray(original)
        for i in rng.integers(0, len(b), rng.integers(1, 4)):
            b[i] = rng.integers(256)
        try:
            out = decompress(bytes(b))
        except SnappyError:
            continue
        assert len(out) == len((FIXTURES / "text.raw").read_bytes())  # the declared length
