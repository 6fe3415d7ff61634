"""support/atomic.py: the one atomic write. A file is replaced whole or not at all, nothing but a
regular file is replaced, and the temporary file names its writer so leftovers can be told."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpt2np.support.atomic import (
    DIR_LOCK,
    TEMP_PATTERN,
    TempDir,
    atomic_write,
    is_leftover,
    sweep,
    write_bytes,
)

try:
    import fcntl
except ImportError:
    fcntl = None


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


@pytest.mark.skipif(fcntl is None, reason="no flock here")
def test_a_locked_temporary_is_alive_whatever_its_pid_says(tmp_path) -> None:
    """A writer on another machine sharing the directory (or in another pid namespace) has a
    pid that means nothing here: the lock it holds is what keeps its files."""
    pid = dead_pid()
    remote = tmp_path / f".model.safetensors.gpt2np-{pid}-0123456789ab.tmp"
    remote.write_bytes(b"")
    remote_dir = tmp_path / f".out.gpt2np-{pid}-0123456789ab.tmp"
    remote_dir.mkdir()
    (remote_dir / DIR_LOCK).write_bytes(b"")
    held = [os.open(remote, os.O_RDWR), os.open(remote_dir / DIR_LOCK, os.O_RDWR)]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)
    sweep(tmp_path)
    assert remote.exists() and remote_dir.exists()
    for fd in held:
        os.close(fd)  # the writer dies: its locks go with it
    sweep(tmp_path)
    assert os.listdir(tmp_path) == []


def test_sweep_removes_only_dead_writers_files_and_directories(tmp_path) -> None:
    pid = dead_pid()
    dead_dir = tmp_path / f".out.gpt2np-{pid}-0123456789ab.tmp"
    (dead_dir / "sub").mkdir(parents=True)
    (dead_dir / "sub" / "model.safetensors").write_bytes(b"half")
    dead_file = tmp_path / f".x.json.gpt2np-{pid}-0123456789ab.tmp"
    dead_file.write_bytes(b"half")
    live = TempDir(tmp_path, "out")
    keep = ["notes.tmp", f"out.gpt2np-{pid}-0123456789ab.tmp", f".x.gpt2np-{pid}-0123.tmp"]
    for name in keep:
        (tmp_path / name).write_bytes(b"mine")
    (tmp_path / f".link.gpt2np-{pid}-0123456789ab.tmp").symlink_to(dead_dir / "sub")
    keep.append(f".link.gpt2np-{pid}-0123456789ab.tmp")  # gpt2np makes no symlinks
    sweep(tmp_path, only="x.json")
    assert dead_dir.exists() and not dead_file.exists()
    sweep(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, live.path.name])
    live.remove()
    assert sorted(os.listdir(tmp_path)) == sorted(keep)


def dead_pid() -> int:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(dead.stdout)
