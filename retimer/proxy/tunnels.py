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

from retimer.proxy.patches.tunnels import tunnelled_tls

__all__ = ["LoopbackTunnels"]

log = logging.getLogger(__name__)
WARNED = 20  # addresses warned about per run (then silent: no log flood)


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

    def next_layer(self, nextlayer: object) -> None:
        # mitmproxy's NextLayer addon has decided first (it comes before retimer's addons)
        if (found := tunnelled_tls(nextlayer)) is None or not _loopback_literal(found[0]):
            return
        host, port = found
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if where in self.warned or len(self.warned) >= WARNED:
            return
        self.warned.add(where)
        log.warning(f"retimer: HTTPS to {where} (loopback) passes through untimed; to re-time a "
                    f"local model server there, add --intercept '{where}' and --set "
                    "ssl_verify_upstream_trusted_ca=ITS-CA.pem")
