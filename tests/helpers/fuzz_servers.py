"""Fuzz targets for a misbehaving server (tests/helpers/fuzzing.py): the Hugging Face Hub with its
CDN, and a plain file server as OpenAI's bucket is, each scripted by a *plan* that the fuzzer
mutates.

A case's ``server.json`` is the plan: every header the server sends, every status, and switches
for its faults. Unmutated, it is a server that behaves. A case changes one value: a header
becomes "²", "../../..", "/abs", a commit of "g"s, a Location with a backslash; a status becomes
0, 301, 416 or 503; a fault is switched on (an endless chunked body, a head or a body trickled a
byte at a time, a cut, a reset, a lying Content-Length, gzip, a 206 from the wrong offset). The
check runs gpt2np against that server and judges:

* the outcome: the right model (or files), or a DownloadError or CheckpointError; never another
  exception, never other weights, never GPT-2's bundled tokenizer in place of the repository's;
* the token: no request to the CDN or to another host carries it;
* the disk: nothing outside GPT2NP_HOME (or models_dir); after a failure, only what a later call
  resumes: no lock, no temporary, no empty partial file, none without a validator;
* what comes next: offline, the cache gives the right model or refuses; online, a server that
  behaves gives the right model (or files) on the next call: a failure poisons nothing.

Time stays small: the worker lowers the download constants (HEAD_DEADLINE 0.5 s, ...), so each
case ends in seconds whatever the server does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from gpt2np import CheckpointError, DownloadError
from tests.helpers.fuzzing import FIXTURES, Wrong, target
from tests.helpers.httpfixture import Bucket, etag_of, serve
from tests.helpers.hubfixture import Hub, git_blob_sha1, serve_hub

HUB = FIXTURES / "hub"
SMALL = FIXTURES / "tf" / "small"
REPO = "tiny-org/tiny-gpt2"
TOKEN = "hf_FUZZsecretTOKEN42"
#: What a mutated plan value becomes: numbers and statuses, header texts that int() or a path
#: join would take, commits that are not commits, and URLs that read differently to urlsplit.
VALUES: tuple[Any, ...] = (
    None, 0, 1, -1, 2**64, 10**12, 206, 301, 302, 404, 416, 500, 503, True, False, [], {},
    "", "x", "0", "-1", "²", "١٢", " 7", "+7", "1_0", "18446744073709551616", "1e3",
    "../../../../escape", "/abs/escape", "0" * 40, "g" * 40, "A" * 40, "W/\"x\"",
    "{spy}\\@{hub}/x", "{spy}/x", "{spy}\\@{cdn}/blobs/x", "//{spy}/x", "gzip", "text/html",
    "bytes 0-0/1", "bytes */0",
)  # fmt: skip
FAULTS = {"cut_at": None, "reset_at": None, "length": None, "wrong_start": 0, "endless": False,
          "no_length": False, "trickle": False, "head_trickle": False, "gzip": False}  # fmt: skip


def tiny_files() -> dict[str, bytes]:
    files = {f: (HUB / "tiny" / f).read_bytes()
             for f in ["config.json", "generation_config.json", "model.safetensors"]}  # fmt: skip
    files.update({f: (HUB / "tokenizer" / f).read_bytes()
                  for f in ["tokenizer.json", "vocab.json", "merges.txt"]})  # fmt: skip
    return files


@contextlib.contextmanager
def quick() -> Iterator[None]:
    """The download constants small, so that no fault holds a case for long."""
    import importlib

    from gpt2np.sources import http, hub, openai
    from gpt2np.support import lock

    session = importlib.import_module("gpt2np.sources.session")
    small = [(http, "CONNECT_TIMEOUT", 1.0), (http, "READ_TIMEOUT", 1.0),
             (http, "STALL_SECONDS", 0.5), (http, "STALL_BYTES", 1024), (http, "ATTEMPTS", 2),
             (http, "BACKOFF_SECONDS", 0.001), (session, "HEAD_DEADLINE", 0.5),
             (lock, "LOCK_POLL_SECONDS", 0.01)]  # fmt: skip
    saved = [(m, n, getattr(m, n)) for m, n, _ in small]
    caps = [getattr(m, "MAX_BYTES", {}) for m in (hub, openai)]
    kept = [dict(c) for c in caps]
    try:
        for module, name, value in small:
            setattr(module, name, value)
        for caps_of in caps:
            for name in caps_of:
                caps_of[name] = min(caps_of[name], 1 << 20)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        for caps_of, old in zip(caps, kept):
            caps_of.update(old)


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@contextlib.contextmanager
def spy() -> Iterator[tuple[Bucket, str]]:
    """A server on another host (127.0.0.2, else another port) that logs what reaches it."""
    bucket = Bucket({})
    try:
        with serve(bucket, host="127.0.0.2") as url:
            yield bucket, url
    except OSError:
        with serve(bucket) as url:
            yield bucket, url


def fill(value: Any, urls: dict[str, str]) -> str:
    text = str(value)
    for name, url in urls.items():
        text = text.replace("{" + name + "}", url)
    return text


def apply_faults(bucket: Bucket, path: str, plan: Any) -> None:
    """Switch on the faults ``plan`` (a mutated dict of FAULTS) names for ``path``."""
    plan = plan if isinstance(plan, dict) else {}

    def count(key: str) -> int | None:
        v = plan.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 else None

    for key, where in (("cut_at", bucket.cut_at), ("reset_at", bucket.reset_at),
                       ("length", bucket.length)):  # fmt: skip
        if count(key) is not None:
            where[path] = count(key)
    if isinstance(plan.get("wrong_start"), int) and plan["wrong_start"]:
        bucket.wrong_start[path] = max(-(2**62), min(2**62, plan["wrong_start"]))
    for key, where in (("endless", bucket.endless), ("no_length", bucket.no_length),
                       ("gzip", bucket.gzip)):  # fmt: skip
        if plan.get(key):
            where.add(path)
    if plan.get("trickle"):
        bucket.trickle[path] = (0.005, 1)
    if plan.get("head_trickle"):
        bucket.head_trickle[path] = (0.02, 3.0)


def status_of(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value != 200
    return min(max(value, -1), 10**6) if ok else None


# --- the Hub -----------------------------------------------------------------------------------


def hub_plan() -> dict[str, Any]:
    """What the hub and its CDN send for the tiny repository, header by header."""
    hub = Hub()
    commit = hub.repo(REPO).add(tiny_files(), repo=REPO)
    files = {}
    for name, data in tiny_files().items():
        if name.endswith(".safetensors"):
            sha = hashlib.sha256(data).hexdigest()
            pointer = git_blob_sha1(b"version https://git-lfs.github.com/spec/v1")
            headers = {"X-Repo-Commit": commit, "Location": "{cdn}/blobs/" + sha,
                       "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                       "ETag": f'"{pointer}"'}  # fmt: skip
        else:
            headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"',
                       "Content-Type": "text/plain", "Content-Length": str(len(data))}  # fmt: skip
        files[name] = {"head": 200, "get": 200, "endless": False, "headers": headers}
    blob = tiny_files()["model.safetensors"]
    cdn = {"status": 200, "headers": {"Content-Type": "application/octet-stream",
                                      "ETag": etag_of(blob)}, **FAULTS}  # fmt: skip
    return {"files": files, "cdn": cdn}


def make_hub_case(case: pathlib.Path) -> None:
    case.mkdir(parents=True)
    (case / "server.json").write_text(json.dumps(hub_plan(), indent=1))


def script_hub(hub: Hub, plan: Any, urls: dict[str, str]) -> None:
    """Make ``hub`` (and its CDN) do what ``plan`` says."""
    plan = plan if isinstance(plan, dict) else {}
    base = hub_plan()
    for name, behaves in base["files"].items():
        mine = plan.get("files", {}).get(name) if isinstance(plan.get("files"), dict) else None
        mine = mine if isinstance(mine, dict) else {}
        key = (REPO, name)
        headers = mine.get("headers") if isinstance(mine.get("headers"), dict) else {}
        hub.headers[key] = {str(k): fill(v, urls) for k, v in headers.items() if v is not None}
        hub.omit[key] = set(behaves["headers"]) - set(hub.headers[key])
        for field, where in (("head", hub.statuses), ("get", hub.get_statuses)):
            status = status_of(mine.get(field, 200))
            if status is not None:
                where[key] = [status] * 20
        if mine.get("endless"):
            hub.endless.add(key)
    (blob,) = [p for p in hub.cdn.files if p.startswith("blobs/")]
    cdn = plan.get("cdn") if isinstance(plan.get("cdn"), dict) else {}
    if status_of(cdn.get("status", 200)) is not None:
        hub.cdn.statuses[blob] = [status_of(cdn["status"]) or 0] * 20
    headers = cdn.get("headers") if isinstance(cdn.get("headers"), dict) else {}
    hub.cdn.headers[blob] = {str(k): fill(v, urls) for k, v in headers.items() if v is not None}
    apply_faults(hub.cdn, blob, cdn)


def expected_model() -> tuple[Any, dict[str, np.ndarray]]:
    from gpt2np.checkpoint import load_files
    from gpt2np.params import flatten

    named = {n: HUB / "tiny" / n for n in ["config.json", "generation_config.json",
                                          "model.safetensors"]}  # fmt: skip
    named.update({n: HUB / "tokenizer" / n for n in ["tokenizer.json", "vocab.json", "merges.txt"]})
    checkpoint = load_files(named)
    return checkpoint.hparams, flatten(checkpoint.params)


def right_model(model: Any) -> None:
    """The tiny repository's weights exactly, and its tokenizer (or none that works: never
    GPT-2's bundled one in its place)."""
    from gpt2np.params import flatten

    hparams, want = expected_model()
    if model.hparams != hparams:
        raise Wrong(f"hparams {model.hparams} instead of {hparams}")
    got = flatten(model.params)
    for name, a in want.items():
        if got[name].dtype != a.dtype or not np.array_equal(got[name], a):
            raise Wrong(f"tensor {name} differs from the repository's")
    ids = json.loads((HUB / "tokenizer" / "ids.json").read_text())["Hello world"]
    try:
        encoded = model.tokenizer.encode("Hello world")
    except (CheckpointError, ValueError):
        return  # a vocabulary the hub said is not there: no tokenizer, and it says so
    if encoded != ids:
        raise Wrong(f"the tokenizer encodes 'Hello world' as {encoded}, the repo's as {ids}")


