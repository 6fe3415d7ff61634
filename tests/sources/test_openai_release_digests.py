"""gpt2np.sources.openai_release_digests: the pinned SHA-256 of OpenAI's 124M files, checked
against what can be derived without them, and the label it gives a checkpoint directory."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import warnings

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


# -- what `gpt2np info` and `gpt2np.load(SIZE)` say of models/SIZE ---------------------------

SMALL = FIXTURES / "tf" / "small"  # a random checkpoint written by TensorFlow's Saver


@pytest.fixture
def copied(tmp_path, monkeypatch) -> pathlib.Path:
    """A random checkpoint copied into $GPT2NP_HOME/models/124M by hand, complete (124M's
    published hparams are the fixture's here, so that its shape passes the download's check),
    with no network."""
    import gpt2np
    from tests.helpers.httpfixture import closed_port_url

    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())
    monkeypatch.setitem(gpt2np.HPARAMS, "124M", gpt2np.HParams.from_json(SMALL / "hparams.json"))
    directory = tmp_path / "home" / "models" / "124M"
    directory.mkdir(parents=True)
    for name in MODEL_FILES:
        if name == "model.ckpt.meta":  # the fixture has none; gpt2np does not read it
            (directory / name).write_bytes(b"graph: not read by gpt2np")
        elif name in ("encoder.json", "vocab.bpe"):  # the download wants the published ones
            shutil.copyfile(pathlib.Path(gpt2np.__file__).parent / "data" / name, directory / name)
        else:
            shutil.copyfile(SMALL / name, directory / name)
    return directory


def info(capsys) -> tuple[str, dict]:
    import gpt2np.cli.app as cli

    assert cli.main(["info", "--model", "124M"]) == 0
    text = capsys.readouterr().out
    assert cli.main(["info", "--model", "124M", "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def hashed(monkeypatch) -> list[pathlib.Path]:
    """The files hashed from now on (spied on, still hashed)."""
    seen: list[pathlib.Path] = []
    real = digests._sha256

    def spy(path: pathlib.Path):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(digests, "_sha256", spy)
    return seen


def test_a_random_checkpoint_in_models_124m_is_not_called_openais(copied, capsys, monkeypatch):
    text, data = info(capsys)
    assert "as released" not in text and "as released" not in json.dumps(data)
    wanted = "not OpenAI's published 124M weights"
    assert f"weights     {wanted}: " in text and "differs from OpenAI's published file" in text
    assert data["weights"].startswith(wanted) and data["dtype"] == "float32"
    import gpt2np
    from gpt2np import api

    monkeypatch.setattr(api, "_WARNED", set())
    with pytest.warns(UserWarning, match=wanted) as warned:
        gpt2np.load("124M", progress=False)
    assert len([w for w in warned if wanted in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second load says nothing
        gpt2np.load("124M", progress=False)


def test_the_verdict_is_computed_once_and_an_edited_file_is_hashed_again(copied, capsys,
                                                                         monkeypatch):  # fmt: skip
    seen = hashed(monkeypatch)
    info(capsys)
    assert seen, "the first look hashes the files"
    assert (copied.parent.parent / "cache" / digests.PROVENANCE_FILE).is_file()
    seen.clear()
    info(capsys)
    import gpt2np

    with pytest.warns(UserWarning, match="not OpenAI's published"):
        gpt2np.load("124M", progress=False)
    assert seen == []  # the cached verdict, from info and from load alike
    with open(copied / "model.ckpt.meta", "ab") as f:  # an edited file
        f.write(b" ")
    info(capsys)
    assert seen, "an edited file is checked again"


def test_files_with_the_pinned_digests_are_openais(copied, capsys, monkeypatch):
    pins = {name: sha256((copied / name).read_bytes()) for name in MODEL_FILES}
    monkeypatch.setitem(digests.RELEASE_SHA256, "124M", pins)
    import gpt2np
    from gpt2np import api

    monkeypatch.setattr(api, "_WARNED", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning
        gpt2np.load("124M", progress=True)  # the load that hashes the files says so
        assert "124M: OpenAI's published 124M weights (SHA-256 checked)" in capsys.readouterr().err
        gpt2np.load("124M", progress=True)  # a later one does not
        assert "SHA-256 checked" not in capsys.readouterr().err
    text, _ = info(capsys)
    assert "weights     OpenAI's published 124M weights (SHA-256 checked)" in text, text
    (copied / "model.ckpt.meta").write_bytes(b"another graph")  # edited after the check
    assert info(capsys)[1]["weights"].startswith("not OpenAI's published 124M weights")


def test_a_size_without_pins_is_not_verified(copied, capsys, monkeypatch):
    monkeypatch.delitem(digests.RELEASE_SHA256, "124M")
    text, data = info(capsys)
    assert "as released" not in text
    assert data["weights"] == "not verified (gpt2np knows no published digests for 124M)"
