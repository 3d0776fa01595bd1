"""`retimer browser chrome|edge|chromium|firefox [URL] [proxy options]`: a browser through retimer.

Starts the proxy in this process unless one already listens on --listen-port, opens the browser
with a throwaway profile once the proxy listens (its CA exists by then), and stops the proxy
when the browser exits; Ctrl-C or SIGTERM closes the browser too.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from retimer.cli.cmdline import OneLineParser, fail
from retimer.cli.launch.browser import (
    KINDS,
    LABELS,
    BrowserError,
    Kind,
    find_browser,
    find_certutil,
    is_chromium,
    prepare_launch,
    run_browser,
    running_as_root,
)
from retimer.cli.launch.env import proxy_url
from retimer.cli.launch.run import listening, probe_retimer
from retimer.cli.proxy.options import ProxyConfig, proxy_parser
from retimer.cli.proxy.runner import bound_port, build_proxy, serve
from retimer.proxy.certs import CA_FILE, spki_hash

if TYPE_CHECKING:
    from mitmproxy.master import Master


def parser() -> OneLineParser:
    p = proxy_parser()
    p.prog = "retimer browser"
    p.description = (
        "Open Chrome, Edge, Chromium or Firefox through retimer with a throwaway profile that trusts "
        "retimer's CA (the system trust store is not touched). Starts the proxy unless one "
        "already listens on --listen-port; closing the browser stops it."
    )
    p.add_argument("browser", choices=KINDS, help="which browser to open")
    p.add_argument("url", nargs="?", default=None, help="page to open")
    p.add_argument("--browser-path", metavar="PATH", default=None,
                   help="the browser's executable, if it is not found by itself")
    p.add_argument("--headless", action="store_true", help="no window (tests, automation)")
    return p



def main(argv: list[str]) -> None:
    args = parser().parse_intermixed_args(argv)
    if args.upstream:
        fail("--upstream (reverse mode) does not apply to `retimer browser`")
    kind: Kind = args.browser
    try:
        exe = find_browser(kind, args.browser_path)
        certutil = None if is_chromium(kind) else find_certutil()
    except BrowserError as e:
        fail(str(e), 1)
    config = ProxyConfig.from_args(args)  # bad options fail even when a retimer is reused
    opener = Opener(kind, exe, proxy_url(config.listen_host, config.listen_port), args.url,
                    args.headless, certutil)
    with contextlib.suppress(KeyboardInterrupt):
        if listening(config.listen_host, config.listen_port):
            ca = _running_retimer_ca(config)
            _say(f"using the retimer already on {opener.proxy} (its own options apply)")
            asyncio.run(_alone(opener, ca))
        else:
            asyncio.run(_with_proxy(config, opener))
    raise SystemExit(opener.exit_code)


def _running_retimer_ca(config: ProxyConfig) -> Path:
    """The CA of the retimer listening on --listen-port, which must be the one in confdir
    (the browser is told to trust that one); fail in one line otherwise."""
    where, port = f"{config.listen_host}:{config.listen_port}", config.listen_port
    spki = probe_retimer(config.listen_host, port)
    if spki is None:
        fail(f"{where} is taken by something that is not retimer (try --listen-port {port + 1})")
    confdir = config.confdir
    ca = confdir / CA_FILE
    if not ca.is_file() or (spki and spki != spki_hash(ca)):
        fail(f"the retimer on {where} uses another CA than {confdir}; pass its --set confdir=DIR")
    return ca


def _say(message: str) -> None:
    print(f"retimer: {message}", file=sys.stderr, flush=True)


class Opener:
    """Prepares the throwaway profile, runs the browser, and keeps its exit code."""

    def __init__(self, kind: Kind, exe: str, proxy: str, url: str | None, headless: bool,
                 certutil: str | None) -> None:
        self.kind, self.exe, self.proxy, self.url = kind, exe, proxy, url
        self.headless, self.certutil = headless, certutil
        self.exit_code = 0

    async def open(self, ca: Path) -> None:
        label = LABELS[self.kind]
        try:
            launch = await asyncio.to_thread(
                prepare_launch, self.kind, self.exe, self.proxy, ca, self.url,
                headless=self.headless, certutil=self.certutil)
        except (BrowserError, OSError) as e:
            _say(f"cannot prepare {label}'s profile: {e}")
            self.exit_code = 1
            return
        if is_chromium(self.kind) and running_as_root():
            _say("running as root: Chromium's sandbox is off (--no-sandbox)")
        code, tail = await run_browser(launch)
        if code:
            _say(f"{label} exited with status {code}" + (f": {tail}" if tail else ""))
            self.exit_code = code if code > 0 else 1


async def _alone(opener: Opener, ca: Path) -> None:
    """Only the browser (a proxy runs elsewhere); SIGINT/SIGTERM still close it cleanly."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await opener.open(ca)


class BrowserCompanion:
    """mitmproxy addon: opens the browser once the proxy listens; the browser's end stops it."""

    def __init__(self, opener: Opener, ca: Path, master: Master, host: str) -> None:
        self.opener, self.ca, self.master, self.host = opener, ca, master, host
        self.task: asyncio.Task[None] | None = None

    def running(self) -> None:
        port = bound_port(self.master)  # differs from the option with --listen-port 0
        if port is not None:
            self.opener.proxy = proxy_url(self.host, port)
        print(f"  opening {LABELS[self.opener.kind]} through {self.opener.proxy} with a throwaway "
              "profile that trusts retimer's CA; closing it (or Ctrl-C) stops retimer", flush=True)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            await self.opener.open(self.ca)
        finally:
            self.master.shutdown()

    async def done(self) -> None:
        if self.task and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def _with_workers(config: ProxyConfig, opener: Opener) -> None:
    """`retimer browser --workers N`: the browser through N proxy processes on the port."""
    from retimer.cli.proxy.banner import profile_name
    from retimer.cli.proxy.workers import serving

    async with serving(config, out=sys.stdout) as workers:
        opener.proxy = proxy_url(config.listen_host, workers.port)
        print(f"retimer: profile {profile_name(config)}, {config.workers} workers; opening "
              f"{LABELS[opener.kind]} through {opener.proxy}; closing it (or Ctrl-C) stops retimer",
              flush=True)
        await _alone(opener, config.confdir / CA_FILE)


async def _with_proxy(config: ProxyConfig, opener: Opener) -> None:
    if config.workers > 1:
        await _with_workers(config, opener)
        return
    m, addon, view = build_proxy(config)
    ca = config.confdir / CA_FILE
    m.addons.add(BrowserCompanion(opener, ca, m, config.listen_host))
    profile = addon.profile
    assert profile is not None  # build_proxy configured it
    from retimer.cli.records.profiles import first_token_text, thinking_text

    timing = ("as upstream" if profile.passthrough else
              f"TTFT {first_token_text(profile)}, {profile.tps:g} tok/s, "
              f"thinking {thinking_text(profile)}")
    print(f"retimer: profile {profile.effective_name}: {timing}", flush=True)
    await serve(m, view)
