"""``gpt2np tokenize``, ``detokenize`` and ``score`` (gpt2np.cli.text): a file argument, the exact
text, streaming a block at a time, and ``--json``. The ids are checked against
``Tokenizer.encode`` (itself checked against tiktoken in tests/tokenizer/test_tokenizer.py) and the
scores against ``gpt2np.scoring.logprobs.score``; the memory of a 60 MB file is measured by
scripts/measure_cli_memory.py, outside the default tier."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gpt2np
import gpt2np.cli.app as cli
from gpt2np.scoring.logprobs import score

TEXT = "Größe: 1 über 2\r\nthe café — naïve 😀 emoji\n\ttabs  and  spaces\n"


@pytest.fixture(scope="module")
def tok() -> gpt2np.Tokenizer:
    return gpt2np.Tokenizer()


@pytest.fixture(autouse=True)
def no_debug(monkeypatch) -> None:
    monkeypatch.delenv("GPT2NP_DEBUG", raising=False)


class Blocks:
    """A stdin that hands out its data in blocks (``buffer.read1``), counting them."""

    def __init__(self, data: bytes, size: int) -> None:
        self.blocks = [data[i : i + size] for i in range(0, len(data), size)]
        self.read = 0
        self.buffer = self

    def read1(self, n: int) -> bytes:
        if self.read == len(self.blocks):
            return b""
        self.read += 1
        return self.blocks[self.read - 1]

    def isatty(self) -> bool:
        return False


class Output(io.StringIO):
    """A stdout that notes how many blocks of ``stdin`` had been read at its first write."""

    def __init__(self, stdin: Blocks) -> None:
        super().__init__()
        self.stdin, self.first = stdin, None

    def write(self, s: str) -> int:
        if s and self.first is None:
            self.first = self.stdin.read
        return super().write(s)


def ids_of(out: str) -> list[int]:
    return [int(i) for i in out.split()]


def test_tokenize_a_file_gives_the_ids_of_its_exact_text(tok, tmp_path, capsys) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(TEXT.encode())
    assert cli.main(["tokenize", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1
    assert ids_of(out) == tok.encode(TEXT)  # the final newline and the \r\n are counted
    assert tok.decode(ids_of(out)) == TEXT
    assert cli.main(["tokenize", "-f", str(path), "--strip-newline"]) == 0
    assert ids_of(capsys.readouterr().out) == tok.encode(TEXT[:-1])


@pytest.mark.parametrize("block", [1, 3, 7, 64])
def test_tokenize_streams_stdin_in_blocks(tok, monkeypatch, block) -> None:
    """Blocks that cut multi-byte characters give the ids of the whole text, and the ids of the
    beginning are printed before the end is read."""
    monkeypatch.setattr(gpt2np.tokenizer.tokenizer, "READ_CHARS", 16)
    text = TEXT * 8
    stdin = Blocks(text.encode(), block)
    out = Output(stdin)
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["tokenize", "-"]) == 0
    assert ids_of(out.getvalue()) == tok.encode(text)
    assert out.first is not None and out.first < len(stdin.blocks) // 2


def test_tokenize_json(tok, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(gpt2np.tokenizer.tokenizer, "READ_CHARS", 16)  # several batches
    path = tmp_path / "t.txt"
    path.write_bytes((TEXT * 4).encode())
    assert cli.main(["tokenize", "--file", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {"ids": tok.encode(TEXT * 4), "n_tokens": len(tok.encode(TEXT * 4))}
    assert cli.main(["tokenize", "", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ids": [], "n_tokens": 0}


def test_tokenize_takes_text_or_file_not_both(tmp_path, capsys) -> None:
    assert cli.main(["tokenize"]) == 1
    assert "give TEXT or --file FILE" in capsys.readouterr().err
    assert cli.main(["tokenize", "hi", "--file", str(tmp_path)]) == 1
    assert "give TEXT or --file FILE" in capsys.readouterr().err


def test_tokenize_names_the_special_token_flag_for_a_file(tmp_path, capsys) -> None:
    path = tmp_path / "t.txt"
    path.write_text("a <|endoftext|> b", encoding="utf-8")
    assert cli.main(["tokenize", "--file", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpt2np: error: {path} contains the special token <|endoftext|>")
    assert "--allow-special" in err
    assert cli.main(["tokenize", "--file", str(path), "--allow-special"]) == 0
    assert ids_of(capsys.readouterr().out) == [64, 220, 50256, 275]


def test_a_stretch_without_spaces_is_bounded(monkeypatch, capsys) -> None:
    """The tokenizer holds text up to a space; a stream with none (cat /dev/zero) is refused
    once the stretch passes MAX_STRETCH, not held until memory runs out."""
    monkeypatch.setattr(gpt2np.cli.text, "MAX_STRETCH", 100)
    monkeypatch.setattr(sys, "stdin", Blocks(b"ab " * 40 + b"\0" * 300, 16))
    assert cli.main(["tokenize", "-"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "gpt2np: error: <stdin> has over 100 characters without a space or line break (no "
        "whitespace at all), more than gpt2np tokenize holds at once\n"
    )
    monkeypatch.setattr(sys, "stdin", Blocks(b"ab " * 200, 16))  # long, with spaces: fine
    assert cli.main(["tokenize", "-"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    "run",
    [" " * 1000 + "\n" * 500, "\n " * 300, "\r\n" * 300, "\u3000" * 300, "\t\u2028 \xa0" * 90],
)
def test_tokenize_takes_long_runs_of_any_whitespace(tok, monkeypatch, capsys, run) -> None:
    """Whitespace of any kind is held a bounded window at a time by the tokenizer, so however
    long, and whatever its characters, it does not count toward MAX_STRETCH (U+3000 * 300 was
    refused as "held whole"); the ids are encode's."""
    monkeypatch.setattr(gpt2np.cli.text, "MAX_STRETCH", 100)
    monkeypatch.setattr(gpt2np.tokenizer.tokenizer, "READ_CHARS", 32)
    text = "x" + run + "y"
    monkeypatch.setattr(sys, "stdin", Blocks(text.encode(), 16))
    assert cli.main(["tokenize", "-"]) == 0
    assert ids_of(capsys.readouterr().out) == tok.encode(text)


