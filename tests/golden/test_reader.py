"""Reading golden files and ports' files: damaged, hostile or odd input is a CheckpointError naming
the file (and the tensor), never a raw exception, a hang or unbounded memory.

The first six tests are hostile inputs to ``gpt2np compare``; each failed before the readers were
rewritten (AttributeError, RecursionError, MemoryError, a ValueError naming no
file, a hang, 12.6 GB of memory). Hostile files are built here with the standard library's
zipfile and by hand, never with the code under test.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import zipfile

import numpy as np
import pytest

import gpt2np
from gpt2np.golden import MANIFEST_KEY, GoldenFile, dump

IDS = [[5, 17, 42, 3]]


@pytest.fixture
def golden_path(tiny_model, tmp_path) -> pathlib.Path:
    path = tmp_path / "golden.npz"
    dump(tiny_model, IDS, path)
    return path


def npy_bytes(descr: str, shape: tuple, data: bytes = b"") -> bytes:
    """An .npy file written out by hand, as the format's documentation describes it."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + data


def copy_with(src: pathlib.Path, dst: pathlib.Path, replace: dict[str, bytes]) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item.filename, replace.get(item.filename, zin.read(item.filename)))


def manifest_npz(path: pathlib.Path, manifest: bytes, **tensors: np.ndarray) -> None:
    np.savez(path, **{MANIFEST_KEY: np.frombuffer(manifest, np.uint8)}, **tensors)


# ---- hostile inputs to compare ---------------------------------------------------------------


def test_a_member_that_is_not_an_npy(golden_path, tmp_path) -> None:
    """Was: AttributeError: 'bytes' object has no attribute 'shape'."""
    bad = tmp_path / "bad.npz"
    copy_with(golden_path, bad, {"ids.npy": b"not an npy at all"})
    with pytest.raises(gpt2np.CheckpointError, match=r"bad\.npz: cannot read tensor ids: not a"):
        gpt2np.compare(golden_path, bad)


def test_a_deeply_nested_manifest(golden_path, tmp_path) -> None:
    """Was: RecursionError."""
    bad = tmp_path / "bad.npz"
    manifest_npz(bad, b"[" * 100_000 + b"]" * 100_000, x=np.ones(2))
    with pytest.raises(gpt2np.CheckpointError, match=r"bad\.npz: bad __manifest__.json: JSON nest"):
        gpt2np.compare(bad, golden_path)


def test_a_tiny_npz_declaring_a_huge_shape(golden_path, tmp_path) -> None:
    """Was: MemoryError (373 GiB) from a ~200-byte file."""
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("logits.npy", npy_bytes("<f4", (10**11,)))
    assert bad.stat().st_size < 300
    with pytest.raises(gpt2np.CheckpointError, match=r"declares float32 \[100000000000\]"):
        gpt2np.compare(golden_path, bad)
    with pytest.raises(gpt2np.CheckpointError, match="cannot read tensor logits"):
        GoldenFile(bad)["logits"]


def test_a_ragged_ids_list_in_the_manifest(golden_path, tmp_path) -> None:
    """Was: a plain ValueError about an inhomogeneous shape, naming no file."""
    bad = tmp_path / "bad.npz"
    manifest = {"format": "gpt2np-golden", "ids": [[1, 2], [3]], "tensors": [{"name": "x"}]}
    manifest_npz(bad, json.dumps(manifest).encode(), x=np.ones(2))
    with pytest.raises(gpt2np.CheckpointError, match=r"bad\.npz: .*ids is not a rectangular"):
        gpt2np.compare(bad, golden_path)


def run_with_timeout(fn, seconds: float = 10.0):
    """fn() in a thread; the test fails (instead of hanging) if it does not return."""
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "it hangs"
    if "error" in result:
        raise result["error"]
    return result.get("value")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_a_fifo_is_refused_not_read(golden_path, tmp_path) -> None:
    """Was: compare hung forever opening a FIFO named logits.npy."""
    port = tmp_path / "port"
    port.mkdir()
    os.mkfifo(port / "logits.npy")
    with pytest.raises(gpt2np.CheckpointError, match=r"logits\.npy is a FIFO, not a regular file"):
        run_with_timeout(lambda: gpt2np.compare(golden_path, port))
    os.mkfifo(tmp_path / "fifo.npz")
    with pytest.raises(gpt2np.CheckpointError, match="not a regular file"):
        run_with_timeout(lambda: gpt2np.compare(tmp_path / "fifo.npz", golden_path))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_is_refused(golden_path, tmp_path) -> None:
    (tmp_path / "zero.npz").symlink_to("/dev/zero")
    with pytest.raises(gpt2np.CheckpointError, match="not a regular file"):
        run_with_timeout(lambda: gpt2np.compare(tmp_path / "zero.npz", golden_path))


