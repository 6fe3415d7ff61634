"""Loading by Hugging Face Hub repo id, against a loopback imitation of the hub and its CDN
(tests/helpers/hubfixture.py) and an HF cache laid out by huggingface_hub itself
(tests/fixtures/hub/hf_cache, scripts/make_hub_fixtures.py)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest

import gpt2np
from gpt2np import CheckpointError, DownloadError
from gpt2np.sources.hub import RepoNotFound
from tests.helpers.httpfixture import closed_port_url
from tests.helpers.hubfixture import Hub, serve_hub

HUB = pathlib.Path(__file__).parent.parent / "fixtures" / "hub"
REPO = "tiny-org/tiny-gpt2"
TOKEN = "hf_SECRETtokenVALUE123"
#: the commit scripts/make_hub_fixtures.py printed for the HF cache fixture
CACHED_COMMIT = "cb26afc4c8b765889e8459f42431ef045c250563"


def tiny_files() -> dict[str, bytes]:
    """The tiny repository, as the fixture script published it (same files, same commit)."""
    files = {f: (HUB / "tiny" / f).read_bytes()
             for f in ["config.json", "generation_config.json", "model.safetensors"]}  # fmt: skip
    files.update({f: (HUB / "tokenizer" / f).read_bytes()
                  for f in ["tokenizer.json", "vocab.json", "merges.txt"]})  # fmt: skip
    return files


def expected() -> dict[str, np.ndarray]:
    with np.load(HUB / "tiny" / "logits.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture
def env(tmp_path, monkeypatch) -> pathlib.Path:
    """GPT2NP_HOME and an empty HF cache in tmp_path; no token, online."""
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                "HF_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def tiny_hub(**repo) -> Hub:
    hub = Hub()
    hub.repo(REPO, **repo).add(tiny_files(), repo=REPO)
    return hub


def assert_tiny(model: gpt2np.GPT2) -> None:
    want = expected()
    logits, _ = model.forward(want["ids"])
    np.testing.assert_allclose(logits, want["logits"], rtol=1e-4, atol=1e-4)


def test_load_by_repo_id_fetches_pins_verifies_then_needs_no_network(env, monkeypatch) -> None:
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        model = gpt2np.load(REPO, progress=False)
        commit = hub.repos[REPO].refs["main"]
        assert commit == CACHED_COMMIT
        assert model.source.commit == commit and model.source.hf_cache == ()
        assert_tiny(model)
        # every file after the first was asked for at the pinned commit, not at "main"
        paths = [r.path for r in hub.requests()]
        assert paths[0] == f"/{REPO}/resolve/main/config.json"
        assert all(f"/resolve/{commit}/" in p for p in paths[1:])
        assert {r.path for r in hub.cdn.served()} == {
            f"blobs/{__import__('hashlib').sha256(tiny_files()['model.safetensors']).hexdigest()}"
        }
        # the text side: tokenizer from vocab.json + merges.txt, eos and max_length defaults
        ids = json.loads((HUB / "tokenizer" / "ids.json").read_text())
        assert model.tokenizer.encode("Hello world") == ids["Hello world"]
        assert model.eot_token == 0 and model.generation_config["max_length"] == 24
        snapshot = env / "home" / "hub" / "models--tiny-org--tiny-gpt2"
        assert (snapshot / "refs" / "main").read_text() == commit
        before = len(hub.requests())
        gpt2np.load(REPO, progress=False)  # cached: one HEAD to learn main's commit
        assert len(hub.requests()) == before + 1
        gpt2np.load(REPO, revision=commit, progress=False)  # a commit: nothing to ask
        assert len(hub.requests()) == before + 1
    monkeypatch.setenv("HF_ENDPOINT", closed_port_url())  # no network: the cache, no waiting
    assert_tiny(gpt2np.load(REPO, progress=False))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = gpt2np.load(f"hf:{REPO}", progress=False)
    assert offline.source.offline == "HF_HUB_OFFLINE=1"
    assert_tiny(offline)


def test_the_token_goes_to_the_hub_only_never_to_the_cdn(env, monkeypatch, capsys) -> None:
    hub = tiny_hub(gated=True)
    hub.tokens.add(TOKEN)
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(DownloadError, match=r"gated or private.*HF_TOKEN") as no_token:
            gpt2np.load(REPO, progress=True)
        monkeypatch.setenv("HF_TOKEN", "hf_wrong")
        with pytest.raises(DownloadError, match=r"token has no access") as wrong:
            gpt2np.load(REPO, progress=True)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        assert_tiny(gpt2np.load(REPO, progress=True))
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}"
               for r in hub.requests() if r.status < 400)  # fmt: skip
    cdn = hub.cdn.served()
    assert cdn and all("Authorization" not in r.headers for r in cdn)
    assert all(TOKEN not in json.dumps(r.headers) for r in cdn)
    out = capsys.readouterr()
    for text in (str(no_token.value), str(wrong.value), out.out, out.err):
        assert TOKEN not in text and "hf_wrong" not in text
    assert not any(TOKEN in p.read_text(errors="replace") for p in env.rglob("*") if p.is_file())


def test_revision_branch_tag_and_pull_request(env, monkeypatch) -> None:
    hub = tiny_hub()
    repo = hub.repos[REPO]
    files = tiny_files()
    config = json.loads(files["config.json"])
    old = repo.add({**files, "config.json": json.dumps({**config, "layer_norm_epsilon": 0.5})
                    .encode()}, ref="v1.0", repo=REPO)  # fmt: skip
    repo.refs["refs/pr/1"] = old
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        tagged = gpt2np.load(REPO, revision="v1.0", progress=False)
        assert tagged.hparams.layer_norm_epsilon == 0.5 and tagged.source.commit == old
        pr = gpt2np.load(REPO, revision="refs/pr/1", progress=False)
        assert pr.source.commit == old
        assert any("/resolve/refs%2Fpr%2F1/" in r.path for r in hub.requests())
        assert gpt2np.load(REPO, progress=False).hparams.layer_norm_epsilon == 1e-5
        with pytest.raises(DownloadError, match=r"no revision 'nope'"):
            gpt2np.load(REPO, revision="nope", progress=False)


def test_sharded_repo_and_renamed_repo(env, monkeypatch) -> None:
    hub = Hub()
    sharded = {f.name: f.read_bytes() for f in (HUB / "sharded").iterdir()}
    hub.repo("new-org/sharded").add(sharded, repo="new-org/sharded")
    hub.renamed["old-org/sharded"] = "new-org/sharded"
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        model = gpt2np.load("old-org/sharded", progress=False)
    assert_tiny(model)
    assert sum(n.endswith(".safetensors") for n in model.source.files) == 3
    assert any(r.status == 307 for r in hub.requests())


def test_missing_repo_file_and_bin_only_repo(env, monkeypatch) -> None:
    hub = Hub()
    hub.repo("org/bin-only").add({"config.json": tiny_files()["config.json"],
                                  "pytorch_model.bin": b"\x80\x02pickle"}, repo="b")  # fmt: skip
    hub.repo("org/no-config").add({"model.safetensors": b"x"}, repo="n")
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(CheckpointError, match=r"only pytorch_model.bin.*never unpickles"):
            gpt2np.load("org/bin-only", progress=False)
        with pytest.raises(DownloadError, match=r"no config.json"):
            gpt2np.load("org/no-config", progress=False)
        with pytest.raises(RepoNotFound, match=r"no file or directory .*org/nothing.*hf:org"):
            gpt2np.load("org/nothing", progress=False)
    assert not any("pytorch_model.bin" in r.path for r in hub.cdn.served())  # never fetched


def test_a_corrupt_download_is_refused_and_nothing_installed(env, monkeypatch) -> None:
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        for path in hub.cdn.files:  # the CDN serves other bytes than the hub's SHA-256 says
            data = bytearray(hub.cdn.files[path])
            data[100] ^= 1
            hub.cdn.files[path] = bytes(data)
        with pytest.raises(DownloadError, match=r"SHA256"):
            gpt2np.load(REPO, progress=False)
    snapshots = env / "home" / "hub" / "models--tiny-org--tiny-gpt2" / "snapshots"
    assert not list(snapshots.rglob("model.safetensors"))
    assert not list(snapshots.rglob(".gpt2np-snapshot.json"))


def test_a_transient_cdn_failure_is_resumed(env, monkeypatch) -> None:
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        blob = next(iter(hub.cdn.files))
        hub.cdn.cut_at[blob] = 10_000
        assert_tiny(gpt2np.load(REPO, progress=False))
        ranges = [r.range for r in hub.cdn.requests_for(blob)]
    assert ranges == [None, "bytes=10000-"]


def test_the_huggingface_hub_cache_is_used_read_only(env, monkeypatch) -> None:
    cache = env / "hf"
    shutil.copytree(HUB / "hf_cache", cache, symlinks=True)
    before = sorted((p.relative_to(cache), p.stat().st_mtime_ns) for p in cache.rglob("*"))
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        model = gpt2np.load(REPO, progress=False)
    assert_tiny(model)
    assert set(model.source.hf_cache) == set(tiny_files())  # every file from their cache
    assert not hub.cdn.served() and all(r.method == "HEAD" for r in hub.requests())
    assert sorted((p.relative_to(cache), p.stat().st_mtime_ns) for p in cache.rglob("*")) == before
    # offline, with nothing of ours: their refs/main and snapshot suffice
    shutil.rmtree(env / "home")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_tiny(gpt2np.load(REPO, progress=False))
    # a damaged blob in their cache is not used
    shutil.rmtree(env / "home", ignore_errors=True)  # (files verified just now: not recorded)
    blob = (cache / "models--tiny-org--tiny-gpt2" / "snapshots" / CACHED_COMMIT
            / "model.safetensors").resolve()  # fmt: skip
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[200] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(DownloadError, match=r"holds no model.safetensors"):
        gpt2np.load(REPO, progress=False)


def test_offline_names_what_is_missing(env, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RepoNotFound, match=r"HF_HUB_OFFLINE=1.*no snapshot of org/absent"):
        gpt2np.load("hf:org/absent")
    monkeypatch.setenv("HF_ENDPOINT", closed_port_url())
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(RepoNotFound, match=r"could not reach"):
        gpt2np.load("org/absent", progress=False)


def test_tokenizer_json_only_and_a_tokenizer_that_is_not_gpt2s(env, monkeypatch) -> None:
    hub = Hub()
    files = tiny_files()
    only_json = {k: v for k, v in files.items() if k not in ("vocab.json", "merges.txt")}
    hub.repo("org/json-only").add(only_json, repo="j")
    refused = {
        **only_json,
        "tokenizer.json": (
            HUB / "tokenizer" / "refused" / "add_prefix_space" / "tokenizer.json"
        ).read_bytes(),
    }
    hub.repo("org/prefix-space").add(refused, repo="p")
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        model = gpt2np.load("org/json-only", progress=False)
        ids = json.loads((HUB / "tokenizer" / "ids.json").read_text())
        assert all(model.tokenizer.encode(t) == i for t, i in ids.items())
        odd = gpt2np.load("org/prefix-space", progress=False)
    assert_tiny(odd)  # ids still work
    with pytest.raises(CheckpointError, match=r"add_prefix_space=True.*token ids still work"):
        odd.generate("Hello", max_new_tokens=2)


def test_generation_config_gives_the_defaults(env, monkeypatch) -> None:
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        model = gpt2np.load(REPO, progress=False, fast=False)
    prompt = [5, 6, 7, 8]
    out = model.generate(prompt, temperature=0)  # max_length 24 counts the prompt
    assert model.default_max_new_tokens(prompt) == 20 and len(out) <= 20
    assert model.default_max_new_tokens("Hello world") == 24 - len(
        model.tokenizer.encode("Hello world")
    )


def test_cli_model_and_revision_and_info(env, monkeypatch, capsys) -> None:
    from gpt2np.cli.app import main

    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert main(["info", "--model", REPO, "--revision", "main"]) == 0
        info = capsys.readouterr().out
        assert f"revision    main -> commit {CACHED_COMMIT}" in info
        assert "model.safetensors" in info and "tokenizer.json" in info
        assert "n_vocab     300" in info and "text        yes" in info
        assert main(["generate", "Hello", "--model", f"hf:{REPO}", "--max-new-tokens", "3",
                     "--temperature", "0"]) == 0  # fmt: skip
        assert len(capsys.readouterr().out.strip()) > 0  # the continuation only
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["info", "--model", "org/absent"]) == 1  # one line naming both readings
    err = capsys.readouterr().err
    assert "no file or directory" in err and "hf:org/absent" in err


# --- a hostile or broken server ---------------------------------------------------------------


@pytest.fixture
def spy():
    """A server on 127.0.0.2 (another host, as far as any client can tell) logging requests."""
    from tests.helpers.httpfixture import Bucket, serve

    bucket = Bucket({})
    try:
        with serve(bucket, host="127.0.0.2") as url:
            yield bucket, url
    except OSError as e:  # a loopback without 127.0.0.2
        pytest.skip(f"cannot listen on 127.0.0.2: {e}")


@pytest.mark.parametrize("where", ["renamed-repo redirect", "LFS location"])
def test_the_token_never_follows_a_backslash_to_another_host(env, monkeypatch, spy, where):
    """http://127.0.0.2:P\\@127.0.0.1:Q/... is 127.0.0.1 to urllib.parse but a request to
    127.0.0.2 for requests: the token must not go there, on either path that sends it."""
    bucket, spy_url = spy
    hub = tiny_hub()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        tricky = f"{spy_url}\\@{url.removeprefix('http://')}/{REPO}/resolve/main/"
        if where == "renamed-repo redirect":
            hub.redirect[(REPO, "config.json")] = tricky + "config.json"
        else:
            hub.headers[(REPO, "model.safetensors")] = {"Location": tricky + "model.safetensors"}
        with pytest.raises(DownloadError):
            gpt2np.load(REPO, progress=False)
    assert hub.requests()  # the hub was asked, with the token
    assert all("Authorization" not in r.headers for r in bucket.served())
    assert where == "renamed-repo redirect" or bucket.served()  # the LFS host was asked


@pytest.mark.parametrize("commit", ["../../../../escape", "ABS"])
def test_a_commit_from_the_server_is_a_commit_id_or_refused(env, monkeypatch, commit):
    """X-Repo-Commit becomes a directory name: a value that is not 40 hex digits ('../..', an
    absolute path) is refused, and nothing is created outside GPT2NP_HOME."""
    commit = str(env / "abs") if commit == "ABS" else commit
    hub = tiny_hub()
    hub.headers[(REPO, "config.json")] = {"X-Repo-Commit": commit}
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(DownloadError, match=r"X-Repo-Commit.*not a commit id"):
            gpt2np.load(REPO, progress=False)
    assert sorted(p.name for p in env.iterdir()) == ["home"] or not (env / "home").exists()
    assert not (env / "escape").exists() and not (env / "abs").exists()


@pytest.mark.parametrize("revision", ["../../../../escape", "/abs", "a/../b", ".hidden", "x.lock"])
def test_a_revision_is_a_commit_or_a_git_ref_name(env, monkeypatch, revision):
    """revision= names refs/<revision>: a name git refuses must not reach the file system,
    even when the server answers for it."""
    hub = tiny_hub()
    hub.repos[REPO].refs[revision] = hub.repos[REPO].refs["main"]
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(ValueError, match=r"neither a commit id .* nor a branch or tag name"):
            gpt2np.load(REPO, revision=revision, progress=False)
    assert sorted(p.name for p in env.iterdir() if p.name != "home") == []
    assert not (env / "home").exists()


def test_a_half_downloaded_snapshot_is_never_served(env, monkeypatch):
    """vocab.json failed after config.json and the weights arrived: offline, and by commit with
    the hub unreachable, the snapshot is refused, never served with the bundled GPT-2 tokenizer
    in place of the repository's."""
    from gpt2np.sources import http

    monkeypatch.setattr(http, "BACKOFF_SECONDS", 0.001)  # the hub unreachable: no waiting
    hub = tiny_hub()
    hub.get_statuses[(REPO, "vocab.json")] = [403]
    commit = hub.repos[REPO].refs["main"]
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(DownloadError, match=r"vocab.json.*HTTP 403"):
            gpt2np.load(REPO, progress=False)
    snapshots = env / "home" / "hub" / "models--tiny-org--tiny-gpt2" / "snapshots"
    assert (snapshots / commit / "model.safetensors").is_file()  # kept for the next call
    monkeypatch.setenv("HF_ENDPOINT", closed_port_url())
    with pytest.raises(DownloadError, match="incomplete"):
        gpt2np.load(REPO, revision=commit, progress=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match=r"incomplete|no snapshot"):
        gpt2np.load(REPO, progress=False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with serve_hub(hub) as url:  # online again: the download is finished, and then served
        monkeypatch.setenv("HF_ENDPOINT", url)
        model = gpt2np.load(REPO, progress=False)
    ids = json.loads((HUB / "tokenizer" / "ids.json").read_text())
    assert model.tokenizer.encode("Hello world") == ids["Hello world"]


def test_a_blob_edited_in_place_keeping_size_and_mtime_is_not_served(env, monkeypatch):
    """A huggingface_hub blob verified once, then edited in place with its size and mtime
    kept (touch -r), is verified again (the record's stamp has ctime) and not served."""
    from gpt2np.sources import hub_snapshots

    monkeypatch.setattr(hub_snapshots, "RACY_NS", 0, raising=False)  # as for an old cache
    cache = env / "hf"
    shutil.copytree(HUB / "hf_cache", cache, symlinks=True)
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert "model.safetensors" in gpt2np.load(REPO, progress=False).source.hf_cache
        folder = env / "home" / "hub" / "models--tiny-org--tiny-gpt2"
        shutil.rmtree(folder / "snapshots")  # our snapshot, not the record of their blobs
        assert (folder / "hf-cache-verified.json").is_file()
        blob = (cache / "models--tiny-org--tiny-gpt2" / "snapshots" / CACHED_COMMIT
                / "model.safetensors").resolve()  # fmt: skip
        st = blob.stat()
        blob.chmod(0o644)
        data = bytearray(blob.read_bytes())
        data[-8] ^= 0x40  # a weight, in the last tensor
        blob.write_bytes(bytes(data))
        os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert blob.stat().st_size == st.st_size and blob.stat().st_mtime_ns == st.st_mtime_ns
        model = gpt2np.load(REPO, progress=False)
    assert "model.safetensors" not in model.source.hf_cache  # fetched instead
    assert_tiny(model)


@pytest.mark.parametrize("header", ["X-Linked-Size", "Content-Length"])
def test_a_header_number_that_is_not_ascii_digits_is_a_download_error(env, monkeypatch, header):
    """A size header of '²' (str.isdigit() says yes, int() says no) is a DownloadError."""
    hub = tiny_hub()
    name = "model.safetensors" if header == "X-Linked-Size" else "config.json"
    hub.headers[(REPO, name)] = {header: "²"}
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(DownloadError, match=rf"{header}: '²', which is not a byte count"):
            gpt2np.load(REPO, progress=False)


def test_endless_bodies_are_cut_at_the_size_the_file_must_have(env, monkeypatch):
    """An endless chunked body: the weights (size and SHA-256 known) are cut at their size; a
    config whose size the hub does not say is cut at the most a config may have."""
    from gpt2np.sources import hub as hub_module

    monkeypatch.setattr(_fetch_module(), "ATTEMPTS", 2)
    monkeypatch.setattr(_fetch_module(), "BACKOFF_SECONDS", 0.001)
    monkeypatch.setitem(hub_module.MAX_BYTES, "config.json", 1 << 20)
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        (blob,) = hub.cdn.files
        hub.cdn.endless.add(blob)
        with pytest.raises(DownloadError, match=r"runs past the \d+ bytes"):
            gpt2np.load(REPO, progress=False)
        size = len(hub.cdn.files[blob])
        assert all(r.hung_up and r.sent < size + (32 << 20) for r in hub.cdn.requests_for(blob))
        hub.cdn.endless.clear()
        shutil.rmtree(env / "home")  # (config.json arrived whole before the weights)
        hub.endless.add((REPO, "config.json"))
        hub.omit[(REPO, "config.json")] = {"Content-Length"}
        with pytest.raises(DownloadError, match=r"more than .* such a file may have"):
            gpt2np.load(REPO, revision=hub.repos[REPO].refs["main"], progress=False)
    leftovers = [p for p in (env / "home").rglob("*") if p.is_file()]
    assert not [p for p in leftovers if p.stat().st_size == 0 or p.name.endswith(".lock")]


def _fetch_module():
    from gpt2np.sources import http

    return http


def test_a_failed_download_leaves_only_what_the_next_call_resumes(env, monkeypatch):
    """A refused weights file (a Content-Length other than the hub's X-Linked-Size): no empty
    .incoming file, no origin.json, no lock; config.json, verified, stays for the next call."""
    hub = tiny_hub()
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        (blob,) = hub.cdn.files
        hub.cdn.length[blob] = len(hub.cdn.files[blob]) + 1
        with pytest.raises(DownloadError, match=r"announces \d+ bytes .* not the file asked"):
            gpt2np.load(REPO, progress=False)
    folder = env / "home" / "hub" / "models--tiny-org--tiny-gpt2"
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    commit = hub.repos[REPO].refs["main"]
    assert left == ["snapshots", f"snapshots/{commit}", f"snapshots/{commit}/config.json"]
