"""support.sizes: the one check of an allocation sized from an input."""

from __future__ import annotations

import pytest

import gpt2np
from gpt2np.support import sizes


def test_a_size_within_memory_passes_and_one_beyond_is_refused_naming_its_source(monkeypatch):
    monkeypatch.setattr(sizes, "memory_cap", lambda: 1 << 30)
    assert sizes.check_bytes(1 << 30, "x") == 1 << 30
    with pytest.raises(ValueError, match=r"^n=5 needs 1 GiB, more than this process's memory \("):
        sizes.check_bytes((1 << 30) + 1, "n=5")
    with pytest.raises(gpt2np.CheckpointError, match=r"^a\.npy: its shape needs 8 GiB, more"):
        sizes.check_elements((1 << 30,), 8, "its shape", "a.npy")
    huge = 2**40 * 50257 * 4  # a Python int: no overflow hides it
    with pytest.raises(ValueError, match=r"^logits needs 201,028 TiB"):
        sizes.check_bytes(huge, "logits")


def test_the_cap_is_the_machines_memory() -> None:
    cap = sizes.memory_cap()
    assert 1 << 26 < cap <= sizes.FALLBACK_CAP or cap == sizes.FALLBACK_CAP
    assert sizes.show_bytes(3 << 30) == "3 GiB" and sizes.show_bytes(5) == "5 bytes"
