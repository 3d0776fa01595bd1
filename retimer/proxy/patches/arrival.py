"""When a request's bytes reached this machine, by the kernel's clock: TTFT counts from there.

Why (BENCHMARKS.md, "Scaling"): a request waits in its socket's receive queue until the
worker's event loop gets to it. mitmproxy stamps `request.timestamp_start` when it reads the
first bytes, so under a burst (200 requests sent in one instant: the last ones are read ~100 ms
late) the profile's TTFT started that wait late, and the client felt TTFT plus the wait.
Linux keeps, for every TCP socket, when its latest data segment arrived (`tcpi_last_data_recv`
of `TCP_INFO`: milliseconds since, counted in kernel ticks). Read as soon as the request's
headers are parsed, the latest data is this request's own (or a later part of its body, or of
another HTTP/2 stream: later still), so `now - age` is never before the request truly arrived,
once one tick is taken off the age (`kernel_tick_s` measures it at start-up: 4 ms at HZ=250;
10 ms, the coarsest, when it cannot). Elsewhere (other systems, UDP, a connection
the proxy server does not list) nothing is known and the clock starts at mitmproxy's stamp.

One of retimer's patches (`retimer.proxy.patches`): it reads mitmproxy's connection handlers
(`Proxyserver.connections`, `ConnectionHandler.transports`), which only they and the bridge may.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.connection import Client
from mitmproxy.proxy.server import ConnectionHandler

from retimer.proxy.patches.connections import connection_handler

TICK_S = 0.010  # the coarsest kernel tick (HZ=100): an age in ticks may be one tick too long
TICK_WAIT_S = 0.05  # how long kernel_tick_s waits to see the clock tick
_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform == "linux" else None
_LAST_DATA_RECV = struct.Struct("=I")  # u32 ms, at byte 52 of struct tcp_info (linux/tcp.h)
_LAST_DATA_RECV_AT = 52
_TCP_INFO_LEN = 104


def kernel_tick_s() -> float:
    """One kernel tick as `TCP_INFO` counts time: the first non-zero age of a byte sent over
    loopback (a late look only reads more, which is safe); TICK_S where it cannot be seen."""
    if _TCP_INFO is None:
        return TICK_S
    try:
        with socket.create_server(("127.0.0.1", 0)) as server, \
                socket.create_connection(server.getsockname()[:2], timeout=1) as client:
            conn, _ = server.accept()
            with conn:
                client.sendall(b"t")
                deadline = time.monotonic() + TICK_WAIT_S
                while time.monotonic() < deadline:
                    info = conn.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
                    (age_ms,) = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_AT)
                    if age_ms:
                        return min(age_ms / 1000, TICK_S)
    except (OSError, struct.error):
        pass
    return TICK_S


def waited_s(proxyserver: Proxyserver | None, client_conn: Client, tick_s: float = TICK_S) -> float:
    """Seconds the client's latest bytes surely waited between reaching the kernel and now
    (0.0 when not known, or under a tick of `tick_s`)."""
    if _TCP_INFO is None or proxyserver is None:
        return 0.0
    handler = connection_handler(proxyserver, client_conn)
    io = handler.transports.get(client_conn) if handler is not None else None
    sock = io.writer.get_extra_info("socket", None) if io is not None and io.writer is not None else None
    if sock is None or sock.type != socket.SOCK_STREAM:
        return 0.0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
    except OSError:
        return 0.0
    if len(info) < _LAST_DATA_RECV_AT + _LAST_DATA_RECV.size:
        return 0.0
    (age_ms,) = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_AT)
    return max(0.0, age_ms / 1000 - tick_s)


NEEDED = {  # what this module relies on, for the start-up check (None: missing)
    "ConnectionHandler.transports": "transports" in getattr(ConnectionHandler, "__annotations__", {}) or None,
}
