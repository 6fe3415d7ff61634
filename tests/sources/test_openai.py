"""gpt2np.download against a loopback HTTP server with injected faults (no internet).

The served "124M" is a real release layout: the TF checkpoint in tests/fixtures/tf/small
(written by TensorFlow's Saver, scripts/make_tf_fixtures.py) with its hparams.json, published
as "124M" for these tests, and the real encoder.json / vocab.bpe (they must pass the SHA-256
pins). The index and data file are therefore verified for real: sizes and every tensor's
CRC-32C. The fixture has no .meta (gpt2np never reads it), so a stand-in is served for it.

Timeouts, stall windows, attempts and backoff are patched small, so no test waits long.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time
from typing import ClassVar

import pytest

import gpt2np
from gpt2np.sources import http as fetch
from gpt2np.sources import session
from gpt2np.support import lock as file_lock
from tests.helpers.httpfixture import Bucket, closed_port_url, etag_of, serve

# gpt2np.download is the function; the module behind it, whose constants the tests patch:
dl = importlib.import_module("gpt2np.sources.openai")

DATA = "model.ckpt.data-00000-of-00001"
SMALL = pathlib.Path(__file__).parent.parent / "fixtures" / "tf" / "small"
BPE_DIR = pathlib.Path(gpt2np.__file__).parent / "data"  # the bundled, published BPE files
HPARAMS_355M = '{"n_vocab": 50257, "n_ctx": 1024, "n_embd": 1024, "n_head": 16, "n_layer": 24}'
HTML_PAGE = b"<html><head><title>Log in</title></head><body>Wi-Fi</body>"  # 57 bytes


def release_files() -> dict[str, bytes]:
    """The seven files of the fake 124M release (see the module docstring)."""
    files = {f: (SMALL / f).read_bytes() for f in ["checkpoint", "hparams.json", DATA]}
    files["model.ckpt.index"] = (SMALL / "model.ckpt.index").read_bytes()
    files["model.ckpt.meta"] = b"stand-in for the MetaGraphDef, which gpt2np never reads\n" * 9
    for f in ["encoder.json", "vocab.bpe"]:
        files[f] = (BPE_DIR / f).read_bytes()
    return files


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small waits, and "124M" published with the fixture's hparams (the index is checked
    against them)."""
    monkeypatch.setattr(fetch, "BACKOFF_SECONDS", 0.001)
    monkeypatch.setattr(file_lock, "LOCK_POLL_SECONDS", 0.01)
    monkeypatch.setitem(gpt2np.HPARAMS, "124M", gpt2np.HParams.from_json(SMALL / "hparams.json"))


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
    """The directory holds exactly the served files (byte-identical) and a manifest; nothing
    is left in staging."""
    for fname in dl.MODEL_FILES:
        assert (directory / fname).read_bytes() == bucket.files[f"{name}/{fname}"], fname
    assert (directory / dl.MANIFEST).exists()
    assert not dl.staging_dir(directory).exists()
    assert not (directory / fetch.INCOMING).exists()


def assert_nothing_like_a_model(models_dir: pathlib.Path) -> None:
    """A failed call leaves no directory a notebook's ``is_dir()`` would take for the model."""
    assert not (models_dir / "124M").exists()
    assert all(p.name.startswith(".") for p in models_dir.iterdir())


def partial(tmp_path: pathlib.Path, fname: str) -> pathlib.Path:
    """Where an interrupted download keeps the partial ``fname``."""
    return dl.staging_dir(tmp_path / "124M") / fetch.INCOMING / fname


def leave_partial(tmp_path, url: str, fname: str, data: bytes, etag: str | None) -> None:
    """A partial file as an interrupted fetch leaves it: the bytes and where they came from."""
    path = partial(tmp_path, fname)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    origin = {"url": f"{url}/124M/{fname}", "etag": etag, "total": None, "digests": {}}
    path.with_name(fname + ".origin.json").write_text(json.dumps(origin))


# -- the normal path ----------------------------------------------------------------------------


def test_fetches_the_seven_files(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert directory == tmp_path / "124M"
    assert_release(directory, bucket)
    assert sorted(r.path for r in bucket.served()) == sorted(bucket.files)
    assert all(r.status == 200 and r.range is None for r in bucket.served())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["124M"]  # no lock left behind
    assert sorted(p.name for p in directory.iterdir()) == sorted([*dl.MODEL_FILES, dl.MANIFEST])


def test_second_call_transfers_nothing(tmp_path, bucket, base_url) -> None:
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    n_requests, n_bytes = len(bucket.served()), bucket.bytes_sent()
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=base_url) == tmp_path / "124M"
    assert (len(bucket.served()), bucket.bytes_sent()) == (n_requests, n_bytes)
    # ... and needs no network at all
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=closed_port_url())


