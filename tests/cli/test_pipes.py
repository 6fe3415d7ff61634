"""The gpt2np command in shell pipelines, run as a user runs it: real processes joined by real
pipes. "-" reads a text or ids argument from stdin, detokenize reads its ids from stdin when none
are given, tokenize and detokenize keep the exact text, the ids formats the API prints are
accepted, --quiet silences stderr on a terminal, and files the CLI writes take the umask's
mode."""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import shlex
import shutil
import stat
import struct
import subprocess
import sys

import numpy as np
import pytest

import gpt2np
import gpt2np.cli.app as cli

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
TF_SMALL = FIXTURES / "tf" / "small"
GPT2NP = f"{shlex.quote(sys.executable)} -m gpt2np"
posix_only = pytest.mark.skipif(os.name != "posix", reason="needs a POSIX shell, pty and umask")
if os.name == "posix":
    import fcntl
    import termios


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> pathlib.Path:
    """A small model with GPT-2's vocabulary, as HF's config.json + model.safetensors."""
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=16, n_head=2, n_layer=1)
    directory = tmp_path_factory.mktemp("pipes") / "tiny"
    gpt2np.save(gpt2np.GPT2(hparams, gpt2np.init_params(hparams, seed=4, std=0.3)), directory)
    return directory


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8", GPT2NP_HOME=str(tmp_path / "home"))
    env.pop("GPT2NP_DEBUG", None)
    return env


