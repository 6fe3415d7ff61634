"""gpt2np.sources.openai_release_digests: the pinned SHA-256 of OpenAI's 124M files, checked
against what can be derived without them, and the label it gives a checkpoint directory."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest

from gpt2np import HPARAMS
from gpt2np.sources import openai_release_digests as digests
from gpt2np.sources.openai import MODEL_FILES
from gpt2np.sources.openai_release_digests import describe_checkpoint, published_release

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
TIKTOKEN_GPT2 = {  # tiktoken_ext/openai_public.py, gpt2()
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_pins_agree_with_what_can_be_derived() -> None:
    """Four of the seven 124M pins are recomputed here: the vocabulary's are tiktoken's, and
    hparams.json and checkpoint are small texts known from the published hparams and
    TensorFlow's CheckpointState format."""
    pins = digests.RELEASE_SHA256["124M"]
    assert set(pins) == set(MODEL_FILES)
    for name, digest in TIKTOKEN_GPT2.items():
        assert pins[name] == digest
    hparams = json.dumps(HPARAMS["124M"].to_dict(), indent=2) + "\n"
    assert pins["hparams.json"] == sha256(hparams.encode())
    state = 'model_checkpoint_path: "model.ckpt"\nall_model_checkpoint_paths: "model.ckpt"\n'
    assert pins["checkpoint"] == sha256(state.encode())
    # the data file's second source gives its size: 4 bytes per float32 parameter
    assert 4 * HPARAMS["124M"].n_params == 497_759_232


def write_release(directory: pathlib.Path, hparams_name: str = "124M") -> dict[str, str]:
    """Seven small stand-in files, and the pins that would make them the published ones."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        (directory / name).write_bytes(f"stand-in {name}\n".encode())
    hparams = json.dumps(HPARAMS[hparams_name].to_dict(), indent=2) + "\n"
    (directory / "hparams.json").write_text(hparams)
    return {name: sha256((directory / name).read_bytes()) for name in MODEL_FILES}


def test_only_the_published_files_are_openais(tmp_path, monkeypatch) -> None:
    pins = write_release(tmp_path / "m")
    monkeypatch.setitem(digests.RELEASE_SHA256, "124M", pins)
    assert published_release(tmp_path / "m", "124M") is None
    assert describe_checkpoint(tmp_path / "m", "124M") == "OpenAI's 124M"
    (tmp_path / "m" / "model.ckpt.index").write_bytes(b"another index\n")
    assert published_release(tmp_path / "m", "124M") == (
        "model.ckpt.index differs from OpenAI's published file"
    )
    assert describe_checkpoint(tmp_path / "m", "124M") == (
        "a 124M-shaped checkpoint (not OpenAI's published files: model.ckpt.index differs "
        "from OpenAI's published file)"
    )
    (tmp_path / "m" / "model.ckpt.index").write_bytes(b"stand-in model.ckpt.index\n")
    (tmp_path / "m" / "model.ckpt.meta").unlink()
    assert published_release(tmp_path / "m", "124M") == "no regular file model.ckpt.meta"


def test_a_checkpoint_of_another_shape_or_size(tmp_path) -> None:
    write_release(tmp_path / "m", hparams_name="355M")
    assert describe_checkpoint(tmp_path / "m", "124M") == "a checkpoint that is not 124M-shaped"
    assert published_release(tmp_path / "m", "355M") == "gpt2np knows no published digests for 355M"
    assert describe_checkpoint(tmp_path / "m", "355M") == (
        "a 355M-shaped checkpoint (not OpenAI's published files: gpt2np knows no published "
        "digests for 355M)"
    )


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_a_file_is_not_waited_on(tmp_path, monkeypatch) -> None:
    import os

    pins = write_release(tmp_path / "m")
    monkeypatch.setitem(digests.RELEASE_SHA256, "124M", pins)
    (tmp_path / "m" / "checkpoint").unlink()
    os.mkfifo(tmp_path / "m" / "checkpoint")
    assert published_release(tmp_path / "m", "124M") == "no regular file checkpoint"


def test_random_weights_in_a_tf_checkpoint_are_not_openais() -> None:
    """The small TF fixture (TensorFlow wrote it) verifies as a checkpoint, and is not OpenAI's."""
    small = FIXTURES / "tf" / "small"
    # TensorFlow's Saver wrote the same CheckpointState as OpenAI's: the pin holds there too
    assert (
        sha256((small / "checkpoint").read_bytes()) == digests.RELEASE_SHA256["124M"]["checkpoint"]
    )
    assert published_release(small, "124M") == "encoder.json differs from OpenAI's published file"
    assert describe_checkpoint(small, "124M") == "a checkpoint that is not 124M-shaped"