BOMB = """
import sys, zipfile
sys.path.insert(0, {src!r})
import gpt2np

def bomb(path, n_bytes):
    text = "{{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }}" % (n_bytes // 4)
    text += " " * (-(10 + len(text) + 1) % 64) + "\\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("logits.npy", "w", force_zip64=True) as w:
            w.write(b"\\x93NUMPY\\x01\\x00" + len(text).to_bytes(2, "little") + text.encode())
            zeros = bytes(1 << 22)
            for _ in range(n_bytes // len(zeros)):
                w.write(zeros)

def rss(field):  # bytes, from /proc/self/status: VmRSS now, VmHWM its peak since the reset
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

def reset_peak():  # the child's peak starts from here (a forked parent's memory does not count)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

bomb("a.npz", {n_bytes})
bomb("b.npz", {n_bytes})
reset_peak()
before = rss("VmRSS")
report = gpt2np.compare("a.npz", "b.npz")
print(report.ok, before, rss("VmHWM"))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux's VmHWM")
def test_deflated_tensors_are_compared_in_bounded_memory(tmp_path) -> None:
    """Was: two 1 MB deflated files holding a 1 GB tensor each took compare past 2.1 GB (12.6 GB
    here). Two 256 MB tensors now add only a few chunks to the process's peak."""
    src = str(pathlib.Path(gpt2np.__file__).parent.parent)
    code = textwrap.dedent(BOMB.format(src=src, n_bytes=256 << 20))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ok, before, after = r.stdout.split()
    assert ok == "True"
    assert (tmp_path / "a.npz").stat().st_size < 2 << 20  # deflated: 256 MB of zeros
    growth_mb = (int(after) - int(before)) / 2**20
    assert growth_mb < 100, f"compare grew the process by {growth_mb:.0f} MB"


# ---- more damaged files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "member,match",
    [
        (npy_bytes("<f4", (-1, 3)), "bad .npy shape"),
        (npy_bytes("|O", (2,)), "Python objects"),
        (npy_bytes("<f4", (2,), b"\x00" * 4), "declares float32 \\[2\\], 8 bytes"),
        (npy_bytes("<f4", (1,), b"\x00" * 12), "declares float32 \\[1\\], 4 bytes"),
        (npy_bytes("<q7", (1,)), "unknown .npy dtype"),
        (b"\x93NUMPY\x09\x00", "unsupported .npy format version 9"),
        (b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 20, "truncated .npy header"),
        (b"\x93NUMPY\x01\x00\x10\x00" + b"(" * 15 + b"\n", "unreadable .npy header"),
        (b"\x93NUMPY\x01\x00\x10\x00{'a': 1}       \n", "bad .npy header"),
        (b"\x93NUM", "truncated .npy header"),
        (b"", "it is empty"),
    ],
)
def test_bad_npy_members(golden_path, tmp_path, member: bytes, match: str) -> None:
    bad = tmp_path / "bad.npz"
    copy_with(golden_path, bad, {"logits.npy": member})
    with pytest.raises(gpt2np.CheckpointError, match=match) as e:
        gpt2np.compare(golden_path, bad)
    assert str(bad) in str(e.value) and "logits" in str(e.value)


