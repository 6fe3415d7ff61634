"""A loopback imitation of the Hugging Face Hub's file endpoints, for the hub tests.

``Hub`` holds repositories (repo id -> branches and tags -> commits -> files); ``serve_hub(hub)``
runs it on 127.0.0.1 together with a second server on another port standing in for the CDN
(an :class:`httpfixture.Bucket`, so every fault of the download tests can be injected there),
and yields the endpoint URL. What it imitates, as huggingface_hub expects it:

* ``HEAD`` and ``GET`` ``/{repo}/resolve/{revision}/{file}``, the revision URL-quoted (a branch,
  a tag, ``refs/pr/1`` or a 40-hex commit), every answer with ``X-Repo-Commit``;
* a small file (a regular git blob) is answered there, ``ETag`` = its git blob SHA-1;
* a file stored with LFS (``.safetensors``, ``.bin``, or ``lfs=`` names) gets a 302 to
  ``{cdn}/blobs/{sha256}?X-Amz-Signature=…`` (a fresh signature each time, like a signed URL),
  with ``X-Linked-Etag`` = its SHA-256 and ``X-Linked-Size``;
* a renamed repository: 307 to the new name on the same host (relative ``Location``);
* 401 ``RepoNotFound`` for an unknown (or private, without a token) repository, 401
  ``GatedRepo`` for a gated one without a token and 403 with a token that has no access,
  404 ``RevisionNotFound`` and 404 ``EntryNotFound``.

Faults to inject, by (repo, file): ``statuses`` (answered first, HEAD and GET alike),
``get_statuses`` (GET only: the HEAD lists the file, its download fails), ``headers`` (replaced
or added in the answer: a lying X-Repo-Commit, X-Linked-Size or Location), ``redirect`` (a 307 to
that Location) and ``endless`` (a small file's GET body chunked and never ending).

Every request is logged with its headers, on both servers, so tests can see where a token went.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.server
import itertools
import threading
import urllib.parse
from collections.abc import Iterator

from tests.helpers.httpfixture import ENDLESS_LIMIT, Bucket, serve

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack")


def git_blob_sha1(data: bytes) -> str:
    """The id git gives a file's contents: SHA-1 of ``blob <size>\\0`` + the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit_id(repo: str, files: dict[str, bytes]) -> str:
    """A made-up but stable 40-hex commit id for a snapshot of ``files``."""
    h = hashlib.sha1(repo.encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


@dataclasses.dataclass
class Repo:
    """One repository: its commits (id -> files) and refs (branch or tag -> commit id)."""

    commits: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)
    refs: dict[str, str] = dataclasses.field(default_factory=dict)
    gated: bool = False  # needs a token from TOKENS (401 without, 403 with another)
    private: bool = False  # like gated, but answers as if it did not exist
    lfs: set[str] = dataclasses.field(default_factory=set)  # more LFS names than the suffixes

    def add(self, files: dict[str, bytes], ref: str = "main", repo: str = "") -> str:
        """Commit ``files`` (a whole snapshot) and point ``ref`` at it; return the commit id."""
        commit = commit_id(repo + ref + str(len(self.commits)), files)
        self.commits[commit] = dict(files)
        self.refs[ref] = commit
        return commit

    def is_lfs(self, name: str) -> bool:
        return name.endswith(LFS_SUFFIXES) or name in self.lfs


@dataclasses.dataclass
class Logged:
    method: str
    path: str
    status: int
    headers: dict[str, str]


@dataclasses.dataclass
class Hub:
    repos: dict[str, Repo] = dataclasses.field(default_factory=dict)
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)  # old id -> new id
    tokens: set[str] = dataclasses.field(default_factory=set)  # tokens with access to gated
    #: (repo, file) -> statuses answered first (one per request), e.g. [503, 503]
    statuses: dict[tuple[str, str], list[int]] = dataclasses.field(default_factory=dict)
    #: (repo, file) -> headers to leave out of the answer (e.g. {"X-Repo-Commit"})
    omit: dict[tuple[str, str], set[str]] = dataclasses.field(default_factory=dict)
    #: (repo, file) -> statuses answered first to GET requests only
    get_statuses: dict[tuple[str, str], list[int]] = dataclasses.field(default_factory=dict)
    #: (repo, file) -> headers replaced or added in its answers
    headers: dict[tuple[str, str], dict[str, str]] = dataclasses.field(default_factory=dict)
    #: (repo, file) -> answer with a 307 to this Location
    redirect: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    #: (repo, file) of small files whose GET body is chunked and endless (after the file)
    endless: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    cdn: Bucket = dataclasses.field(default_factory=lambda: Bucket({}))
    cdn_url: str = ""
    log: list[Logged] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    _signature: Iterator[int] = dataclasses.field(default_factory=itertools.count)

    def repo(self, repo_id: str, **kwargs) -> Repo:
        self.repos[repo_id] = Repo(**kwargs)
        return self.repos[repo_id]

    def publish(self) -> None:
        """Put every LFS file's bytes on the CDN under blobs/<sha256>."""
        for repo in self.repos.values():
            for files in repo.commits.values():
                for name, data in files.items():
                    if repo.is_lfs(name):
                        self.cdn.files[f"blobs/{hashlib.sha256(data).hexdigest()}"] = data

    def requests(self, method: str | None = None) -> list[Logged]:
        with self.lock:
            return [r for r in self.log if method is None or r.method == method]


