"""Fetch a GPT-2-architecture model from the Hugging Face Hub by repo id, pinned and verified.

``snapshot("distilbert/distilgpt2", revision="main")`` returns the files of that repository at
one commit, each verified, without a network when they are cached:

* **Where from.** ``{endpoint}/{repo}/resolve/{revision}/{file}``, the endpoint from
  ``$HF_ENDPOINT`` (a mirror) or ``https://huggingface.co``. The first answer's
  ``X-Repo-Commit`` pins the revision: every other file is fetched from that commit, so a
  branch that moves meanwhile cannot mix two versions.
* **The token** (``token=``, else ``$HF_TOKEN``, else huggingface_hub's token file) goes to the
  endpoint's own origin (scheme, host, port) only, as the HTTP client parses URLs
  (:func:`gpt2np.sources.session.origin`: a Location with a backslash cannot smuggle it to
  another host): a redirect to the LFS/CDN host is fetched without it. It is never printed,
  logged or put in a message.
* **Verified.** A file stored with LFS by the SHA-256 the hub declares (``X-Linked-Etag``), a
  small file by its git blob id (``ETag``: SHA-1 of ``blob <size>\\0`` + its bytes), as
  huggingface_hub names its cache blobs. A file with neither is refused.
* **How.** Each file travels as :mod:`gpt2np.sources.http` describes (resume with If-Range, retries,
  stall detection, the time bound, a small file capped at what its reader accepts), into
  ``$GPT2NP_HOME/hub/models--{org}--{name}/snapshots/{commit}/``, under its final name only
  once verified; a manifest of the snapshot is written last, once every file verified, and only
  a snapshot with its manifest is ever served; ``refs/{revision}`` names the commit. The commit
  must be 40 hex digits and the revision a git ref name (or a commit), so neither can name a
  path outside the cache. A lock beside the snapshot serialises two processes; a failed call
  leaves only what the next one resumes (verified files, resumable partial files).
* **huggingface_hub's cache** (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``)
  is read, never written: a file of the same commit there is used instead of a download once
  its bytes match its blob name (the hub's etag); that check is done once and recorded in
  gpt2np's cache (by path and stamp: inode, size, mtime and ctime).
* **Offline.** With ``$HF_HUB_OFFLINE=1`` (or ``$TRANSFORMERS_OFFLINE=1``), or when the hub
  cannot be reached (no network, timeouts, 5xx) or refuses access, the snapshot comes from the
  two caches, whole or not at all (:mod:`gpt2np.sources.hub_snapshots`); what is missing is
  named.

The files a GPT-2 needs: ``config.json``; ``model.safetensors`` or
``model.safetensors.index.json`` and its shards; optionally ``vocab.json`` + ``merges.txt``,
``tokenizer.json`` and ``generation_config.json``. A repository with only pickle weights
(``pytorch_model.bin``, ``*.pt``) is refused: gpt2np never unpickles.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import socket
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Optional, Union

from ..checkpoint.hf import shard_names
from ..errors import CheckpointError, DownloadError
from ..support.bounded_read import MAX_JSON_BYTES
from ..support.lock import FileLock
from ..support.paths import expand_user, home_dir
from ..support.progress import show_progress
from ..tokenizer.vocab import MAX_FILE_BYTES
from . import http as _fetch

if TYPE_CHECKING:  # imported where a request is made: `gpt2np --version` need not load it
    import requests
from . import session as _session
from .hub_snapshots import (
    COMMIT,
    CONFIG,
    INDEX,
    MANIFEST,
    OPTIONAL,
    RepoNotFound,
    check_for,
    from_caches,
    is_ref_name,
    locate,
    read_manifest,
    verified_hf_file,
    write_json,
    write_ref,
)
from .session import deadline, expired, same_origin

__all__ = [
    "DEFAULT_ENDPOINT",
    "RepoNotFound",
    "Snapshot",
    "hf_cache_dir",
    "is_repo_id",
    "snapshot",
]

DEFAULT_ENDPOINT = "https://huggingface.co"
#: The most bytes a file other than the weights may have: what its reader accepts.
MAX_BYTES = {
    CONFIG: MAX_JSON_BYTES, INDEX: MAX_JSON_BYTES, "generation_config.json": MAX_JSON_BYTES,
    "vocab.json": MAX_FILE_BYTES, "merges.txt": MAX_FILE_BYTES, "tokenizer.json": MAX_FILE_BYTES,
}  # fmt: skip
#: The most bytes a weights file may have when neither the hub (X-Linked-Size) nor the file's
#: LFS pointer says its size: GPT-2 XL in float64 with an untied head is 13.5 GB.
MAX_WEIGHTS_BYTES = 16 << 30
POINTER_BYTES = 1024  # the most bytes of an LFS pointer read (a real one has about 130)
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
_TRUE = {"1", "ON", "YES", "TRUE"}


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A repository's files at one commit: ``files`` name -> local path, verified.

    ``hf_cache`` lists the files taken from huggingface_hub's cache; ``offline`` says why the
    network was not used (None if it was); ``unknown``, the tokenizer files that cache neither
    holds nor records absent when it holds no tokenizer (see :meth:`missing_tokenizer`)."""

    repo: str
    revision: str
    commit: str
    files: Mapping[str, pathlib.Path]
    hf_cache: tuple[str, ...] = ()
    offline: Optional[str] = None
    unknown: tuple[str, ...] = ()

    def missing_tokenizer(self) -> Optional[str]:
        """Why the snapshot has no tokenizer to give, naming the files to fetch; None when it
        has one, or when the repository has none (GPT-2's vocabulary is then GPT-2's)."""
        if not self.unknown:
            return None
        return (
            f"{self.repo} at commit {self.commit} was read offline ({self.offline}) from "
            f"huggingface_hub's cache, which holds its model but no tokenizer: fetch vocab.json "
            f"and merges.txt (or tokenizer.json) of it, e.g. `hf download {self.repo} vocab.json "
            f"merges.txt --revision {self.commit}`, or load it once online; token ids still work"
        )


