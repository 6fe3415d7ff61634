"""gpt2np.load: path or published name -> GPT2, end to end through the loopback server.

The served "124M" is the small real TF checkpoint in tests/fixtures/tf/small (written by
TensorFlow, scripts/make_tf_fixtures.py) plus the real bundled encoder.json / vocab.bpe; its
weights are compared with expected.npz, which TensorFlow wrote from the same variables.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import gpt2np
from gpt2np.params import flatten
from tests.checkpoint.test_loader import assert_matches_openai, npz
from tests.helpers.httpfixture import Bucket, closed_port_url, serve

SMALL = pathlib.Path(__file__).parent / "fixtures" / "tf" / "small"
# The served "124M" is random weights, which load rightly warns are not OpenAI's published ones
# (tests/sources/test_openai_release_digests.py tests that warning).
pytestmark = pytest.mark.filterwarnings("ignore:.*not OpenAI's published 124M weights")
BPE_DIR = pathlib.Path(gpt2np.__file__).parent / "data"
DATA = "model.ckpt.data-00000-of-00001"


def small_hparams() -> gpt2np.HParams:
    return gpt2np.HParams.from_json(SMALL / "hparams.json")


def assert_weights(model: gpt2np.GPT2, dtype=np.float32) -> None:
    """The weights TensorFlow saved (expected.npz), in ``dtype``."""
    assert all(a.dtype == dtype for a in flatten(model.params).values())
    assert_matches_openai(model, npz(SMALL / "expected.npz"))


def served_release() -> dict[str, bytes]:
    files = {f: (SMALL / f).read_bytes() for f in ["checkpoint", "hparams.json", DATA]}
    files["model.ckpt.index"] = (SMALL / "model.ckpt.index").read_bytes()
    files["model.ckpt.meta"] = b"graph: not read by gpt2np"  # the fixture has no .meta
    for f in ["encoder.json", "vocab.bpe"]:  # must pass the published SHA-256
        files[f] = (BPE_DIR / f).read_bytes()
    return {f"124M/{k}": v for k, v in files.items()}


@pytest.fixture
def home(tmp_path, monkeypatch) -> pathlib.Path:
    """GPT2NP_HOME in tmp_path (downloads and the conversion cache), and "124M" published with
    the small fixture's hparams so that download's hparams.json check accepts the fixture."""
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(gpt2np.HPARAMS, "124M", small_hparams())
    return tmp_path / "home"


def test_load_by_name_downloads_converts_and_then_needs_no_network(home, monkeypatch) -> None:
    bucket = Bucket(served_release())
    with serve(bucket) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        model = gpt2np.load("124M")
    assert model.hparams == small_hparams()
    assert_weights(model)
    assert len(bucket.served()) == 7
    for f in ["encoder.json", "hparams.json", DATA]:
        assert (home / "models" / "124M" / f).read_bytes() == bucket.files[f"124M/{f}"]

    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())  # offline from now on
    again = gpt2np.load("124M", dtype=np.float64)
    assert_weights(again, np.float64)
    logits, _ = again.forward([1, 2, 3])
    assert logits.shape == (3, small_hparams().n_vocab) and np.all(np.isfinite(logits))


def test_load_by_old_name_uses_the_canonical_download(home, monkeypatch) -> None:
    with serve(Bucket(served_release())) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        assert_weights(gpt2np.load("117M", models_dir=home / "elsewhere"))
    assert (home / "elsewhere" / "124M" / DATA).exists()


def test_corrupt_weights_are_refused_by_the_download(home, monkeypatch) -> None:
    files = served_release()
    data = bytearray(files[f"124M/{DATA}"])
    data[len(data) // 2] ^= 0xFF  # same size: only the index's CRC-32C can tell
    files[f"124M/{DATA}"] = bytes(data)
    with serve(Bucket(files)) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        with pytest.raises(gpt2np.DownloadError, match="CRC-32C") as err:
            gpt2np.load("124M")
    assert f"{url}/124M/{DATA}" in str(err.value) and "tensor model/" in str(err.value)
    assert not (home / "models" / "124M").exists()


def test_weights_damaged_on_disk_are_caught_by_the_checkpoint_crc(home, monkeypatch) -> None:
    with serve(Bucket(served_release())) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        gpt2np.download("124M")
    path = home / "models" / "124M" / DATA
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, so the download's manifest cannot notice
    path.write_bytes(bytes(data))
    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())
    with pytest.raises(gpt2np.CheckpointError) as err:
        gpt2np.load("124M")
    message = str(err.value)
    assert "checksum mismatch for tensor" in message
    assert str(home / "models" / "124M") in message and "delete that directory" in message


def test_load_a_directory(home) -> None:
    model = gpt2np.load(SMALL)
    assert model.hparams == small_hparams()
    assert_weights(model)
    assert_weights(gpt2np.load(str(SMALL), np.float64), np.float64)


def test_an_existing_directory_wins_over_the_name(home, tmp_path, monkeypatch) -> None:
    local = tmp_path / "cwd" / "124M"
    local.mkdir(parents=True)
    for f in ["checkpoint", "hparams.json", DATA, "model.ckpt.index"]:
        (local / f).write_bytes((SMALL / f).read_bytes())
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())  # would fail if it downloaded
    assert_weights(gpt2np.load("124M"))


def test_unknown_name_lists_the_known_ones(home) -> None:
    with pytest.raises(ValueError, match="neither an existing path, a known model name") as e:
        gpt2np.load("gpt3")
    assert "124M, 355M, 774M, 1558M, 117M, 345M, gpt2, gpt2-medium, gpt2-large, gpt2-xl" in str(
        e.value
    )
    assert not isinstance(e.value, gpt2np.CheckpointError)


def test_load_by_hf_name_uses_the_canonical_download(home, monkeypatch) -> None:
    with serve(Bucket(served_release())) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        assert_weights(gpt2np.load("gpt2"))
    assert (home / "models" / "124M" / DATA).exists()
    assert not (home / "models" / "gpt2").exists()
    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())  # the same files, no network
    assert_weights(gpt2np.load("124M"))


def test_cli_downloads_and_describes_by_hf_name(home, monkeypatch, capsys) -> None:
    import gpt2np.cli.app as cli

    with serve(Bucket(served_release())) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        assert cli.main(["download", "gpt2"]) == 0
    assert capsys.readouterr().out == f"{home / 'models' / '124M'}\n"
    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())
    assert cli.main(["info", "--model", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert f"files       {home / 'models' / '124M'}\n" in out and "not downloaded" not in out
    assert cli.main(["info", "--model", "gpt2-medium"]) == 0
    out = capsys.readouterr().out
    assert "(not downloaded)" in out and "parameters  354,823,168" in out


@pytest.mark.parametrize(
    "hf, size", [("gpt2", "124M"), ("gpt2-medium", "355M"), ("gpt2-large", "774M"),
                 ("gpt2-xl", "1558M")],
)  # fmt: skip
def test_hf_names_are_the_four_sizes(home, hf, size) -> None:
    from gpt2np.sources.openai import model_dir, resolve_name

    assert resolve_name(hf) == size
    assert model_dir(hf) == home / "models" / size


def test_a_missing_path_that_could_be_a_repo_id_names_both_readings(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network in tests
    with pytest.raises(gpt2np.DownloadError) as e:
        gpt2np.load("models/124M")
    message = str(e.value)
    assert "no file or directory models/124M exists" in message
    assert "hf:models/124M" in message and "./models/124M" in message


@pytest.mark.parametrize("missing", ["./124M-finetuned", "~/no/such/dir", "a/b/c"])
def test_a_missing_path_is_named(home, tmp_path, monkeypatch, missing) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(gpt2np.CheckpointError, match="no such checkpoint directory") as e:
        gpt2np.load(missing)
    assert pathlib.Path(missing).expanduser().name in str(e.value)
    with pytest.raises(gpt2np.CheckpointError, match="no such checkpoint directory"):
        gpt2np.load(pathlib.Path("124M"))  # a Path is always a path, never a name


def test_arguments_of_the_wrong_kind(home) -> None:
    with pytest.raises(TypeError):
        gpt2np.load(124)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        gpt2np.load("")  # not ".", which exists


def test_served_hparams_really_are_checked(home, monkeypatch) -> None:
    """Guard for the fixture above: with the real published 124M, the tiny model is refused."""
    monkeypatch.setitem(gpt2np.HPARAMS, "124M", gpt2np.HParams())
    with serve(Bucket(served_release())) as url:
        monkeypatch.setenv("GPT2NP_BASE_URL", url)
        with pytest.raises(gpt2np.DownloadError, match="published 124M"):
            gpt2np.load("124M")
    assert json.loads((SMALL / "hparams.json").read_text())["n_embd"] == 16


def test_an_interrupted_download_directory_says_what_is_missing_and_how_to_resume(tmp_path):
    """A models/124M that lost its data file (an interrupted copy, a failed download of an older
    version) is named as an incomplete release with the command that resumes it."""
    d = tmp_path / "models" / "124M"
    shutil.copytree(SMALL, d)
    (d / "model.ckpt.data-00000-of-00001").unlink()
    with pytest.raises(
        gpt2np.CheckpointError, match=r"lacks .*model\.ckpt\.data-00000-of-00001"
    ) as e:
        gpt2np.load(d)
    assert "gpt2np.download('124M'" in str(e.value) and str(tmp_path / "models") in str(e.value)


@pytest.mark.parametrize(
    "argv, env",
    [(["info", "--model", "~nosuchuser/x"], {}),
     (["download", "124M", "--models-dir", "~nosuchuser/models"], {}),
     (["info", "--model", "org/name"], {"HF_HUB_CACHE": "~nosuchuser/hf"})],
    ids=["info --model", "download --models-dir", "HF_HUB_CACHE"],
)  # fmt: skip
def test_a_tilde_of_no_user_is_one_line_of_error(home, monkeypatch, capsys, argv, env) -> None:
    """A ~user that does not exist, in --model, --models-dir or HF_HUB_CACHE, is one line
    of error naming it (pathlib's expanduser would raise RuntimeError, a traceback)."""
    import gpt2np.cli.app as cli

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: ") and err.count("\n") == 1
    assert "'nosuchuser' has no home directory" in err
