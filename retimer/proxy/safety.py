"""Faults and bounds, as options, and a graceful shutdown. A thin mitmproxy addon.

The work is done in the bridge and the sans-io playout; this addon turns the options into the
playouts' `Settings` and runs the shutdown sequence:

* `retimer_max_stream_buffer` / `retimer_max_total_buffer` (sizes as mitmproxy takes them,
  "16m"): bytes one stream, and all streams together, may keep; past a cap the stream becomes
  pass-through (what it holds goes out at once, then the rest as it comes), with one warning
  and a record whose `fallback` starts with "buffer cap".
* `retimer_keepalive` (a duration, "4s"; "0" turns it off): while bytes are held and the client
  got nothing for that long, SSE formats get a comment line (`: keep-alive`), which every SSE
  parser skips; `retimer_idle_release` makes the other formats send their next event early.
* `retimer_shutdown_grace` ("5s"): on the first SIGINT/SIGTERM every stream sends what it holds
  at once and passes the rest through; the proxy stops when none is left or the grace period
  is over. Streams still open then are recorded with outcome `shutdown`. A second signal stops
  at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader
from mitmproxy.master import Master
from mitmproxy.utils import human

from retimer.profile.units import parse_duration
from retimer.proxy.addon import Retimer
from retimer.proxy.security import exposure_warning

logger = logging.getLogger("retimer")

DRAIN_POLL_S = 0.05


def _size(option: str, value: str) -> int:
    try:
        size = human.parse_size(value)
    except ValueError:
        size = None
    if size is None or size <= 0:
        raise exceptions.OptionsError(f"{option}: expected a size such as 16m or 256m, got {value!r}")
    return size


def _seconds(option: str, value: str) -> float:
    try:
        return parse_duration(value.strip())
    except (ValueError, TypeError):
        raise exceptions.OptionsError(f"{option}: expected a duration such as 4s, got {value!r}") from None


class Safety:
    """Options for the bounds and keep-alives, and the drain that precedes a shutdown."""

    def __init__(self, retimer: Retimer) -> None:
        self.retimer = retimer  # the Retimer addon whose streams are drained
        self._task: asyncio.Task[None] | None = None

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "retimer_max_stream_buffer", str, "16m",
            "Bytes one paced stream may hold; past it the stream passes through unpaced.",
        )
        loader.add_option(
            "retimer_max_total_buffer", str, "256m",
            "Bytes all paced streams together may hold; the stream that crosses it passes through.",
        )
        loader.add_option(
            "retimer_keepalive", str, "4s",
            "While tokens are held and the client got nothing for this long, send an SSE "
            "comment (SSE formats only); 0 turns it off.",
        )
        loader.add_option(
            "retimer_idle_release", bool, False,
            "Formats without a keep-alive (NDJSON, JSON arrays, binary frames): send the next "
            "held event early instead of keeping the client idle past retimer_keepalive.",
        )
        loader.add_option(
            "retimer_shutdown_grace", str, "5s",
            "On SIGINT/SIGTERM, how long streams in flight may take to finish (held bytes go out at once).",
        )

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        s = self.retimer.bridge.settings
        if "retimer_max_stream_buffer" in updated:
            s.max_stream_buffer = _size("retimer_max_stream_buffer", opts.retimer_max_stream_buffer)
        if "retimer_max_total_buffer" in updated:
            s.max_total_buffer = _size("retimer_max_total_buffer", opts.retimer_max_total_buffer)
        if "retimer_keepalive" in updated:
            s.keepalive_s = _seconds("retimer_keepalive", opts.retimer_keepalive)
        if "retimer_idle_release" in updated:
            s.idle_release = opts.retimer_idle_release
        if "retimer_shutdown_grace" in updated:
            _seconds("retimer_shutdown_grace", opts.retimer_shutdown_grace)

    def running(self) -> None:
        # `retimer` refuses an exposed proxy; under mitmdump/mitmweb say it plainly at least
        if warning := exposure_warning(ctx.options):
            logger.warning(f"retimer: {warning}")

    async def drain(self, grace: float | None = None) -> int:
        """Send everything held now, then wait up to `grace` for streams to end; return how
        many are still open (they are recorded as `shutdown` when the proxy stops)."""
        if grace is None:
            grace = _seconds("retimer_shutdown_grace", ctx.options.retimer_shutdown_grace)
        self.retimer.drain()
        deadline = time.monotonic() + grace
        while self.retimer.in_flight() and time.monotonic() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        left = self.retimer.in_flight()
        if left:
            logger.warning(f"retimer: stopping with {left} stream(s) still open (recorded as shutdown)")
        return left

    def shutdown(self, master: Master) -> None:
        """A signal handler: the first signal drains then stops; the next stops at once."""
        if self._task is not None:
            master.shutdown()
            return

        async def drain_then_stop() -> None:
            try:
                await self.drain()
            finally:
                master.shutdown()

        self._task = asyncio.get_running_loop().create_task(drain_then_stop())


def quiet_exit(loop: asyncio.AbstractEventLoop) -> None:
    """Connections still open at exit are cancelled; Python 3.12.1's stream callback then logs
    a CancelledError traceback for each (mitmproxy's eager tasks). That is no error: drop it."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), asyncio.CancelledError):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def shutdown_gracefully(master: Master) -> None:
    """SIGINT/SIGTERM handler for `retimer`: drain through the Safety addon if present."""
    safety = master.addons.get("safety")
    if safety is None:
        master.shutdown()
    else:
        safety.shutdown(master)
