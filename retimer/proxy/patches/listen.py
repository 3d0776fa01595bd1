"""The listener for `retimer --workers N`: mitmproxy's TCP listener opened with SO_REUSEPORT, so
N worker processes listen on one address and the kernel spreads connections among them.

mitmproxy opens its listener with `asyncio.start_server(...)` inside
`AsyncioServerInstance.listen` (mitmproxy/proxy/mode_servers.py) and has no option for
SO_REUSEPORT; this module wraps that method (one of retimer's patches, `retimer.proxy.patches`),
and checks what it wraps at start-up (`InternalsMissing`, one line).
A worker calls `install()` before the proxy starts; a single `retimer` never does.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from mitmproxy.proxy import mode_servers

from retimer.proxy.patches import require


class NoReusePort(RuntimeError):
    """This system has no SO_REUSEPORT: several processes cannot share one listening address."""


def check_reuse_port() -> None:
    """Fail with one line (`NoReusePort`) where the OS lacks SO_REUSEPORT."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise NoReusePort("--workers: this system has no SO_REUSEPORT, so several workers cannot "
                          "share one listening port; use --workers 1")


def check_internals() -> None:
    """Fail with one line when mitmproxy no longer opens its listener where this wraps it."""
    server = getattr(mode_servers, "AsyncioServerInstance", None)
    require({
        "mode_servers.AsyncioServerInstance": server,
        "AsyncioServerInstance.listen": getattr(server, "listen", None),
        "AsyncioServerInstance.handle_stream": getattr(server, "handle_stream", None),
    }, "retimer --workers")


_installed = False


def install() -> None:
    """Make every TCP listener mitmproxy opens in this process share its port (SO_REUSEPORT).
    Idempotent; UDP-based modes keep mitmproxy's own listener."""
    global _installed
    if _installed:
        return
    check_reuse_port()
    check_internals()
    server = mode_servers.AsyncioServerInstance
    original = server.listen

    async def listen(self: Any, host: str, port: int) -> list[Any]:
        if self.mode.transport_protocol != "tcp" or port == 0:
            return await original(self, host, port)
        return [await asyncio.start_server(self.handle_stream, host, port, reuse_port=True)]

    server.listen = listen  # type: ignore[method-assign]
    _installed = True


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound (not listening) to host:port with SO_REUSEPORT: it holds the port for the
    workers (and picks one for port 0) without taking any connection itself."""
    check_reuse_port()
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock
