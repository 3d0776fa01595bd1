"""`retimer run`, `retimer env` and `retimer ca`: point real programs at retimer without editing them.

`run` starts the proxy in this process (or reuses the retimer already on the port), runs the
command with every common runtime's proxy and CA variables set (launch_env.py), and exits
with the command's exit code. `env` prints the same variables for a shell; `ca` makes sure the
CA exists and prints where it is, its SPKI hash and the OS's steps to trust it system-wide
(retimer.cli.proxy.trust), which it runs with --install and undoes with --uninstall.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import http.client
import os
import shutil
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from retimer.cli.cmdline import OneLineParser, fail
from retimer.cli.launch.env import SHELLS, child_env, launch_env, proxy_url, shell_lines
from retimer.cli.proxy.options import ProxyConfig, confdir_of, proxy_parser
from retimer.cli.proxy.runner import bound_port, build_proxy

RUN_USAGE = "retimer run [proxy options] -- COMMAND [ARGS...]"


def main(command: str, argv: list[str]) -> None:
    if command == "run":
        raise SystemExit(run(argv))
    if command == "env":
        print_env(argv)
    else:
        print_ca(argv)


# -- shared ---------------------------------------------------------------------------------
def _ca_files(confdir: Path) -> tuple[Path, Path]:
    """(CA cert, bundle) in confdir, creating the CA (0700 dir, 0600 key) and bundle as needed."""
    from retimer.proxy.certs import ensure_ca, write_bundle

    try:
        ca = ensure_ca(confdir)
        return ca, write_bundle(confdir)
    except OSError as e:
        fail(f"cannot create the CA in {confdir}: {e.strerror}", 1)


def _kept_trust(confdir: Path, ca: Path, bundle: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The trust variables the user had set (a company CA, their own bundle), each as a file of
    theirs plus retimer's CA: merged, never replaced. A variable naming a file that cannot be read
    is left to retimer's own, with one line saying so."""
    from retimer.cli.launch.env import TRUST_VARIABLES
    from retimer.proxy.certs import MERGED_DIR, merged_bundle, system_bundle

    system = system_bundle()
    # the system's own roots are in retimer's bundle already (and Node has its own)
    ours = {ca.resolve(), bundle.resolve(), *((system.resolve(),) if system else ())}
    out: dict[str, str] = {}
    for name in TRUST_VARIABLES:
        value = environ.get(name, "")
        if not value:
            continue
        path = Path(value).expanduser()
        if path.resolve() in ours or path.resolve().parent == (confdir / MERGED_DIR).resolve():
            continue  # retimer's already (a run inside a run), or the system's roots
        try:
            out[name] = str(merged_bundle(confdir, path))
        except OSError as e:
            print(f"retimer: warning: {name}={value} cannot be read ({e.strerror}); the program "
                  "gets retimer's CA without it", file=sys.stderr)
    return out


def _small_parser(prog: str, description: str) -> OneLineParser:
    p = OneLineParser(prog=prog, description=description)
    p.add_argument("--listen-host", default="127.0.0.1", help="retimer's address (default 127.0.0.1)")
    p.add_argument("--listen-port", type=int, default=8080, help="retimer's port (default 8080)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="as for retimer; only confdir=DIR (where the CA lives) matters here")
    return p


def _connect_host(host: str) -> str:
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=1.0):
            return True
    except OSError:
        return False