def only_what_resumes(home: pathlib.Path) -> None:
    """No lock, no temporary, no empty partial file and none a later call could not resume."""
    from gpt2np.support.atomic import TEMP_PATTERN

    for path in home.rglob("*"):
        if path.name.endswith(".lock") or TEMP_PATTERN.match(path.name):
            raise Wrong(f"left {path.relative_to(home)}")
        if path.parent.name != ".incoming" or path.name.endswith(".origin.json"):
            if path.name == ".incoming" and not any(path.iterdir()):
                raise Wrong(f"left an empty {path.relative_to(home)}")
            continue
        origin = path.with_name(path.name + ".origin.json")
        try:
            validator = json.loads(origin.read_text()).get("etag") or json.loads(
                origin.read_text()
            ).get("last_modified")
        except (OSError, ValueError):
            validator = None
        if path.stat().st_size == 0 or not validator:
            raise Wrong(f"left {path.relative_to(home)}, which nothing can resume")


def no_token_elsewhere(*buckets: Bucket) -> None:
    for bucket in buckets:
        for r in bucket.served():
            if any(TOKEN in str(v) for v in r.headers.values()):
                raise Wrong(f"the token reached {r.path} on another host")


@target("hub-server", make_hub_case, ["server.json"], errors=(DownloadError, CheckpointError),
        values=VALUES, json_only=True, smoke=2)  # fmt: skip
