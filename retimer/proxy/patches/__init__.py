"""mitmproxy's internals, where retimer needs them for something other than pacing: hook
dispatch at the cost of the addons that have the hook (`hooks`), one listening port shared by
`--workers` (`listen`), when a request reached the kernel (`arrival`) and which connection
handler serves a client (`connections`), which connections pass through untouched
(`tunnels`) and injected WebSocket messages sent whole and intact (`websocket`). With
`retimer.proxy.bridge` (pacing), the only code allowed on mitmproxy's private API; each module
says what it relies on (`NEEDED`), and `install()` checks it before it changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping

MITMPROXY_RANGE = ">=12.2.3,<13"


class InternalsMissing(RuntimeError):
    """This mitmproxy lacks a private name retimer relies on."""


def require(needed: Mapping[str, object], what: str = "retimer") -> None:
    """Fail with one clear line (`InternalsMissing`) naming every private name that is None."""
    missing = [name for name, value in needed.items() if value is None]
    if missing:
        from mitmproxy.version import VERSION

        raise InternalsMissing(
            f"mitmproxy {VERSION} lacks {', '.join(missing)}; {what} needs mitmproxy {MITMPROXY_RANGE}"
        )


def install() -> None:
    """Put the patches every retimer process runs with into mitmproxy (the hook dispatch, injected
    WebSocket messages), once per process, after checking every private name they and `arrival`
    use."""
    from retimer.proxy.patches import arrival, connections, hooks, tunnels, websocket

    require({**hooks.NEEDED, **arrival.NEEDED, **connections.NEEDED, **tunnels.NEEDED,
             **websocket.NEEDED})
    hooks.install()
    websocket.install()
