"""The HTTP session every download uses: a deadline on each response head, and credentials that
follow a redirect only to the same origin, as the client itself parses URLs.

**The deadline.** requests bounds each read of the socket (its read timeout), not the whole
wait for a response: a server that sends its status line and headers one byte a second would
hold a request for ever, every read getting its byte in time. Every connection of
:func:`new_session` starts a watchdog when it begins to wait for a response; if the status line
and headers are not complete within :data:`HEAD_DEADLINE`, it shuts the socket down, and the
request fails with a :class:`HeadTimeout` (through requests' ``ReadTimeout``). Inside
:func:`deadline`, one bound holds for every response head waited for, across the hops of a
redirect chain and the retries of a caller: each hop waits at most what is left of it, and a
hop answered after it has passed fails too, so 30 hops that each answer within
:data:`HEAD_DEADLINE` cannot add up to minutes. Its clock is :data:`clock` (a test may set
its own).

**The origin.** URLs with a backslash or other oddities are read differently by
:mod:`urllib.parse` and by urllib3, which opens the connection:
``http://127.0.0.2:80\\@127.0.0.1:80/`` is a URL of 127.0.0.1 to ``urlsplit`` but a request to
127.0.0.2 for requests. :func:`origin` reads a URL as requests does when it connects, and the
session drops ``Authorization`` on a redirect to any other origin (requests' own check uses
``urlparse``, and would keep it there).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import ipaddress
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # imported when a session is made: `gpt2np --version` need not load it
    import requests

__all__ = ["HEAD_DEADLINE", "HeadTimeout", "deadline", "expired", "new_session", "origin"]

HEAD_DEADLINE = 15.0  # seconds from sending a request to its complete status line and headers
clock = time.monotonic  # the clock of :func:`deadline` (read at each use: a test may replace it)
#: (end by ``clock``, its length in seconds) of the innermost :func:`deadline`, if any
_END: contextvars.ContextVar[Optional[tuple[float, float]]] = contextvars.ContextVar(
    "gpt2np_deadline", default=None
)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every response head waited for inside (each hop of a redirect chain, each retry) must be
    complete within ``seconds`` from now, in all; an enclosing deadline that ends sooner
    holds."""
    end = (clock() + seconds, seconds)
    outer = _END.get()
    token = _END.set(end if outer is None or end[0] < outer[0] else outer)
    try:
        yield
    finally:
        _END.reset(token)


def expired(within: float = 0.0) -> bool:
    """Whether the current :func:`deadline` ends within ``within`` seconds (False outside
    one)."""
    end = _END.get()
    return end is not None and clock() + within >= end[0]


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


def check_host(url: str) -> str:
    """``url``, or ValueError when its host is in brackets but is not an IPv6 address
    (``http://[127.0.0.2]/``). urllib.parse refuses such a host from Python 3.11.4 on; older
    Pythons let it through to the connection, so the check is made here, alike on every one."""
    host = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    if host.startswith("["):
        inside = host[1:].partition("]")[0]
        try:
            ipaddress.IPv6Address(inside.partition("%")[0])
        except ValueError:
            raise ValueError(f"{inside!r} in brackets is not an IPv6 address") from None
    return url


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
        deadline, end, across = HEAD_DEADLINE, _END.get(), False
        if end is not None and end[0] - clock() < deadline:  # less is left of the whole bound
            deadline, across = end[0] - clock(), True
            if deadline <= 0:  # the request went out after the deadline: no use waiting
                raise _late(0, end[1])
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
                raise _late(deadline, end[1] if end and across else None) from None
            raise
        timer.cancel()
        if not watch.arrived():
            response.close()
            raise _late(deadline, end[1] if end and across else None)
        if end is not None and clock() > end[0]:  # this hop came after the whole bound
            response.close()
            raise _late(0, end[1])
        return response


def _late(waited: float, bound: Optional[float] = None) -> HeadTimeout:
    """The error of a response head that did not come in ``waited`` seconds: HEAD_DEADLINE,
    or what was left of a :func:`deadline` of ``bound`` seconds."""
    if bound is not None and waited <= 0:
        return HeadTimeout(f"no answer within {bound:.2g} s for this request, its redirects "
                           "and retries (the server is slow)")  # fmt: skip
    why = "(the server trickles)"
    if bound is not None:  # what was left of it: say both bounds, not a number of this run
        why = f"or by the end of the {bound:.2g} s this request, its redirects and retries have"
    return HeadTimeout(f"no complete response head within {HEAD_DEADLINE:g} s {why}")


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
        def get_redirect_target(self, resp: requests.Response) -> Optional[str]:
            target = super().get_redirect_target(resp)
            if target:  # ValueError, as urllib.parse raises on Python 3.11.4 and later
                check_host(urllib.parse.urljoin(resp.url, target))
            return target

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
