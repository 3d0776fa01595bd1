"""`retimer`: run the re-timing proxy, or list profiles. Bad input gets one line, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from retimer import __version__
from retimer.cli.cmdline import OneLineParser, fail

DEFAULT_CONFDIR = "~/.retimer"


class UsageError(Exception):
    """A bad option value; printed as one line."""


_Parser = OneLineParser  # the subcommands' parsers share it


def _proxy_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="retimer",
        description="Re-time real LLM streams to a target speed profile. "
        "Subcommands: browser, run, env, ca, study, export, fit, report, profiles "
        "(`retimer SUBCOMMAND --help`).",
    )
    p.add_argument("--version", action="version", version=f"retimer {__version__}")
    p.add_argument("--profile", "-p", default="",
                   help="built-in profile name or alias, or a YAML file (default: cerebras; "
                   "--ttft/--tps without --profile start from frontier's shape)")
    p.add_argument("--listen-host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--listen-port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument("--seed", type=int, default=None, help="seed for the timing model (reproducible runs)")
    p.add_argument("--log", metavar="FILE", default="", help="append one JSON line per re-timed stream")
    p.add_argument("--ttft", metavar="DURATION", default="",
                   help="override the median time to first token, e.g. 400ms or 2s")
    p.add_argument("--tps", metavar="RATE", default="", help="override the mean decode rate (tokens/s)")
    p.add_argument("--jitter", metavar="X", default="",
                   help="scale the profile's jitter; 0 turns it off (every gap is the mean gap)")
    p.add_argument("--speed", metavar="FACTOR", default="",
                   help="play the whole profile faster or slower: 2 (2x, 200%%) twice as fast, 0.5x half")
    p.add_argument("--thinking", metavar="LEVEL", default="",
                   help="hidden thinking before the first token: off (the table rows' default), "
                   "low, medium, high (levels the profile declares) or a number of hidden tokens; "
                   "it runs at the profile's own rate, whatever --tps says")
    p.add_argument("--strategy", default="live", metavar="NAME",
                   help="when the upstream is slower than the profile: live (default), smooth "
                   "(start late enough to play without stalls) or replay (wait for the whole "
                   "response, then play it exactly)")
    p.add_argument("--cache", metavar="DIR", default="",
                   help="answer repeated identical requests from DIR with exact profile timing, "
                   "no upstream call; responses are stored there")
    p.add_argument("--cache-max-mb", metavar="MB", type=int, default=0,
                   help="cap the cache's size, least recently used entries go first")
    p.add_argument("--intercept", metavar="REGEX", action="append", default=[],
                   help="also intercept TLS for hosts matching REGEX (host:port), repeatable")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="set a mitmproxy option, e.g. --set ssl_insecure=true (repeatable)")
    p.add_argument("--quiet", "-q", action="store_true", help="no live view or per-stream lines")
    p.add_argument("--upstream", metavar="URL", default="",
                   help="reverse mode: serve plain HTTP as this API (e.g. https://api.openai.com); "
                   "clients set their base URL to retimer, no proxy or CA needed")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --listen-host other machines can reach (needs --proxy-auth)")
    p.add_argument("--proxy-auth", metavar="USER:PASS", default="",
                   help="require these proxy credentials (mitmproxy's proxyauth)")
    return p


def _profiles_parser() -> argparse.ArgumentParser:
    """`retimer profiles [NAME ...]`: so --help helps and a flag is not taken for a name."""
    p = _Parser(prog="retimer profiles",
                description="The built-in profiles as a table, or the named ones in full.")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="a profile name, alias or YAML file to show in full")
    return p


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "profiles":
        from retimer.cli.profiles_cmd import print_profiles

        print_profiles(_profiles_parser().parse_args(argv[1:]).names)
        return
    if argv and argv[0] in ("run", "env", "ca"):
        from retimer.cli import launch

        launch.main(argv[0], argv[1:])
        return
    if argv and argv[0] == "browser":
        from retimer.cli import browser_cmd

        browser_cmd.main(argv[1:])
        return
    if argv and argv[0] == "study":
        from retimer.cli import study_cmd

        study_cmd.main(argv[1:])
        return
    if argv and argv[0] == "export":
        from retimer.cli import export

        export.main(argv[1:])
        return
    if argv and argv[0] in ("fit", "report"):
        from retimer.cli import fit_cmd, report_cmd

        (fit_cmd if argv[0] == "fit" else report_cmd).main(argv[1:])
        return
    if argv and not argv[0].startswith("-"):  # no subcommand, and the proxy takes no words
        from retimer.cli.cmdline import unknown_command

        fail(unknown_command(argv[0]))
    args = _proxy_parser().parse_args(argv)
    try:
        asyncio.run(_run_proxy(args))
    except KeyboardInterrupt:
        pass


def _validate(args: argparse.Namespace, check_port: bool = True) -> None:
    from retimer.profile.model import ProfileError
    from retimer.proxy.addon import build_profile

    try:
        build_profile(args.profile, args.ttft, args.tps, args.jitter, args.speed,
                      getattr(args, "thinking", ""))
    except ProfileError as e:
        fail(str(e))
    if not 0 <= args.listen_port <= 65535:
        fail(f"--listen-port: {args.listen_port} is not a port number")
    if args.seed is not None and args.seed < 0:
        fail(f"--seed: expected a number >= 0, got {args.seed}")
    import re

    for rx in args.intercept:
        try:
            re.compile(rx)
        except re.error as e:
            fail(f"--intercept: {rx!r} is not a regular expression ({e})")
    for item in args.sets:
        if "=" not in item:
            fail(f"--set: expected KEY=VALUE, got {item!r}")
    from retimer.timing.strategy import parse_strategy

    try:
        parse_strategy(args.strategy)
    except ValueError as e:
        fail(str(e))
    if args.cache_max_mb < 0:
        fail(f"--cache-max-mb: expected a size >= 0, got {args.cache_max_mb:g}")
    if args.upstream:
        from retimer.proxy.reverse import UpstreamError, parse_upstream

        try:
            args.upstream = parse_upstream(args.upstream)
        except UpstreamError as e:
            fail(f"--upstream: {e}")
    if check_port:
        _check_port(args.listen_host, args.listen_port)


def confdir_of(args: argparse.Namespace) -> Path:
    """The confdir a --set confdir=DIR names, else retimer's default (the CA lives there)."""
    value = DEFAULT_CONFDIR
    for item in args.sets:
        key, _, val = item.partition("=")
        if key.strip() == "confdir":
            value = val
    return Path(os.path.expanduser(value))