def hub_server(case: pathlib.Path) -> None:
    import gpt2np

    plan = json.loads((case / "server.json").read_text())
    home, outside = case / "home", sorted(os.listdir(case.parent))
    env = {"GPT2NP_HOME": str(home), "HF_HUB_CACHE": str(case / "hf"), "HF_TOKEN": TOKEN,
           "HF_HOME": str(case / "hf_home"), "HF_HUB_OFFLINE": None,
           "TRANSFORMERS_OFFLINE": None}  # fmt: skip
    refused: BaseException | None = None
    with quick(), environment(**env), spy() as (other, other_url):
        hub = Hub()
        hub.repo(REPO).add(tiny_files(), repo=REPO)
        with serve_hub(hub) as url:
            urls = {"cdn": hub.cdn_url, "spy": other_url, "hub": url.removeprefix("http://")}
            script_hub(hub, plan, urls)
            with environment(HF_ENDPOINT=url):
                try:
                    right_model(gpt2np.load(REPO, progress=False))
                except (DownloadError, CheckpointError) as e:
                    refused = e
        no_token_elsewhere(hub.cdn, other)
        if sorted(os.listdir(case.parent)) != outside or set(os.listdir(case)) - {
            "server.json",
            "home",
        }:
            raise Wrong(f"wrote outside GPT2NP_HOME: {sorted(os.listdir(case))}")
        if refused is not None and home.exists():
            only_what_resumes(home)
        with environment(HF_HUB_OFFLINE="1"), contextlib.suppress(DownloadError, CheckpointError):
            right_model(gpt2np.load(REPO, progress=False))  # the cache: right, or nothing
        behaving = Hub()
        behaving.repo(REPO).add(tiny_files(), repo=REPO)
        with serve_hub(behaving) as url, environment(HF_ENDPOINT=url):
            try:
                right_model(gpt2np.load(REPO, progress=False))
            except (DownloadError, CheckpointError) as e:
                raise Wrong(f"after that, a hub that behaves was refused: {e}") from None
    if refused is not None:
        raise refused


