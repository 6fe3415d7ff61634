"""gpt2np.tokenizer.vocab: the two vocabulary files are read with bounds and checked against each
other.

Each case here was first seen to fail: a truncated vocab.bpe loaded with other ids,
nested brackets raised RecursionError, /dev/zero filled memory, a FIFO hung, and a missing
half of the pair named only itself.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from gpt2np import CheckpointError, Tokenizer
from gpt2np.tokenizer import vocab as vocab_module

DATA = pathlib.Path(__file__).resolve().parent.parent.parent / "src" / "gpt2np" / "data"
TEXT = "Hello world, the tokenizer's merges: 12345 東京 🇯🇵\n\n  end"


@pytest.fixture
def gpt2_copy(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    shutil.copy(DATA / "encoder.json", tmp_path / "encoder.json")
    shutil.copy(DATA / "vocab.bpe", tmp_path / "vocab.bpe")
    return tmp_path / "encoder.json", tmp_path / "vocab.bpe"


# -- encoder.json and vocab.bpe check each other ----------------------------------------------

BPE = (DATA / "vocab.bpe").read_bytes()


@pytest.mark.parametrize(
    "length",
    [0, 1, 10, len(b"#version: 0.2\n"), BPE.index(b"\n", 300_000) + 1, len(BPE) - 2, len(BPE) - 4],
)
def test_a_truncated_vocab_bpe_is_refused(gpt2_copy, length: int) -> None:
    """Cut at a line end, or inside a line whose head is still a valid pair ("Ġt h" of
    "Ġt he"), the merges used to load and change the ids; now the tokens no merge makes say
    that the merges file is short."""
    encoder_json, vocab_bpe = gpt2_copy
    vocab_bpe.write_bytes(BPE[:length])
    with pytest.raises(CheckpointError) as err:
        Tokenizer.from_files(encoder_json, vocab_bpe)
    message = str(err.value)
    assert message.startswith(str(vocab_bpe)), message
    if "line" not in message:  # a cut inside a line may fail as a malformed line first
        assert "truncated" in message and "50,257 tokens" in message
        assert str(encoder_json) in message and "made by no merge" in message


def test_every_truncation_of_vocab_bpe_is_refused() -> None:
    """Cuts spread over the whole file: none may load. Only dropping the final line end leaves
    every merge, and the same vocabulary."""
    encoder = vocab_module.parse_encoder((DATA / "encoder.json").read_bytes(), "encoder.json")
    for length in [*range(0, len(BPE) - 2, len(BPE) // 15), len(BPE) - 2]:
        with pytest.raises(CheckpointError, match=r"^vocab\.bpe"):
            merges = vocab_module.parse_merges(BPE[:length], "vocab.bpe", encoder)
            vocab_module.check_pair(encoder, merges, "encoder.json", "vocab.bpe")
    merges = vocab_module.parse_merges(BPE[:-1], "vocab.bpe", encoder)
    vocab_module.check_pair(encoder, merges, "encoder.json", "vocab.bpe")
    assert len(merges) == 50_000


def test_the_whole_pair_loads(gpt2_copy) -> None:
    tok = Tokenizer.from_files(*gpt2_copy)
    assert tok.encode(TEXT) == Tokenizer().encode(TEXT)


def test_a_token_without_its_merge_is_refused(tmp_path: pathlib.Path) -> None:
    """A toy pair where encoder.json has a token the merges cannot make."""
    symbols = list(vocab_module.bytes_to_unicode().values())
    encoder = {s: i for i, s in enumerate(symbols)}
    encoder.update({"Ġt": 256, "Ġth": 257, "xyz": 258, "<|endoftext|>": 259})
    (tmp_path / "vocab.json").write_text(json.dumps(encoder), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nĠt h\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"1 tokens, such as 'xyz' \(id 258\)"):
        Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")


# -- bounded reads -----------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [101, 200_000])
def test_deeply_nested_encoder_json_is_refused(gpt2_copy, depth: int) -> None:
    encoder_json, vocab_bpe = gpt2_copy
    for nested in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
        encoder_json.write_bytes(nested)
        with pytest.raises(CheckpointError, match="nested more than 100 deep") as err:
            Tokenizer.from_files(encoder_json, vocab_bpe)
        assert str(encoder_json) in str(err.value)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    many = {("[" * 150) + str(i): i for i in range(3)}
    assert not vocab_module.too_deep(json.dumps(many).encode())
    assert vocab_module.too_deep(b'{"a": ' + b"[" * 101 + b"]" * 101 + b"}")
    assert not vocab_module.too_deep(b'{"\\"[": ' + b"[" * 99 + b"]" * 99 + b"}")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_is_refused_without_reading_it(gpt2_copy, tmp_path: pathlib.Path) -> None:
    """Run in a child with a 1 GiB address-space cap: reading /dev/zero would die there."""
    vocab_bpe = gpt2_copy[1]
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from gpt2np import CheckpointError, Tokenizer
        try:
            Tokenizer.from_files({str(tmp_path / "zero.json")!r}, {str(vocab_bpe)!r})
        except CheckpointError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "is a character device, not a regular file" in out.stdout, out.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_is_refused_without_waiting(gpt2_copy, tmp_path: pathlib.Path) -> None:
    encoder_json, _ = gpt2_copy
    os.mkfifo(tmp_path / "vocab.bpe.fifo")
    code = textwrap.dedent(f"""
        from gpt2np import CheckpointError, Tokenizer
        try:
            Tokenizer.from_files({str(encoder_json)!r}, {str(tmp_path / "vocab.bpe.fifo")!r})
        except CheckpointError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "vocab.bpe.fifo is a FIFO, not a regular file" in out.stdout, out.stderr


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no unix sockets")
def test_a_socket_and_a_directory_are_refused(gpt2_copy, tmp_path: pathlib.Path) -> None:
    encoder_json, vocab_bpe = gpt2_copy
    path = tmp_path / "s"  # short: socket paths are limited to ~100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        try:
            server.bind(str(path))
        except OSError:
            pytest.skip("cannot bind a unix socket here")
        assert stat.S_ISSOCK(path.stat().st_mode)
        with pytest.raises(CheckpointError, match="is a socket"):
            Tokenizer.from_files(path, vocab_bpe)
    with pytest.raises(CheckpointError, match="is a directory"):
        Tokenizer.from_files(encoder_json, tmp_path)


