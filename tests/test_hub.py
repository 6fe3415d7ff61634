"""Loading by Hugging Face Hub repo id, against a loopback imitation of the hub and its CDN
(tests/hubfixture.py) and an HF cache laid out by huggingface_hub itself
(tests/fixtures/hub/hf_cache, scripts/make_hub_fixtures.py)."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import gpt2np
from gpt2np import CheckpointError, DownloadError
from gpt2np.sources.hub import RepoNotFound
from httpfixture import closed_port_url
from hubfixture import Hub, serve_hub

HUB = pathlib.Path(__file__).parent / "fixtures" / "hub"
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
    shutil.rmtree(env / "home")
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