def _check_port(host: str, port: int) -> None:
    """Say plainly when the address is taken, before mitmproxy's longer message."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        fail(f"--listen-host: cannot resolve {host!r} ({e.strerror})")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            hint = f" (try --listen-port {port + 1})" if e.errno == 98 else ""
            fail(f"--listen-port: cannot listen on {host}:{port}: {e.strerror}{hint}")


async def _run_proxy(args: argparse.Namespace) -> None:
    m, addon, view = build_proxy(args)
    _print_banner(args, m.options, addon)
    await serve(m, view)


def build_proxy(
    args: argparse.Namespace, out: Any = None, interactive: bool | None = None
) -> tuple[Any, Any, Any]:
    """Validate the options and build the mitmproxy master with retimer's addons (in a loop).

    Returns (master, Retimer addon, live view); `out`/`interactive` redirect the view.
    """
    _validate(args)
    from mitmproxy import exceptions, master, options
    from mitmproxy.addons import default_addons, errorcheck, termlog

    from retimer.cli.liveview import LiveView
    from retimer.proxy.addon import Retimer
    from retimer.proxy.bridge import InternalsMissing
    from retimer.proxy.cache_addon import ResponseCache
    from retimer.proxy.certs import ensure_ca
    from retimer.proxy.pac import PacServer
    from retimer.wire.hosts import allow_hosts

    opts = options.Options()
    m = master.Master(opts)
    m.addons.add(termlog.TermLog(out=_StderrProxy()))
    m.addons.add(*default_addons())
    m.addons.add(errorcheck.ErrorCheck(repeat_errors_on_stderr=True))
    addon = Retimer()
    study = getattr(args, "study", "")  # `retimer study`: the view must not show conditions
    view = LiveView(out=out, interactive=interactive, active=addon.snapshot, blind=bool(study))
    if not args.quiet:
        addon.listeners.append(view)
    try:
        m.addons.add(addon)
        from retimer.proxy.safety import Safety

        m.addons.add(Safety(addon))  # bounds, keep-alives, graceful shutdown
    except InternalsMissing as e:
        fail(str(e), 1)
    from retimer.proxy.study_addon import Study

    m.addons.add(Study(addon))  # before the cache: it answers the rating page itself
    m.addons.add(ResponseCache(addon))
    m.addons.add(PacServer())
    confdir = confdir_of(args)
    try:
        ensure_ca(confdir)  # before mitmproxy creates it with looser permissions
    except OSError as e:
        fail(f"cannot create the CA in {confdir}: {e.strerror}", 1)
    updates: dict[str, Any] = {
        "listen_host": args.listen_host,
        "listen_port": args.listen_port,
        "confdir": str(confdir),
        # reverse mode has one destination, so nothing to choose: intercept it
        "allow_hosts": [] if args.upstream else allow_hosts(args.intercept),
        "termlog_verbosity": "warn",
        "retimer_profile": args.profile,
        "retimer_ttft": args.ttft,
        "retimer_tps": args.tps,
        "retimer_jitter": args.jitter,
        "retimer_seed": -1 if args.seed is None else args.seed,
        "retimer_log": args.log,
        "retimer_speed": args.speed,
        "retimer_thinking": getattr(args, "thinking", ""),
        "retimer_strategy": args.strategy,
        "retimer_cache": args.cache,
        "retimer_cache_max_mb": args.cache_max_mb,
        "retimer_study": study,
        "retimer_participant": getattr(args, "participant", ""),
    }
    if args.upstream:
        updates["mode"] = [f"reverse:{args.upstream}"]
    try:
        opts.update(**updates)
        # a script's own options exist only once it has loaded (after start-up), so with
        # scripts they wait for it, as mitmdump does; without, a typo is an error at once
        with_scripts = any(spec.split("=", 1)[0] == "scripts" for spec in args.sets)
        opts.set(*args.sets, defer=with_scripts)
        from retimer.proxy.security import exposure_error, proxy_auth_error

        if auth := getattr(args, "proxy_auth", ""):
            if err := proxy_auth_error(auth):
                fail(err)
            opts.update(proxyauth=auth)
        if err := exposure_error(opts, getattr(args, "allow_remote", False)):
            fail(err)
    except exceptions.OptionsError as e:
        from retimer.cli.cmdline import unknown_options_hint

        first = str(e).splitlines()[0] if str(e) else "invalid option"
        fail(unknown_options_hint(first, opts.keys()))
    return m, addon, view


async def serve(m: Any, view: Any) -> None:
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
    refresher = asyncio.create_task(_refresh(view)) if view.interactive else None
    try:
        await m.run()
    finally:
        if refresher:
            refresher.cancel()
        view.stop()


async def _refresh(view: Any) -> None:
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


def _print_banner(args: argparse.Namespace, opts: Any, addon: Any) -> None:
    from rich.console import Console

    profile = addon.profile
    from retimer.proxy.certs import CA_FILE, write_bundle

    confdir = Path(os.path.expanduser(opts.confdir))
    ca = confdir / CA_FILE
    bundle = write_bundle(confdir)
    proxy = f"http://{args.listen_host}:{args.listen_port}"
    from retimer.cli.profiles_cmd import first_token_text, thinking_text

    rate = "as upstream" if profile.passthrough else f"{profile.tps:g} tok/s"
    ttft = first_token_text(profile)  # the median wait for the first token, thinking included
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    console.print(f"[bold]retimer[/bold] listening on {proxy}")
    if args.listen_host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"  [bold red]warning[/bold red]: {args.listen_host} is reachable from other machines; "
            "anyone with the proxy credentials can use this proxy"
        )
    if getattr(args, "study_banner", None):  # blinded: no profile, seed or timing lines
        for line in args.study_banner:
            console.print(line, markup=False)
    else:
        console.print(f"  profile  {profile.effective_name}: TTFT {ttft}, {rate}, seed {addon.seed}")
        if not profile.passthrough:
            console.print(f"  thinking {thinking_text(profile)}", markup=False)
    extras = [f"strategy {args.strategy}"] if args.strategy != "live" else []
    if profile.speed != 1:
        extras.append(f"speed {profile.speed:g}x")
    if args.cache:
        extras.append(f"cache {Path(args.cache).expanduser()}")
    if extras and not getattr(args, "study_banner", None):
        console.print(f"  timing   {', '.join(extras)}")
    if args.upstream:
        from retimer.cli.launch_env import proxy_url
        from retimer.proxy.reverse import base_url_hint

        listen = proxy_url(args.listen_host, args.listen_port)
        console.print(f"  reverse  serving {args.upstream} as plain HTTP at {listen}: no proxy or CA needed")
        console.print(f"  clients  {base_url_hint(args.upstream, listen)}")
        console.print("  Ctrl-C stops.")
        if args.log:
            console.print(f"  records  {Path(args.log).expanduser()}")
        return
    console.print(f"  CA cert  {ca}")
    console.print(f"  bundle   {bundle} (system roots + the CA, for SDKs and CLIs)")
    console.print(f"  curl     curl --proxy {proxy} --cacert {bundle} -N https://api.openai.com/...")
    console.print(f"  Python   HTTPS_PROXY={proxy} SSL_CERT_FILE={bundle} python app.py")
    console.print(f"  Node     HTTPS_PROXY={proxy} NODE_USE_ENV_PROXY=1 NODE_EXTRA_CA_CERTS={ca} node app.js")
    console.print(f"  browser  proxy {args.listen_host}:{args.listen_port} for HTTP and HTTPS; trust {ca}")
    console.print(f"  PAC      {proxy}/proxy.pac (LLM hosts via retimer, the rest DIRECT)")
    console.print("  any app  retimer run \\[options] -- COMMAND  (or: eval \"$(retimer env)\")")
    console.print("  only LLM hosts are intercepted; everything else is tunnelled untouched. Ctrl-C stops.")
    if args.log:
        console.print(f"  records  {Path(args.log).expanduser()}")


logging.getLogger("retimer").setLevel(logging.INFO)
