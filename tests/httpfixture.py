"""A loopback HTTP file server with injectable faults, for the download tests.

``Bucket`` holds the files (URL path -> bytes), the faults to inject and a log of every request;
``serve(bucket)`` runs it on 127.0.0.1 (a free port) in a thread and yields the base URL.
Nothing here touches the network beyond the loopback interface.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import re
import threading
import time
from collections.abc import Iterator

PIECE = 64 * 1024  # the server writes bodies in pieces of this size


@dataclasses.dataclass
class Served:
    """One request as the server saw it."""

    path: str
    range: str | None
    status: int
    sent: int = 0  # body bytes written
    finished: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)


@dataclasses.dataclass
class Bucket:
    files: dict[str, bytes]
    range_support: bool = True
    #: path -> statuses answered (one per request) before the file is served normally
    statuses: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    #: path -> number of requests answered by closing the connection without a response
    drop: dict[str, int] = dataclasses.field(default_factory=dict)
    #: path -> close the connection after this many body bytes (once; Content-Length is full)
    cut_at: dict[str, int] = dataclasses.field(default_factory=dict)
    #: path -> go silent for this many seconds halfway through the body (once)
    stall: dict[str, float] = dataclasses.field(default_factory=dict)
    #: path -> answer the next ranged request with a 206 starting this many bytes off (once)
    wrong_start: dict[str, int] = dataclasses.field(default_factory=dict)
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
        record = Served(self.path.lstrip("/"), self.headers.get("Range"), 0)
        with self.server.bucket.lock:
            self.server.bucket.log.append(record)
        try:
            self._answer(record)
        finally:
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
            stall = bucket.stall.pop(path, None)
            shift = bucket.wrong_start.pop(path, 0) if rng is not None else 0
        if dropped:
            self.close_connection = True  # the client sees the connection close, no response
            return
        if status is None and path not in bucket.files:
            status = 404
        if status is not None:
            record.status = status
            self._reply_empty(status)
            return
        data = bucket.files[path]
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if bucket.range_support and match:
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
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self._send_body(record, data[start:], cut, stall)

    def _reply_empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_body(self, record: Served, body: bytes, cut: int | None, stall: float | None):
        limit = len(body) if cut is None else min(cut, len(body))
        try:
            for i in range(0, limit, PIECE):
                if stall is not None and i >= limit // 2:
                    time.sleep(stall)
                    stall = None
                piece = body[i : min(i + PIECE, limit)]
                self.wfile.write(piece)
                record.sent += len(piece)
                if self.server.bucket.piece_delay:
                    time.sleep(self.server.bucket.piece_delay)
            self.wfile.flush()
        except OSError:  # the client gave up (e.g. after its read timeout)
            self.close_connection = True
        if cut is not None:
            self.close_connection = True  # the client sees fewer bytes than Content-Length


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    bucket: Bucket


@contextlib.contextmanager
def serve(bucket: Bucket) -> Iterator[str]:
    """Run ``bucket`` on 127.0.0.1 in a thread; yield its base URL ``http://127.0.0.1:PORT``."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.bucket = bucket
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused), like a machine offline."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