# --- a plain file server (OpenAI's bucket) -----------------------------------------------------


def release_files() -> dict[str, bytes]:
    """The seven files of a 124M release, the small TF fixture standing in for the weights."""
    import gpt2np

    data = pathlib.Path(gpt2np.__file__).parent / "data"
    files = {f: (SMALL / f).read_bytes() for f in ["checkpoint", "hparams.json",
                                                   "model.ckpt.index",
                                                   "model.ckpt.data-00000-of-00001"]}  # fmt: skip
    files["model.ckpt.meta"] = b"a stand-in for the MetaGraphDef, never read\n" * 20
    files.update({f: (data / f).read_bytes() for f in ["encoder.json", "vocab.bpe"]})
    return files


def bucket_plan() -> dict[str, Any]:
    files = {}
    for name, data in release_files().items():
        headers = {"Content-Type": "application/octet-stream", "ETag": etag_of(data)}
        files[name] = {"status": 200, "headers": headers, **FAULTS}
    server = {"range_support": True, "etags": True, "last_modified": False,
              "ignore_if_range": False, "content_md5": False}  # fmt: skip
    return {"server": server, "files": files}


def make_bucket_case(case: pathlib.Path) -> None:
    case.mkdir(parents=True)
    (case / "server.json").write_text(json.dumps(bucket_plan(), indent=1))


def script_bucket(bucket: Bucket, plan: Any) -> set[str]:
    """Make ``bucket`` do what ``plan`` says; the files whose Content-Length it lies about."""
    plan = plan if isinstance(plan, dict) else {}
    server = plan.get("server") if isinstance(plan.get("server"), dict) else {}
    for switch in ("range_support", "etags", "last_modified", "ignore_if_range", "content_md5"):
        if switch in server:
            setattr(bucket, switch, bool(server[switch]))
    files = plan.get("files") if isinstance(plan.get("files"), dict) else {}
    lying = set()
    for name in release_files():
        mine = files.get(name) if isinstance(files.get(name), dict) else {}
        path = f"124M/{name}"
        if status_of(mine.get("status", 200)) is not None:
            bucket.statuses[path] = [status_of(mine["status"]) or 0] * 20
        headers = mine.get("headers") if isinstance(mine.get("headers"), dict) else {}
        bucket.headers[path] = {str(k): str(v) for k, v in headers.items() if v is not None}
        apply_faults(bucket, path, mine)
        if path in bucket.length or "Content-Length" in bucket.headers[path]:
            lying.add(name)
    return lying


def right_files(directory: pathlib.Path, lying: set[str]) -> None:
    """The served bytes under each name; model.ckpt.meta, which nothing can check, may be the
    prefix a lying Content-Length announced."""
    for name, data in release_files().items():
        got = (directory / name).read_bytes()
        if got != data and not (
            name == "model.ckpt.meta" and name in lying and data.startswith(got)
        ):
            raise Wrong(f"{name} differs from the file served")


@target("file-server", make_bucket_case, ["server.json"], errors=(DownloadError,),
        values=VALUES, json_only=True, smoke=2)  # fmt: skip
def file_server(case: pathlib.Path) -> None:
    import gpt2np

    gpt2np.HPARAMS["124M"] = gpt2np.HParams.from_json(SMALL / "hparams.json")
    plan = json.loads((case / "server.json").read_text())
    models, outside = case / "models", sorted(os.listdir(case.parent))
    refused: BaseException | None = None
    with quick():
        bucket = Bucket({f"124M/{k}": v for k, v in release_files().items()})
        lying = script_bucket(bucket, plan)
        with serve(bucket) as url:
            try:
                right_files(gpt2np.download("124M", models_dir=models, base_url=url), lying)
            except DownloadError as e:
                refused = e
        if sorted(os.listdir(case.parent)) != outside or set(os.listdir(case)) - {
            "server.json",
            "models",
        }:
            raise Wrong(f"wrote outside models_dir: {sorted(os.listdir(case))}")
        if refused is not None and models.exists():
            only_what_resumes(models)
            if (models / "124M").exists():
                raise Wrong("a failed download left models/124M, which passes for a model")
        behaving = Bucket({f"124M/{k}": v for k, v in release_files().items()})
        with serve(
            behaving
        ) as url:  # (a .meta cut as a lying server said stays: nothing checks it)
            try:
                right_files(gpt2np.download("124M", models_dir=models, base_url=url), lying)
            except DownloadError as e:
                raise Wrong(f"after that, a server that behaves was refused: {e}") from None
    if refused is not None:
        raise refused
