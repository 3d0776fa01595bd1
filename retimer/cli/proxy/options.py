"""The proxy's command-line options, shared by `retimer`, `retimer run`, `browser` and `study`.

Each of those commands extends `proxy_parser()` with its own arguments, then turns what was
parsed into one `ProxyConfig` (`ProxyConfig.from_args`), which checks every value and is all
that starting the proxy, its banner and the launchers read.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from retimer import __version__
from retimer.cli.cmdline import OneLineParser, fail

if TYPE_CHECKING:
    from retimer.profile.settings import ProfileSettings

DEFAULT_CONFDIR = "~/.retimer"


def version_line() -> str:
    """`retimer --version`: retimer's own version and the mitmproxy and Python it runs on, the
    three facts a bug report needs."""
    try:
        mitmproxy = metadata.version("mitmproxy")
    except metadata.PackageNotFoundError:
        mitmproxy = "not installed"
    return f"retimer {__version__} (mitmproxy {mitmproxy}, Python {platform.python_version()})"


def proxy_parser() -> OneLineParser:
    """`retimer [options]`: the options of the proxy itself."""
    p = OneLineParser(
        prog="retimer",
        description="Re-time real LLM streams to a target speed profile. "
        "Subcommands: browser, run, env, ca, study, demo, export, fit, report, whatif, profiles, addon "
        "(`retimer SUBCOMMAND --help`).",
    )
    p.add_argument("--version", action="version", version=version_line())
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
    p.add_argument("--record", metavar="DIR", default="",
                   help="record this session's LLM calls into a new cassette in DIR")
    p.add_argument("--replay", metavar="DIR", default="",
                   help="answer this session's LLM calls from the cassette in DIR with the "
                   "profile's timing and no upstream: any speed, faster than any provider")
    p.add_argument("--replay-diverged", metavar="WHAT", default="error", choices=("error", "upstream"),
                   help="a replayed call that matches no recorded call gets: error (a 400, "
                   "default) or upstream (it goes to its upstream)")
    p.add_argument("--intercept", metavar="REGEX", action="append", default=[],
                   help="also intercept TLS for hosts matching REGEX (host:port), repeatable")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="set a mitmproxy option, e.g. --set ssl_insecure=true (repeatable)")
    p.add_argument("--workers", metavar="N", default="1",
                   help="N proxy processes on the one port, balanced by the kernel (SO_REUSEPORT, "
                   "Linux; elsewhere one process runs); auto: one per CPU (default 1: one process)")
    p.add_argument("--quiet", "-q", action="store_true", help="no live view or per-stream lines")
    p.add_argument("--upstream", metavar="URL", default="",
                   help="reverse mode: serve plain HTTP as this API (e.g. https://api.openai.com); "
                   "clients set their base URL to retimer, no proxy or CA needed")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --listen-host other machines can reach (needs --proxy-auth)")
    p.add_argument("--proxy-auth", metavar="USER:PASS", default="",
                   help="require these proxy credentials (mitmproxy's proxyauth)")
    return p


@dataclass(frozen=True)
class ProxyConfig:
    """What the proxy runs with: the proxy options, checked, plus what `retimer study` adds."""

    profile: str
    ttft: str
    tps: str
    jitter: str
    speed: str
    thinking: str
    listen_host: str
    listen_port: int
    seed: int | None
    log: str
    strategy: str
    cache: str
    cache_max_mb: int
    intercept: tuple[str, ...]
    sets: tuple[str, ...]  # mitmproxy options as KEY=VALUE
    quiet: bool
    upstream: str  # normalised as scheme://host[:port]; "" when not in reverse mode
    allow_remote: bool
    proxy_auth: str
    study: str = ""  # the study file: the live view then hides the conditions
    participant: str = ""
    study_banner: tuple[str, ...] = ()  # a study's banner lines, shown instead of the timing
    workers: int = 1  # proxy processes sharing the port (retimer.cli.proxy.workers); 1: this process
    study_state: str = ""  # `retimer study --study-state`: positions shared with other instances
    record: str = ""  # --record DIR: a cassette of this session's calls
    replay: str = ""  # --replay DIR: the calls answered from this cassette
    replay_diverged: str = "error"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ProxyConfig:
        """The config of what `proxy_parser()` parsed; a bad value fails in one line (exit 2).

        Whether the port is free is left to `check_port`: a launcher reusing a running
        retimer finds it taken. `--workers N` where the kernel would not spread connections
        over N processes runs one, and says so in one line.
        """
        workers = parse_workers(args.workers)
        note = single_process_note(workers, sys.platform, hasattr(socket, "SO_REUSEPORT"))
        config = cls(
            profile=args.profile, ttft=args.ttft, tps=args.tps, jitter=args.jitter,
            speed=args.speed, thinking=args.thinking,
            listen_host=args.listen_host, listen_port=args.listen_port, seed=args.seed,
            log=args.log, strategy=args.strategy, cache=args.cache,
            cache_max_mb=args.cache_max_mb, intercept=tuple(args.intercept),
            sets=tuple(args.sets), quiet=args.quiet, upstream=args.upstream,
            allow_remote=args.allow_remote, proxy_auth=args.proxy_auth,
            workers=1 if note else workers, record=args.record, replay=args.replay,
            replay_diverged=args.replay_diverged,
        ).checked()
        if note:
            print(f"retimer: {note}", file=sys.stderr, flush=True)
        return config

    @property
    def profile_settings(self) -> ProfileSettings:
        """The profile and its overrides, as typed."""
        from retimer.profile.settings import ProfileSettings

        return ProfileSettings(self.profile, self.ttft, self.tps, self.jitter, self.speed, self.thinking)

    def checked(self) -> ProxyConfig:
        """This config with --upstream normalised, after every value is checked (in the
        order of the messages users and tests rely on)."""
        from retimer.profile.model import ProfileError

        try:
            self.profile_settings.build()
        except ProfileError as e:
            fail(str(e))
        if not 0 <= self.listen_port <= 65535:
            fail(f"--listen-port: {self.listen_port} is not a port number")
        if self.seed is not None and self.seed < 0:
            fail(f"--seed: expected a number >= 0, got {self.seed}")
        for rx in self.intercept:
            try:
                re.compile(rx)
            except re.error as e:
                fail(f"--intercept: {rx!r} is not a regular expression ({e})")
        for item in self.sets:
            if "=" not in item:
                fail(f"--set: expected KEY=VALUE, got {item!r}")
        from retimer.timing.strategy import parse_strategy

        try:
            parse_strategy(self.strategy)
        except ValueError as e:
            fail(str(e))
        if self.cache_max_mb < 0:
            fail(f"--cache-max-mb: expected a size >= 0, got {self.cache_max_mb:g}")
        if self.record and self.replay:
            fail("--record and --replay: one at a time")
        if self.record and self.workers > 1:
            fail("--record: one process records a session, in order; leave out --workers")
        if not self.upstream:
            return self
        from retimer.proxy.reverse import UpstreamError, parse_upstream

        try:
            return replace(self, upstream=parse_upstream(self.upstream))
        except UpstreamError as e:
            fail(f"--upstream: {e}")

    @property
    def confdir(self) -> Path:
        """Where the CA lives (see `confdir_of`)."""
        return confdir_of(self.sets)


def parse_workers(value: str) -> int:
    """--workers: a number >= 1, or auto (one per CPU); anything else fails in one line."""
    text = str(value).strip().lower()
    if text == "auto":
        return os.cpu_count() or 1
    try:
        n = int(text)
    except ValueError:
        fail(f"--workers: expected a number of processes >= 1 or auto, got {value!r}")
    if n < 1:
        fail(f"--workers: expected a number of processes >= 1 or auto, got {value!r}")
    return n


def spreads_connections(platform: str, has_reuse_port: bool) -> bool:
    """Whether the kernel spreads a port's connections over the processes listening on it with
    SO_REUSEPORT. Linux does. macOS and FreeBSD have SO_REUSEPORT but hand every connection to
    one of the sockets (FreeBSD balances only with SO_REUSEPORT_LB, which asyncio does not
    set); Windows has none."""
    return has_reuse_port and platform.startswith("linux")


def single_process_note(workers: int, platform: str, has_reuse_port: bool) -> str | None:
    """The line `--workers N` prints where N processes would not share the load (one process
    runs instead), or None when N workers run as asked."""
    if workers <= 1 or spreads_connections(platform, has_reuse_port):
        return None
    return (f"--workers {workers}: this platform does not spread connections over processes "
            "(SO_REUSEPORT load balancing is Linux only); running one process")


def confdir_of(sets: Sequence[str]) -> Path:
    """The confdir a --set confdir=DIR names, else retimer's default (the CA lives there)."""
    value = DEFAULT_CONFDIR
    for item in sets:
        key, _, val = item.partition("=")
        if key.strip() == "confdir":
            value = val
    return Path(os.path.expanduser(value))


def check_port(host: str, port: int) -> None:
    """Say plainly when the address is taken, before mitmproxy's longer message."""
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
