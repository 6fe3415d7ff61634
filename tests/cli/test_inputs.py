"""What the gpt2np command reads (gpt2np.cli.inputs): a FILE must be a regular file, stdin a file,
a pipe, a terminal or /dev/null; a text read whole has a bound; every input is strict UTF-8,
the command line's too. Each refusal is one line ``gpt2np: error: ...`` and exit status 1,
never a MemoryError, a traceback or a wait without end (the fuzz tier's "cli-devices" family
runs these inputs through every command at random: tests/helpers/fuzz_targets.py)."""

from __future__ import annotations

import io
import os
import pathlib
import socket
import subprocess
import sys

import pytest

import gpt2np
import gpt2np.cli.app as cli
from gpt2np.cli import common, inputs

posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and /dev/zero")


@pytest.fixture(autouse=True)
def no_debug(monkeypatch) -> None:
    monkeypatch.delenv("GPT2NP_DEBUG", raising=False)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> pathlib.Path:
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=16, n_head=2, n_layer=1)
    directory = tmp_path_factory.mktemp("inputs") / "tiny"
    gpt2np.save(gpt2np.GPT2(hparams, gpt2np.init_params(hparams, seed=4, std=0.3)), directory)
    return directory


def one_line_error(capsys, *words: str) -> str:
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("gpt2np: error: ") and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    return err


def stdin_from(monkeypatch, path: str) -> None:
    """stdin opened on ``path``, as the shell's ``< path`` makes it."""
    stream = io.TextIOWrapper(open(path, "rb"))
    monkeypatch.setattr(sys, "stdin", stream)


@posix
@pytest.mark.parametrize(
    "argv",
    [["score", "{file}", "--model", "{model}"], ["tokenize", "--file", "{file}"]],
)
def test_a_file_argument_must_be_a_regular_file(argv, model_dir, tmp_path, capsys) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opening it for reading without O_NONBLOCK would wait forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    kinds = {"/dev/zero": "a character device", str(fifo): "a FIFO",
             str(tmp_path): "a directory", str(tmp_path / "sock"): "a socket"}  # fmt: skip
    try:  # (a FIFO blocked before: opening it waited for a writer)
        for path, kind in kinds.items():
            args = [a.format(file=path, model=model_dir) for a in argv]
            assert cli.main(args) == 1
            err = one_line_error(capsys, f"{path} is {kind}, not a regular file")
            if kind == "a FIFO":
                assert err.endswith("not a regular file (pipe it in and give - instead)\n")
    finally:
        sock.close()
    assert cli.main([a.format(file=tmp_path / "none", model=model_dir) for a in argv]) == 1
    one_line_error(capsys, "none: no such file")


@posix
@pytest.mark.parametrize(
    "argv",
    [["tokenize", "-"], ["tokenize", "--file", "-"], ["detokenize"], ["detokenize", "-"],
     ["score", "-", "--model", "{model}"], ["generate", "-", "--model", "{model}"],
     ["dump", "--prompt", "-", "--model", "{model}", "--out", "{out}"],
     ["dump", "--ids", "-", "--model", "{model}", "--out", "{out}"]],
)  # fmt: skip
def test_stdin_may_not_be_a_device(argv, model_dir, tmp_path, monkeypatch, capsys) -> None:
    """``gpt2np tokenize - < /dev/zero`` and the like: refused, not read until memory ends."""
    args = [a.format(model=model_dir, out=tmp_path / "g.npz") for a in argv]
    for device in ("/dev/zero", "/dev/urandom"):
        stdin_from(monkeypatch, device)
        assert cli.main(args) == 1
        one_line_error(capsys, "<stdin> is a character device", "not a file or a pipe")
    assert not (tmp_path / "g.npz").exists()


@posix
def test_dev_null_is_an_empty_stdin(monkeypatch, capsys) -> None:
    stdin_from(monkeypatch, os.devnull)
    assert cli.main(["tokenize", "-"]) == 0
    assert capsys.readouterr().out == "\n"
    stdin_from(monkeypatch, os.devnull)
    assert cli.main(["detokenize", "-"]) == 1
    one_line_error(capsys, "no token ids given")


def test_a_text_read_whole_has_a_bound(model_dir, tmp_path, monkeypatch, capsys) -> None:
    """``cat /dev/zero | gpt2np score -`` stops at the bound with one line (here the bounds are
    made small: they are 256 MiB for score's text and 16 MiB for a prompt)."""
    monkeypatch.setattr(common, "MAX_TEXT_BYTES", 1000)
    monkeypatch.setattr(common, "MAX_ARG_BYTES", 100)
    monkeypatch.setattr(inputs, "READ_BYTES", 64)
    for argv, limit in [
        (["score", "-", "--model", str(model_dir)], "1000 bytes"),
        (["generate", "-", "--model", str(model_dir)], "100 bytes"),
        (["dump", "--prompt", "-", "--model", str(model_dir), "--out", str(tmp_path / "g")],
         "100 bytes"),
    ]:  # fmt: skip
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\0" * 5000)))
        assert cli.main(argv) == 1
        one_line_error(capsys, f"<stdin> holds more than {limit} of text")
    path = tmp_path / "big.txt"
    path.write_bytes(b"word " * 300)
    assert cli.main(["score", str(path), "--model", str(model_dir)]) == 1
    one_line_error(capsys, f"{path} holds 1500 bytes, more than the 1000 bytes")


@pytest.mark.parametrize(
    "data, where",
    [(b"ab\xffcd", "byte 0xff at offset 2"), (b"1 " * 50 + b"\xc3", "byte 0xc3 at offset 100"),
     (b"abc\xe2\x82", "byte 0xe2 at offset 3"), (b"\xed\xa0\x80", "byte 0xed at offset 0")],
)  # fmt: skip
def test_streamed_text_names_the_offset_of_a_bad_byte(monkeypatch, capsys, data, where) -> None:
    """Across block boundaries (blocks of 3 bytes here), the offset is the file's."""
    monkeypatch.setattr(inputs, "READ_BYTES", 3)
    for argv in (["tokenize", "-"], ["detokenize"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        assert cli.main(argv) == 1
        one_line_error(capsys, f"<stdin>: not UTF-8 text ({where})")


@pytest.mark.parametrize(
    "argv, what",
    [(["tokenize", "a\udcffb"], "TEXT"), (["detokenize", "1\udcc3"], "IDS"),
     (["generate", "\udcff", "--model", "/no/model"], "PROMPT"),
     (["dump", "--prompt", "ok", "--prompt", "x\udce9", "--out", "o"], "PROMPT")],
)  # fmt: skip
def test_arguments_that_are_not_utf8_are_refused_as_stdin_is(argv, what, capsys) -> None:
    """Python hands argv's bytes that are not UTF-8 over as lone surrogates (surrogateescape);
    before, tokenize encoded them as U+FFFD while the same bytes on stdin were refused."""
    assert cli.main(argv) == 1
    one_line_error(capsys, f"{what}: not UTF-8 text (byte 0x")


@pytest.mark.skipif(os.name != "posix", reason="argv as bytes")
def test_argv_bytes_end_to_end(tmp_path) -> None:
    env = dict(os.environ, GPT2NP_HOME=str(tmp_path))
    env.pop("GPT2NP_DEBUG", None)
    proc = subprocess.run(
        [sys.executable.encode(), b"-m", b"gpt2np", b"tokenize", b"caf\xe9"],
        capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr == b"gpt2np: error: TEXT: not UTF-8 text (byte 0xe9 at offset 3)\n"