@dataclasses.dataclass(frozen=True)
class _Meta:
    """What a HEAD of one file told: its commit, content hash, size and where its bytes are."""

    commit: Optional[str]
    etag: str
    size: Optional[int]
    location: str


def meta_deadline() -> float:
    """The longest the metadata of one file may take, across its redirects and retries: what
    ATTEMPTS silent answers and their backoff take (4 × 15 s + 3.5 s ≈ 64 s)."""
    backoff = _fetch.BACKOFF_SECONDS * (2 ** (_fetch.ATTEMPTS - 1) - 1)
    return float(_fetch.ATTEMPTS * _session.HEAD_DEADLINE + backoff)


def is_repo_id(text: str) -> bool:
    """``org/name`` (or a bare legacy ``name``) in the hub's characters."""
    return bool(_REPO_ID.fullmatch(text)) and ".." not in text and "--" not in text


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_cache_dir() -> pathlib.Path:
    """huggingface_hub's cache: $HF_HUB_CACHE, $HF_HOME/hub, or ~/.cache/huggingface/hub."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return pathlib.Path(expand_user(os.environ[var], var))
    return _hf_home() / "hub"


def _hf_home() -> pathlib.Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return pathlib.Path(
        expand_user(home, "HF_HOME" if os.environ.get("HF_HOME") else "XDG_CACHE_HOME")
    )


def _offline_by_env() -> Optional[str]:
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").upper() in _TRUE:
            return f"{var}={os.environ[var]}"
    return None


def _token(token: Optional[str]) -> Optional[str]:
    if token is not None:
        return token or None
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return os.environ.get("HF_TOKEN") or os.environ["HUGGING_FACE_HUB_TOKEN"]
    path = pathlib.Path(os.path.expanduser(os.environ.get("HF_TOKEN_PATH") or _hf_home() / "token"))
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _folder(root: pathlib.Path, repo: str) -> pathlib.Path:
    return root / ("models--" + repo.replace("/", "--"))


def snapshot(
    repo: str,
    revision: Optional[str] = None,
    *,
    token: Optional[str] = None,
    progress: Optional[bool] = None,
    cache_dir: Union[str, os.PathLike[str], None] = None,
) -> Snapshot:
    """The files of ``repo`` at ``revision`` (a branch, tag or commit; default "main"), from the
    caches or the hub. Raises :class:`RepoNotFound`, :class:`~gpt2np.DownloadError` (naming
    the URL and file, or what the caches lack when offline) or :class:`~gpt2np.CheckpointError`
    (a repository without safetensors weights)."""
    if not isinstance(repo, str) or not is_repo_id(repo):
        raise ValueError(f"{repo!r} is not a Hugging Face Hub repo id such as 'org/name'")
    revision = revision or "main"
    if not isinstance(revision, str):
        raise TypeError(f"revision must be a str, got {type(revision).__name__}")
    if not (COMMIT.fullmatch(revision) or is_ref_name(revision)):
        raise ValueError(
            f"revision {revision!r} is neither a commit id (40 hex digits) nor a branch or tag "
            "name (git's rules: no '..', no component starting with '.', no spaces or ~^:?*[\\)"
        )
    ours = _folder(pathlib.Path(cache_dir) if cache_dir else home_dir() / "hub", repo)
    theirs = _folder(hf_cache_dir(), repo)
    offline = _offline_by_env()
    if offline:
        return Snapshot(*from_caches(repo, revision, ours, theirs, offline))
    return _Fetcher(repo, revision, ours, theirs, _token(token), show_progress(progress)).run()


class _Fetcher:
    def __init__(
        self,
        repo: str,
        revision: str,
        ours: pathlib.Path,
        theirs: pathlib.Path,
        token: Optional[str],
        shown: bool,
    ) -> None:
        self.repo, self.revision, self.ours, self.theirs = repo, revision, ours, theirs
        self.endpoint, self.shown = endpoint(), shown
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.session = _fetch.new_session()

    def url(self, name: str, revision: str) -> str:
        quoted = urllib.parse.quote(revision, safe="")
        return f"{self.endpoint}/{self.repo}/resolve/{quoted}/{urllib.parse.quote(name)}"

    def run(self) -> Snapshot:
        try:
            with self.session:
                return self._run()
        except _Fallback as reason:
            return Snapshot(
                *from_caches(self.repo, self.revision, self.ours, self.theirs, str(reason))
            )

    def _run(self) -> Snapshot:
        if COMMIT.fullmatch(self.revision):  # a commit never changes: no need to ask
            directory = self.ours / "snapshots" / self.revision
            found = locate(read_manifest(directory), directory, self.theirs, self.revision)
            if found is not None:
                return Snapshot(self.repo, self.revision, self.revision, *found)
        config = self.head(CONFIG, self.revision, fallback=True)
        if config is None:
            raise DownloadError(f"{self.repo} has no {CONFIG} at {self.revision}: not a "
                                "transformers model gpt2np can read")  # fmt: skip
        commit = config.commit or (self.revision if COMMIT.fullmatch(self.revision) else None)
        if commit is None:
            raise DownloadError(
                f"{self.url(CONFIG, self.revision)} did not say which commit it serves (no "
                f"X-Repo-Commit header): is HF_ENDPOINT={self.endpoint} a Hub? Pass the "
                f"revision as a 40-hex commit id to fetch from it anyway"
            )
        at_revision = f"/resolve/{urllib.parse.quote(self.revision, safe='')}/"
        pinned = config.location.replace(at_revision, f"/resolve/{commit}/", 1)
        config = dataclasses.replace(config, location=pinned)  # its bytes, too, from the commit
        directory = self.ours / "snapshots" / commit
        manifest = read_manifest(directory)
        if manifest:
            found = locate(manifest, directory, self.theirs, commit)
            if found is not None:
                write_ref(self.ours, self.revision, commit)
                return Snapshot(self.repo, self.revision, commit, *found)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DownloadError(f"could not create {directory}: {e}") from e
        try:
            with FileLock(directory.with_name(f".{commit}.lock"), notify=self.shown):
                files, from_hf = self.download(commit, config, directory)
        except BaseException:  # keep what the next call resumes, and nothing else
            for d in (directory, directory.parent, self.ours):
                with contextlib.suppress(OSError):
                    d.rmdir()  # if empty
            raise
        write_ref(self.ours, self.revision, commit)
        return Snapshot(self.repo, self.revision, commit, files, tuple(from_hf))

    def download(
        self, commit: str, config: _Meta, directory: pathlib.Path
    ) -> tuple[dict[str, pathlib.Path], list[str]]:
        """(files, names from huggingface_hub's cache) of the snapshot ``commit``, each file
        verified; the manifest, which makes the snapshot servable, is written last."""
        listing = {CONFIG: config, **self.weights(commit, directory)}
        for name in OPTIONAL:
            meta = self.head(name, commit)
            if meta is not None:
                listing[name] = meta
        files: dict[str, pathlib.Path] = {}
        from_hf: list[str] = []
        for name, meta in listing.items():
            if name not in files:
                files[name], hf = self.get(name, meta, commit, directory)
                from_hf += [name] if hf else []
        write_json(directory / MANIFEST, {
            "version": 1, "repo": self.repo, "commit": commit,
            "files": {n: {"etag": m.etag, "size": m.size} for n, m in listing.items()},
        })  # fmt: skip
        return files, from_hf

    def weights(self, commit: str, directory: pathlib.Path) -> dict[str, _Meta]:
        single = self.head("model.safetensors", commit)
        if single is not None:
            return {"model.safetensors": single}
        index = self.head(INDEX, commit)
        if index is None:
            pickles = [name for name in PICKLES if self.head(name, commit) is not None]
            what = f"only {', '.join(pickles)}" if pickles else "no model.safetensors"
            raise CheckpointError(
                f"{self.repo} at {commit} has {what}. gpt2np reads safetensors only and never "
                "unpickles a file (loading a pickle can run any code). Look for a revision "
                "with model.safetensors (the hub's conversion bot often offers one as a pull "
                "request: revision='refs/pr/N'), or convert it yourself with transformers: "
                "GPT2LMHeadModel.from_pretrained(repo).save_pretrained(dir) and load(dir)."
            )
        path, _ = self.get(INDEX, index, commit, directory)
        listing = {INDEX: index}
        for name in shard_names(os.fspath(path)):
            meta = self.head(name, commit)
            if meta is None:
                raise DownloadError(f"{self.url(name, commit)}: a shard named by {INDEX} is "
                                    "not in the repository")  # fmt: skip
            listing[name] = meta
        return listing

    def head(self, name: str, revision: str, fallback: bool = False) -> Optional[_Meta]:
        """The metadata of ``name``, or None if the repository has no such file. Same-origin
        redirects (a renamed repository) are followed with the token; one to another host (the
        CDN) is not followed: its Location is where the bytes are. All its requests (redirects
        and retries) share one deadline, :func:`meta_deadline`."""
        url = self.url(name, revision)
        with deadline(meta_deadline()):
            for _ in range(10):
                resp = self._request(url, name, fallback)
                target = _join(url, resp.headers.get("Location", ""))
                stays = same_origin(target, self.endpoint)
                if resp.is_redirect and stays and not resp.headers.get("X-Linked-Etag"):
                    url = target  # the repository moved (renamed): ask again there
                    continue
                return self._meta(resp, url, name, revision, fallback)
        raise DownloadError(f"too many redirects resolving {self.url(name, revision)}")

    def _request(self, url: str, name: str, fallback: bool) -> requests.Response:
        import requests

        for attempt in range(_fetch.ATTEMPTS):
            try:
                resp = self.session.head(
                    url, headers=self.auth, allow_redirects=False,
                    timeout=(_fetch.CONNECT_TIMEOUT, _fetch.READ_TIMEOUT),
                )  # fmt: skip
            except ValueError as e:  # a Location urllib.parse refuses (requests reads it)
                raise DownloadError(f"{url} redirects to a URL that is not valid ({e})") from e
            except requests.exceptions.RequestException as e:
                error = f"{_fetch._root_cause(e)}"
                if isinstance(e, requests.exceptions.SSLError) or not isinstance(
                    e, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
                ):
                    raise DownloadError(f"could not reach {url}: {error}") from e
                if any(isinstance(c, socket.gaierror) for c in _fetch._causes(e)):
                    error = f"the host name does not resolve: {error}"
                    break  # no network, most likely: no use waiting
            else:
                if resp.status_code != 429 and resp.status_code < 500:
                    return resp
                error = f"HTTP {resp.status_code} {resp.reason}"
            delay = _fetch.BACKOFF_SECONDS * 2**attempt
            if attempt + 1 < _fetch.ATTEMPTS and expired(delay):
                break  # the deadline of this file's metadata ends before the next try
            if attempt + 1 < _fetch.ATTEMPTS:
                time.sleep(delay)
        why = f"could not reach {self.endpoint} ({error})"
        if fallback:
            raise _Fallback(why)
        raise _fetch.Unreachable(f"could not fetch {name} of {self.repo}: {why}")

    def _meta(
        self, resp: requests.Response, url: str, name: str, revision: str, fallback: bool
    ) -> Optional[_Meta]:
        code, status = resp.headers.get("X-Error-Code", ""), resp.status_code
        gated = status == 403 or (status == 401 and code != "RepoNotFound")
        if gated:
            why = (f"{self.repo} is gated or private and "
                   + ("the token has no access to it (accept its terms on its page, or use "
                      "another token)" if self.auth else "no token was given: set HF_TOKEN "
                      "(or pass token=) after accepting its terms on its page"))  # fmt: skip
            if fallback:
                raise _Fallback(f"HTTP {status}: {why}")
            raise DownloadError(f"{url}: HTTP {status}: {why}")
        if status == 401 or code == "RepoNotFound":
            hint = "" if self.auth else " (a private repository needs HF_TOKEN)"
            raise RepoNotFound(f"{self.endpoint} has no repository {self.repo}{hint}")
        if code == "RevisionNotFound":
            raise DownloadError(f"{self.repo} has no revision {revision!r} (HTTP 404: {url})")
        if status == 404:
            return None
        if status not in (200, 301, 302, 303, 307, 308):
            raise DownloadError(f"{url}: HTTP {status} {resp.reason}")
        etag = resp.headers.get("X-Linked-Etag") or resp.headers.get("ETag") or ""
        etag = etag.removeprefix("W/").strip('"').lower()
        size = _fetch.header_int(resp.headers.get("X-Linked-Size"), "X-Linked-Size", url)
        if size is None and not resp.is_redirect:
            size = _fetch.header_int(resp.headers.get("Content-Length"), "Content-Length", url)
        location = _join(url, resp.headers["Location"]) if resp.is_redirect else url
        if not (len(etag) in (40, 64) and all(c in "0123456789abcdef" for c in etag)):
            raise DownloadError(
                f"{url} gave no content hash for {name} (ETag {etag!r}, neither a SHA-256 nor a "
                "git blob id), so it could not be verified: refused"
            )
        commit = resp.headers.get("X-Repo-Commit")
        if commit is not None and not COMMIT.fullmatch(commit.lower()):
            raise DownloadError(
                f"{url} names its commit {commit[:60]!r} (X-Repo-Commit), which is not a commit "
                "id (40 hex digits): refused"
            )
        return _Meta(commit.lower() if commit else None, etag, size, location)

    def get(
        self, name: str, meta: _Meta, commit: str, directory: pathlib.Path
    ) -> tuple[pathlib.Path, bool]:
        """(the verified local path of ``name``, whether it is huggingface_hub's)."""
        dest = directory / name
        if dest.is_file() and dest.stat().st_size == (meta.size or dest.stat().st_size):
            return dest, False  # fetch installs only verified files
        theirs = self.theirs / "snapshots" / commit / name
        if verified_hf_file(theirs, meta.etag, self.ours):
            return theirs, True
        same = same_origin(meta.location, self.endpoint)
        digests, verify = check_for(meta.etag)
        size = meta.size
        if size is None and len(meta.etag) == 64:  # an LFS file: its pointer says its size
            size = self.pointer_size(name, commit, meta.etag)
        remote = _fetch.RemoteFile(
            meta.location, dest, size=size, digests=digests, verify=verify,
            headers=self.auth if same else {}, label=f"{self.repo}/{name}",
            max_size=MAX_BYTES.get(name, MAX_WEIGHTS_BYTES),
            resume_key=f"{self.repo}@{commit}/{name}:{meta.etag}",
        )  # fmt: skip
        _fetch.fetch(remote, self.session, self.shown)
        return dest, False

    def pointer_size(self, name: str, commit: str, sha256: str) -> Optional[int]:
        """The size the LFS pointer of ``name`` declares (``/{repo}/raw/{commit}/{name}``), if
        it is the pointer of ``sha256``; None when the hub serves no such pointer (the size is
        then bounded by :data:`MAX_WEIGHTS_BYTES`)."""
        import requests

        url = f"{self.endpoint}/{self.repo}/raw/{commit}/{urllib.parse.quote(name)}"
        body = b""
        try:
            with deadline(_session.HEAD_DEADLINE), self.session.get(
                url, headers=self.auth, stream=True, allow_redirects=False,
                timeout=(_fetch.CONNECT_TIMEOUT, _fetch.READ_TIMEOUT),
            ) as resp:  # fmt: skip
                read = _fetch._reader(resp)
                while resp.status_code == 200 and len(body) <= POINTER_BYTES and not expired():
                    if not (data := read(POINTER_BYTES)):
                        break
                    body += data
        except (requests.exceptions.RequestException, ValueError, OSError):
            return None
        return _pointer_size(body, sha256)


def _pointer_size(body: bytes, sha256: str) -> Optional[int]:
    """``size`` of a git-lfs pointer whose ``oid`` is ``sha256:<sha256>``, else None."""
    fields = dict(line.partition(" ")[::2] for line in body.decode("ascii", "replace").split("\n"))
    if not fields.get("version", "").startswith("https://git-lfs.github.com/spec/"):
        return None
    if fields.get("oid") != f"sha256:{sha256}":
        return None
    try:
        return _fetch._number(fields.get("size", ""))
    except ValueError:
        return None


def _join(url: str, location: str) -> str:
    """``location`` read relative to ``url``; DownloadError for one urllib.parse refuses
    (``http://[127.0.0.2]/``: an IPv4 address in brackets)."""
    try:
        return _session.check_host(urllib.parse.urljoin(url, location))
    except ValueError as e:
        raise DownloadError(f"{url} redirects to {location[:80]!r}, not a valid URL ({e})") from e


class _Fallback(Exception):
    """The hub could not be reached or refused access: use the caches, saying why."""
