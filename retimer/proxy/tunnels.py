"""Says when a local HTTPS server passes through untimed (forward mode).

retimer re-times a local model server over plain HTTP whatever its port, since it sees the
request. Over HTTPS on loopback it sees only a TLS handshake to an address that is not on the
list of LLM hosts, and tunnels it untouched: intercepting it by default would not be safe (the
local server's certificate is usually its own, which retimer could not verify, so every local
HTTPS service would break). So the tunnel stays, and a warning names the way to re-time it,
once per address.
"""

from __future__ import annotations

import ipaddress
import logging

from mitmproxy.proxy import layer, layers
from mitmproxy.proxy.mode_specs import RegularMode

__all__ = ["LoopbackTunnels"]

log = logging.getLogger(__name__)
WARNED = 20  # addresses warned about per run (then silent: no log flood)
TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello


def _loopback_literal(host: str) -> bool:
    """Loopback by its name or address only: no DNS lookup inside the event loop."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LoopbackTunnels:
    """Warns once per address about HTTPS to loopback tunnelled untouched."""

    def __init__(self) -> None:
        self.warned: set[str] = set()

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        # mitmproxy's NextLayer addon runs first: an untouched tunnel is a TCPLayer without a flow
        chosen = nextlayer.layer
        if not isinstance(chosen, layers.TCPLayer) or chosen.flow is not None:
            return
        context = nextlayer.context
        address = context.server.address
        if not isinstance(context.client.proxy_mode, RegularMode) or not address:
            return
        host, port = str(address[0]), int(address[1])
        data = nextlayer.data_client()
        if not _loopback_literal(host) or not data or data[0] != TLS_HANDSHAKE:
            return
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if where in self.warned or len(self.warned) >= WARNED:
            return
        self.warned.add(where)
        log.warning(f"retimer: HTTPS to {where} (loopback) passes through untimed; to re-time a "
                    f"local model server there, add --intercept '{where}' and --set "
                    "ssl_verify_upstream_trusted_ca=ITS-CA.pem")
