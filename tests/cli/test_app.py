"""The gpt2np command end to end in a subprocess (``python -m gpt2np``), with a small
random-weights model saved to a directory, plus in-process checks of the error handling."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gpt2np
import gpt2np.cli.app as cli
import gpt2np.cli.text as cli_text
from gpt2np import save
from gpt2np.generation.loop import generate
from gpt2np.scoring.logprobs import score


@pytest.fixture(scope="module")
def model() -> gpt2np.GPT2:
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=16, n_head=2, n_layer=1)
    return gpt2np.GPT2(hparams, gpt2np.init_params(hparams, seed=4, std=0.3))


@pytest.fixture(scope="module")
def model_dir(model, tmp_path_factory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp("cli") / "tiny"
    save(model, directory)
    return directory


@pytest.fixture
def home(tmp_path) -> pathlib.Path:
    return tmp_path / "home"


def run(*args: str, home: pathlib.Path, stdin: str = "", debug: bool = False):
    env = dict(os.environ, PYTHONIOENCODING="utf-8", GPT2NP_HOME=str(home))
    env.pop("GPT2NP_DEBUG", None)
    if debug:
        env["GPT2NP_DEBUG"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "gpt2np", *args],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )


def assert_one_line_error(proc, code: int, *words: str) -> None:
    assert proc.returncode == code, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpt2np: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_tokenize_and_detokenize(home):
    assert run("tokenize", "Hello world", home=home).stdout == "15496 995\n"
    # the exact text: a newline follows only on a terminal (tests/cli/test_text.py)
    assert run("detokenize", "15496 995", home=home).stdout == "Hello world"
    assert run("detokenize", "15496,995", home=home).stdout == "Hello world"
    assert run("detokenize", "15496", "995", home=home).stdout == "Hello world"
    special = run("tokenize", "a<|endoftext|>", "--allow-special", home=home)
    assert special.stdout == "64 50256\n"
    assert_one_line_error(run("tokenize", "a<|endoftext|>", home=home), 1, "--allow-special")
    assert_one_line_error(run("detokenize", "15496,x", home=home), 1, "'x'")
    assert_one_line_error(run("detokenize", "99999", home=home), 1, "99999")
    assert_one_line_error(run("detokenize", "15496 ²", home=home), 1, "must be integers", "'²'")


def test_generate_streams_what_generate_returns(model, model_dir, home):
    kw = dict(max_new_tokens=12, temperature=0)
    expected = generate("The dog", model, **kw)
    proc = run("generate", "The dog", "--model", str(model_dir), "--max-new-tokens", "12",
               "--temperature", "0", home=home)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected + "\n"
    sampled = ("--temperature", "0.9", "--top-k", "20", "--top-p", "0.9", "--seed", "7")
    a = run("generate", "The dog", "--model", str(model_dir), *sampled, home=home)
    b = run("generate", "The dog", "--model", str(model_dir), *sampled, home=home)
    assert a.returncode == 0 and a.stdout == b.stdout
    want = generate("The dog", model, max_new_tokens=50, temperature=0.9, top_k=20, top_p=0.9,
                    seed=7)  # fmt: skip
    assert a.stdout == want + "\n"


def test_generate_stop(model, model_dir, home):
    full = generate("Once", model, max_new_tokens=20, temperature=0)
    stop = full[4:7]
    flags = ("--temperature", "0", "--max-new-tokens", "20", "--stop", "\x01never", "--stop", stop)
    proc = run("generate", "Once", "--model", str(model_dir), *flags, home=home)
    assert proc.stdout == full[: full.find(stop)] + "\n"


def test_generate_samples_beams_logprobs_and_penalties(model, model_dir, capsys):
    """The generate flags give what the same keyword arguments give in Python (in-process)."""
    base = ["generate", "The dog", "--model", str(model_dir), "--max-new-tokens", "6"]

    def cli_out(*flags: str) -> str:
        assert cli.main([*base, *flags]) == 0
        return capsys.readouterr().out

    samples = generate("The dog", model, max_new_tokens=6, n=3, seed=2)
    assert cli_out("-n", "3", "--seed", "2") == "".join(
        f"--- sample {i} of 3 ---\n{s}\n" for i, s in enumerate(samples, 1)
    )
    beams = generate("The dog", model, max_new_tokens=6, num_beams=3, n=2, length_penalty=0.5,
                     early_stopping="never")  # fmt: skip
    flags = ("--num-beams", "3", "--num-samples", "2", "--length-penalty", "0.5",
             "--early-stopping", "never")  # fmt: skip
    assert cli_out(*flags) == "".join(
        f"--- beam {i} of 2 ---\n{b}\n" for i, b in enumerate(beams, 1)
    )
    table = generate("The dog", model, max_new_tokens=6, temperature=0, logprobs=2, echo=True)
    assert cli_out("--temperature", "0", "--logprobs", "2", "--echo") == f"{table}\n"
    assert "top 2" in str(table) and "p1" in str(table)
    penalised = generate("The dog", model, max_new_tokens=6, temperature=0,
                         repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.25,
                         no_repeat_ngram_size=2, min_new_tokens=3,
                         bad_words_ids=[[262], [11, 290]], echo=True)  # fmt: skip
    flags = ("--temperature", "0", "--repetition-penalty", "1.5", "--presence-penalty", "0.5",
             "--frequency-penalty", "0.25", "--no-repeat-ngram-size", "2", "--min-new-tokens",
             "3", "--bad-words-ids", "262", "--bad-words-ids", "11,290", "--echo")  # fmt: skip
    assert cli_out(*flags) == penalised + "\n" and penalised.startswith("The dog")


def test_generate_unconditional_and_flag_errors(model, model_dir, home):
    proc = run("generate", "", "--model", str(model_dir), "--max-new-tokens", "5", "--seed", "3",
               home=home)  # fmt: skip
    assert (
        proc.returncode == 0
        and proc.stdout == generate(None, model, max_new_tokens=5, seed=3) + "\n"
    )
    where = ("--model", str(model_dir))
    assert_one_line_error(
        run("generate", "hi", *where, "--num-beams", "2", "--temperature", "0.5", home=home),
        1, "deterministic", "temperature",
    )  # fmt: skip
    assert_one_line_error(run("generate", "hi", *where, "-n", "2", "--temperature", "0",
                              home=home), 1, "identical")  # fmt: skip
    assert_one_line_error(run("generate", "hi", "--repetition-penalty", "0", home=home), 2,
                          "--repetition-penalty")  # fmt: skip
    assert_one_line_error(run("generate", "hi", "--bad-words-ids", "1,x", *where, home=home), 2,
                          "--bad-words-ids", "'x'")  # fmt: skip
    assert_one_line_error(run("generate", "hi", "--early-stopping", "yes", home=home), 2,
                          "--early-stopping")  # fmt: skip


def test_score_file_and_stdin(model, model_dir, home, tmp_path):
    text = "It was a bright cold day in April, and the clocks were striking thirteen. " * 3
    expected = score(model, text)
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    for proc in (
        run("score", str(path), "--model", str(model_dir), home=home),
        run("score", "-", "--model", str(model_dir), stdin=text, home=home),
    ):
        assert proc.returncode == 0, proc.stderr
        fields = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()}
        assert int(fields["tokens"]) == expected.n_tokens
        assert float(fields["nll"]) == pytest.approx(expected.nll, abs=1e-5)
        assert float(fields["perplexity"]) == pytest.approx(expected.perplexity, rel=1e-5)
    assert_one_line_error(run("score", "-", "--model", str(model_dir), home=home), 1, "2 tokens")
    assert_one_line_error(
        run("score", str(tmp_path / "missing.txt"), "--model", str(model_dir), home=home),
        1,
        "missing.txt",
    )


def test_info_convert(model, model_dir, home, tmp_path):
    proc = run("info", "--model", str(model_dir), home=home)
    assert proc.returncode == 0, proc.stderr
    assert "n_vocab     50257" in proc.stdout and "n_embd      16" in proc.stdout
    assert f"parameters  {model.hparams.n_params:,}" in proc.stdout
    assert "float32" in proc.stdout and str(model_dir.resolve()) in proc.stdout
    named = run("info", home=home)  # the default 124M, not downloaded: described, not fetched
    assert "parameters  124,439,808" in named.stdout and "(not downloaded)" in named.stdout
    assert str(home / "models" / "124M") in named.stdout

    out = tmp_path / "converted"
    proc = run("convert", str(model_dir), str(out), "--dtype", "float64", home=home)
    assert proc.returncode == 0, proc.stderr
    again = gpt2np.load(str(out))
    assert again.dtype == np.float64
    np.testing.assert_array_equal(again.params["wte"], model.params["wte"].astype(np.float64))


def test_user_errors_are_one_line(model_dir, home):
    assert_one_line_error(
        run("generate", "hi", "--model", "/no/such/dir", home=home), 1, "/no/such"
    )
    assert_one_line_error(run("generate", "hi", "--model", "999M", home=home), 1, "999M")
    assert_one_line_error(run("generate", "hi", "--temperature", "-1", home=home), 2, "temperature")
    assert_one_line_error(run("generate", "hi", "--top-k", "x", home=home), 2, "--top-k")
    assert_one_line_error(run("nosuchcommand", home=home), 2)
    too_long = ("--max-new-tokens", "100", "--temperature", "0")
    assert_one_line_error(
        run("generate", "hi", "--model", str(model_dir), *too_long, home=home),
        1,
        "n_ctx",
        "--context slide",  # the CLI's spelling, not only the API's context='slide'
    )
    debug = run("generate", "hi", "--model", "/no/such/dir", home=home, debug=True)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_interrupt_and_subcommands_in_process(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_text, "run_tokenize", interrupted)
    monkeypatch.delenv("GPT2NP_DEBUG", raising=False)
    assert cli.main(["tokenize", "x"]) == 130
    assert capsys.readouterr().err.strip() == "gpt2np: error: interrupted"

    calls = []
    fake = lambda name, **kw: calls.append((name, kw)) or "/m/124M"  # noqa: E731
    monkeypatch.setattr(sys.modules["gpt2np.sources.openai"], "download", fake)
    assert cli.main(["download", "124M", "--base-url", "http://example.invalid"]) == 0
    assert capsys.readouterr().out == "/m/124M\n"
    kwargs = {"models_dir": None, "base_url": "http://example.invalid", "progress": False}
    assert calls == [("124M", kwargs)]  # no bars: stderr is not a terminal here

    commands = cli.build_parser()._subparsers._group_actions[0].choices
    assert {"generate", "score", "tokenize", "detokenize", "download", "convert", "info"} <= set(
        commands
    )
    if __import__("importlib").util.find_spec("gpt2np.cli.golden"):
        assert {"dump", "compare"} <= set(commands)


def run_bytes(*args: str, home: pathlib.Path, stdin: bytes):
    env = dict(os.environ, PYTHONIOENCODING="utf-8", GPT2NP_HOME=str(home), LC_ALL="C")
    env.pop("GPT2NP_DEBUG", None)
    env.pop("PYTHONUTF8", None)
    return subprocess.run(
        [sys.executable, "-m", "gpt2np", *args], input=stdin, capture_output=True, env=env
    )


def test_score_reads_the_exact_utf8_bytes_of_file_and_stdin(model, model_dir, home, tmp_path):
    # CRLF is scored as written (GPT-2 has tokens for "\r"), the same from a file and stdin.
    text = "line one\r\nline two\r\n"
    expected = score(model, text)
    path = tmp_path / "crlf.txt"
    path.write_bytes(text.encode())
    for proc in (
        run_bytes("score", str(path), "--model", str(model_dir), home=home, stdin=b""),
        run_bytes("score", "-", "--model", str(model_dir), home=home, stdin=text.encode()),
    ):
        assert proc.returncode == 0, proc.stderr
        fields = {line.split()[0]: line.split()[1] for line in proc.stdout.decode().splitlines()}
        assert int(fields["tokens"]) == expected.n_tokens
        assert float(fields["nll"]) == pytest.approx(expected.nll, abs=1e-5)
    # Invalid UTF-8 is an error naming the input, never silently scored as U+FFFD.
    bad = b"ab c\xff de"
    path.write_bytes(bad)
    for proc, name in (
        (run_bytes("score", str(path), "--model", str(model_dir), home=home, stdin=b""), "crlf"),
        (run_bytes("score", "-", "--model", str(model_dir), home=home, stdin=bad), "<stdin>"),
    ):
        proc.stderr = proc.stderr.decode()
        assert_one_line_error(proc, 1, name, "not UTF-8", "0xff")


def test_importing_dunder_main_does_not_run_the_cli():
    code = "import gpt2np.__main__; print('imported')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "imported\n", proc


# -- generate's flags are the generation options -----------------------------------------------


def generate_parser() -> argparse.ArgumentParser:
    return cli.build_parser()._subparsers._group_actions[0].choices["generate"]


def test_generate_has_one_flag_per_option_with_the_options_help():
    from gpt2np.generation.options import OPTIONS

    actions = {a.dest: a for a in generate_parser()._actions}
    for option in OPTIONS.values():
        if option.flag is None:
            assert option.name not in actions, option.name
            continue
        action = actions[option.name]
        assert action.help == option.help, option.name
        assert action.default is argparse.SUPPRESS  # not given: the model's or gpt2np's default


@pytest.mark.parametrize(
    "flag, value, keyword",
    [("--top-p", "2", dict(top_p=2.0)), ("--temperature", "-1", dict(temperature=-1.0)),
     ("--min-p", "1.5", dict(min_p=1.5)), ("--max-new-tokens", "-3", dict(max_new_tokens=-3)),
     ("--repetition-penalty", "0", dict(repetition_penalty=0.0)),
     ("--exponential-decay-length-penalty", "2,0",
      dict(exponential_decay_length_penalty=(2, 0.0)))],
)  # fmt: skip
def test_a_bad_flag_is_refused_in_the_words_of_the_keyword_argument(
    model, capsys, flag, value, keyword
):
    """One validator: the flag's message is the library's for the same value."""
    with pytest.raises(ValueError) as library:
        generate("hi", model, **keyword)
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "hi", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpt2np: error: argument {flag}: {library.value}"), err


def test_new_flags_give_what_their_keyword_arguments_give(model, model_dir, capsys):
    base = ["generate", "The dog", "--model", str(model_dir), "--max-new-tokens", "8"]

    def cli_out(*flags: str) -> str:
        assert cli.main([*base, *flags]) == 0
        return capsys.readouterr().out

    cases = [
        (("--min-p", "0.2", "--typical-p", "0.9", "--seed", "3"), dict(min_p=0.2, typical_p=0.9,
                                                                       seed=3)),
        (("--top-p", "0.5", "--top-p-rule", "openai", "--seed", "1"),
         dict(top_p=0.5, top_p_rule="openai", seed=1)),
        (("--do-sample", "false", "--suppress-tokens", "262 13", "--eos-token-id", "11,13"),
         dict(do_sample=False, suppress_tokens=[262, 13], eos_token_id=[11, 13])),
        (("--temperature", "0", "--exponential-decay-length-penalty", "2,1.5",
          "--forced-eos-token-id", "0"), dict(temperature=0, forced_eos_token_id=0,
                                              exponential_decay_length_penalty=(2, 1.5))),
    ]  # fmt: skip
    for flags, kw in cases:
        assert cli_out(*flags) == generate("The dog", model, max_new_tokens=8, **kw) + "\n", flags
    assert cli.main([*base[:4], "--max-length", "5", "--do-sample", "false"]) == 0
    assert capsys.readouterr().out == generate("The dog", model, max_length=5, do_sample=False) + (
        "\n"
    )  # fmt: skip


def test_generate_json_prints_one_object_per_completion(model, model_dir, capsys):
    base = ["generate", "The dog", "--model", str(model_dir), "--max-new-tokens", "6", "--json"]

    def json_lines(*flags: str) -> list[dict]:
        assert cli.main([*base, *flags]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    samples = generate("The dog", model, max_new_tokens=6, n=2, seed=2, logprobs=3)
    assert json_lines("-n", "2", "--seed", "2", "--logprobs", "3") == [
        s.to_dict() for s in samples
    ]  # fmt: skip
    beams = generate("The dog", model, max_new_tokens=6, num_beams=3, n=2, logprobs=0)
    assert json_lines("--num-beams", "3", "-n", "2") == [b.to_dict() for b in beams]
    assert beams[0].to_dict()["score"] == beams[0].score


@pytest.fixture
def one_thread():
    """gpt2np (and OpenBLAS) at one thread for the test. Two generations compared bit for bit
    need it: OpenBLAS rounds a one-row head differently at 2 threads and at 1, and on a busy
    machine gpt2np.fast.owner moves a batch-1 decode between the two (docs/benchmarks.md)."""
    from gpt2np.fast import threads

    threads.set_threads(1)
    yield
    threads.set_threads(None)


def test_generate_json_streams_pieces_as_json_lines(model, model_dir, capsys, one_thread):
    whole = generate("The dog", model, max_new_tokens=6, seed=4, logprobs=2, echo=True)
    argv = ["generate", "The dog", "--model", str(model_dir), "--max-new-tokens", "6",
            "--seed", "4", "--logprobs", "2", "--echo", "--json"]  # fmt: skip
    assert cli.main(argv) == 0
    pieces = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(pieces) > 2 and "".join(p["text"] for p in pieces) == whole.text
    assert [t for p in pieces for t in p["ids"]] == whole.ids
    assert [v for p in pieces for v in p["token_logprobs"]] == whole.to_dict()["token_logprobs"]
    assert [p["finish_reason"] for p in pieces][-1] == whole.finish_reason
    assert all(p["finish_reason"] is None for p in pieces[:-1])
    assert pieces[0]["n_prompt"] == len(whole.ids) - 6 and pieces[0]["tokens"][0] == "The"


def test_version_imports_neither_requests_nor_tqdm() -> None:
    """``gpt2np --version`` (and ``import gpt2np``) load no HTTP client and no progress bars:
    they are imported when a download or a bar needs them."""
    code = (
        "import sys\n"
        "from gpt2np.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('requests', 'tqdm')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"gpt2np {gpt2np.__version__}", "[]"]


def test_info_json(model, model_dir, tmp_path, monkeypatch, capsys) -> None:
    """``info --json``: one JSON object with what the text lists."""
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    assert cli.main(["info", "--model", str(model_dir), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["model"] == str(model_dir) and record["files"] == str(model_dir.resolve())
    assert record["hparams"] == model.hparams.to_dict()
    assert record["parameters"] == model.hparams.n_params and record["dtype"] == "float32"
    assert record["text"].startswith("yes") and "downloaded" not in record
    assert cli.main(["info", "--json"]) == 0  # the default 124M, not downloaded
    record = json.loads(capsys.readouterr().out)
    assert record["model"] == "124M" and record["downloaded"] is False
    assert record["files"] == str(tmp_path / "home" / "models" / "124M")
    assert record["parameters"] == 124_439_808 and record["text"] is None
    assert record["hparams"] == gpt2np.HPARAMS["124M"].to_dict()
