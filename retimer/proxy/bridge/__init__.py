"""The pacing bridge: with `retimer.proxy.patches`, the only code on mitmproxy's private API.

One driver per paced or passthrough HTTP stream (`driver`, `passthrough`) feeds the core's
playout and writes what it says through a client sink (`sinks`: mitmproxy's layers, or straight
to the connection), woken by loop timers (`timers`); WebSocket messages are paced with public
hooks (`websocket`) and kept in order (`websocket_order`). `pacing.install()` checks mitmproxy's
internals and puts the bridge in place, once per process.
"""

from retimer.proxy.bridge.pacing import PacingBridge, install

__all__ = ["PacingBridge", "install"]
