"""Which of mitmproxy's connection handlers serves a client connection (`Proxyserver.connections`):
where a request's socket (`arrival`) and a passthrough stream's writer (the bridge) are found."""

from __future__ import annotations

from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.connection import Client
from mitmproxy.proxy.server import ConnectionHandler


def connection_handler(proxyserver: Proxyserver | None, client_conn: Client) -> ConnectionHandler | None:
    """The connection handler serving `client_conn` in `proxyserver` (mitmproxy's Proxyserver
    addon), or None when it does not list it."""
    if proxyserver is None:
        return None
    handler = proxyserver.connections.get(client_conn.id)
    return handler if isinstance(handler, ConnectionHandler) and handler.client is client_conn else None


NEEDED = {  # what this module relies on, for the start-up check (None: missing)
    "Proxyserver.connections": "connections" in getattr(Proxyserver, "__annotations__", {}) or None,
    "ConnectionHandler.client": any(
        "client" in getattr(c, "__annotations__", {}) for c in ConnectionHandler.__mro__) or None,
}