def test_more_damaged_archives(golden_path, tmp_path) -> None:
    dup = tmp_path / "dup.npz"
    with zipfile.ZipFile(dup, "w") as z, pytest.warns(UserWarning, match="Duplicate"):
        z.writestr("logits.npy", npy_bytes("<f4", (1,), bytes(4)))
        z.writestr("logits.npy", npy_bytes("<f4", (1,), bytes(4)))
    with pytest.raises(gpt2np.CheckpointError, match=r"two members are named logits\.npy"):
        GoldenFile(dup)

    deflated = tmp_path / "deflated.npz"  # a corrupt deflate stream
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("logits.npy", npy_bytes("<f8", (4000,), bytes(32000)))
    data = bytearray(deflated.read_bytes())
    with zipfile.ZipFile(deflated) as z:
        info = z.getinfo("logits.npy")
    start = info.header_offset + 30 + len("logits.npy")
    data[start + 5 : start + 20] = b"\xff" * 15
    deflated.write_bytes(bytes(data))
    with pytest.raises(gpt2np.CheckpointError, match=r"deflated\.npz: cannot read tensor logits"):
        gpt2np.compare(golden_path, deflated)

    big = tmp_path / "big_manifest.npz"
    with zipfile.ZipFile(big, "w") as z:
        z.writestr(MANIFEST_KEY + ".npy", npy_bytes("|u1", (1 << 40,)))
    with pytest.raises(gpt2np.CheckpointError, match="declares uint8"):
        GoldenFile(big)
    typed = tmp_path / "typed.npz"
    np.savez(typed, **{MANIFEST_KEY: np.zeros(3, np.float32)})
    with pytest.raises(gpt2np.CheckpointError, match="expected uint8"):
        GoldenFile(typed)

    odd = tmp_path / "odd.npz"  # members that are not .npy are ignored, and said so
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("logits.npy", npy_bytes("<f4", (1,), bytes(4)))
        z.writestr("README.txt", b"hello")
    with GoldenFile(odd) as f:
        assert f.names == ["logits"] and f.ignored == ["README.txt"]
    assert "1 members that are not .npy ignored" in str(gpt2np.compare(odd, odd))


@pytest.mark.parametrize(
    "manifest,match",
    [
        ({"tensors": "x"}, "not an object with a 'tensors' list"),
        ({"tensors": [{"name": 3}]}, "has no name"),
        ({"tensors": [{"name": "x", "shape": [-1]}]}, "shape .* is not a list of ints"),
        ({"tensors": [], "T_past": -2}, "T_past -2"),
        ({"tensors": [], "T_past": True}, "T_past True"),
        ({"tensors": [], "ids": [[1, 2]], "pad": [0, 1]}, "pad"),
        ({"tensors": [], "ids": [[1, "a"]]}, "ids is not"),
        ({"tensors": [], "prefix_ids": []}, "prefix_ids is not"),
        ({"tensors": [], "hparams": [1]}, "hparams is not an object"),
        ({"tensors": [], "weights_sha256": 5}, "weights_sha256 is not a str"),
    ],
)
def test_bad_manifests(tmp_path, manifest: dict, match: str) -> None:
    bad = tmp_path / "bad.npz"
    manifest_npz(bad, json.dumps(manifest).encode(), x=np.ones(2))
    with pytest.raises(gpt2np.CheckpointError, match=match) as e:
        GoldenFile(bad)
    assert str(bad) in str(e.value)
    manifest_npz(bad, b"\xff\xfe not utf-8", x=np.ones(2))
    with pytest.raises(gpt2np.CheckpointError, match=r"bad __manifest__\.json"):
        GoldenFile(bad)


def test_a_port_member_with_a_bad_crc_is_caught_while_streaming(golden_path, tmp_path) -> None:
    """The port is read in chunks; its CRC-32 is checked when the last chunk is read."""
    port = tmp_path / "port.npz"
    port.write_bytes(golden_path.read_bytes())
    data = bytearray(port.read_bytes())
    with GoldenFile(port) as f:
        at = f.data_offset("h0.mlp.gelu")
    data[at + 3] ^= 0x01
    port.write_bytes(bytes(data))
    with pytest.raises(gpt2np.CheckpointError, match=r"cannot read tensor h0\.mlp\.gelu: Bad CRC"):
        gpt2np.compare(golden_path, port)


def test_reading_a_closed_golden_file_says_so(golden_path) -> None:
    """A tensor not read before close() was looked up as a directory's file: a TypeError from
    os.open about a ZipInfo (mypy found the member's two types)."""
    with GoldenFile(golden_path) as f:
        name = f.names[-1]
    with pytest.raises(gpt2np.CheckpointError, match=rf"cannot read tensor {name}: .* is closed"):
        f.read(name)


