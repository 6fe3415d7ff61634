"""gpt2np.download against a loopback HTTP server with injected faults (no internet).

The served model is OpenAI's layout with the real encoder.json / vocab.bpe (they must pass the
SHA-256 pins), OpenAI's published 124M hparams.json text, and random bytes standing in for the
three checkpoint files (their contents are checked by the converter, not here).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import threading
import time

import pytest

import gpt2np
from httpfixture import Bucket, closed_port_url, serve

# gpt2np.download is the function; the module behind it, whose constants the tests patch:
dl = importlib.import_module("gpt2np.download")

DATA = "model.ckpt.data-00000-of-00001"
BPE_DIR = pathlib.Path(gpt2np.__file__).parent / "data"  # the bundled, published BPE files
HPARAMS_124M = '{\n  "n_vocab": 50257,\n  "n_ctx": 1024,\n  "n_embd": 768,\n  "n_head": 12,\n  "n_layer": 12\n}\n'  # noqa: E501 (OpenAI's file, verbatim)
HPARAMS_355M = '{"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1024, "n_head": 16, "n_layer": 24}'


def release_files() -> dict[str, bytes]:
    """The seven files of a fake 124M release; the data file spans a few 1 MiB chunks."""
    rnd = random.Random(0)
    return {
        "checkpoint": b'model_checkpoint_path: "model.ckpt"\n',
        "encoder.json": (BPE_DIR / "encoder.json").read_bytes(),
        "hparams.json": HPARAMS_124M.encode(),
        DATA: rnd.randbytes(2_500_000),
        "model.ckpt.index": rnd.randbytes(3000),
        "model.ckpt.meta": rnd.randbytes(50_000),
        "vocab.bpe": (BPE_DIR / "vocab.bpe").read_bytes(),
    }


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dl, "BACKOFF_SECONDS", 0.001)
    monkeypatch.setattr(dl, "LOCK_POLL_SECONDS", 0.01)


@pytest.fixture
def bucket() -> Bucket:
    return Bucket({f"124M/{k}": v for k, v in release_files().items()})


@pytest.fixture
def base_url(bucket: Bucket):
    with serve(bucket) as url:
        yield url


def resumed_from(req) -> int:
    """The start of a ``Range: bytes=N-`` request."""
    assert req.range is not None and req.range.startswith("bytes=") and req.range.endswith("-")
    return int(req.range[len("bytes=") : -1])


def assert_release(directory: pathlib.Path, bucket: Bucket, name: str = "124M") -> None:
    """The directory holds exactly the served files (byte-identical), no .part, a manifest."""
    for fname in dl.MODEL_FILES:
        assert (directory / fname).read_bytes() == bucket.files[f"{name}/{fname}"], fname
    assert not list(directory.glob("*.part"))
    assert (directory / dl.MANIFEST).exists()


def test_fetches_the_seven_files(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert directory == tmp_path / "124M"
    assert_release(directory, bucket)
    assert sorted(r.path for r in bucket.served()) == sorted(bucket.files)
    assert all(r.status == 200 and r.range is None for r in bucket.served())


def test_second_call_transfers_nothing(tmp_path, bucket, base_url) -> None:
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    n_requests, n_bytes = len(bucket.served()), bucket.bytes_sent()
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=base_url) == tmp_path / "124M"
    assert (len(bucket.served()), bucket.bytes_sent()) == (n_requests, n_bytes)
    # ... and needs no network at all
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=closed_port_url())


def test_resumes_a_cut_connection_with_range(tmp_path, bucket, base_url) -> None:
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.cut_at[f"124M/{DATA}"] = size // 2
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert (first.status, first.range, first.sent) == (200, None, size // 2)
    # Resumed from what reached the .part: all whole chunks (bytes of a chunk still being
    # filled when the connection dropped are lost in urllib3 and fetched again).
    start = resumed_from(second)
    assert dl.CHUNK_SIZE <= start <= size // 2
    assert (second.status, second.sent) == (206, size - start)


def test_server_without_range_support_restarts_from_zero(tmp_path, bucket, base_url) -> None:
    bucket.range_support = False
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.cut_at[f"124M/{DATA}"] = size * 2 // 3  # past the first 1 MiB chunk
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert (first.status, first.sent) == (200, size * 2 // 3)
    assert 0 < resumed_from(second) <= size * 2 // 3
    assert (second.status, second.sent) == (200, size)  # whole file again, not appended


@pytest.mark.parametrize("shift", [-(10**9), +1000], ids=["from-0", "skipping-ahead"])
def test_206_from_the_wrong_offset_is_not_appended(tmp_path, bucket, base_url, shift) -> None:
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.cut_at[f"124M/{DATA}"] = size // 2
    bucket.wrong_start[f"124M/{DATA}"] = shift
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second, third = bucket.requests_for(f"124M/{DATA}")
    assert (first.status, first.range, second.status) == (200, None, 206)
    assert resumed_from(second) > 0  # ... but the server sent another range: discarded
    assert (third.status, third.range, third.sent) == (200, None, size)


def test_leftover_part_is_resumed(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    (tmp_path / "124M").mkdir()
    (tmp_path / "124M" / f"{DATA}.part").write_bytes(data[:1_000_000])
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(tmp_path / "124M", bucket)
    [req] = bucket.requests_for(f"124M/{DATA}")
    assert (req.range, req.sent) == ("bytes=1000000-", len(data) - 1_000_000)


def test_part_as_long_as_the_file_is_finished_by_a_416(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    (tmp_path / "124M").mkdir()
    (tmp_path / "124M" / f"{DATA}.part").write_bytes(data)  # died between last byte and rename
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(tmp_path / "124M", bucket)
    assert [r.status for r in bucket.requests_for(f"124M/{DATA}")] == [416]


def test_part_longer_than_the_file_is_discarded(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    (tmp_path / "124M").mkdir()
    (tmp_path / "124M" / f"{DATA}.part").write_bytes(data + b"junk")
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(tmp_path / "124M", bucket)
    assert [r.status for r in bucket.requests_for(f"124M/{DATA}")] == [416, 200]


def test_503_is_retried(tmp_path, bucket, base_url) -> None:
    bucket.statuses["124M/vocab.bpe"] = [503, 502]
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert [r.status for r in bucket.requests_for("124M/vocab.bpe")] == [503, 502, 200]


def test_dropped_connection_is_retried(tmp_path, bucket, base_url) -> None:
    bucket.drop["124M/hparams.json"] = 2
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert len(bucket.requests_for("124M/hparams.json")) == 3


def test_persistent_503_gives_up_after_attempts(tmp_path, bucket, base_url) -> None:
    bucket.statuses["124M/vocab.bpe"] = [503] * 20
    with pytest.raises(gpt2np.DownloadError, match=r"vocab\.bpe.*HTTP 503"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for("124M/vocab.bpe")) == dl.ATTEMPTS


def test_404_is_not_retried_and_names_url_and_file(tmp_path, bucket, base_url) -> None:
    del bucket.files[f"124M/{DATA}"]
    with pytest.raises(gpt2np.DownloadError) as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert f"{base_url}/124M/{DATA}" in str(err.value) and "404" in str(err.value)
    assert isinstance(err.value, OSError)
    assert len(bucket.requests_for(f"124M/{DATA}")) == 1
    directory = tmp_path / "124M"
    assert not (directory / DATA).exists() and not (directory / dl.MANIFEST).exists()


@pytest.mark.parametrize("fname", ["encoder.json", "vocab.bpe"])
def test_wrong_hash_is_refused_and_nothing_left_behind(tmp_path, bucket, base_url, fname):
    good = bucket.files[f"124M/{fname}"]
    bucket.files[f"124M/{fname}"] = good[:-2] + b"x\n"
    with pytest.raises(gpt2np.DownloadError, match="SHA-256") as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert f"{base_url}/124M/{fname}" in str(err.value)
    leftovers = [p.name for p in (tmp_path / "124M").iterdir()]
    assert fname not in leftovers and f"{fname}.part" not in leftovers
    assert dl.MANIFEST not in leftovers
    bucket.files[f"124M/{fname}"] = good  # the server is fixed: the next call completes
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)


def test_hparams_of_another_size_are_refused(tmp_path, bucket, base_url) -> None:
    bucket.files["124M/hparams.json"] = HPARAMS_355M.encode()
    with pytest.raises(gpt2np.DownloadError, match=r"hparams\.json.*published 124M"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert not list((tmp_path / "124M").glob("hparams.json*"))


def test_deeply_nested_hparams_are_refused(tmp_path, bucket, base_url) -> None:
    bucket.files["124M/hparams.json"] = b"[" * 100_000  # json's recursion limit, not ValueError
    with pytest.raises(gpt2np.DownloadError, match=r"not a valid hparams\.json"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert not list((tmp_path / "124M").glob("hparams.json*"))


def test_full_disk_is_a_download_error_naming_url_and_file(tmp_path, bucket, base_url, monkeypatch):
    """ENOSPC while writing the data file: DownloadError naming URL and .part; the partial
    .part is kept (a later call resumes it) but nothing is under the final name."""
    real_open = open

    class FullDisk:
        def __init__(self, f):
            self.f, self.written = f, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, chunk):
            if self.written >= 1 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(chunk)
            return self.f.write(chunk)

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FullDisk(f) if str(path).endswith(f"{DATA}.part") else f

    monkeypatch.setattr(dl, "open", open_on_a_full_disk, raising=False)
    with pytest.raises(gpt2np.DownloadError, match="No space left") as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert f"{base_url}/124M/{DATA}" in str(err.value) and f"{DATA}.part" in str(err.value)
    directory = tmp_path / "124M"
    assert not (directory / DATA).exists() and not (directory / dl.MANIFEST).exists()
    kept = (directory / f"{DATA}.part").read_bytes()
    assert kept and bucket.files[f"124M/{DATA}"].startswith(kept)  # a correct prefix
    monkeypatch.undo()  # space freed: the next call resumes from the prefix
    monkeypatch.setattr(dl, "BACKOFF_SECONDS", 0.001)
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert resumed_from(bucket.requests_for(f"124M/{DATA}")[-1]) == len(kept)


def test_read_timeout_is_retried_and_resumed(tmp_path, bucket, base_url, monkeypatch) -> None:
    monkeypatch.setattr(dl, "TIMEOUT", (2.0, 0.3))
    bucket.stall[f"124M/{DATA}"] = 1.0
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert first.status == 200 and 0 < first.sent < len(bucket.files[f"124M/{DATA}"])
    assert second.status == 206 and 0 < resumed_from(second) <= first.sent


def test_no_network_says_which_files_go_where(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(dl, "ATTEMPTS", 2)
    with pytest.raises(gpt2np.DownloadError) as err:
        gpt2np.download("345M", models_dir=tmp_path, base_url=closed_port_url())
    message = str(err.value)
    assert str(tmp_path / "355M") in message
    assert all(fname in message for fname in dl.MODEL_FILES)
    assert "/355M/hparams.json" in message  # the first URL it tried


@pytest.mark.parametrize("base", ["127.0.0.1:1/models", "ftp://127.0.0.1/models"])
def test_a_malformed_base_url_is_a_download_error(tmp_path, base) -> None:
    with pytest.raises(gpt2np.DownloadError, match=f"hparams.json from {base}/124M/hparams.json"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base)


def test_files_copied_by_hand_need_no_network(tmp_path, bucket) -> None:
    directory = tmp_path / "124M"
    directory.mkdir()
    for fname in dl.MODEL_FILES:
        (directory / fname).write_bytes(bucket.files[f"124M/{fname}"])
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=closed_port_url()) == directory
    assert (directory / dl.MANIFEST).exists()


def test_a_file_damaged_after_completion_is_fetched_again(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    (directory / DATA).write_bytes(b"truncated")
    n_requests = len(bucket.served())
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert [r.path for r in bucket.served()[n_requests:]] == [f"124M/{DATA}"]


def test_unknown_names_are_refused_before_touching_disk(tmp_path) -> None:
    for name in ["125M", "../124M", "124M/../../etc", "", "124m"]:
        with pytest.raises(ValueError, match="known names: 124M, 355M, 774M, 1558M, 117M, 345M"):
            gpt2np.download(name, models_dir=tmp_path, base_url=closed_port_url())
    with pytest.raises(ValueError):
        gpt2np.download(124, models_dir=tmp_path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_models_dir_that_is_not_a_directory_is_a_value_error(tmp_path) -> None:
    """A file where models_dir (or the model's directory in it) must go: ValueError naming the
    file, raised before any request; a models_dir of the wrong type: TypeError."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "124M").write_text("also mine")
    in_the_way = tmp_path / "models" / "124M"
    cases = [(a_file, a_file), (a_file / "deeper", a_file), (tmp_path / "models", in_the_way)]
    for models_dir, blocker in cases:
        with pytest.raises(ValueError, match=re.escape(f"{blocker} is not a directory")):
            gpt2np.download("124M", models_dir=models_dir, base_url=closed_port_url())
    assert a_file.read_text() == "mine" and in_the_way.read_text() == "also mine"
    with pytest.raises(TypeError, match="models_dir must be a path, got int"):
        gpt2np.download("124M", models_dir=7)  # type: ignore[arg-type]


def test_a_models_dir_that_cannot_be_created_is_a_download_error(tmp_path, monkeypatch) -> None:
    """Any other mkdir failure (EACCES here, injected: the tests may run as root, whom
    permissions do not stop) is a DownloadError naming the directory and the OS's reason."""

    def refuse(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    target = tmp_path / "locked" / "124M"
    with pytest.raises(
        gpt2np.DownloadError, match=re.escape(f"could not create {target}") + ".*Permission denied"
    ):
        gpt2np.download("124M", models_dir=tmp_path / "locked", base_url=closed_port_url())


def test_old_names_download_into_the_canonical_directory(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("117M", models_dir=tmp_path, base_url=base_url)
    assert directory == tmp_path / "124M"
    assert_release(directory, bucket)
    assert all(r.path.startswith("124M/") for r in bucket.served())


def test_environment_picks_home_and_base_url(tmp_path, bucket, base_url, monkeypatch) -> None:
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPT2NP_BASE_URL", base_url + "/")
    directory = gpt2np.download("124M")
    assert directory == tmp_path / "home" / "models" / "124M"
    assert_release(directory, bucket)
    # an explicit base_url wins over the environment
    monkeypatch.setenv("GPT2NP_BASE_URL", closed_port_url())
    (directory / dl.MANIFEST).unlink()
    (directory / DATA).unlink()
    assert gpt2np.download("124M", base_url=base_url) == directory


def test_progress_bars_only_when_asked_or_on_a_terminal(tmp_path, bucket, base_url, capsys):
    gpt2np.download("124M", models_dir=tmp_path / "a", base_url=base_url)  # stderr: not a TTY
    assert capsys.readouterr().err == ""
    gpt2np.download("124M", models_dir=tmp_path / "b", base_url=base_url, progress=True)
    err = capsys.readouterr().err
    assert all(fname in err for fname in dl.MODEL_FILES)
    assert "2.38M/2.38M" in err and "B/s" in err  # the data file: 2_500_000 B = 2.38 MiB


@pytest.mark.parametrize("use_fcntl", [True, False], ids=["flock", "O_EXCL"])
def test_concurrent_downloads_fetch_each_file_once(
    tmp_path, bucket, base_url, monkeypatch, use_fcntl
):
    if use_fcntl and dl.fcntl is None:
        pytest.skip("no fcntl on this platform")
    monkeypatch.setattr(dl, "fcntl", dl.fcntl if use_fcntl else None)
    bucket.piece_delay = 0.003  # ~0.15 s for the data file, so the two calls overlap
    results, errors = [], []

    def run() -> None:
        try:
            results.append(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url))
        except Exception as e:  # surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [tmp_path / "124M"] * 3
    assert_release(tmp_path / "124M", bucket)
    assert sorted(r.path for r in bucket.served()) == sorted(bucket.files)  # each exactly once


def test_lock_blocks_another_process(tmp_path, bucket, base_url) -> None:
    directory = tmp_path / "124M"
    directory.mkdir()
    script = (
        "import sys, gpt2np; print('ready', flush=True); "
        "print(gpt2np.download('124M', models_dir=sys.argv[1], base_url=sys.argv[2]))"
    )
    with dl._Lock(directory / dl.LOCK_FILE):
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), base_url],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.5)  # it would have fetched hparams.json by now if nothing held it back
        assert child.poll() is None and bucket.served() == []  # waiting, not downloading
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 0 and out.strip() == str(directory)
    assert_release(directory, bucket)


def test_stale_excl_lock_is_taken_over(tmp_path, monkeypatch) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("")
    old = time.time() - dl.STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    with dl._Lock(lock, use_fcntl=False):
        assert lock.exists() and lock.stat().st_mtime > old
    assert not lock.exists()


def test_manifest_records_every_size(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    sizes = json.loads((directory / dl.MANIFEST).read_text())["sizes"]
    assert sizes == {f: len(bucket.files[f"124M/{f}"]) for f in dl.MODEL_FILES}
