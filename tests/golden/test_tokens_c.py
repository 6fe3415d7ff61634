"""The tokenizer golden without Python (issue 34, item 6): ``gpt2np dump-tokenizer --format bin``
writes the JSON golden's cases in a binary layout, and examples/read_tokenizer_golden.c (no
library) reads it. Compiled here with gcc -std=c99 -Wall -Wextra -Werror and run on the built-in
corpus: every case's text bytes, special tokens, pieces and ids, and each decode case's ids and
bytes, are what Python wrote. A truncated or damaged file makes it exit 1 with a message (built
with AddressSanitizer and UBSan where the compiler has them, so a read past the end would be
caught, not just survived), and gpt2np's own reader raise CheckpointError.

Skipped when no C compiler is found (``$CC``, cc, gcc or clang).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import gpt2np
from gpt2np.golden.tokens import BINARY_MAGIC, dump_tokenizer, read_binary, to_binary

SOURCE = pathlib.Path(__file__).parent.parent.parent / "examples" / "read_tokenizer_golden.c"
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
FLAGS = ["-O1", "-std=c99", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
#: a sanitizer's report exits with these, not the reader's 1
SAN_ENV = {**os.environ, "ASAN_OPTIONS": "exitcode=97:detect_leaks=0",
           "UBSAN_OPTIONS": "halt_on_error=1:exitcode=98"}  # fmt: skip


def compiler() -> str:
    compilers = [os.environ.get("CC"), "cc", "gcc", "clang"]
    cc = next((shutil.which(c) for c in compilers if c and shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler ($CC, cc, gcc, clang)")
    return cc


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> pathlib.Path:
    exe = tmp_path_factory.mktemp("c") / "read_tokenizer_golden"
    r = subprocess.run([compiler(), *FLAGS, "-o", str(exe), str(SOURCE)], capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return exe


@pytest.fixture(scope="module")
def checked_reader(tmp_path_factory, reader) -> pathlib.Path:
    """The reader with AddressSanitizer and UBSan, or the plain one where they are missing."""
    exe = tmp_path_factory.mktemp("c") / "read_tokenizer_golden_asan"
    r = subprocess.run([compiler(), *FLAGS, *SANITIZE, "-o", str(exe), str(SOURCE)],
                       capture_output=True, text=True)  # fmt: skip
    return exe if r.returncode == 0 else reader


@pytest.fixture(scope="module")
def goldens(tmp_path_factory) -> tuple[dict, pathlib.Path]:
    d = tmp_path_factory.mktemp("tok")
    golden = dump_tokenizer(d / "tokenizer.json")
    dump_tokenizer(d / "tokenizer.bin", format="bin")
    return golden, d / "tokenizer.bin"


def read_with_c(reader: pathlib.Path, path: pathlib.Path) -> dict:
    """The C reader's --dump output, parsed: pattern and cases, strings as bytes."""
    r = subprocess.run([str(reader), str(path), "--dump"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("tokenizer golden: version 1") and lines[-1].startswith("ok: ")
    out: dict = {"cases": []}
    for line in lines[1:-1]:
        key, _, rest = line.partition(" ")
        if key == "pattern":
            out["pattern"] = bytes.fromhex(rest)
        elif key == "case":
            case = {"kind": rest.split()[1], "special": [], "pieces": []}
            out["cases"].append(case)
        elif key == "piece":
            flag, text = rest.split(" ") if " " in rest else (rest, "")
            case["pieces"].append({"special": flag == "1", "text": bytes.fromhex(text)})
        elif key == "piece_ids":
            case["pieces"][-1]["ids"] = [int(i) for i in rest.split()]
        elif key in ("name", "text", "bytes"):
            case[key] = bytes.fromhex(rest)
        elif key == "special":
            case["special"].append(bytes.fromhex(rest))
        else:  # ids, decode
            case[key] = [int(i) for i in rest.split()]
    return out


def test_the_c_reader_reads_what_python_wrote(goldens, reader) -> None:
    golden, path = goldens
    read = read_with_c(reader, path)
    assert read["pattern"] == golden["pattern"].encode()
    assert len(read["cases"]) == len(golden["cases"]) == 18
    for want, got in zip(golden["cases"], read["cases"]):
        assert got["name"] == want["name"].encode() and got["text"] == want["text"].encode()
        if "decode" in want:
            assert got["kind"] == "decode"
            assert got["decode"] == want["decode"] and got["bytes"].hex() == want["bytes"]
            continue
        assert got["kind"] == "text", want["name"]
        assert got["special"] == [s.encode() for s in want["allowed_special"]]
        assert got["ids"] == want["ids"]
        assert [(p["special"], p["text"], p["ids"]) for p in got["pieces"]] == [
            (bool(p.get("special")), p["text"].encode(), p["ids"]) for p in want["pieces"]
        ]
    kinds = [c["kind"] for c in read["cases"]]
    assert kinds.count("decode") == 3 and any(c["special"] for c in read["cases"])


def test_gpt2nps_reader_reads_it_back(goldens) -> None:
    golden, path = goldens
    back = read_binary(path)
    assert (back["n_vocab"], back["pattern"]) == (50257, golden["pattern"])
    assert len(back["cases"]) == len(golden["cases"])
    for want, got in zip(golden["cases"], back["cases"]):
        if "decode" in want:
            assert got == {k: want[k] for k in ("name", "text", "decode", "bytes")}
        else:
            pieces = [{"text": p["text"], "special": bool(p.get("special")), "ids": p["ids"]}
                      for p in want["pieces"]]  # fmt: skip
            assert got == {**{k: want[k] for k in ("name", "text", "allowed_special", "ids")},
                           "pieces": pieces}  # fmt: skip


def test_the_cli_writes_the_binary_form(tmp_path, capsys) -> None:
    from gpt2np.cli import main

    out = tmp_path / "t.bin"
    assert main(["dump-tokenizer", "--format", "bin", "--out", str(out), "--text", "héllo"]) == 0
    assert out.read_bytes()[:8] == BINARY_MAGIC
    assert [c["ids"] for c in read_binary(out)["cases"]] == [gpt2np.Tokenizer().encode("héllo")]
    capsys.readouterr()
    assert main(["compare", str(out), str(out)]) != 0  # compare reads the JSON one
    assert "compare the JSON one" in capsys.readouterr().err
    assert main(["dump-tokenizer", "--out", str(tmp_path / "t.json"), "--text", "a"]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["format"] == "gpt2np-tokenizer-golden"


def run_damaged(reader: pathlib.Path, path: pathlib.Path, data: bytes) -> Any:
    path.write_bytes(data)
    return subprocess.run([str(reader), str(path)], capture_output=True, text=True, env=SAN_ENV)


def assert_refused(reader: pathlib.Path, path: pathlib.Path, data: bytes, says: str = "") -> None:
    r = run_damaged(reader, path, data)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert r.stderr.startswith("read_tokenizer_golden: ") and says in r.stderr, r.stderr
    with pytest.raises(gpt2np.CheckpointError, match=says or "."):
        read_binary(path)


def test_a_truncated_file_fails_cleanly(goldens, checked_reader, tmp_path) -> None:
    data = goldens[1].read_bytes()
    cuts = sorted({*range(0, 40), *np.linspace(40, len(data) - 1, 120).astype(int).tolist()})
    for cut in cuts:
        assert_refused(checked_reader, tmp_path / f"cut{cut}.bin", data[:cut])
    assert_refused(checked_reader, tmp_path / "more.bin", data + b"\0", "bytes after the last case")


def damaged(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + struct.pack("<I", value) + data[at + 4 :]


def test_a_damaged_file_fails_cleanly(goldens, checked_reader, tmp_path) -> None:
    golden, path = goldens
    data = path.read_bytes()
    n_pattern = len(golden["pattern"].encode())
    case0 = 24 + n_pattern  # kind, then the name's length
    cases = [
        (b"GPT2NPTX" + data[8:], "not a gpt2np tokenizer golden"),
        (damaged(data, 8, 2), "version"),
        (damaged(data, 20, 0xFFFFFFFF), "a string runs past the end"),
        (damaged(data, 16, 0xFFFFFFFF), "cases"),
        (damaged(data, case0, 7), "kind"),
        (damaged(data, case0 + 4, 0x7FFFFFFF), "a string runs past the end"),
    ]
    # the first case's ids: its last 4 bytes before the next case hold its last id
    first = to_binary({**golden, "cases": golden["cases"][:1]})
    end_of_first = len(first)
    cases.append((damaged(data, end_of_first - 4, 50257), "an id outside"))
    cases.append((damaged(data, end_of_first - 4, 0xFFFFFFFF), "an id outside"))
    last_id = golden["cases"][0]["ids"][-1]
    other = 0 if last_id else 1
    cases.append((damaged(data, end_of_first - 4, other), "not its pieces' ids"))
    for i, (bad, says) in enumerate(cases):
        assert_refused(checked_reader, tmp_path / f"bad{i}.bin", bad, says)


def test_random_damage_never_crashes_either_reader(goldens, checked_reader, tmp_path) -> None:
    """Bytes overwritten at random: the C reader reads the file or exits 1 with a message
    (never a signal, never a sanitizer's report); gpt2np's reader returns or raises
    CheckpointError."""
    data = goldens[1].read_bytes()
    rng = np.random.default_rng(0)
    for i in range(80):
        bad = bytearray(data)
        at = int(rng.integers(8, len(data) - 4))
        bad[at : at + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        r = run_damaged(checked_reader, tmp_path / f"r{i}.bin", bytes(bad))
        assert r.returncode in (0, 1), (at, r.returncode, r.stderr[-2000:])
        assert r.returncode == 0 or r.stderr.startswith("read_tokenizer_golden: "), r.stderr
        try:
            read_binary(tmp_path / f"r{i}.bin")
        except gpt2np.CheckpointError:
            pass