def test_fortran_order_and_big_endian_members(golden_path, tmp_path) -> None:
    """np.save of a transposed array writes Fortran order; a big-endian port writes '>f4'."""
    with np.load(golden_path) as z:
        logits, gelu = z["logits"], z["h1.mlp.gelu"]
    port = tmp_path / "port"
    port.mkdir()
    np.save(port / "logits.npy", np.asfortranarray(logits))
    np.save(port / "h1.mlp.gelu.npy", gelu.astype(">f4"))
    with open(port / "logits.npy", "rb") as f:
        np.lib.format.read_magic(f)
        assert np.lib.format.read_array_header_1_0(f)[1]  # fortran_order
    report = gpt2np.compare(golden_path, port, only=["logits", "h1.mlp.gelu"])
    assert report.ok and report.compared == 2, str(report)


# ---- absurd numbers in a manifest, and golden tensors that are not numbers ------------------


def with_manifest_keys(golden_path: pathlib.Path, dst: pathlib.Path, **changes) -> pathlib.Path:
    """A copy of ``golden_path`` (through np.load / np.savez) whose manifest has ``changes``."""
    with np.load(golden_path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(arrays[MANIFEST_KEY].tobytes())
    manifest.update(changes)
    arrays[MANIFEST_KEY] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    np.savez(dst, **arrays)
    return dst


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"pad": [2**63]}, "pad"),
        ({"pad": [10**30]}, "pad"),
        ({"T_past": 10**30}, "T_past"),
        ({"T_past": 2**63}, "T_past"),
        ({"hparams": {"n_embd": 24, "n_head": 0}}, "hparams"),
        ({"hparams": {"n_embd": "24", "n_head": 3}}, "hparams"),
        ({"hparams": {"n_embd": 10**40, "n_head": 3}}, "hparams"),
    ],
)
def test_absurd_numbers_in_a_manifest_are_named(golden_path, tmp_path, changes, match) -> None:
    """Numbers too large for an int64 (or a zero head count) were an OverflowError (or a
    ZeroDivisionError) from deep inside compare; now a CheckpointError naming the key."""
    bad = with_manifest_keys(golden_path, tmp_path / "bad.npz", **changes)
    for golden, port in ((bad, golden_path), (golden_path, bad)):
        with pytest.raises(gpt2np.CheckpointError, match=match) as e:
            gpt2np.compare(golden, port)
        assert str(bad) in str(e.value)


def test_absurd_manifest_numbers_are_one_line_from_the_cli(golden_path, tmp_path, capsys) -> None:
    from gpt2np.cli import main

    bad = with_manifest_keys(golden_path, tmp_path / "bad.npz", pad=[2**63])
    assert main(["compare", str(bad), str(golden_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: ") and len(err.strip().splitlines()) == 1
    assert "pad" in err and "Traceback" not in err


@pytest.mark.parametrize("dtype", ["<U4", "|S4", "|V4", "<c8"])
def test_a_golden_tensor_that_is_not_numbers_is_refused(golden_path, tmp_path, dtype) -> None:
    """Only the port's dtype was checked: a golden tensor of text or raw bytes raised numpy's
    ValueError from the comparison."""
    with np.load(golden_path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["logits"] = np.zeros(arrays["logits"].shape, dtype)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(gpt2np.CheckpointError, match=f"logits.*{dtype[1:]}|logits.*not numbers"):
        gpt2np.compare(bad, golden_path)


def test_the_hint_search_reads_no_port_tensor_larger_than_the_golden(golden_path, tmp_path):
    """A small deflated port file may declare a huge tensor under a golden name, in another
    shape: the hint search read it whole (2.1 GB and 40 s for 2 GiB). Now it reads a port
    tensor only when it is no larger than the golden tensor it is checked against."""
    with np.load(golden_path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != MANIFEST_KEY}
    arrays["logits"] = np.zeros(16 << 20, np.float32)  # 64 MB, deflated to ~64 kB
    port = tmp_path / "port.npz"
    np.savez_compressed(port, **arrays)
    assert port.stat().st_size < 1 << 20
    read = []
    original = GoldenFile.chunks

    def chunks(self, name, n=1 << 20):
        if self.path == port:
            read.append(name)
        return original(self, name, n)

    import unittest.mock

    with unittest.mock.patch.object(GoldenFile, "chunks", chunks):
        report = gpt2np.compare(golden_path, port)
    row = next(r for r in report.rows if r.name == "logits")
    assert row.status == "shape" and report.first_divergence == "logits"
    assert "logits" not in read  # neither compared (its shape differs) nor read for a hint