def test_tokenize_names_what_it_refuses(monkeypatch, capsys) -> None:
    """A refusal says what the input held: text without whitespace, or a run of whitespace
    (naming its characters) with no place where a token boundary is certain."""
    monkeypatch.setattr(gpt2np.cli.text, "MAX_STRETCH", 100)
    monkeypatch.setattr(gpt2np.tokenizer.tokenizer, "READ_CHARS", 32)
    monkeypatch.setattr(gpt2np.tokenizer.runs, "MAX_RUNS", 100)
    monkeypatch.setattr(sys, "stdin", Blocks(b"a " + "\xa0".encode() * 300, 16))
    assert cli.main(["tokenize", "-"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "gpt2np: error: <stdin> has a run of over 64 whitespace characters, over 32 of them in "
        "a row of U+0020 SPACE, U+00A0 NO-BREAK SPACE with no place where a token boundary is "
        "certain"
    ), err
    assert "special token" not in err and "without a space" not in err
    monkeypatch.setattr(sys, "stdin", Blocks(b" " * 300 + b"z" * 300, 16))
    assert cli.main(["tokenize", "-"]) == 1
    err = capsys.readouterr().err
    assert "<stdin> has over 100 characters without a space or line break" in err
    assert "whitespace characters" not in err


def test_detokenize_streams_and_keeps_the_exact_text(tok, monkeypatch) -> None:
    text = TEXT * 8
    ids = tok.encode(text)
    data = (" ".join(map(str, ids[:40])) + ",\n" + "\n".join(map(str, ids[40:]))).encode()
    stdin = Blocks(data, 5)
    out = Output(stdin)
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["detokenize"]) == 0
    assert out.getvalue() == text  # no newline added: stdout is no terminal
    assert out.first is not None and out.first < len(stdin.blocks) // 2


