"""One worker process of `retimer --workers N` (`python -m retimer.cli.proxy.worker_main INDEX FD SENDS`).

The parent (retimer.cli.proxy.workers) writes the checked `ProxyConfig` as one JSON line on the
worker's stdin, then keeps stdin open: its end means the parent is gone, and the worker drains
and stops as on Ctrl-C. The worker runs the same proxy as a single `retimer` (build_proxy),
its listener shares the port (retimer.proxy.patches.listen), and it sends what the parent
shows, one JSON line each, down the pipe FD: `{"ready": port}`, and, as SENDS asks
(`records,live`), every record and the streams in flight every quarter second (only while a
live table shows them: a snapshot makes a record of every stream in flight, which costs the
streams' timing when many play). The config travels on stdin, not argv: it may hold
--proxy-auth's password.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from retimer.cli.proxy.options import ProxyConfig
from retimer.proxy.hooks import RECORD_KEY, WORKER_KEY
from retimer.records.schema import StreamRecord

if TYPE_CHECKING:
    from mitmproxy import http
    from mitmproxy.master import Master

SNAPSHOT_S = 0.25  # how often the streams in flight go to the parent's live view


def config_json(config: ProxyConfig) -> str:
    """The config as one JSON line (tuples become lists)."""
    return json.dumps({f.name: getattr(config, f.name) for f in fields(config)})


def config_of(line: str) -> ProxyConfig:
    """The config `config_json` wrote."""
    data = json.loads(line)
    for key, value in data.items():
        if isinstance(value, list):
            data[key] = tuple(value)
    return ProxyConfig(**data)


class Channel:
    """mitmproxy addon in a worker: tags each flow's record with the worker, and sends the
    parent every record and, periodically, the streams in flight."""

    name = "retimer_worker_channel"

    def __init__(self, index: int, fd: int, master: Master, active: Callable[[], list[dict[str, Any]]],
                 sends: str = "records,live") -> None:
        self.index, self.fd, self.master, self.active = index, fd, master, active
        wanted = set(sends.split(","))
        self.records, self.live = "records" in wanted, "live" in wanted
        self.transport: asyncio.WriteTransport | None = None
        self.ticker: asyncio.Task[None] | None = None

    def request(self, flow: http.HTTPFlow) -> None:  # added last: after the study set its fields
        flow.metadata[RECORD_KEY] = {**flow.metadata.get(RECORD_KEY, {}), WORKER_KEY: self.index}

    async def running(self) -> None:
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(self.fd, "wb", buffering=0)
        self.transport, _ = await loop.connect_write_pipe(asyncio.Protocol, pipe)
        from retimer.cli.proxy.runner import bound_port

        self.send({"ready": bound_port(self.master)})
        if self.live:
            self.ticker = asyncio.create_task(self._tick())
        loop.add_reader(0, self._stdin)

    def retimer_record(self, record: StreamRecord) -> None:
        if self.records:
            self.send({"record": record.to_json()})

    def done(self) -> None:
        if self.ticker:
            self.ticker.cancel()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(0)

    def send(self, message: dict[str, Any]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def _tick(self) -> None:
        shown = False
        while True:
            await asyncio.sleep(SNAPSHOT_S)
            active = self.active()
            if active or shown:  # nothing to say while idle, but say when it became idle
                self.send({"active": active})
            shown = bool(active)

    def _stdin(self) -> None:
        try:
            data = os.read(0, 4096)
        except OSError:
            data = b""
        if not data:  # the parent is gone: stop as on Ctrl-C
            asyncio.get_running_loop().remove_reader(0)
            from retimer.proxy.safety import shutdown_gracefully

            shutdown_gracefully(self.master)


async def run_worker(config: ProxyConfig, index: int, fd: int, sends: str = "records,live") -> None:
    """Build and serve this worker's proxy on the shared port."""
    from retimer.cli.cmdline import fail
    from retimer.cli.proxy.runner import build_proxy, serve
    from retimer.proxy.patches import InternalsMissing
    from retimer.proxy.patches.listen import NoReusePort, install

    try:
        install()
    except (InternalsMissing, NoReusePort) as e:
        fail(str(e), 1)
    # quiet: the parent shows the records; its port check already ran (the port is shared)
    m, addon, view = build_proxy(replace(config, quiet=True), interactive=False, check=False)
    m.addons.add(Channel(index, fd, m, addon.snapshot, sends))
    await serve(m, view)


def main(argv: list[str]) -> None:
    index, fd = int(argv[0]), int(argv[1])
    sends = argv[2] if len(argv) > 2 else "records,live"
    config = config_of(sys.stdin.buffer.readline().decode())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_worker(config, index, fd, sends))


if __name__ == "__main__":
    main(sys.argv[1:])
