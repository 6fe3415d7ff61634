"""A loopback HTTP file server with injectable faults, for the download tests.

``Bucket`` holds the files (URL path -> bytes), the faults to inject and a log of every request;
``serve(bucket)`` runs it on 127.0.0.1 (a free port) in a thread and yields the base URL.
Nothing here touches the network beyond the loopback interface.

The faults imitate what a client meets in the field: 5xx and 4xx answers, connections dropped
before the answer or reset in the middle of the body, a Content-Length that is too short or too
long, a body with no length at all that is cut, a file that changes between two requests (with
or without an ETag, and a server that ignores If-Range), a server that trickles its body a
byte at a time, or its status line and headers, one that never answers, one that sends an
endless chunked body, and an HTML page where the file should be.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import email.utils
import gzip
import hashlib
import http.server
import re
import select
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator

PIECE = 4096  # the server writes bodies in pieces of this size
ENDLESS_LIMIT = 256 << 20  # the most bytes an "endless" body sends (a test must end)


@dataclasses.dataclass
class Served:
    """One request as the server saw it."""

    path: str
    range: str | None
    status: int
    if_range: str | None = None
    sent: int = 0  # body bytes written
    hung_up: bool = False  # the client closed the connection before the server was done
    headers: dict[str, str] = dataclasses.field(default_factory=dict)  # the request's
    finished: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)


def etag_of(data: bytes) -> str:
    """The strong ETag the bucket gives a file: a quoted hash of its bytes."""
    return '"' + hashlib.sha256(data).hexdigest()[:20] + '"'


def last_modified_of(data: bytes) -> str:
    """The Last-Modified the bucket gives a file: a date that changes with its bytes."""
    seconds = 1_600_000_000 + int(hashlib.sha256(data).hexdigest()[:6], 16)
    return email.utils.formatdate(seconds, usegmt=True)


@dataclasses.dataclass
class Bucket:
    files: dict[str, bytes]
    range_support: bool = True
    etags: bool = True  # send a strong ETag and honour If-Range against it
    last_modified: bool = False  # send Last-Modified and honour If-Range against it
    ignore_if_range: bool = False  # answer a Range with 206 even when If-Range does not match
    content_md5: bool = False  # send Content-MD5 (base64 MD5 of the whole file) with a 200
    content_type: str = "application/octet-stream"
    #: path -> extra or replaced response headers for that file
    headers: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    #: path -> statuses answered (one per request) before the file is served normally
    statuses: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    #: path -> number of requests answered by closing the connection without a response
    drop: dict[str, int] = dataclasses.field(default_factory=dict)
    #: path -> close the connection after this many body bytes (once; Content-Length is full)
    cut_at: dict[str, int] = dataclasses.field(default_factory=dict)
    #: path -> reset the connection (TCP RST) after this many body bytes (once)
    reset_at: dict[str, int] = dataclasses.field(default_factory=dict)
    #: path -> go silent for this many seconds halfway through the body (once)
    stall: dict[str, float] = dataclasses.field(default_factory=dict)
    #: path -> announce this Content-Length instead of the true one (every time); the body is
    #: written whole, and the connection closed after it
    length: dict[str, int] = dataclasses.field(default_factory=dict)
    #: paths whose answer has no Content-Length: the body ends when the connection closes
    no_length: set[str] = dataclasses.field(default_factory=set)
    #: path -> (seconds, n): for the next n requests, send the body one byte every seconds
    trickle: dict[str, tuple[float, int]] = dataclasses.field(default_factory=dict)
    #: path -> read the request, then say nothing for this many seconds (every request)
    silent: dict[str, float] = dataclasses.field(default_factory=dict)
    #: path -> answer the next ranged request with a 206 starting this many bytes off (once)
    wrong_start: dict[str, int] = dataclasses.field(default_factory=dict)
    #: path -> (seconds, limit): send the status line and headers one byte every ``seconds``,
    #: never ending them, until the client hangs up or ``limit`` seconds passed (every request)
    head_trickle: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    #: paths whose body is chunked and endless: the file, then zeros, until the client hangs
    #: up or ENDLESS_LIMIT bytes were sent
    endless: set[str] = dataclasses.field(default_factory=set)
    #: paths sent gzip-compressed, with Content-Encoding: gzip (whatever the client asked for)
    gzip: set[str] = dataclasses.field(default_factory=set)
    piece: int = PIECE
    piece_delay: float = 0.0  # seconds between pieces, to make transfers overlap
    log: list[Served] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def served(self) -> list[Served]:
        """Every request so far, once its handler has finished writing (the client may have
        returned before the server thread counted its last bytes)."""
        with self.lock:
            log = list(self.log)
        for r in log:
            assert r.finished.wait(10), f"handler for {r.path} still running"
        return log

    def requests_for(self, path: str) -> list[Served]:
        return [r for r in self.served() if r.path == path]

    def bytes_sent(self) -> int:
        return sum(r.sent for r in self.served())


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each small write waits ~40 ms for a delayed ACK
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        record = Served(
            urllib.parse.urlsplit(self.path).path.lstrip("/"),  # a signed URL's query aside
            self.headers.get("Range"),
            0,
            self.headers.get("If-Range"),
            headers=dict(self.headers),
        )
        with self.server.bucket.lock:
            self.server.bucket.log.append(record)
        try:
            self._answer(record)
        finally:
            record.finished.set()

    def do_HEAD(self) -> None:  # logged, and answered with the status a GET would get
        record = Served(urllib.parse.urlsplit(self.path).path.lstrip("/"), None, 0,
                        headers=dict(self.headers))  # fmt: skip
        with self.server.bucket.lock:
            self.server.bucket.log.append(record)
        data = self.server.bucket.files.get(record.path)
        record.status = 404 if data is None else 200
        self._reply_empty(record.status, {} if data is None else {"X-Size": str(len(data))})
        record.finished.set()

    def _answer(self, record: Served) -> None:
        bucket, path, rng = self.server.bucket, record.path, record.range
        with bucket.lock:
            queued = bucket.statuses.get(path)
            status = queued.pop(0) if queued else None
            dropped = bucket.drop.get(path, 0) > 0
            if dropped:
                bucket.drop[path] -= 1
            cut = bucket.cut_at.pop(path, None)
            reset = bucket.reset_at.pop(path, None)
            stall = bucket.stall.pop(path, None)
            shift = bucket.wrong_start.pop(path, 0) if rng is not None else 0
            every, left = bucket.trickle.get(path, (0.0, 0))
            if left:
                bucket.trickle[path] = (every, left - 1)
        if dropped:
            self.close_connection = True  # the client sees the connection close, no response
            return
        if path in bucket.silent:
            self._say_nothing(bucket.silent[path])
            return
        if path in bucket.head_trickle:
            self._trickle_head(record, *bucket.head_trickle[path])
            return
        if status is None and path not in bucket.files:
            status = 404
        if status is not None:
            record.status = status
            self._reply_empty(status)
            return
        data = bucket.files[path]
        if path in bucket.gzip:
            data = gzip.compress(data, mtime=0)
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if bucket.range_support and match and self._if_range_holds(data):
            start = max(0, int(match.group(1)) + shift)
            if start >= len(data):
                record.status = 416
                self._reply_empty(416, {"Content-Range": f"bytes */{len(data)}"})
                return
            record.status = 206
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            record.status = 200
            self.send_response(200)
            if bucket.content_md5:
                md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
                self.send_header("Content-MD5", md5)
        headers = {"Content-Type": bucket.content_type, "Accept-Ranges": "bytes"}
        if path in bucket.gzip:
            headers["Content-Encoding"] = "gzip"
        if bucket.etags:
            headers["ETag"] = etag_of(data)
        if bucket.last_modified:
            headers["Last-Modified"] = last_modified_of(data)
        if path in bucket.no_length:
            headers["Connection"] = "close"
            self.close_connection = True
        else:
            headers["Content-Length"] = str(bucket.length.get(path, len(data) - start))
            if path in bucket.length:
                self.close_connection = True  # else the client waits for the missing bytes
        if path in bucket.endless:
            headers.pop("Content-Length", None)
            headers["Transfer-Encoding"] = "chunked"
        headers.update(bucket.headers.get(path, {}))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if path in bucket.endless:
            self._endless(record, data[start:])
            return
        if left:
            self._trickle(record, data[start:], every)
            return
        self._send_body(record, data[start:], cut, stall, reset)

    def _if_range_holds(self, data: bytes) -> bool:
        """RFC 9110 13.1.5: a Range is honoured only if If-Range (when sent) still matches."""
        bucket, validator = self.server.bucket, self.headers.get("If-Range")
        if validator is None or bucket.ignore_if_range:
            return True
        if validator.startswith('"'):
            return bucket.etags and validator == etag_of(data)
        return bucket.last_modified and validator == last_modified_of(data)

    def _reply_empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _say_nothing(self, seconds: float) -> None:
        """No status line, no headers: wait until the client hangs up or ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                break  # the client closed the connection
        self.close_connection = True

    def _trickle_head(self, record: Served, every: float, limit: float) -> None:
        """A status line, then a header line that never ends, one byte at a time."""
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nX-Slow: "
        deadline = time.monotonic() + limit
        try:
            for i in range(1 << 30):
                if time.monotonic() > deadline:
                    break
                self.wfile.write(head[i : i + 1] if i < len(head) else b"a")
                self.wfile.flush()
                time.sleep(every)
        except OSError:
            record.hung_up = True
        self.close_connection = True

    def _endless(self, record: Served, body: bytes) -> None:
        """``body`` as chunks, then zeros for ever (up to ENDLESS_LIMIT bytes)."""
        try:
            zeros = bytes(1 << 16)
            for piece in (body, *([zeros] * (ENDLESS_LIMIT // len(zeros)))):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                record.sent += len(piece)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            record.hung_up = True
        self.close_connection = True

    def _trickle(self, record: Served, body: bytes, every: float) -> None:
        """One byte, then a pause, until the body is sent or the client hangs up."""
        try:
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                record.sent += 1
                time.sleep(every)
        except OSError:
            pass
        self.close_connection = True

    def _send_body(
        self,
        record: Served,
        body: bytes,
        cut: int | None,
        stall: float | None,
        reset: int | None,
    ) -> None:
        limit = len(body) if cut is None else min(cut, len(body))
        if reset is not None:
            limit = min(reset, len(body))
        step = self.server.bucket.piece
        try:
            for i in range(0, limit, step):
                if stall is not None and i >= limit // 2:
                    time.sleep(stall)
                    stall = None
                piece = body[i : min(i + step, limit)]
                self.wfile.write(piece)
                record.sent += len(piece)
                if self.server.bucket.piece_delay:
                    time.sleep(self.server.bucket.piece_delay)
            self.wfile.flush()
        except OSError:  # the client gave up (e.g. after its read timeout)
            self.close_connection = True
        if cut is not None:
            self.close_connection = True  # the client sees fewer bytes than Content-Length
        if reset is not None:
            self._reset()

    def _reset(self) -> None:
        """Close with SO_LINGER 0: the kernel sends RST, the client reads ECONNRESET."""
        self.close_connection = True
        time.sleep(0.05)  # let the bytes already written reach the client first
        self.rfile.close()  # the socket is really closed only when no file object holds it
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    bucket: Bucket

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up mid-answer, or spoke TLS: expected here, not news


@contextlib.contextmanager
def serve(bucket: Bucket, host: str = "127.0.0.1") -> Iterator[str]:
    """Run ``bucket`` on ``host`` (a loopback address) in a thread; yield its base URL
    ``http://HOST:PORT``."""
    server = _Server((host, 0), _Handler)
    server.bucket = bucket
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused), like a machine offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
