"""support/atomic.py: the one atomic write. A file is replaced whole or not at all, nothing but a
regular file is replaced, and the temporary file names its writer so leftovers can be told."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpt2np.support.atomic import TEMP_PATTERN, atomic_write, is_leftover, write_bytes


def test_replaces_whole_and_leaves_no_temporary(tmp_path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    write_bytes(target, "new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]


def test_a_failure_leaves_the_target_as_it_was(tmp_path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as f:
        f.write(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]


def test_a_refusing_verify_leaves_the_target_as_it_was(tmp_path) -> None:
    target = tmp_path / "out.bin"

    def refuse(tmp) -> None:
        assert tmp.read_bytes() == b"data" and TEMP_PATTERN.match(tmp.name)
        raise ValueError("does not verify")

    with (
        pytest.raises(ValueError, match="does not verify"),
        atomic_write(target, verify=refuse) as f,
    ):
        f.write(b"data")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_nothing_but_a_regular_file_is_replaced(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"refusing to replace .*fifo.*not a regular file"):
        write_bytes(fifo, "x")
    with pytest.raises(ValueError, match=r"refusing to replace .*: it is a directory"):
        write_bytes(tmp_path, "x")
    assert sorted(os.listdir(tmp_path)) == ["fifo"]


def test_a_dead_writers_temporary_is_a_leftover_a_live_ones_is_not(tmp_path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    left = tmp_path / f".model.safetensors.gpt2np-{pid}-0123456789ab.tmp"
    live = tmp_path / f".model.safetensors.gpt2np-{os.getppid()}-0123456789ab.tmp"
    mine = tmp_path / f".model.safetensors.gpt2np-{os.getpid()}-0123456789ab.tmp"
    theirs = tmp_path / "model.safetensors.tmp"  # not gpt2np's: never a leftover
    for p in (left, live, mine, theirs):
        p.write_bytes(b"")
    assert [is_leftover(p) for p in (left, live, mine, theirs)] == [True, False, False, False]