def probe_retimer(host: str, port: int, auth: str = "") -> str | None:
    """The CA SPKI hash a retimer on host:port reports with its PAC file, or None if what
    listens there is not retimer. `auth` (USER:PASS) answers a retimer run with --proxy-auth."""
    from retimer.proxy.pac import PATH, SPKI_HEADER

    headers = {"host": f"{_connect_host(host)}:{port}"}
    if auth:
        headers["proxy-authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    conn = http.client.HTTPConnection(_connect_host(host), port, timeout=3.0)
    try:
        conn.request("GET", PATH, headers=headers)
        resp = conn.getresponse()
        body = resp.read(64)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    if resp.status != 200 or not body.startswith(b"// retimer"):
        return None
    return resp.getheader(SPKI_HEADER) or ""


# -- retimer env / retimer ca ---------------------------------------------------------------
def print_env(argv: list[str]) -> None:
    p = _small_parser("retimer env", "Print shell lines that point programs at retimer, e.g. "
                      'eval "$(retimer env)". Creates the CA if needed.')
    p.add_argument("--shell", choices=SHELLS, default="sh", help="output syntax (default sh: bash, zsh)")
    p.add_argument("--proxy-auth", metavar="USER:PASS", default="",
                   help="the credentials retimer was started with: put in the proxy URL")
    _add_local_flag(p)
    args = p.parse_args(argv)
    if not 0 < args.listen_port <= 65535:
        fail(f"--listen-port: {args.listen_port} is not a port number")
    _check_auth(args.proxy_auth)
    ca, bundle = _ca_files(confdir_of(args.sets))
    proxy = proxy_url(args.listen_host, args.listen_port, args.proxy_auth)
    env = launch_env(proxy, str(bundle), str(ca), local=args.local,
                     trust=_kept_trust(confdir_of(args.sets), ca, bundle, os.environ))
    print("\n".join(shell_lines(env, args.shell)))
    if not listening(args.listen_host, args.listen_port):
        print(f"retimer: note: nothing listens on {args.listen_host}:{args.listen_port} yet; "
              "start `retimer` there", file=sys.stderr)


def print_ca(argv: list[str]) -> None:
    from retimer.cli.proxy.trust import DISTROS, PLATFORMS, apply_plan, machine_plans, plan_lines

    p = _small_parser("retimer ca", "Create retimer's CA if needed; print its path, SPKI hash and "
                      "this OS's steps to trust it system-wide (--install runs them).")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--spki", action="store_true", help="print only the SPKI hash")
    only.add_argument("--path", action="store_true", help="print only the CA certificate's path")
    only.add_argument("--install", action="store_true",
                      help="trust the CA system-wide: run the printed install steps (sudo on Linux "
                      "and macOS; Windows: your user's store)")
    only.add_argument("--uninstall", action="store_true", help="run the printed remove steps")
    p.add_argument("--platform", choices=PLATFORMS, default=None,
                   help="print another OS's steps: linux, darwin (macOS) or win32 (Windows)")
    p.add_argument("--distro", choices=DISTROS, default=None,
                   help="Linux: the steps of debian (Debian, Ubuntu) or fedora (Fedora, RHEL); "
                   "default: from /etc/os-release")
    args = p.parse_args(argv)
    from retimer.proxy.certs import spki_hash

    confdir = confdir_of(args.sets)
    existed = (confdir / "mitmproxy-ca.pem").exists()
    ca, bundle = _ca_files(confdir)
    spki = spki_hash(ca)
    if args.spki or args.path:
        print(spki if args.spki else ca)
        return
    plans, here = machine_plans(confdir, args.platform, args.distro)
    if args.install or args.uninstall:
        print(apply_plan(plans, here, "--install" if args.install else "--uninstall"))
        return
    print(f"cert    {ca}")
    print(f"spki    {spki}")
    print(f"bundle  {bundle}")
    print(f"key     {confdir / 'mitmproxy-ca.pem'} (private: never share it)")
    if not existed:
        print("created a new CA: clients must trust it (see certs/README.md)")
    print(f"chrome  --ignore-certificate-errors-spki-list={spki}")
    print("\n".join(plan_lines(plans, here)))


def _add_local_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-local", dest="local", action="store_false",
                   help="reach loopback (localhost, 127.0.0.1, ::1) directly, as before: local "
                        "model servers are then not re-timed (default: loopback goes through "
                        "retimer, which paces only LLM API calls and passes the rest untouched)")


def _check_auth(auth: str) -> None:
    from retimer.proxy.security import proxy_auth_error

    if auth and (err := proxy_auth_error(auth)):
        fail(err)


# -- retimer run ----------------------------------------------------------------------------
def split_command(argv: list[str], flags: set[str] | None = None) -> tuple[list[str], list[str]]:
    """(proxy options, command): split at the first `--`, else at the first non-option word
    that is not an option's value (`flags` are the options that take none)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    if flags is None:
        flags = _run_parser().flag_options()
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            return argv[:i], argv[i:]
        i += 1 if (word in flags or "=" in word) else 2
    return argv, []


def _run_parser() -> OneLineParser:
    parser = proxy_parser()
    parser.prog = "retimer run"
    parser.usage = RUN_USAGE
    _add_local_flag(parser)
    return parser


def run(argv: list[str]) -> int:
    parser = _run_parser()
    options, command = split_command(argv, parser.flag_options())
    args = parser.parse_args(options)
    if not command:
        fail(f"run: missing COMMAND (usage: {RUN_USAGE})")
    if args.upstream:
        fail("run: --upstream is for `retimer --upstream URL`; point the client's base URL at it")
    if shutil.which(command[0]) is None:
        fail(f"run: command not found: {command[0]}", 127)
    config = ProxyConfig.from_args(args)  # bad options fail even when a retimer is reused
    _check_auth(config.proxy_auth)
    local: bool = args.local
    try:
        if config.listen_port and listening(config.listen_host, config.listen_port):
            return asyncio.run(_run_reusing(config, command, local))
        return asyncio.run(_run_with_proxy(config, command, local))
    except KeyboardInterrupt:  # before the child started
        return 130


async def _run_reusing(config: ProxyConfig, command: list[str], local: bool) -> int:
    from retimer.proxy.certs import spki_hash

    where = f"{config.listen_host}:{config.listen_port}"
    spki = probe_retimer(config.listen_host, config.listen_port, config.proxy_auth)
    if spki is None:
        fail(f"run: {where} is taken by something that is not retimer "
             f"(try --listen-port {config.listen_port + 1})")
    confdir = config.confdir
    ca, bundle = _ca_files(confdir)
    if spki and spki != spki_hash(ca):
        fail(f"run: the retimer on {where} uses another CA than {confdir}; "
             "pass its --set confdir=DIR")
    if not config.quiet:
        print(f"retimer: using the retimer already on {where} (its own options apply)",
              file=sys.stderr)
    proxy = proxy_url(config.listen_host, config.listen_port, config.proxy_auth)
    env = launch_env(proxy, str(bundle), str(ca), local=local,
                     trust=_kept_trust(confdir, ca, bundle, os.environ))
    return await run_child(command, child_env(os.environ, env))


class _Ready:
    """Sets an event when mitmproxy's `running` hook fires: servers are up, CA loaded."""

    def __init__(self, event: asyncio.Event) -> None:
        self.event = event

    def running(self) -> None:
        self.event.set()


