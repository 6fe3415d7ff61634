"""docs/golden-files.md's JavaScript reader, run with node as it stands in the page: every tensor
of a golden file equals NumPy's, and a tensor past 2 GiB is read (fs.readFileSync, which the
page used before, refuses any file over 2 GiB; a 124M dump at T = 1024 is 2.2 GB).

Skipped where node is not installed."""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import struct
import subprocess

import numpy as np
import pytest

import gpt2np

NODE = shutil.which("node")
PAGE = pathlib.Path(__file__).resolve().parent.parent.parent / "docs" / "golden-files.md"
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

MAIN = """
const g = openGolden(process.argv[2]);
const out = {};
for (const t of g.manifest.tensors) out[t.name] = Array.from(g.tensor(t.name), Number);
g.close();
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("js") / "read.js"
    path.write_text(js_block("function openGolden") + MAIN, encoding="utf-8")
    return path


def run_node(script: pathlib.Path, golden: pathlib.Path) -> dict:
    r = subprocess.run([NODE, str(script), str(golden)], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_docs_js_reader_reads_every_tensor(tiny_model, tmp_path, script, dtype) -> None:
    golden = tmp_path / "g.npz"
    gpt2np.dump(tiny_model, [[5, 17, 42, 3, 88, 60]], golden, dtype=dtype, prefix=3)
    read = run_node(script, golden)
    with np.load(golden) as z:
        names = [n for n in z.files if n != "__manifest__.json"]
        assert sorted(read) == sorted(names)
        for name in names:
            np.testing.assert_array_equal(np.array(read[name]), z[name].reshape(-1), err_msg=name)


def test_the_docs_js_reader_reads_past_2_gib(tmp_path, script) -> None:
    """A sparse file whose one tensor starts past 2 GiB (the manifest first, as in every golden
    file), written here by hand with struct and NumPy's own .npy header writer."""
    offset = ((2 << 30) + (300 << 20)) // 64 * 64
    data = np.arange(16, dtype=np.float32) * 0.25 - 1.0
    manifest = json.dumps({"format": "gpt2np-golden", "tensors": [
        {"name": "x", "shape": [16], "dtype": "float32", "offset": offset, "nbytes": 64},
    ]}).encode()  # fmt: skip
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": (len(manifest),)}
    )
    name = b"__manifest__.json.npy"
    member = header.getvalue() + manifest
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, 0, len(member), len(member),
                        len(name), 0)  # fmt: skip
    golden = tmp_path / "big.npz"
    with open(golden, "wb") as f:
        f.write(local + name + member)
        f.seek(offset)
        f.write(data.tobytes())
    assert golden.stat().st_size > 2 << 30
    assert run_node(script, golden) == {"x": data.tolist()}
    old = "require('fs').readFileSync(process.argv[1])"  # the page's recipe before
    r = subprocess.run([NODE, "-e", old, str(golden)], capture_output=True, text=True)
    assert r.returncode != 0 and "ERR_FS_FILE_TOO_LARGE" in r.stderr


def js_block(marker: str) -> str:
    page = PAGE.read_text(encoding="utf-8")
    blocks = [b.split("```")[0] for b in page.split("```js\n")[1:]]
    return next(b for b in blocks if marker in b)


def test_the_docs_js_tokenizer_passes_the_tokenizer_golden(tmp_path) -> None:
    from gpt2np.golden.tokens import dump_tokenizer
    from gpt2np.golden.tokens_diff import compare_tokenizer

    golden, port, script = tmp_path / "tok.json", tmp_path / "port.json", tmp_path / "tok.js"
    dump_tokenizer(golden)
    script.write_text(js_block("function bpe("), encoding="utf-8")
    data = pathlib.Path(gpt2np.__file__).parent / "data"
    args = [str(data / "encoder.json"), str(data / "vocab.bpe"), str(golden), str(port)]
    r = subprocess.run([NODE, str(script), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    report = compare_tokenizer(golden, port)
    assert report.ok, str(report)


SAMPLER_SETTINGS = {
    "all filters": dict(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.3,
                        presence_penalty=0.5, frequency_penalty=0.2),
    # issue 34: the page's sampler divided by the temperature, 0 for greedy, and failed
    "greedy": dict(temperature=0.0, repetition_penalty=1.3, presence_penalty=0.5),
}  # fmt: skip


@pytest.mark.parametrize("setting", list(SAMPLER_SETTINGS))
def test_the_docs_js_sampler_passes_the_sampler_golden(tmp_path, setting) -> None:
    from gpt2np.golden.sampler import Setting, dump_sampler
    from gpt2np.golden.sampler_diff import compare_sampler

    golden, port, script = tmp_path / "s.npz", tmp_path / "port", tmp_path / "sample.js"
    port.mkdir()
    dump_sampler(golden, Setting(**SAMPLER_SETTINGS[setting]), steps=4)
    script.write_text(js_block("function openGolden") + js_block("writeNpy"), encoding="utf-8")
    r = subprocess.run([NODE, str(script), str(golden), str(port)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = compare_sampler(golden, port)
    assert report.ok, str(report)