def test_a_file_over_the_size_cap_is_refused(gpt2_copy, monkeypatch) -> None:
    encoder_json, vocab_bpe = gpt2_copy
    monkeypatch.setattr(vocab_module, "MAX_FILE_BYTES", 1_000_000)
    with pytest.raises(
        CheckpointError, match=r"encoder\.json has \d+ bytes, more than the 1000000"
    ):
        Tokenizer.from_files(encoder_json, vocab_bpe)  # GPT-2's is 1,042,301 bytes


# -- one of the two missing ---------------------------------------------------------------------


@pytest.mark.parametrize("gone", ["encoder.json", "vocab.bpe"])
def test_a_missing_half_names_both_files(gpt2_copy, gone: str) -> None:
    encoder_json, vocab_bpe = gpt2_copy
    (encoder_json.parent / gone).unlink()
    found = vocab_bpe if gone == "encoder.json" else encoder_json
    with pytest.raises(CheckpointError) as err:
        Tokenizer.from_files(encoder_json, vocab_bpe)
    message = str(err.value)
    assert f"{encoder_json.parent / gone} is missing but {found} is there" in message


def test_both_missing_names_both(tmp_path: pathlib.Path) -> None:
    with pytest.raises(CheckpointError, match=r"a\.json and .*b\.bpe are missing"):
        Tokenizer.from_files(tmp_path / "a.json", tmp_path / "b.bpe")
