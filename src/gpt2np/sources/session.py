"""The HTTP session every download uses: a deadline on each response head, and credentials that
follow a redirect only to the same origin, as the client itself parses URLs.

**The deadline.** requests bounds each read of the socket (its read timeout), not the whole
wait for a response: a server that sends its status line and headers one byte a second would
hold a request for ever, every read getting its byte in time. Every connection of
:func:`new_session` starts a watchdog when it begins to wait for a response; if the status line
and headers are not complete within :data:`HEAD_DEADLINE`, it shuts the socket down, and the
request fails with a :class:`HeadTimeout` (through requests' ``ReadTimeout``).

**The origin.** URLs with a backslash or other oddities are read differently by
:mod:`urllib.parse` and by urllib3, which opens the connection:
``http://127.0.0.2:80\\@127.0.0.1:80/`` is a URL of 127.0.0.1 to ``urlsplit`` but a request to
127.0.0.2 for requests. :func:`origin` reads a URL as requests does when it connects, and the
session drops ``Authorization`` on a redirect to any other origin (requests' own check uses
``urlparse``, and would keep it there).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # imported when a session is made: `gpt2np --version` need not load it
    import requests

__all__ = ["HEAD_DEADLINE", "HeadTimeout", "new_session", "origin"]

HEAD_DEADLINE = 15.0  # seconds from sending a request to its complete status line and headers


class HeadTimeout(TimeoutError):
    """The response's status line and headers did not arrive within :data:`HEAD_DEADLINE`."""


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url`` as requests connects to it. The URL is prepared as
    requests prepares a request's (urllib3 parses it and it is written out again, a backslash
    in the path percent-encoded), so the parts of the result are unambiguous. ValueError for a
    URL requests refuses."""
    import requests

    try:
        prepared = requests.Request("GET", url).prepare().url or ""
        parts = urllib.parse.urlsplit(prepared)
        scheme = parts.scheme.lower()
        port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    except (requests.exceptions.RequestException, ValueError) as e:
        raise ValueError(f"not a URL requests can fetch: {url!r} ({e})") from None
    return scheme, (parts.hostname or "").lower(), port


def same_origin(a: str, b: str) -> bool:
    """Whether requests would connect to one origin for ``a`` and ``b`` (False for a URL it
    refuses)."""
    try:
        return origin(a) == origin(b)
    except ValueError:
        return False


def new_session() -> requests.Session:
    """A session for :func:`gpt2np.sources.http.fetch` and the hub: byte offsets must mean the
    file's bytes, not gzip's (``Accept-Encoding: identity``); every response head has a
    deadline; credentials follow redirects to the same origin only."""
    session_class, adapter_class = _classes()
    session = session_class()
    session.headers["User-Agent"] = "gpt2np"
    session.headers["Accept-Encoding"] = "identity"
    adapter = adapter_class()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class _Watch:
    """Shuts ``sock`` down when fired, unless the response head arrived first."""

    def __init__(self, sock: Optional[socket.socket]) -> None:
        self.sock, self.lock, self.state = sock, threading.Lock(), "waiting"

    def fire(self) -> None:
        with self.lock:
            if self.state != "waiting":
                return
            self.state = "cut"
        if self.sock is not None:  # the raw socket, under any TLS: the blocked read wakes up
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def arrived(self) -> bool:
        """Mark the head arrived; False if the watchdog cut it first."""
        with self.lock:
            if self.state == "cut":
                return False
            self.state = "done"
            return True


class _Deadline:
    """A connection whose ``getresponse`` (the wait for the status line and headers) ends
    within HEAD_DEADLINE."""

    sock: Optional[socket.socket]

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        deadline = HEAD_DEADLINE
        watch = _Watch(self.sock)
        timer = threading.Timer(deadline, watch.fire)
        timer.daemon = True
        timer.start()
        try:
            # the connection class this is mixed into has getresponse; the mixin alone does not
            response = super().getresponse(*args, **kwargs)  # type: ignore[misc]  # (above)
        except BaseException:
            timer.cancel()
            if not watch.arrived():  # the error is the shut socket's: say why it was shut
                raise _late(deadline) from None
            raise
        timer.cancel()
        if not watch.arrived():
            response.close()
            raise _late(deadline)
        return response


def _late(deadline: float) -> HeadTimeout:
    return HeadTimeout(f"no complete response head within {deadline:g} s (the server trickles)")


def _with_deadline(pools: Mapping[str, Any]) -> dict[str, Any]:
    """urllib3's pool classes (scheme -> class), each making :class:`_Deadline` connections."""
    out = {}
    for scheme, pool in pools.items():
        name = pool.ConnectionCls.__name__
        connection = type(f"Deadline{name}", (_Deadline, pool.ConnectionCls), {})
        out[scheme] = type(f"Deadline{pool.__name__}", (pool,), {"ConnectionCls": connection})
    return out


@functools.cache
def _classes() -> tuple[type[requests.Session], type[requests.adapters.HTTPAdapter]]:
    """The session and adapter classes, made once, when the first session is: they subclass
    requests', which is imported only then."""
    import requests

    class _Session(requests.Session):
        def should_strip_auth(self, old_url: str, new_url: str) -> bool:
            # types-requests leaves should_strip_auth untyped
            theirs = super().should_strip_auth(old_url, new_url)  # type: ignore[no-untyped-call]  # (above)
            return bool(theirs) or not same_origin(old_url, new_url)

    class _Adapter(requests.adapters.HTTPAdapter):
        """requests' adapter with the connections of :class:`_Deadline` (directly and through
        an HTTP proxy; a SOCKS proxy keeps its own connections, without the deadline)."""

        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self._plain = dict(self.poolmanager.pool_classes_by_scheme)
            self._pools = _with_deadline(self._plain)
            self.poolmanager.pool_classes_by_scheme = self._pools

        def proxy_manager_for(self, proxy: Any, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            if dict(manager.pool_classes_by_scheme) == self._plain:  # not SOCKS's
                manager.pool_classes_by_scheme = self._pools
            return manager

    return _Session, _Adapter
