"""Fetch one file over HTTP(S): resumable, bounded in time, and verified before it is installed.

A :class:`RemoteFile` says what to fetch and what the result must be (its size, digests, a
check of its contents); :func:`fetch` brings it to ``dest`` or raises
:class:`~gpt2np.DownloadError`. OpenAI's release (:mod:`gpt2np.sources.openai`) is seven of these.

How the bytes travel. They stream into the partial file ``.incoming/<name>`` beside ``dest``
(under the file's own name, so a check that goes by the name works on it); beside it
``<name>.origin.json`` records where they came from (URL, ETag or Last-Modified, total size, any
digest the server declared). An interrupted transfer resumes with ``Range: bytes=<size>-`` and
that validator as ``If-Range``, so a server whose file changed since sends the whole new file
instead of the rest of the old one; a partial file without a validator is restarted from byte 0.
A 206 from another offset, of another total or with another ETag is discarded. Once the byte
count is complete, the file is checked (size, digests, ``verify``), flushed to disk and renamed
to ``dest``: a file under its final name is always whole and verified. A check that fails
discards the file and fetches it once more (:data:`VERIFY_ATTEMPTS`), then raises.

What is refused at once. An HTML page (by Content-Type, or by its first bytes) where a file was
expected: a captive portal, a proxy's error page, a wrong URL. A Content-Length other than the
expected size, or more than the file may have (:attr:`RemoteFile.max_size`: a config is small).
A header number that is not plain ASCII digits. A body in a Content-Encoding (gzip, ...): the
bytes are asked for as they are, and a compressed body would be saved compressed. A body whose
end only the closing of the connection marks (no Content-Length, not chunked) when neither its
size nor a digest is known, since a cut could not be told from the end. 4xx answers (but 408 and
429), a host name that does not resolve, TLS errors: retrying cannot help, so the first one
raises, naming the URL.

The bytes are bounded. A body is cut as soon as it runs past the size the file must have (known
beforehand, or announced by the response) or past :attr:`RemoteFile.max_size`: an endless
chunked body never fills the disk.

What is retried, with exponential backoff (:data:`BACKOFF_SECONDS` · 2^k): a refused or reset
connection, 5xx, 408, 429, a timeout, a short or overlong body, a stall. The notices go to
stderr when progress is shown.

The time bound. Connecting waits at most :data:`CONNECT_TIMEOUT` (10 s, per address of the host).
The status line and headers must arrive within :data:`~gpt2np.sources.session.HEAD_DEADLINE`
(15 s) however they trickle: a watchdog closes the socket. Any single read of the body waits at
most :data:`READ_TIMEOUT` (15 s). A body that brings fewer than :data:`STALL_BYTES` (64 KiB) in
:data:`STALL_SECONDS` (20 s), such as a server trickling a byte every few seconds, is cut and
resumed. A file fails after :data:`ATTEMPTS` (4) attempts in a row that each bring less than
64 KiB of new data. So a server that never answers fails in about 4 × 15 s + 3.5 s of backoff
≈ 64 s, an unreachable one in about 44 s, a trickling one in about 84 s; no attempt lasts longer
than 10 + 15 + 20 + 15 = 60 s, so no file waits more than about 4 minutes without progress.
A DNS failure, 4xx, a TLS error or an HTML page fail on the first request.

Where credentials go. :func:`~gpt2np.sources.session.new_session` sends ``Authorization`` along
a redirect only to the same origin (scheme, host, port) as the client itself parses the URLs:
``http://a\\@b/`` is a request to ``a``, whatever :mod:`urllib.parse` says.

What a failure leaves. A partial file stays in ``.incoming/`` only if a later call can resume it
(it has bytes, and a validator to resume them with) and the failure was not a refusal of the
file itself; otherwise it goes, with its ``origin.json`` and the empty ``.incoming/``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..errors import DownloadError
from ..support.atomic import write_bytes
from ..support.paths import fsync_dir
from ..support.progress import tqdm
from .session import HeadTimeout, new_session

if TYPE_CHECKING:  # imported where a request is made: `gpt2np --version` need not load it
    import requests

__all__ = [
    "RemoteFile",
    "Unreachable",
    "check",
    "content_md5",
    "fetch",
    "header_int",
    "new_session",
]

CONNECT_TIMEOUT = 10.0  # seconds to open a connection (per address of the host)
READ_TIMEOUT = 15.0  # longest silence: seconds any single read may wait
STALL_SECONDS = 20.0  # a response must bring STALL_BYTES within every window of this length
STALL_BYTES = 64 * 1024  # ... and an attempt that brings less than this made no progress
ATTEMPTS = 4  # attempts in a row without progress before a file fails
BACKOFF_SECONDS = 0.5  # sleep BACKOFF_SECONDS * 2**k before retry k (0.5, 1, 2 s)
VERIFY_ATTEMPTS = 2  # complete downloads that fail their check before a file fails
INCOMING = ".incoming"  # the directory beside dest where partial files arrive
READ_SIZE = 1 << 20  # most bytes taken from the socket in one read
HASH_BLOCK = 16 << 20  # bytes read at a time when hashing a file
RETRY_STATUSES = frozenset({408, 429})  # 4xx worth retrying, besides every 5xx
_DIGITS = frozenset("0123456789")

#: A check of a complete file's contents: why it is wrong, or None when it is right.
Check = Callable[[pathlib.Path], Optional[str]]


class Unreachable(DownloadError):
    """The server could not be reached, or kept failing: no network, a wrong host, timeouts.

    Copying the files by hand is then the way out, which the caller may say."""


class _Retry(Exception):
    """A transient failure: retry, resuming from what the partial file holds."""


class _Restart(_Retry):
    """A transient failure after which the partial file is not to be trusted: retry from 0."""


def header_int(value: Optional[str], header: str, url: str) -> Optional[int]:
    """The number a response header holds, None if it is absent. Only ASCII digits make a number
    (``int()`` takes "²", " 7", "+7" and "1_000"): anything else is a DownloadError naming the
    header and the URL."""
    if value is None:
        return None
    try:
        return _number(value)
    except ValueError:
        raise DownloadError(
            f"{url} sent {header}: {value[:40]!r}, which is not a byte count: refused"
        ) from None


def content_md5(headers: Mapping[str, str], whole: bool) -> dict[str, str]:
    """The MD5 a server declares for the whole file: ``Content-MD5`` of a whole-file answer
    (RFC 1864; Azure Blob Storage, OpenAI's bucket, sends it), or Azure's
    ``x-ms-blob-content-md5`` on any answer. {"md5": hex}, or {} if none or malformed."""
    value = headers.get("x-ms-blob-content-md5") or (headers.get("Content-MD5") if whole else None)
    try:
        digest = base64.b64decode(value or "", validate=True)
    except (binascii.Error, ValueError):
        return {}
    return {"md5": digest.hex()} if len(digest) == 16 else {}


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """One file to fetch from ``url`` into ``dest``, and what it must be once there.

    size: its exact size in bytes, if known beforehand (checked against Content-Length at once).
    digests: {hashlib name: hex digest} it must have, e.g. {"sha256": "..."}.
    verify: a check of the complete file's contents: ``verify(path)`` returns why it is wrong,
        or None if it is right.
    headers: extra request headers (credentials are never put in messages).
    declared: reads the digests a server declares in its response headers
        (``declared(headers, whole_file_answer)``); they are checked like ``digests``.
    allow_html: accept an HTML page (else one is refused at once, see the module docstring).
    label: the file's name in messages and progress bars (default: ``dest.name``).
    max_size: the most bytes the file may have when its exact size is not known beforehand
        (a config, a vocabulary): a longer answer is refused before it reaches the disk.
    resume_key: what a partial file must have been fetched for to be resumed (default: the
        URL; the Hub gives the content hash, as its CDN's signed URLs change on every request).
    """

    url: str
    dest: pathlib.Path
    size: Optional[int] = None
    digests: Mapping[str, str] = dataclasses.field(default_factory=dict)
    verify: Optional[Check] = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    declared: Callable[[Mapping[str, str], bool], dict[str, str]] = content_md5
    allow_html: bool = False
    label: str = ""
    max_size: Optional[int] = None
    resume_key: str = ""

    @property
    def name(self) -> str:
        return self.label or self.dest.name

    @property
    def part(self) -> pathlib.Path:
        """The partial file, while it is being received and checked."""
        return self.dest.parent / INCOMING / self.dest.name

    @property
    def origin_path(self) -> pathlib.Path:
        return self.dest.parent / INCOMING / (self.dest.name + ".origin.json")

    @property
    def key(self) -> str:
        """What the partial file's bytes were fetched for (see ``resume_key``)."""
        return self.resume_key or self.url

    @property
    def limit(self) -> Optional[int]:
        """The most bytes the file may have: its size, else ``max_size`` (None: no bound)."""
        return self.size if self.size is not None else self.max_size


def check(
    remote: RemoteFile, path: pathlib.Path, declared: Optional[Mapping[str, str]] = None
) -> Optional[str]:
    """Why ``path`` is not ``remote``'s file (size, then digests, then ``verify``), or None.

    ``declared``: digests the server declared for it, checked beside ``remote.digests``."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return f"it has {size} bytes, expected {remote.size}"
    wanted = {**(declared or {}), **remote.digests}
    if wanted:
        got = _digests(path, wanted)
        for algorithm, hexdigest in wanted.items():
            if got[algorithm] != hexdigest.lower():
                return f"its {algorithm.upper()} is {got[algorithm]}, expected {hexdigest}"
    return remote.verify(path) if remote.verify is not None else None


def fetch(remote: RemoteFile, session: requests.Session, progress: bool = False) -> None:
    """Bring ``remote`` to ``remote.dest``, verified, resuming a partial file left by an
    earlier call. Raises :class:`~gpt2np.DownloadError` naming the URL and file
    (:class:`Unreachable` when the server could not be reached or kept failing)."""
    with tqdm(
        total=remote.size, desc=remote.name, unit="B", unit_scale=True, unit_divisor=1024,
        disable=not progress, file=sys.stderr, dynamic_ncols=True,
    ) as bar:  # fmt: skip
        transfer = None
        try:
            if remote.size is not None and remote.max_size is not None:
                if remote.size > remote.max_size:
                    raise DownloadError(f"{remote.url}: {remote.name} is said to have "
                                        f"{remote.size} bytes, more than such a file may have "
                                        f"({remote.max_size}): refused")  # fmt: skip
            transfer = _Transfer(remote, session, bar, progress)
            transfer.run()
        except DownloadError as e:  # a refusal leaves nothing; a network failure what resumes
            if transfer is not None:
                transfer.give_up(resumable=isinstance(e, Unreachable))
            raise
        except OSError as e:  # our side (requests' errors are caught where they happen)
            if transfer is not None:
                transfer.give_up(resumable=True)
            raise DownloadError(
                f"could not save {remote.name} from {remote.url} in {remote.part}: {e}"
            ) from e
        except BaseException:  # an interrupt: what arrived is worth resuming
            if transfer is not None:
                transfer.give_up(resumable=True)
            raise


class _Transfer:
    """One fetch: where the partial file's bytes came from, and how the attempts went."""

    def __init__(self, remote: RemoteFile, session: requests.Session, bar: Any, progress: bool):
        self.remote, self.session, self.bar, self.progress = remote, session, bar, progress
        self.origin = _read_json(remote.origin_path)
        if self.origin.get("key", self.origin.get("url")) != remote.key:
            self._discard()

    def give_up(self, resumable: bool) -> None:
        """Keep the partial file only if ``resumable`` and a later call can resume it (it has
        bytes, and a validator for If-Range); remove ``.incoming/`` if nothing is left in it."""
        with contextlib.suppress(OSError):
            if not (resumable and _size(self.remote.part) and _validator(self.origin)):
                self._discard()
            self.remote.part.parent.rmdir()

    def run(self) -> None:
        failures, corrupt, best = 0, 0, _size(self.remote.part)
        while True:
            try:
                self._attempt()
                reason = check(self.remote, self.remote.part, self.origin.get("digests"))
                if reason is None:
                    self._install()
                    return
                self._discard()
                corrupt, failures, best = corrupt + 1, 0, 0  # a fresh download from byte 0
                if corrupt >= VERIFY_ATTEMPTS:
                    raise DownloadError(
                        f"{self.remote.name} from {self.remote.url} failed verification "
                        f"({corrupt} downloads): {reason}"
                    )
                self._say(f"{self.remote.name} failed verification ({reason}); fetching it again")
                continue
            except _Restart as e:
                self._discard()
                error: Exception = e
            except _Retry as e:
                error = e
            size = _size(self.remote.part)
            failures = 1 if size >= best + STALL_BYTES else failures + 1
            best = max(best, size)
            if failures >= ATTEMPTS:
                raise Unreachable(
                    f"could not download {self.remote.name} from {self.remote.url} "
                    f"({failures} attempts in a row brought nothing new): {error}"
                )
            delay = BACKOFF_SECONDS * 2 ** (failures - 1)
            self._say(f"{self.remote.name}: {error}; retrying in {delay:.1f} s")
            time.sleep(delay)

    def _attempt(self) -> None:
        """One request; returns once the partial file holds every byte, else raises _Retry."""
        remote, offset = self.remote, _size(self.remote.part)
        validator = _validator(self.origin)
        if offset and not validator:
            self._discard()  # nothing would tell us if the file changed since: start afresh
            offset = 0
        headers = dict(remote.headers)
        if offset and validator:
            headers["Range"] = f"bytes={offset}-"
            headers["If-Range"] = validator
        with self._request(headers) as resp:
            accepted = self._accept(resp, offset)
            if accepted is None:  # a 416: the partial file holds the whole file already
                return
            start, total = accepted
            self.bar.reset(total=total if total is not None else remote.size)
            self.bar.update(start)
            self._receive(resp, start, total)
        size, expected = _size(remote.part), total if total is not None else remote.size
        if expected is not None and size > expected:
            raise _Restart(f"received {size} bytes, more than the {expected} announced")
        if expected is not None and size < expected:
            raise _Retry(f"the connection closed after {size} of {expected} bytes")

    def _accept(self, resp: requests.Response, offset: int) -> Optional[tuple[int, Optional[int]]]:
        """(start, total) of a body worth receiving, None if the file is already whole; raises
        _Retry for what is transient and DownloadError for what is not."""
        remote, status = self.remote, resp.status_code
        if status == 416 and offset:  # the partial file holds everything already, or more
            if _content_range(resp.headers.get("Content-Range"))[1] == offset:
                return None
            raise _Restart(f"HTTP 416 for bytes {offset}-")
        if status in RETRY_STATUSES or 500 <= status < 600:
            raise _Retry(f"HTTP {status} {resp.reason}")
        if status not in (200, 206):
            raise DownloadError(
                f"could not download {remote.name} from {remote.url}: HTTP {status} {resp.reason}"
            )
        self._refuse_html(resp.headers.get("Content-Type", ""), b"")
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise DownloadError(
                f"{remote.url} sent {remote.name} in Content-Encoding {encoding[:40]!r}, though "
                f"it was asked for the bytes as they are (identity): refused"
            )
        if status == 206:
            start, total = self._check_resumed(resp, offset)
            if not offset:
                self._begin(resp, total)
        else:  # the whole file: the server ignored Range, or If-Range found it changed
            if offset:
                self._say(f"{remote.name}: the server sent the whole file again")
            start, total = 0, header_int(resp.headers.get("Content-Length"), "Content-Length",
                                         remote.url)  # fmt: skip
            self._begin(resp, total)
        if remote.size is not None and total is not None and total != remote.size:
            raise DownloadError(
                f"{remote.url} announces {total} bytes for {remote.name}, "
                f"expected {remote.size}: not the file asked for"
            )
        if remote.max_size is not None and total is not None and total > remote.max_size:
            raise DownloadError(
                f"{remote.url} announces {total} bytes for {remote.name}, more than such a "
                f"file may have ({remote.max_size}): refused"
            )
        framed = total is not None or "chunked" in resp.headers.get("Transfer-Encoding", "")
        if not (framed or remote.size is not None or remote.digests or self.origin["digests"]):
            raise DownloadError(
                f"{remote.url} sent {remote.name} with no Content-Length, so a cut transfer "
                f"could not be told from a whole one, and there is no size or digest to check "
                f"it against: refused"
            )
        return start, total

    def _request(self, headers: dict[str, str]) -> requests.Response:
        import requests

        remote = self.remote
        try:
            return self.session.get(
                remote.url, headers=headers, stream=True, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
            )
        except requests.exceptions.SSLError as e:
            raise DownloadError(
                f"TLS error fetching {remote.name} from {remote.url}: {_root_cause(e)} (a proxy "
                f"or antivirus intercepting HTTPS? REQUESTS_CA_BUNDLE can name its certificate)"
            ) from e
        except requests.exceptions.ConnectionError as e:
            if any(isinstance(c, socket.gaierror) for c in _causes(e)):
                raise Unreachable(
                    f"could not download {remote.name} from {remote.url}: the host name "
                    f"does not resolve ({_root_cause(e)}): no network, or a wrong URL"
                ) from e
            raise _Retry(_root_cause(e)) from e
        except requests.exceptions.Timeout as e:  # the read timeout while waiting for headers
            late = [str(c) for c in _causes(e) if isinstance(c, HeadTimeout)]
            raise _Retry(late[0] if late else f"no answer within {READ_TIMEOUT:g} s") from e
        except requests.exceptions.RequestException as e:  # a malformed URL, too many redirects
            raise DownloadError(f"could not download {remote.name} from {remote.url}: {e}") from e

    def _check_resumed(self, resp: requests.Response, offset: int) -> tuple[int, Optional[int]]:
        """(start, total) of a 206 that continues the partial file; _Restart if it does not."""
        start, total = _content_range(resp.headers.get("Content-Range"))
        if start != offset:
            raise _Restart(f"asked for byte {offset}, the server sent from byte {start}")
        etag, ours = resp.headers.get("ETag"), self.origin.get("etag")
        if etag and ours and etag != ours:
            raise _Restart(f"the file changed on the server (ETag {ours} -> {etag})")
        if total is not None and self.origin.get("total") not in (None, total):
            raise _Restart(f"the file changed on the server ({self.origin['total']} -> {total} B)")
        return start, total

    def _begin(self, resp: requests.Response, total: Optional[int]) -> None:
        """A whole-file answer: empty the partial file, record where its bytes now come from."""
        etag = resp.headers.get("ETag")
        self.origin = {
            "url": self.remote.url,
            "key": self.remote.key,
            "etag": etag if etag and not etag.startswith("W/") else None,  # If-Range: strong only
            "last_modified": resp.headers.get("Last-Modified"),
            "total": total,
            "digests": self.remote.declared(resp.headers, resp.status_code == 200),
        }
        self.remote.part.parent.mkdir(exist_ok=True)
        self.remote.part.write_bytes(b"")
        write_json(self.remote.origin_path, self.origin)

    def _receive(self, resp: requests.Response, start: int, total: Optional[int]) -> None:
        """Append the body to the partial file, cutting the response if it stalls or runs past
        the size the file must have."""
        read = _reader(resp)
        window_start, window_bytes = time.monotonic(), 0
        limit = total if total is not None else self.remote.limit
        with open(self.remote.part, "ab") as f:
            while True:
                try:
                    data = read(READ_SIZE)
                except Exception as e:  # reset, cut, timeout: any broken read is transient
                    raise _Retry(f"the connection broke: {_root_cause(e)}") from e
                if not data:
                    return
                if start == 0 and f.tell() == 0:
                    self._refuse_html("", data)
                if limit is not None and f.tell() + len(data) > limit:
                    self._overflow(limit)
                f.write(data)
                self.bar.update(len(data))
                window_bytes += len(data)
                now = time.monotonic()
                if now - window_start >= STALL_SECONDS:
                    if window_bytes < STALL_BYTES:
                        raise _Retry(
                            f"stalled: {window_bytes} bytes in {now - window_start:.1f} s "
                            f"(less than {STALL_BYTES} per {STALL_SECONDS:g} s)"
                        )
                    window_start, window_bytes = now, 0

    def _overflow(self, limit: int) -> None:
        """The body runs past ``limit`` bytes: past the file's known size (the answer is wrong:
        retried from byte 0), or past its ``max_size`` (not such a file: refused)."""
        remote = self.remote
        if remote.size is None and remote.max_size is not None and limit == remote.max_size:
            raise DownloadError(
                f"{remote.url} sent more than {limit} bytes for {remote.name}, more than such "
                f"a file may have: refused"
            )
        raise _Restart(f"the body runs past the {limit} bytes of {remote.name}")

    def _refuse_html(self, content_type: str, first_bytes: bytes) -> None:
        mime = content_type.split(";")[0].strip().lower()
        head = first_bytes[:512].lstrip().lower()
        if self.remote.allow_html or not (
            mime in ("text/html", "application/xhtml+xml")
            or head.startswith((b"<!doctype html", b"<html"))
        ):
            return
        raise DownloadError(
            f"{self.remote.url} answered with an HTML page instead of {self.remote.name}: a "
            f"network that wants a login first (hotel or airport Wi-Fi), a proxy's error page, "
            f"or a wrong URL. Open the URL in a browser to see which."
        )

    def _install(self) -> None:
        part, dest = self.remote.part, self.remote.dest
        with open(part, "rb") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the name says they are whole
        os.replace(part, dest)
        self.remote.origin_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # others may still be arriving there
            part.parent.rmdir()
        fsync_dir(dest.parent)

    def _discard(self) -> None:
        self.remote.part.unlink(missing_ok=True)
        self.remote.origin_path.unlink(missing_ok=True)
        self.origin = {"digests": {}}

    def _say(self, message: str) -> None:
        if self.progress:
            tqdm.write(message, file=sys.stderr)


def _reader(resp: requests.Response) -> Callable[[int], bytes]:
    """``read(n)``: whatever the socket has, up to n bytes, after at most one read of it, so
    a trickle of bytes comes back a few at a time (``read(n)`` would wait for all n)."""
    raw = resp.raw
    if hasattr(raw, "read1"):  # urllib3 >= 2
        return lambda n: raw.read1(n, decode_content=False)
    legacy: Any = raw  # urllib3 1.26, which the stubs (urllib3 2's) do not describe
    read1: Callable[[int], bytes] = legacy._fp.read1  # http.client's response under it
    return read1


def _validator(origin: Mapping[str, Any]) -> Optional[str]:
    return origin.get("etag") or origin.get("last_modified")


def _content_range(value: Optional[str]) -> tuple[Optional[int], Optional[int]]:
    """``bytes START-END/TOTAL`` (or ``bytes */TOTAL``) -> (START or None, TOTAL or None)."""
    try:
        if value is None:
            raise ValueError(value)
        unit, spec = value.split(" ", 1)
        span, total = spec.split("/")
        if unit != "bytes":
            raise ValueError(unit)
        start = None if span == "*" else _number(span.split("-")[0])
        return start, (None if total == "*" else _number(total))
    except ValueError:
        raise _Restart(f"unreadable Content-Range {value!r}") from None


def _number(text: str) -> int:
    """ASCII digits only (``int()`` takes "²", "+7" and "1_000"); else ValueError."""
    if not text or not set(text) <= _DIGITS or len(text) > 30:
        raise ValueError(text)
    return int(text)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and everything it wraps: requests -> urllib3's MaxRetryError.reason -> ..."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        context = None if e.__suppress_context__ else e.__context__  # "raise ... from None"
        wrapped = [getattr(e, "reason", None), e.__cause__, context, *e.args]
        todo.extend(w for w in wrapped if isinstance(w, BaseException))


def _root_cause(error: BaseException) -> str:
    """The innermost error's message: '[Errno 111] Connection refused', not urllib3's page."""
    last = error
    for last in _causes(error):  # noqa: B007 (the last one is the innermost)
        pass
    return str(last) or type(last).__name__


def _digests(path: pathlib.Path, algorithms: Mapping[str, str]) -> dict[str, str]:
    hashes = {a: hashlib.new(a, usedforsecurity=a != "md5") for a in algorithms}
    with open(path, "rb") as f:
        while block := f.read(HASH_BLOCK):
            for h in hashes.values():
                h.update(block)
    return {a: h.hexdigest() for a, h in hashes.items()}


def _size(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"digests": {}}
    if not isinstance(value, dict) or not isinstance(value.get("digests", {}), dict):
        return {"digests": {}}
    return {"digests": {}, **value}


def write_json(path: pathlib.Path, value: dict[str, Any]) -> None:
    write_bytes(path, json.dumps(value, indent=1))
