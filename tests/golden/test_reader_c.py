"""examples/read_golden.c, a reader in a second language: compiled here and run on golden files,
every value it reads through a pointer cast into the mapped file checked against NumPy's.

Skipped when no C compiler is found (``$CC``, cc, gcc or clang).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import gpt2np
from gpt2np.golden import MANIFEST_KEY, dump

SOURCE = pathlib.Path(__file__).parent.parent.parent / "examples" / "read_golden.c"
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the reader uses POSIX mmap")


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> pathlib.Path:
    compilers = [os.environ.get("CC"), "cc", "gcc", "clang"]
    cc = next((shutil.which(c) for c in compilers if c and shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler ($CC, cc, gcc, clang)")
    exe = tmp_path_factory.mktemp("c") / "read_golden"
    r = subprocess.run([cc, "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                        str(SOURCE)], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return exe


def read_all(reader: pathlib.Path, path: pathlib.Path) -> dict[str, tuple[str, list, int, list]]:
    """name -> (descr, shape, offset, values as text) from the C program's output."""
    r = subprocess.run([str(reader), str(path), "--values"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out: dict = {}
    for line in r.stdout.splitlines():
        if line.startswith("# "):
            name, descr, shape, offset = line[2:].split(" ")
            values: list[str] = []
            out[name] = (descr, json.loads(shape), int(offset), values)
        else:
            values.append(line)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_c_reader_reads_every_tensor(tiny_model, tmp_path, reader, dtype: str) -> None:
    path = tmp_path / "golden.npz"
    m = dump(tiny_model, [[5, 17, 42, 3, 88], [9, 1]], path, dtype=dtype, prefix=2)
    read = read_all(reader, path)
    with np.load(path) as z:
        assert list(read) == z.files
        for name in z.files:
            a = z[name]
            descr, shape, offset, values = read[name]
            assert (descr, shape) == (a.dtype.str, list(a.shape)) and offset % 64 == 0
            if a.dtype.kind == "f":
                got = np.array([float(v) for v in values], a.dtype)
            else:
                got = np.array([int(v) for v in values], a.dtype)
            np.testing.assert_array_equal(got.reshape(a.shape), a, err_msg=name)  # exactly
    offsets = {t["name"]: t["offset"] for t in m["tensors"]}
    assert all(read[name][2] == at for name, at in offsets.items())
    manifest = bytes(int(v) for v in read[MANIFEST_KEY][3])
    assert json.loads(manifest) == json.loads(json.dumps(m))


def test_numpys_own_npz_is_not_mappable(tmp_path, reader) -> None:
    """Why golden files are written with aligned members: np.savez's data are 64-byte aligned
    within each member only, so a pointer cast into the mapped file would be misaligned."""
    np.savez(tmp_path / "plain.npz", a=np.arange(5.0), b=np.arange(7.0))
    r = subprocess.run([str(reader), str(tmp_path / "plain.npz")], capture_output=True, text=True)
    assert r.returncode == 1 and "not 64-byte aligned" in r.stderr


WRITER_MAIN = r"""
#include <stdio.h>
#include <string.h>
%s
int main(int argc, char **argv) {
    float x[24];
    for (int i = 0; i < 24; i++) x[i] = 0.5f * i - 3.0f;
    long s3[] = {2, 3, 4}, s1[] = {24};
    char path[4096];
    snprintf(path, sizeof path, "%%s/a.npy", argv[1]);
    write_npy(path, x, s3, 3);
    snprintf(path, sizeof path, "%%s/b.npy", argv[1]);
    write_npy(path, x, s1, 1);
    return argc != 2;
}
"""


def test_the_docs_c_writer_writes_what_numpy_and_compare_read(tmp_path, reader) -> None:
    """docs/golden-files.md's write_npy, compiled as it stands in the page."""
    page = (SOURCE.parent.parent / "docs" / "golden-files.md").read_text(encoding="utf-8")
    block = next(b for b in page.split("```c\n")[1:] if "void write_npy" in b).split("```")[0]
    source = tmp_path / "writer.c"
    source.write_text(WRITER_MAIN % block)
    cc = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")
    exe = tmp_path / "writer"
    r = subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-o", str(exe), str(source)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    port = tmp_path / "port"
    port.mkdir()
    assert subprocess.run([str(exe), str(port)]).returncode == 0
    expected = np.arange(24, dtype=np.float32) * 0.5 - 3.0
    np.testing.assert_array_equal(np.load(port / "a.npy"), expected.reshape(2, 3, 4))
    np.testing.assert_array_equal(np.load(port / "b.npy"), expected)
    assert (port / "a.npy").stat().st_size == 128 + 24 * 4
    golden = {"a": expected.reshape(2, 3, 4).astype(np.float64), "b": expected}
    assert gpt2np.compare(golden, port).ok