async def _run_with_workers(config: ProxyConfig, command: list[str], local: bool) -> int:
    """`retimer run --workers N`: the same, with N proxy processes on the port."""
    from retimer.cli.proxy.banner import profile_name
    from retimer.cli.proxy.workers import serving

    async with serving(config) as workers:
        ca, bundle = _ca_files(config.confdir)
        if not config.quiet:
            paced = "LLM hosts and local model servers" if local else "LLM hosts"
            print(f"retimer: {proxy_url(config.listen_host, workers.port)} ({profile_name(config)}, "
                  f"{config.workers} workers), {paced} re-timed; running {' '.join(command)}",
                  file=sys.stderr)
        proxy = proxy_url(config.listen_host, workers.port, config.proxy_auth)
        env = launch_env(proxy, str(bundle), str(ca), local=local,
                         trust=_kept_trust(config.confdir, ca, bundle, os.environ))
        return await run_child(command, child_env(os.environ, env))


async def _run_with_proxy(config: ProxyConfig, command: list[str], local: bool) -> int:
    if config.workers > 1:
        return await _run_with_workers(config, command, local)
    m, addon, view = build_proxy(config, out=sys.stderr, interactive=False)
    ready = asyncio.Event()
    m.addons.add(_Ready(ready))
    server = asyncio.create_task(m.run())
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({server, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiter.cancel()
        await server  # raises what stopped the proxy (errorcheck exits 1)
        return 1
    port = bound_port(m) or config.listen_port
    ca, bundle = _ca_files(config.confdir)
    if not config.quiet:  # the address without credentials: they never reach the terminal
        paced = "LLM hosts and local model servers" if local else "LLM hosts"
        assert addon.profile is not None  # build_proxy configured it
        ran = addon.profile.effective_name  # the name plus overrides: what this run plays
        print(f"retimer: {proxy_url(config.listen_host, port)} ({ran}), {paced} "
              f"re-timed; running {' '.join(command)}", file=sys.stderr)
    proxy = proxy_url(config.listen_host, port, config.proxy_auth)
    env = launch_env(proxy, str(bundle), str(ca), local=local,
                     trust=_kept_trust(config.confdir, ca, bundle, os.environ))
    try:
        return await run_child(command, child_env(os.environ, env))
    finally:
        m.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await server
        view.stop()


def terminal_interrupt() -> bool:
    """Whether a SIGINT most likely came from the terminal's Ctrl-C, which the kernel sends to
    the whole foreground process group: the child (in our group) then has it already."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except (OSError, AttributeError):  # AttributeError: Windows has no process groups
        return False


class _Forwarder:
    """The SIGINT/SIGTERM/SIGHUP handler of `retimer run`: passes each on to the command. It is
    installed before the command is spawned, as a signal in between would otherwise be lost
    (SIGTERM's default kills retimer alone and the command runs on); one that comes before the
    command exists is kept and delivered as soon as it does."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.pending: list[int] = []

    def __call__(self, sig: int) -> None:
        if sig == signal.SIGINT and terminal_interrupt():
            return  # the terminal's Ctrl-C went to the command too (it exists by then but for
            # the microseconds before the fork: forwarding it would most likely double it)
        if self.proc is None:
            self.pending.append(sig)
        else:
            self._send(sig)

    def attach(self, proc: asyncio.subprocess.Process) -> None:
        """The command was spawned: forward to it from now on, and first what came before."""
        self.proc = proc
        pending, self.pending = self.pending, []
        for sig in pending:
            self._send(sig)

    def _send(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):  # it has exited already
            self.proc.send_signal(sig)


async def run_child(command: list[str], env: dict[str, str]) -> int:
    """Run `command` with `env` (stdio inherited); forward SIGINT/SIGTERM/SIGHUP; its exit code,
    128+N when a signal N ended it (as shells report it)."""
    loop = asyncio.get_running_loop()
    forward = _Forwarder()
    handled: list[int] = []
    hup = getattr(signal, "SIGHUP", None)  # Windows has none
    for sig in (signal.SIGINT, signal.SIGTERM, *([hup] if hup is not None else [])):
        try:
            loop.add_signal_handler(sig, forward, sig)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
            pass
    try:
        try:
            proc = await asyncio.create_subprocess_exec(*command, env=env)
        except OSError as e:
            fail(f"run: cannot run {command[0]}: {e.strerror}", 126)
        forward.attach(proc)
        code = await proc.wait()
    finally:
        for handled_sig in handled:
            loop.remove_signal_handler(handled_sig)
    return code if code >= 0 else 128 - code
