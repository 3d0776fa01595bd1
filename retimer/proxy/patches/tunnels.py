"""What mitmproxy's NextLayer addon decided for a connection: whether it is a TLS handshake
tunnelled untouched (a TCPLayer without a flow, mitmproxy's `ignore_hosts`/`allow_hosts`
passthrough), and where to. retimer.proxy.tunnels warns about such tunnels to loopback."""

from __future__ import annotations

from mitmproxy.proxy import layer, layers
from mitmproxy.proxy.mode_specs import RegularMode

TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello


def tunnelled_tls(nextlayer: object) -> tuple[str, int] | None:
    """(host, port) of a forward-mode TLS connection mitmproxy passes through untouched, once
    its NextLayer addon has decided; None for anything else."""
    if not isinstance(nextlayer, layer.NextLayer):
        return None
    chosen = nextlayer.layer
    if not isinstance(chosen, layers.TCPLayer) or chosen.flow is not None:
        return None
    context = nextlayer.context
    address = context.server.address
    if not isinstance(context.client.proxy_mode, RegularMode) or not address:
        return None
    data = nextlayer.data_client()
    if not data or data[0] != TLS_HANDSHAKE:
        return None
    return str(address[0]), int(address[1])


NEEDED = {  # what this module relies on, for the start-up check (None: missing)
    "TCPLayer.flow": "flow" in getattr(layers.TCPLayer, "__annotations__", {}) or None,
    "NextLayer.data_client": getattr(layer.NextLayer, "data_client", None),
}