def sh(pipeline: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run a shell pipeline in which the command ``gpt2np`` is this Python's ``-m gpt2np``."""
    return subprocess.run(
        re.sub(r"(^|\|\s*)gpt2np ", lambda m: f"{m.group(1)}{GPT2NP} ", pipeline),
        shell=True,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )


@posix_only
def test_tokenize_piped_into_detokenize(env) -> None:
    proc = sh('gpt2np tokenize "Hello world" | gpt2np detokenize', env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Hello world", "")
    # and back again: both keep the exact text, so the ids come back
    proc = sh('gpt2np tokenize "Hello world" | gpt2np detokenize | gpt2np tokenize -', env)
    assert proc.stdout == "15496 995\n", proc.stderr
    proc = sh("echo 64 198 | gpt2np detokenize | gpt2np tokenize -", env)
    assert proc.stdout == "64 198\n", proc.stderr  # "a\n": the text's own newline survives


@posix_only
def test_dash_reads_stdin_for_text_and_ids(env) -> None:
    assert sh("echo 'Hello world' | gpt2np tokenize -", env).stdout == "15496 995 198\n"
    assert sh("echo 'Hello world' | gpt2np tokenize - --strip-newline", env).stdout == (
        "15496 995\n"
    )
    assert sh("echo 15496 995 | gpt2np detokenize -", env).stdout == "Hello world"
    assert sh("echo 15496 995 | gpt2np detokenize", env).stdout == "Hello world"


def piped(monkeypatch, data: bytes) -> None:
    """stdin as a pipe holding ``data``, for the in-process tests."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize(
    "data, argv, out",
    [(b"Hello world\r\n", ["tokenize", "-"], "15496 995 201 198\n"),  # every byte
     (b"Hello world\r\n", ["tokenize", "-", "--strip-newline"], "15496 995\n"),  # one line end
     (b"Hello world\n\n", ["tokenize", "-", "--strip-newline"], "15496 995 198\n"),  # only one
     (b"Hello world\n\n", ["tokenize", "--file", "-"], "15496 995 628\n"),
     (b"a<|endoftext|>", ["tokenize", "-", "--allow-special"], "64 50256\n"),
     (b"[15496, 995]\n", ["detokenize"], "Hello world"),
     (b"15496\n995\n", ["detokenize", "-"], "Hello world")],
)  # fmt: skip
def test_stdin_in_process(monkeypatch, capsys, data, argv, out) -> None:
    piped(monkeypatch, data)
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == out


@posix_only
def test_echo_into_generate(env, model_dir) -> None:
    flags = f"--model {shlex.quote(str(model_dir))} --max-new-tokens 8 --temperature 0"
    piped = sh(f"echo Hello | gpt2np generate - {flags}", env)
    direct = sh(f"gpt2np generate Hello {flags}", env)
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
    assert piped.stdout == direct.stdout
    model = gpt2np.load(model_dir)
    assert piped.stdout == model.generate("Hello", max_new_tokens=8, temperature=0) + "\n"


@pytest.mark.parametrize(
    "ids",
    ["15496 995", "15496,995", "[15496, 995]", "[[15496, 995]]", "[15496   995]",
     "array([15496,   995])", "array([15496, 995], dtype=int64)", " [15496,\n 995]\n"],
)  # fmt: skip
def test_detokenize_takes_the_formats_the_api_prints(capsys, ids) -> None:
    assert cli.main(["detokenize", ids]) == 0
    assert capsys.readouterr().out == "Hello world"


@posix_only
def test_detokenize_of_what_python_prints(env) -> None:
    code = "import gpt2np; print(gpt2np.Tokenizer().encode('Hello world'))"
    proc = sh(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} | gpt2np detokenize", env)
    assert proc.stdout == "Hello world", proc.stderr


@pytest.mark.parametrize(
    "data, words",
    [(b"", "no token ids given"), (b"[[1, 2], [3, 4]]\n", "must be one row of ids, got several"),
     (b"15496 x\n", "'x'"), (b"[1, 2\n", "unbalanced brackets")],
)  # fmt: skip
def test_bad_ids_from_stdin_are_one_line_errors(monkeypatch, capsys, data, words) -> None:
    piped(monkeypatch, data)
    monkeypatch.delenv("GPT2NP_DEBUG", raising=False)
    assert cli.main(["detokenize"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: ") and words in err and len(err.splitlines()) == 1


def test_bad_utf8_on_stdin_is_named(env) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpt2np", "tokenize", "-"],
        input=b"ab\xffcd", capture_output=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == (
        "gpt2np: error: <stdin>: not UTF-8 text (byte 0xff at offset 2)"
    )


@posix_only
def test_detokenize_without_ids_on_a_terminal_says_what_to_do(env) -> None:
    """Nothing piped: waiting on the terminal would look like a hang, so it is an error."""
    primary, secondary = os.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpt2np", "detokenize"],
            stdin=secondary, capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
    finally:
        os.close(primary)
        os.close(secondary)
    assert proc.returncode == 1
    assert "no IDS given" in proc.stderr and "| gpt2np detokenize" in proc.stderr


@posix_only
def test_dump_reads_its_prompt_or_ids_from_stdin(env, model_dir, tmp_path) -> None:
    out = tmp_path / "g.npz"
    model = shlex.quote(str(model_dir))
    proc = sh(f"echo 464,3290 | gpt2np dump --model {model} --ids - --out {out}", env)
    assert proc.returncode == 0, proc.stderr
    assert "ids [1, 2] (464, 3290)" in proc.stdout  # dump prints the shape and the first ids
    proc = sh(f"echo 'Hello world' | gpt2np dump --model {model} --prompt - --out {out}", env)
    assert "ids [1, 2] (15496, 995)" in proc.stdout, proc.stderr


def read_pty(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO once the other side is closed (Linux)
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


@posix_only
@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_silences_the_bars_on_a_terminal(env, tmp_path, quiet) -> None:
    """stderr on a pseudo-terminal, as in a user's shell: the first load of a TF checkpoint
    draws its bar, and --quiet leaves only the result on stdout."""
    model = tmp_path / "tf"
    shutil.copytree(TF_SMALL, model)
    primary, secondary = os.openpty()
    size = struct.pack("HHHH", 24, 100, 0, 0)  # rows, columns: a new pty has 0 columns
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, size)
    args = ["info", "--model", str(model)] + (["--quiet"] if quiet else [])
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpt2np", *args],
        stdout=subprocess.PIPE, stderr=secondary, env=env, text=True,
    )  # fmt: skip
    os.close(secondary)
    err = read_pty(primary)
    os.close(primary)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "n_layer" in out
    assert ("verifying checkpoint" in err) is not quiet, err
    if quiet:
        assert err == ""


@posix_only
@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_files_the_cli_writes_take_the_umask(env, model_dir, tmp_path, umask) -> None:
    out = tmp_path / "converted"
    proc = subprocess.run(
        [sys.executable, "-m", "gpt2np", "convert", str(model_dir), str(out), "-q"],
        capture_output=True, text=True, env=env, timeout=120,
        preexec_fn=lambda: os.umask(umask),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for name in ("model.safetensors", "config.json", "vocab.json", "merges.txt"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~umask, name
    assert json.loads((out / "config.json").read_text())["n_layer"] == 1
    np.testing.assert_array_equal(
        gpt2np.load(out).params["wte"], gpt2np.load(model_dir).params["wte"]
    )