@pytest.mark.parametrize(
    "data, words",
    [(b"\0" * 1000, "must be integers separated by spaces or commas, got '\\x00"),
     (b"15496 " + b"7" * 500, "must be integers"), (b"1 2 x3 4", "'x3'"), (b" \n ,", "no token"),
     (b"15496 995 [1]", "unbalanced brackets"), ("١٢".encode(), "'١٢' (an id is ASCII digits)"),
     (b"1_000", "'1_000' (an id"), (b"+5", "'+5' (an id"), (b"-5", "'-5' (an id"),
     (b"[15496, +5]", "'+5' (an id")],
)  # fmt: skip
def test_detokenize_stream_errors(monkeypatch, capsys, data, words) -> None:
    monkeypatch.setattr(sys, "stdin", Blocks(data, 7))
    assert cli.main(["detokenize"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: ") and words in err and len(err.splitlines()) == 1
    assert len(err) < 200  # a long run is not quoted whole


def test_detokenize_ends_the_line_on_a_terminal(monkeypatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for ids, shown in (["15496", "995"], "Hello world\n"), (["15496", "198"], "Hello\n"):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stdout", terminal)
        assert cli.main(["detokenize", *ids]) == 0
        assert terminal.getvalue() == shown  # one newline, and none added after the text's own


def test_tokenize_file_into_detokenize_gives_the_file_back(tmp_path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(TEXT.encode())
    gpt2np_ = f"{sys.executable} -m gpt2np"
    proc = subprocess.run(
        f"{gpt2np_} tokenize --file {path} | {gpt2np_} detokenize", shell=True,
        capture_output=True, timeout=120, env=dict(os.environ, PYTHONIOENCODING="utf-8"),
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == TEXT.encode(), proc.stderr


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> pathlib.Path:
    hparams = gpt2np.HParams(n_vocab=50257, n_ctx=64, n_embd=16, n_head=2, n_layer=1)
    directory = tmp_path_factory.mktemp("score") / "tiny"
    gpt2np.save(gpt2np.GPT2(hparams, gpt2np.init_params(hparams, seed=4, std=0.3)), directory)
    return directory


def test_score_json(model_dir, tmp_path, capsys) -> None:
    text = "It was a bright cold day in April, and the clocks were striking thirteen. " * 2
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    expected = score(gpt2np.load(model_dir), text, max_len=16)
    args = ["score", str(path), "--model", str(model_dir), "--max-len", "16", "--json"]
    assert cli.main(args) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "model": str(model_dir), "file": str(path), "n_tokens": expected.n_tokens,
        "n_scored": expected.n_scored, "nll": expected.nll, "mean_nll": expected.mean_nll,
        "perplexity": expected.perplexity,
    }  # fmt: skip
    assert cli.main([*args, "--per-token"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["ids"] == expected.ids.tolist()
    np.testing.assert_array_equal(record["token_logprobs"], expected.token_logprobs)
    assert record["context_len"] == expected.context_len.tolist()


def test_score_json_has_no_infinities(model_dir, tmp_path, capsys, monkeypatch) -> None:
    """JSON has no Infinity: a perplexity that overflows is null."""
    real = score

    def overflowing(*args, **kwargs):
        result = real(*args, **kwargs)
        return type(result)(result.ids, result.token_logprobs, result.context_len,
                            result.nll, float("inf"), result.n_tokens)  # fmt: skip

    monkeypatch.setattr("gpt2np.scoring.logprobs.score", overflowing)
    path = tmp_path / "t.txt"
    path.write_text("a b c d e f", encoding="utf-8")
    assert cli.main(["score", str(path), "--model", str(model_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["perplexity"] is None


def test_detokenize_of_whitespace_only_stdin_holds_a_block_not_the_input(monkeypatch, capsys):
    """Whitespace before the first id is dropped as it arrives: 8 MiB of it are read in 64 KiB
    blocks with a peak of a few blocks (it was held whole, and searched again at every block)."""
    import tracemalloc

    data = b" \n\t" * ((8 << 20) // 3)
    monkeypatch.setattr(sys, "stdin", Blocks(data + b"15496 995", 1 << 16))
    gpt2np.cli.text._tokenizer()  # built before: its tables are not the input's
    tracemalloc.start()
    try:
        assert cli.main(["detokenize"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert capsys.readouterr().out == "Hello world"
    assert peak < 4 << 20, peak


def test_tokenize_json_ends_a_complete_object_when_it_refuses_an_input(
    tmp_path, capsys, monkeypatch
):
    """A special token met after ids were written: stdout still holds one JSON object (the ids
    before it and the error), and stderr the one-line error."""
    monkeypatch.setattr(gpt2np.tokenizer.tokenizer, "READ_CHARS", 16)  # several batches
    path = tmp_path / "t.txt"
    path.write_text("Hello world " * 3000 + "<|endoftext|>", encoding="utf-8")
    assert cli.main(["tokenize", "--file", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert "special token <|endoftext|>" in record["error"]
    assert record["n_tokens"] == len(record["ids"]) and record["ids"][:2] == [15496, 995]
    assert captured.err.startswith("gpt2np: error: ") and captured.err.count("\n") == 1