class _HubHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HubServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _reply(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes = b"",
        omit: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        hub = self.server.hub
        with hub.lock:
            hub.log.append(Logged(self.command, self.path, status, dict(self.headers)))
        self.send_response(status)
        headers = {"Content-Length": str(len(body)), **headers}
        for key in omit:
            headers.pop(key, None)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "GET" and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str, commit: str | None = None) -> None:
        headers = {"X-Error-Code": code, "Content-Type": "application/json"}
        if commit:
            headers["X-Repo-Commit"] = commit
        self._reply(status, headers, b'{"error": "%s"}' % code.encode())

    def _answer(self, body: bool) -> None:
        hub = self.server.hub
        path = urllib.parse.urlsplit(self.path).path
        parts = path.lstrip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            self._error(404, "NotFound")
            return
        repo_id, revision = "/".join(parts[:2]), urllib.parse.unquote(parts[3])
        name = urllib.parse.unquote("/".join(parts[4:]))
        if repo_id in hub.renamed:
            new = hub.renamed[repo_id]
            self._reply(307, {"Location": "/" + new + path[len(repo_id) + 1 :]})
            return
        repo = hub.repos.get(repo_id)
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if repo is None or (repo.private and token not in hub.tokens):
            self._error(401, "RepoNotFound")
            return
        if repo.gated and token not in hub.tokens:
            self._error(403 if token else 401, "GatedRepo")
            return
        with hub.lock:
            queued = hub.statuses.get((repo_id, name))
            if not queued and body:
                queued = hub.get_statuses.get((repo_id, name))
            status = queued.pop(0) if queued else None
        if status is not None:
            self._error(status, "Injected")
            return
        if (repo_id, name) in hub.redirect:
            self._reply(307, {"Location": hub.redirect[(repo_id, name)],
                              **hub.headers.get((repo_id, name), {})})  # fmt: skip
            return
        commit = revision if revision in repo.commits else repo.refs.get(revision)
        if commit is None:
            self._error(404, "RevisionNotFound")
            return
        files = repo.commits[commit]
        if name not in files:
            self._error(404, "EntryNotFound", commit)
            return
        data = files[name]
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if repo.is_lfs(name):
            sha256 = hashlib.sha256(data).hexdigest()
            signature = next(hub._signature)
            headers.update({
                "Location": f"{hub.cdn_url}/blobs/{sha256}?X-Amz-Signature={signature:08x}",
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(len(data)),
                "ETag": f'"{git_blob_sha1(b"version https://git-lfs.github.com/spec/v1")}"',
            })  # fmt: skip
            status, data = 302, b""
        else:
            headers.update({"ETag": f'"{git_blob_sha1(data)}"', "Content-Type": "text/plain"})
            status = 200
        headers.update(hub.headers.get((repo_id, name), {}))
        omit = hub.omit.get((repo_id, name), frozenset())
        if not body:
            headers.setdefault("Content-Length", str(len(data)))
            self._reply(status, headers, omit=omit)
            return
        if (repo_id, name) in hub.endless and status == 200:
            self._endless({k: v for k, v in headers.items() if k not in omit}, data)
            return
        self._reply(status, headers, data, omit=omit)

    def _endless(self, headers: dict[str, str], data: bytes) -> None:
        """``data``, then zeros, chunked, until the client hangs up (or ENDLESS_LIMIT)."""
        hub = self.server.hub
        with hub.lock:
            hub.log.append(Logged(self.command, self.path, 200, dict(self.headers)))
        self.send_response(200)
        for key, value in {**headers, "Transfer-Encoding": "chunked"}.items():
            self.send_header(key, value)
        self.end_headers()
        zeros = bytes(1 << 16)
        try:
            for piece in (data, *([zeros] * (ENDLESS_LIMIT // len(zeros)))):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        self.close_connection = True


class _HubServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    hub: Hub

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@contextlib.contextmanager
def serve_hub(hub: Hub) -> Iterator[str]:
    """Run ``hub`` and its CDN on two loopback ports; yield the hub's endpoint URL."""
    with serve(hub.cdn) as cdn_url:
        hub.cdn_url = cdn_url
        hub.publish()
        server = _HubServer(("127.0.0.1", 0), _HubHandler)
        server.hub = hub
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
