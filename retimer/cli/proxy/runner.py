"""Starting the proxy from a `ProxyConfig`: the mitmproxy master with retimer's addons, the live
view around it, and the signals that stop it. `retimer`, `run`, `browser` and `study` share it."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from retimer.cli.cmdline import fail
from retimer.cli.proxy.banner import print_banner
from retimer.cli.proxy.options import ProxyConfig, check_port

# retimer's own INFO lines (per-stream notes) reach mitmproxy's log in a process that runs the proxy
logging.getLogger("retimer").setLevel(logging.INFO)

if TYPE_CHECKING:
    from mitmproxy.master import Master

    from retimer.cli.proxy.liveview import LiveView
    from retimer.proxy.addon import Retimer


async def run_proxy(config: ProxyConfig) -> None:
    """`retimer`'s own job: build the proxy, print the banner, serve until stopped. With
    `--listen-port 0` the banner waits for the port the system chose, and names it."""
    m, addon, view = build_proxy(config)
    if config.listen_port:
        print_banner(config, m.options, addon)
        await serve(m, view)
        return
    serving = asyncio.create_task(serve(m, view))
    port = await listening_port(m, serving)
    if port is not None:
        print_banner(replace(config, listen_port=port), m.options, addon)
    await serving


def build_proxy(
    config: ProxyConfig, out: TextIO | None = None, interactive: bool | None = None, check: bool = True
) -> tuple[Master, Retimer, LiveView]:
    """Check the port and build the mitmproxy master with retimer's addons (in a loop).

    Returns (master, Retimer addon, live view); `out`/`interactive` redirect the view.
    `check=False`: a worker of `--workers N`, whose port the parent checked and holds.
    """
    if check:
        check_port(config.listen_host, config.listen_port)
    from mitmproxy import exceptions, master, options
    from mitmproxy.addons import default_addons, errorcheck, termlog

    from retimer.cli.proxy.liveview import LiveView
    from retimer.proxy.addon import Retimer
    from retimer.proxy.addons import install, retimer_addons
    from retimer.proxy.certs import ensure_ca
    from retimer.proxy.hooks import RecordListener
    from retimer.proxy.patches import InternalsMissing
    from retimer.wire.hosts import allow_hosts

    opts = options.Options()
    m = master.Master(opts)
    m.addons.add(termlog.TermLog(out=_StderrProxy()))  # type: ignore[arg-type]  # TermLog takes any writer: it calls write/flush/isatty
    m.addons.add(*default_addons())
    m.addons.add(errorcheck.ErrorCheck(repeat_errors_on_stderr=True))
    try:
        addon = Retimer(install())  # retimer into mitmproxy, once its internals are checked
        m.addons.add(*retimer_addons(addon))  # the same addons as `mitmdump -s addons/retimer.py`
    except InternalsMissing as e:
        fail(str(e), 1)
    study = config.study  # `retimer study`: the view must not show conditions
    view = LiveView(out=out, interactive=interactive, active=addon.snapshot, blind=bool(study))
    if not config.quiet:
        m.addons.add(RecordListener(view))  # every record, as the Retimer addon makes it
    confdir = config.confdir
    try:
        ensure_ca(confdir)  # before mitmproxy creates it with looser permissions
    except OSError as e:
        fail(f"cannot create the CA in {confdir}: {e.strerror}", 1)
    updates: dict[str, Any] = {
        "listen_host": config.listen_host,
        "listen_port": config.listen_port,
        "confdir": str(confdir),
        # reverse mode has one destination, so nothing to choose: intercept it
        "allow_hosts": [] if config.upstream else allow_hosts(list(config.intercept)),
        "termlog_verbosity": "warn",
        "retimer_profile": config.profile,
        "retimer_ttft": config.ttft,
        "retimer_tps": config.tps,
        "retimer_jitter": config.jitter,
        "retimer_seed": -1 if config.seed is None else config.seed,
        "retimer_log": config.log,
        "retimer_speed": config.speed,
        "retimer_thinking": config.thinking,
        "retimer_strategy": config.strategy,
        "retimer_cache": config.cache,
        "retimer_cache_max_mb": config.cache_max_mb,
        "retimer_record": config.record,
        "retimer_replay": config.replay,
        "retimer_replay_diverged": config.replay_diverged,
        "retimer_study": study,
        "retimer_participant": config.participant,
        "retimer_study_state": config.study_state,
    }
    if config.upstream:
        updates["mode"] = [f"reverse:{config.upstream}"]
    try:
        opts.update(**updates)
        # a script's own options exist only once it has loaded (after start-up), so with
        # scripts they wait for it, as mitmdump does; without, a typo is an error at once
        with_scripts = any(spec.split("=", 1)[0] == "scripts" for spec in config.sets)
        opts.set(*config.sets, defer=with_scripts)
        from retimer.proxy.security import exposure_error, proxy_auth_error

        if auth := config.proxy_auth:
            if err := proxy_auth_error(auth):
                fail(err)
            opts.update(proxyauth=auth)
        if err := exposure_error(opts, config.allow_remote):
            fail(err)
    except exceptions.OptionsError as e:
        from retimer.cli.cmdline import unknown_options_hint

        first = str(e).splitlines()[0] if str(e) else "invalid option"
        fail(unknown_options_hint(first, opts.keys()))
    return m, addon, view


async def serve(m: Master, view: LiveView) -> None:
    """Run the master until SIGINT/SIGTERM or m.shutdown(), with the live view around it."""
    from retimer.proxy.safety import quiet_exit, shutdown_gracefully

    loop = asyncio.get_running_loop()
    quiet_exit(loop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, shutdown_gracefully, m)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows
            pass
    view.start()
    refresher = asyncio.create_task(refresh_view(view)) if view.interactive else None
    try:
        await m.run()
    finally:
        if refresher:
            refresher.cancel()
        view.stop()


async def listening_port(m: Master, running: asyncio.Task[None], timeout: float = 10.0) -> int | None:
    """The proxy's port once it listens, or None if it stopped (or never listened) first."""
    for _ in range(int(timeout / 0.02)):
        port = bound_port(m)
        if port:
            return port
        if running.done():
            return None
        await asyncio.sleep(0.02)
    print("retimer: the proxy did not start listening", file=sys.stderr)
    return None


def bound_port(m: Master) -> int | None:
    """The port the proxy really listens on (differs from the option with --listen-port 0)."""
    ps = m.addons.get("proxyserver")
    for instance in getattr(ps, "servers", []):
        for addr in instance.listen_addrs:
            return int(addr[1])
    return None


async def refresh_view(view: LiveView) -> None:
    """Redraw an interactive live view four times a second (from the loop, never a thread)."""
    while True:
        view.refresh()
        await asyncio.sleep(0.25)


class _StderrProxy:
    """Writes to whatever sys.stderr is now (the live view redirects it above the table)."""

    def write(self, s: str) -> int:
        return sys.stderr.write(s)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()