def test_manifest_records_every_size(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    manifest = json.loads((directory / dl.MANIFEST).read_text())
    assert manifest["version"] == dl.MANIFEST_VERSION
    assert manifest["sizes"] == {f: len(bucket.files[f"124M/{f}"]) for f in dl.MODEL_FILES}


# -- resume ---------------------------------------------------------------------------------------


def test_resumes_a_cut_connection_with_range_and_if_range(tmp_path, bucket, base_url) -> None:
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.cut_at[f"124M/{DATA}"] = size // 2
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert (first.status, first.range, first.sent) == (200, None, size // 2)
    start = resumed_from(second)
    assert 0 < start <= size // 2  # what reached the disk before the cut
    assert second.if_range == etag_of(bucket.files[f"124M/{DATA}"])
    assert (second.status, second.sent) == (206, size - start)


def test_a_reset_connection_is_resumed(tmp_path, bucket, base_url) -> None:
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.reset_at[f"124M/{DATA}"] = size // 2
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert first.status == 200 and second.status == 206
    assert second.sent == size - resumed_from(second)


def test_server_without_range_support_restarts_from_zero(tmp_path, bucket, base_url) -> None:
    bucket.range_support = False
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.cut_at[f"124M/{DATA}"] = size * 2 // 3
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


def test_an_interrupted_call_is_resumed_by_the_next(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    bucket.cut_at[f"124M/{DATA}"] = len(data) // 2
    with pytest.MonkeyPatch.context() as mp:  # the first call gives up after the cut
        mp.setattr(fetch, "ATTEMPTS", 1)
        with pytest.raises(gpt2np.DownloadError, match=r"the connection (broke|closed)"):
            gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_nothing_like_a_model(tmp_path)
    kept = partial(tmp_path, DATA).read_bytes()
    assert kept and data.startswith(kept)
    n = len(bucket.served())
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert [r.path for r in bucket.served()[n:]] == [f"124M/{DATA}"]  # the rest was verified
    last = bucket.served()[-1]
    assert (resumed_from(last), last.status, last.sent) == (len(kept), 206, len(data) - len(kept))


def test_a_partial_file_without_a_validator_is_restarted(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    path = partial(tmp_path, DATA)
    path.parent.mkdir(parents=True)
    path.write_bytes(data[:20_000])  # no record of where these bytes came from
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    [req] = bucket.requests_for(f"124M/{DATA}")
    assert (req.range, req.status, req.sent) == (None, 200, len(data))


@pytest.mark.parametrize("server", ["etag", "last-modified", "no-validator", "ignores-if-range"])
def test_a_partial_file_of_a_file_that_changed_is_not_spliced(tmp_path, bucket, base_url, server):
    """A download interrupted, the file changed on the server, the download resumed: only the
    new file is installed, never the old bytes spliced to the new, whatever the server tells (or
    does not tell) us."""
    new = bucket.files[f"124M/{DATA}"]
    old = bytes(b ^ 0xFF for b in new)  # the version that was being fetched before
    bucket.etags = server in ("etag", "ignores-if-range")
    bucket.last_modified = server == "last-modified"
    bucket.ignore_if_range = server == "ignores-if-range"
    bucket.files[f"124M/{DATA}"] = old
    bucket.cut_at[f"124M/{DATA}"] = len(old) // 2
    with pytest.MonkeyPatch.context() as mp:  # the first call gets half of the old file, dies
        mp.setattr(fetch, "ATTEMPTS", 1)
        with pytest.raises(gpt2np.DownloadError):
            gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    if server == "no-validator":  # nothing could resume it: not kept
        assert not partial(tmp_path, DATA).exists()
    else:
        assert old.startswith(partial(tmp_path, DATA).read_bytes())
    bucket.files[f"124M/{DATA}"] = new  # the server now has the new file
    n = len(bucket.served())
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    requests = [r for r in bucket.served()[n:] if r.path == f"124M/{DATA}"]
    statuses = [r.status for r in requests]
    if server == "no-validator":  # nothing to prove the bytes current: not even asked to resume
        assert statuses == [200] and requests[0].range is None
    elif server == "ignores-if-range":  # a 206 with another ETag: discarded, then from 0
        assert statuses == [206, 200] and requests[1].range is None
    else:  # If-Range did not match: the server sent the whole new file
        assert statuses == [200] and requests[0].if_range is not None


def test_a_complete_partial_file_is_finished_by_a_416(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    leave_partial(tmp_path, base_url, DATA, data, etag_of(data))  # died before the rename
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert [r.status for r in bucket.requests_for(f"124M/{DATA}")] == [416]


def test_a_partial_file_longer_than_the_file_is_discarded(tmp_path, bucket, base_url) -> None:
    data = bucket.files[f"124M/{DATA}"]
    leave_partial(tmp_path, base_url, DATA, data + b"junk", etag_of(data))
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert [r.status for r in bucket.requests_for(f"124M/{DATA}")] == [416, 200]


# -- transient failures are retried --------------------------------------------------------------


@pytest.mark.parametrize("statuses", [[503, 502], [500], [408], [429]])
def test_transient_statuses_are_retried(tmp_path, bucket, base_url, statuses) -> None:
    bucket.statuses["124M/vocab.bpe"] = list(statuses)
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert [r.status for r in bucket.requests_for("124M/vocab.bpe")] == [*statuses, 200]


def test_dropped_connection_is_retried(tmp_path, bucket, base_url) -> None:
    bucket.drop["124M/hparams.json"] = 2
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert len(bucket.requests_for("124M/hparams.json")) == 3


def test_persistent_503_gives_up_after_attempts(tmp_path, bucket, base_url) -> None:
    bucket.statuses["124M/vocab.bpe"] = [503] * 20
    with pytest.raises(gpt2np.DownloadError, match=r"vocab\.bpe.*HTTP 503"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for("124M/vocab.bpe")) == fetch.ATTEMPTS
    assert_nothing_like_a_model(tmp_path)


def test_retries_are_announced_when_progress_is_shown(tmp_path, bucket, base_url, capsys):
    bucket.statuses["124M/vocab.bpe"] = [503]
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url, progress=True)
    assert re.search(r"vocab\.bpe: HTTP 503 .*; retrying in", capsys.readouterr().err)


def test_read_timeout_is_retried_and_resumed(tmp_path, bucket, base_url, monkeypatch) -> None:
    monkeypatch.setattr(fetch, "READ_TIMEOUT", 0.3)
    bucket.stall[f"124M/{DATA}"] = 1.0
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert first.status == 200 and 0 < first.sent < len(bucket.files[f"124M/{DATA}"])
    assert second.status == 206 and 0 < resumed_from(second) <= first.sent


# -- hangs: bounded ------------------------------------------------------------------------------


def test_a_trickling_server_is_cut_and_the_download_resumed(
    tmp_path, bucket, base_url, monkeypatch
) -> None:
    """A server sending a byte every few seconds (each read gets its byte in time) is cut by
    the stall detector, and the next attempt resumes."""
    monkeypatch.setattr(fetch, "STALL_SECONDS", 0.3)
    monkeypatch.setattr(fetch, "STALL_BYTES", 1024)
    bucket.trickle[f"124M/{DATA}"] = (0.02, 1)
    start = time.monotonic()
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert time.monotonic() - start < 10  # a hang would be 60 s or forever
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert 0 < first.sent < 100 and second.status == 206


def test_a_server_that_only_trickles_fails_in_bounded_time(
    tmp_path, bucket, base_url, monkeypatch
) -> None:
    monkeypatch.setattr(fetch, "STALL_SECONDS", 0.3)
    monkeypatch.setattr(fetch, "STALL_BYTES", 1024)
    monkeypatch.setattr(fetch, "ATTEMPTS", 2)
    bucket.trickle["124M/hparams.json"] = (0.02, 10)
    start = time.monotonic()
    with pytest.raises(gpt2np.DownloadError, match=r"stalled: \d+ bytes in 0\.\d s") as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert time.monotonic() - start < 10  # a hang would be 60 s or forever
    assert "hparams.json" in str(err.value) and "copy the seven files" in str(err.value)
    assert len(bucket.requests_for("124M/hparams.json")) == 2
    assert_nothing_like_a_model(tmp_path)


def test_a_silent_server_fails_in_bounded_time(tmp_path, bucket, base_url, monkeypatch) -> None:
    """A server that accepts the connection and says nothing fails within the time bound."""
    monkeypatch.setattr(fetch, "READ_TIMEOUT", 0.3)
    monkeypatch.setattr(fetch, "ATTEMPTS", 2)
    bucket.silent["124M/hparams.json"] = 10.0
    start = time.monotonic()
    with pytest.raises(gpt2np.DownloadError, match=r"no answer within 0\.3 s") as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert time.monotonic() - start < 10  # a hang would be 60 s or forever
    assert f"{base_url}/124M/hparams.json" in str(err.value)
    assert len(bucket.requests_for("124M/hparams.json")) == 2
    assert_nothing_like_a_model(tmp_path)


def test_a_server_trickling_its_response_head_is_cut(tmp_path, bucket, base_url, monkeypatch):
    """A status line and headers sent one byte at a time (each read gets its byte in time, so
    the read timeout never fires) are cut by the watchdog at HEAD_DEADLINE, on every attempt."""
    monkeypatch.setattr(session, "HEAD_DEADLINE", 0.5)
    monkeypatch.setattr(fetch, "ATTEMPTS", 2)
    bucket.head_trickle["124M/hparams.json"] = (0.02, 20.0)
    with pytest.raises(gpt2np.DownloadError, match=r"no complete response head within 0\.5 s"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    requests = bucket.requests_for("124M/hparams.json")
    assert len(requests) == 2 and all(r.hung_up for r in requests)  # the client cut each
    assert_nothing_like_a_model(tmp_path)


def test_the_head_deadline_holds_for_the_hubs_head_requests_too(tmp_path, monkeypatch) -> None:
    """The hub is asked with HEAD, through the same session: a trickling hub is cut too."""
    import socketserver

    class Trickle(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            asked.append(self.request.recv(65536).split(b" ")[0])
            with contextlib.suppress(OSError):
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:  # 20 s of head
                    self.request.sendall(bytes([byte]))
                    time.sleep(0.02)

    asked: list[bytes] = []
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    monkeypatch.setattr(session, "HEAD_DEADLINE", 0.5)
    monkeypatch.setattr(fetch, "ATTEMPTS", 2)
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        with pytest.raises(gpt2np.DownloadError, match=r"no complete response head within 0\.5"):
            gpt2np.load("org/trickled", progress=False)
    finally:
        server.shutdown()
        server.server_close()
    assert asked == [b"HEAD", b"HEAD"]  # each cut, then asked again: ATTEMPTS in all


def test_an_endless_body_is_cut_at_the_most_such_a_file_may_have(
    tmp_path, bucket, base_url, monkeypatch
) -> None:
    """model.ckpt.meta has no published size: an endless chunked body is cut at the most such
    a file may have, and nothing of it is kept."""
    monkeypatch.setitem(dl.MAX_BYTES, "model.ckpt.meta", 1 << 20)
    bucket.endless.add("124M/model.ckpt.meta")
    with pytest.raises(gpt2np.DownloadError, match=r"more than 1048576 bytes .* may have"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    (request,) = bucket.requests_for("124M/model.ckpt.meta")
    assert request.hung_up and request.sent < 32 << 20
    assert not (dl.staging_dir(tmp_path / "124M") / fetch.INCOMING).exists()


def test_an_announced_size_over_the_cap_is_refused_before_any_byte(tmp_path, bucket, base_url):
    bucket.files["124M/hparams.json"] += b" " * (1 << 17)  # 128 KiB of "hparams"
    with pytest.raises(gpt2np.DownloadError, match=r"announces \d+ bytes .* more than such a"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert not (dl.staging_dir(tmp_path / "124M") / fetch.INCOMING).exists()


def test_a_content_length_that_is_not_ascii_digits_is_a_download_error(
    tmp_path, bucket, base_url
) -> None:
    """A Content-Length of '²' (str.isdigit() says yes, int() says no) is a DownloadError."""
    bucket.headers["124M/hparams.json"] = {"Content-Length": "²", "Connection": "close"}
    with pytest.raises(gpt2np.DownloadError, match=r"Content-Length: '²', which is not a byte"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)


def test_a_compressed_answer_is_refused_not_saved_compressed(tmp_path, bucket, base_url) -> None:
    """gpt2np asks for the bytes as they are: a gzip answer is refused, not saved gzipped
    (model.ckpt.meta, which nothing checks, would have kept it)."""
    import gzip

    meta = bucket.files["124M/model.ckpt.meta"]
    bucket.files["124M/model.ckpt.meta"] = gzip.compress(meta)
    bucket.headers["124M/model.ckpt.meta"] = {"Content-Encoding": "gzip"}
    with pytest.raises(gpt2np.DownloadError, match=r"Content-Encoding 'gzip'"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert not list(tmp_path.rglob("model.ckpt.meta"))


def test_a_refused_download_leaves_nothing_of_it(tmp_path, bucket, base_url) -> None:
    """An HTML page (told by its first bytes) where model.ckpt.meta should be: no empty
    partial file, no origin.json, no .incoming, no lock; only the files that verified stay,
    for the next call."""
    bucket.files["124M/model.ckpt.meta"] = HTML_PAGE
    with pytest.raises(gpt2np.DownloadError, match="HTML page"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    staging = dl.staging_dir(tmp_path / "124M")
    assert sorted(p.name for p in tmp_path.iterdir()) == [staging.name]
    verified = dl.MODEL_FILES[: dl.MODEL_FILES.index("model.ckpt.meta")]
    assert sorted(p.name for p in staging.iterdir()) == sorted(verified)


def test_the_documented_time_bound_matches_the_constants(monkeypatch) -> None:
    """The module docstring's figures are the constants' (a silent server: ATTEMPTS reads that
    time out, plus the backoff between them)."""
    monkeypatch.undo()  # the constants as shipped
    backoff = sum(fetch.BACKOFF_SECONDS * 2**k for k in range(fetch.ATTEMPTS - 1))
    silent = fetch.ATTEMPTS * min(fetch.READ_TIMEOUT, session.HEAD_DEADLINE) + backoff
    longest = (
        fetch.CONNECT_TIMEOUT + session.HEAD_DEADLINE + fetch.STALL_SECONDS + fetch.READ_TIMEOUT
    )
    doc = fetch.__doc__
    assert f"≈ {silent:.0f} s" in doc and f"= {longest:.0f} s" in doc
    assert f"{backoff:g} s of backoff" in doc


# -- not transient: fail at once ----------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 403, 401, 410])
def test_4xx_is_not_retried_and_names_url_and_file(tmp_path, bucket, base_url, status) -> None:
    bucket.statuses[f"124M/{DATA}"] = [status] * 5
    with pytest.raises(gpt2np.DownloadError) as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert f"{base_url}/124M/{DATA}" in str(err.value) and str(status) in str(err.value)
    assert isinstance(err.value, OSError)
    assert len(bucket.requests_for(f"124M/{DATA}")) == 1
    assert_nothing_like_a_model(tmp_path)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff sleeps fetch takes: none means no retry."""
    taken: list[float] = []
    monkeypatch.setattr(fetch.time, "sleep", taken.append)
    return taken


def test_a_host_that_does_not_resolve_fails_at_once(tmp_path, monkeypatch, sleeps) -> None:
    """Offline, a host name that does not resolve fails at the first attempt, not after silent
    retries."""
    lookups = []
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        lookups.append(host)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(gpt2np.DownloadError) as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url="http://nonexistent.invalid/m")
    assert lookups == ["nonexistent.invalid"] and sleeps == []
    message = str(err.value)
    assert "http://nonexistent.invalid/m/124M/hparams.json" in message
    assert "does not resolve" in message and "no network" in message
    assert str(tmp_path / "124M") in message and "copy the seven files" in message
    assert_nothing_like_a_model(tmp_path)


def test_a_tls_error_fails_at_once(tmp_path, base_url, sleeps) -> None:
    """https:// to a server that speaks plain HTTP: the handshake fails, no retry."""
    with pytest.raises(gpt2np.DownloadError, match=r"TLS error fetching hparams\.json"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url.replace("http", "https"))
    assert sleeps == []


def test_no_network_says_which_files_go_where(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(fetch, "ATTEMPTS", 2)
    with pytest.raises(gpt2np.DownloadError) as err:
        gpt2np.download("345M", models_dir=tmp_path, base_url=closed_port_url())
    message = str(err.value)
    assert str(tmp_path / "355M") in message and "Connection refused" in message
    assert all(fname in message for fname in dl.MODEL_FILES)
    assert "/355M/hparams.json" in message  # the first URL it tried


@pytest.mark.parametrize("base", ["127.0.0.1:1/models", "ftp://127.0.0.1/models"])
def test_a_malformed_base_url_is_a_download_error(tmp_path, base) -> None:
    with pytest.raises(gpt2np.DownloadError, match=f"hparams.json from {base}/124M/hparams.json"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base)


# -- integrity: five ways a bad file could be installed, each refused ----------------------------


def test_an_html_page_instead_of_the_data_file_is_refused_at_once(tmp_path, bucket, base_url):
    """A captive portal answers 200 with its login page for every URL."""
    bucket.files[f"124M/{DATA}"] = HTML_PAGE
    bucket.headers[f"124M/{DATA}"] = {"Content-Type": "text/html; charset=utf-8"}
    with pytest.raises(gpt2np.DownloadError, match=r"HTML page instead of model\.ckpt\.data"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for(f"124M/{DATA}")) == 1
    assert_nothing_like_a_model(tmp_path)


def test_an_html_page_with_a_binary_content_type_is_refused_too(tmp_path, bucket, base_url):
    bucket.files["124M/model.ckpt.meta"] = b"\n  <!DOCTYPE html>" + HTML_PAGE
    with pytest.raises(gpt2np.DownloadError, match=r"HTML page instead of model\.ckpt\.meta"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for("124M/model.ckpt.meta")) == 1


@pytest.mark.parametrize("delta", [-1000, +1000], ids=["shorter", "longer"])
def test_a_content_length_other_than_the_index_says_is_refused(
    tmp_path, bucket, base_url, delta
) -> None:
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.length[f"124M/{DATA}"] = size + delta
    with pytest.raises(gpt2np.DownloadError, match=f"announces {size + delta} bytes.*{size}"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for(f"124M/{DATA}")) == 1
    assert_nothing_like_a_model(tmp_path)


def test_a_content_length_shorter_than_the_body_is_caught_by_content_md5(
    tmp_path, bucket, base_url
) -> None:
    """The .meta has no size known beforehand; OpenAI's bucket declares every file's MD5."""
    bucket.content_md5 = True
    bucket.length["124M/model.ckpt.meta"] = 100
    with pytest.raises(gpt2np.DownloadError, match=r"model\.ckpt\.meta.*failed verification.*MD5"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for("124M/model.ckpt.meta")) == fetch.VERIFY_ATTEMPTS
    del bucket.length["124M/model.ckpt.meta"]
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)


def test_a_body_cut_without_content_length_is_resumed(tmp_path, bucket, base_url) -> None:
    """The data file's size is known from the index, so a cut is seen."""
    size = len(bucket.files[f"124M/{DATA}"])
    bucket.no_length.add(f"124M/{DATA}")
    bucket.cut_at[f"124M/{DATA}"] = size // 3
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    first, second = bucket.requests_for(f"124M/{DATA}")
    assert first.sent == size // 3 and (second.status, resumed_from(second)) == (206, size // 3)


def test_a_body_without_length_of_a_file_of_unknown_size_is_refused(tmp_path, bucket, base_url):
    """Where neither a length nor a size nor a digest is known, a cut body would pass."""
    bucket.no_length.add("124M/model.ckpt.meta")
    with pytest.raises(gpt2np.DownloadError, match=r"no Content-Length.*refused"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    bucket.content_md5 = True  # ... but a declared digest proves it whole
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)


def test_corrupt_data_is_refused_by_the_index_crc(tmp_path, bucket, base_url) -> None:
    data = bytearray(bucket.files[f"124M/{DATA}"])
    data[len(data) // 2] ^= 0xFF  # same size: only the CRC-32C can tell
    bucket.files[f"124M/{DATA}"] = bytes(data)
    with pytest.raises(gpt2np.DownloadError, match=r"CRC-32C 0x[0-9a-f]{8}, the index says"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert len(bucket.requests_for(f"124M/{DATA}")) == fetch.VERIFY_ATTEMPTS
    assert_nothing_like_a_model(tmp_path)


def test_a_corrupt_transfer_is_fetched_again(tmp_path, bucket, base_url, monkeypatch) -> None:
    """A body damaged once (a flaky proxy): discarded, fetched again, installed."""
    good = bucket.files[f"124M/{DATA}"]
    bucket.files[f"124M/{DATA}"] = good[:100] + bytes([good[100] ^ 1]) + good[101:]
    real_check = fetch.check

    def fix_server_after_first_check(remote, path, declared=None):
        reason = real_check(remote, path, declared)
        if remote.name == DATA:
            bucket.files[f"124M/{DATA}"] = good
        return reason

    monkeypatch.setattr(fetch, "check", fix_server_after_first_check)
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert [r.status for r in bucket.requests_for(f"124M/{DATA}")] == [200, 200]


def test_an_index_of_another_size_is_refused(tmp_path, bucket, base_url, monkeypatch) -> None:
    three_layers = gpt2np.HParams(n_vocab=260, n_ctx=16, n_embd=16, n_head=2, n_layer=3)
    monkeypatch.setitem(gpt2np.HPARAMS, "124M", three_layers)
    bucket.files["124M/hparams.json"] = json.dumps(gpt2np.HPARAMS["124M"].to_dict()).encode()
    with pytest.raises(gpt2np.DownloadError, match=r"model/ tensors hold 44032 bytes.*124M"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)


@pytest.mark.parametrize("fname", ["encoder.json", "vocab.bpe"])
def test_wrong_hash_is_refused_and_nothing_left_behind(tmp_path, bucket, base_url, fname):
    good = bucket.files[f"124M/{fname}"]
    bucket.files[f"124M/{fname}"] = good[:-2] + b"x\n"
    with pytest.raises(gpt2np.DownloadError, match="SHA256") as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert f"{base_url}/124M/{fname}" in str(err.value)
    assert_nothing_like_a_model(tmp_path)
    assert not list(tmp_path.rglob(fname))
    bucket.files[f"124M/{fname}"] = good  # the server is fixed: the next call completes
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)


def test_hparams_of_another_size_are_refused(tmp_path, bucket, base_url) -> None:
    bucket.files["124M/hparams.json"] = HPARAMS_355M.encode()
    with pytest.raises(gpt2np.DownloadError, match=r"hparams\.json.*published 124M"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert not list(tmp_path.rglob("hparams.json*"))


def test_deeply_nested_hparams_are_refused(tmp_path, bucket, base_url) -> None:
    bucket.files["124M/hparams.json"] = b"[" * 50_000  # json's recursion limit, not ValueError
    with pytest.raises(gpt2np.DownloadError, match=r"not a valid hparams\.json"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert not list(tmp_path.rglob("hparams.json*"))


@pytest.mark.parametrize("text", [b'model_checkpoint_path: "model.ckpt"', b"\x00\x01junk\n"])
def test_a_checkpoint_state_that_is_cut_or_not_one_is_refused(tmp_path, bucket, base_url, text):
    bucket.files["124M/checkpoint"] = text
    with pytest.raises(gpt2np.DownloadError, match=r"checkpoint from .* failed verification"):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)


def test_a_wrong_file_under_the_final_name_is_replaced(tmp_path, bucket, base_url) -> None:
    """Files copied in by hand (no manifest) are each verified offline, not trusted for their
    names, and only the wrong one is fetched."""
    directory = tmp_path / "124M"
    directory.mkdir()
    for fname in dl.MODEL_FILES:
        (directory / fname).write_bytes(bucket.files[f"124M/{fname}"])
    data = bytearray(bucket.files[f"124M/{DATA}"])
    data[7] ^= 0x40
    (directory / DATA).write_bytes(bytes(data))
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=base_url) == directory
    assert_release(directory, bucket)
    assert [r.path for r in bucket.served()] == [f"124M/{DATA}"]


def test_files_copied_by_hand_need_no_network(tmp_path, bucket) -> None:
    directory = tmp_path / "124M"
    directory.mkdir()
    for fname in dl.MODEL_FILES:
        (directory / fname).write_bytes(bucket.files[f"124M/{fname}"])
    assert gpt2np.download("124M", models_dir=tmp_path, base_url=closed_port_url()) == directory
    assert (directory / dl.MANIFEST).exists()


def test_a_manifest_from_before_verification_is_not_trusted(tmp_path, bucket, base_url):
    """Versions before 2 wrote the manifest without verifying: such a model is checked once."""
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    (directory / DATA).write_bytes(HTML_PAGE)
    sizes = {f: (directory / f).stat().st_size for f in dl.MODEL_FILES}
    (directory / dl.MANIFEST).write_text(json.dumps({"base_url": base_url, "sizes": sizes}))
    (directory / dl.LEGACY_LOCK).write_text("")
    n = len(bucket.served())
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert [r.path for r in bucket.served()[n:]] == [f"124M/{DATA}"]
    assert not (directory / dl.LEGACY_LOCK).exists()


def test_a_file_damaged_after_completion_is_fetched_again(tmp_path, bucket, base_url) -> None:
    directory = gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    (directory / DATA).write_bytes(b"truncated")
    n_requests = len(bucket.served())
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_release(directory, bucket)
    assert [r.path for r in bucket.served()[n_requests:]] == [f"124M/{DATA}"]


def test_full_disk_is_a_download_error_naming_url_and_file(tmp_path, bucket, base_url, monkeypatch):
    """ENOSPC while writing the data file: DownloadError naming URL and partial file; the
    partial file is kept (a later call resumes it) but nothing is under a final name."""
    real_open = open

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def tell(self):
            return self.f.tell()

        def write(self, chunk):
            room = 20_000 - self.f.tell()
            self.f.write(chunk[: max(room, 0)])
            if len(chunk) > room:
                raise OSError(errno.ENOSPC, "No space left on device")

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FullDisk(f) if str(path).endswith(DATA) and "a" in mode else f

    monkeypatch.setattr(fetch, "open", open_on_a_full_disk, raising=False)
    with pytest.raises(gpt2np.DownloadError, match="No space left") as err:
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert f"{base_url}/124M/{DATA}" in str(err.value)
    assert str(partial(tmp_path, DATA)) in str(err.value)
    assert_nothing_like_a_model(tmp_path)
    kept = partial(tmp_path, DATA).read_bytes()
    assert kept and bucket.files[f"124M/{DATA}"].startswith(kept)  # a correct prefix
    monkeypatch.undo()  # space freed: the next call resumes from the prefix
    monkeypatch.setattr(fetch, "BACKOFF_SECONDS", 0.001)
    monkeypatch.setitem(gpt2np.HPARAMS, "124M", gpt2np.HParams.from_json(SMALL / "hparams.json"))
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert resumed_from(bucket.requests_for(f"124M/{DATA}")[-1]) == len(kept)


# -- what a failed download leaves, and how to tell a complete model ---------------------------


def test_a_failed_download_leaves_no_directory_that_passes_for_a_model(
    tmp_path, bucket, base_url
) -> None:
    """A failed download leaves no models/124M/ holding only the lock, which a notebook's
    is_dir() check would take for a model."""
    del bucket.files[f"124M/{DATA}"]
    with pytest.raises(gpt2np.DownloadError):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    assert_nothing_like_a_model(tmp_path)
    staged = sorted(p.name for p in dl.staging_dir(tmp_path / "124M").iterdir())
    assert staged == sorted(f for f in dl.MODEL_FILES if f != DATA)  # verified, kept to resume


def test_a_directory_left_by_an_older_version_is_replaced_whole(tmp_path, bucket, base_url):
    """Versions before 2 left models/124M/ holding the lock and partial files."""
    directory = tmp_path / "124M"
    directory.mkdir()
    (directory / dl.LEGACY_LOCK).write_text("")
    (directory / f"{DATA}.part").write_bytes(b"junk")
    assert_release(gpt2np.download("124M", models_dir=tmp_path, base_url=base_url), bucket)
    assert sorted(p.name for p in directory.iterdir()) == sorted([*dl.MODEL_FILES, dl.MANIFEST])


def test_missing_files_and_check_complete(tmp_path, bucket, base_url, monkeypatch) -> None:
    directory = tmp_path / "124M"
    assert dl.missing_files(directory) == list(dl.MODEL_FILES)
    with pytest.raises(gpt2np.CheckpointError, match=r"has none of hparams\.json, encoder\.json"):
        dl.check_complete(directory)
    bucket.statuses[f"124M/{DATA}"] = [404]
    with pytest.raises(gpt2np.DownloadError):
        gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)
    directory.mkdir()  # say, the user copies some of the files by hand
    (directory / "hparams.json").write_bytes(bucket.files["124M/hparams.json"])
    (directory / "model.ckpt.meta").write_bytes(b"")
    missing = dl.missing_files(directory)
    assert missing == [f for f in dl.MODEL_FILES if f != "hparams.json"]
    with pytest.raises(gpt2np.CheckpointError) as err:
        dl.check_complete(directory)
    message = str(err.value)
    assert f"{directory} is not a complete GPT-2 release: it lacks encoder.json," in message
    assert f"gpt2np.download('124M', models_dir={str(tmp_path)!r})" in message
    assert f"`gpt2np download 124M --models-dir {tmp_path}`" in message
    assert f"resuming the interrupted download in {dl.staging_dir(directory)}" in message
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)  # the default models dir, written relative or not: no models_dir
    home_models = tmp_path.parent / "models" / "124M"
    with pytest.raises(
        gpt2np.CheckpointError, match=r"download\('124M'\) \(or `gpt2np download 124M`\)"
    ):
        dl.check_complete(home_models)
    with pytest.raises(gpt2np.CheckpointError, match="Copy them from OpenAI's release"):
        dl.check_complete(tmp_path / "my-finetune")
    complete = gpt2np.download("124M", models_dir=tmp_path / "b", base_url=base_url)
    assert dl.missing_files(complete) == [] and dl.check_complete(complete) == complete


# -- names, directories, environment -------------------------------------------------------------


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


# -- progress --------------------------------------------------------------------------------------


class FakeShell:
    """What IPython.get_ipython() returns inside a Jupyter kernel, as far as tqdm and gpt2np
    look: a config with the kernel app's section."""

    config: ClassVar[dict] = {"IPKernelApp": {"connection_file": "kernel-1.json"}}


def test_progress_none_hides_bars_when_nobody_watches(tmp_path, bucket, base_url, capsys):
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)  # stderr: not a TTY
    assert capsys.readouterr().err == ""


def test_progress_true_shows_a_bar_per_file(tmp_path, bucket, base_url, capsys) -> None:
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url, progress=True)
    err = capsys.readouterr().err
    assert all(fname in err for fname in dl.MODEL_FILES)
    assert "43.0k/43.0k" in err and "B/s" in err  # the data file: 44_032 B = 43.0 KiB


def test_progress_none_shows_bars_in_a_notebook(tmp_path, bucket, base_url, capsys, monkeypatch):
    """Under ipykernel stderr is not a TTY, yet a first-use download shows its bars there:
    tqdm.auto's, which are widgets in Jupyter."""
    import tqdm.auto

    ipython = type(sys)("IPython")
    ipython.get_ipython = lambda: FakeShell()
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert gpt2np.support.progress.show_progress(None) is True
    assert fetch.tqdm is gpt2np.support.progress.tqdm  # tqdm.auto's, imported on first use
    assert type(fetch.tqdm(total=1, disable=True)) is tqdm.auto.tqdm
    bars = []

    class Recorder(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append((kwargs["desc"], kwargs["disable"]))

    monkeypatch.setattr(fetch, "tqdm", Recorder)
    gpt2np.download("124M", models_dir=tmp_path, base_url=base_url)  # progress=None
    assert bars == [(f, False) for f in dl.MODEL_FILES]
    assert DATA in capsys.readouterr().err


def test_progress_must_be_a_bool_or_none(tmp_path) -> None:
    assert gpt2np.support.progress.show_progress(
        True
    ) and not gpt2np.support.progress.show_progress(False)
    with pytest.raises(TypeError, match="progress must be True, False or None, got 'yes'"):
        gpt2np.download("124M", models_dir=tmp_path, progress="yes")  # type: ignore[arg-type]


# -- the lock --------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_fcntl", [True, False], ids=["flock", "O_EXCL"])
def test_concurrent_downloads_fetch_each_file_once(
    tmp_path, bucket, base_url, monkeypatch, use_fcntl
):
    if use_fcntl and file_lock.fcntl is None:
        pytest.skip("no fcntl on this platform")
    monkeypatch.setattr(file_lock, "fcntl", file_lock.fcntl if use_fcntl else None)
    bucket.piece_delay = 0.001  # ~0.4 s for the seven files, so the calls overlap
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
    script = (
        "import sys, gpt2np; print('ready', flush=True); "
        "gpt2np.HPARAMS['124M'] = gpt2np.HParams.from_json(sys.argv[3]); "
        "print(gpt2np.download('124M', models_dir=sys.argv[1], base_url=sys.argv[2]))"
    )
    with file_lock.FileLock(dl.lock_path(directory)):
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), base_url, str(SMALL / "hparams.json")],
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
    old = time.time() - file_lock.STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    with file_lock.FileLock(lock, use_fcntl=False):
        assert lock.exists() and lock.stat().st_mtime > old
    assert not lock.exists()
