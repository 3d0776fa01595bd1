"""What `retimer` prints once it listens: where, with which timing, and how to point each kind
of client at it (or, in a study, the blinded lines instead of the timing).

In a terminal narrower than a line, a line of prose is word-wrapped with its continuation under
the value column; a command (curl, Python, Node, `retimer run`, a reverse proxy's client
settings) stays one line, which the terminal soft-wraps and copies whole. Piped, nothing is
wrapped."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from retimer.cli.cmdline import fit
from retimer.cli.proxy.options import ProxyConfig

VALUE_COLUMN = 11  # where a row's value starts ("  bundle   ")

if TYPE_CHECKING:
    from mitmproxy.options import Options

    from retimer.profile.model import Profile
    from retimer.proxy.addon import Retimer


def print_banner(config: ProxyConfig, opts: Options | None, addon: Retimer | None) -> None:
    """The banner on stdout; `opts` are mitmproxy's options, `addon` the Retimer addon (both
    None in the parent of `--workers N`, which has no proxy of its own: it reads `config`)."""
    from rich.console import Console

    if addon is None:
        profile = config_profile(config)
        seed: int | str = "drawn per worker" if config.seed is None else config.seed
        confdir = config.confdir
    else:
        assert opts is not None and addon.profile is not None  # given together; configured by now
        profile, seed = addon.profile, addon.seed
        confdir = Path(os.path.expanduser(opts.confdir))
    from retimer.proxy.certs import CA_FILE, write_bundle

    ca = confdir / CA_FILE
    bundle = write_bundle(confdir)
    proxy = f"http://{config.listen_host}:{config.listen_port}"
    from retimer.cli.records.profiles import first_token_text, thinking_text

    rate = "as upstream" if profile.passthrough else f"{profile.tps:g} tok/s"
    ttft = first_token_text(profile)  # the median wait for the first token, thinking included
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    width = console.width if console.is_terminal else None

    def say(line: str) -> None:  # a row: its continuation under its value
        console.print(fit(line, width, hang=VALUE_COLUMN), markup=False)

    console.print(f"[bold]retimer[/bold] listening on {proxy}")
    if config.workers > 1:
        say(f"  workers  {config.workers} processes on this one port, balanced by the kernel "
            "(SO_REUSEPORT)")
    if config.listen_host not in ("127.0.0.1", "localhost", "::1"):
        warning = fit(f"  warning: {config.listen_host} is reachable from other machines; anyone "
                      "with the proxy credentials can use this proxy", width, hang=4)
        console.print(warning.replace("warning", "[bold red]warning[/bold red]", 1), markup=True)
    if config.study_banner:  # blinded: no profile, seed or timing lines
        for line in config.study_banner:
            say(line)
    else:
        say(f"  profile  {profile.effective_name}: TTFT {ttft}, {rate}, seed {seed}")
        if not profile.passthrough:
            say(f"  thinking {thinking_text(profile)}")
    extras = [f"strategy {config.strategy}"] if config.strategy != "live" else []
    if profile.speed != 1:
        extras.append(f"speed {profile.speed:g}x")
    if config.cache:
        extras.append(f"cache {Path(config.cache).expanduser()}")
    if extras and not config.study_banner:
        say(f"  timing   {', '.join(extras)}")
    if config.record:
        say(f"  cassette recording this session's calls into {Path(config.record).expanduser()}")
    elif config.replay:
        rest = "others go upstream" if config.replay_diverged == "upstream" else "no upstream"
        say(f"  cassette answering calls from {Path(config.replay).expanduser()}, {rest} (any speed)")
    elif not profile.passthrough and not config.study_banner:
        say("  note     a live stream is never sped up past its upstream: --record, --replay")
    if config.upstream:
        from retimer.cli.launch.env import proxy_url
        from retimer.proxy.reverse import base_url_hint

        listen = proxy_url(config.listen_host, config.listen_port)
        say(f"  reverse  serving {config.upstream} as plain HTTP at {listen}: no proxy or CA needed")
        console.print(f"  clients  {base_url_hint(config.upstream, listen)}", markup=False)  # a command
        say("  Ctrl-C stops.")
        if config.log:
            say(f"  records  {Path(config.log).expanduser()}")
        return
    say(f"  CA cert  {ca}")
    say(f"  bundle   {bundle} (system roots + the CA, for SDKs and CLIs)")
    for command in (f"  curl     curl --proxy {proxy} --cacert {bundle} -N https://api.openai.com/...",
                    f"  Python   HTTPS_PROXY={proxy} SSL_CERT_FILE={bundle} python app.py",
                    f"  Node     HTTPS_PROXY={proxy} NODE_USE_ENV_PROXY=1 NODE_EXTRA_CA_CERTS={ca} node app.js"):
        console.print(command, markup=False)
    say(f"  browser  proxy {config.listen_host}:{config.listen_port} for HTTP and HTTPS; trust {ca}")
    say(f"  PAC      {proxy}/proxy.pac (LLM hosts via retimer, the rest DIRECT)")
    console.print('  any app  retimer run [options] -- COMMAND  (or: eval "$(retimer env)")', markup=False)
    console.print(fit("  only LLM hosts are intercepted; everything else is tunnelled untouched.",
                      width, hang=4), markup=False)
    say("  Ctrl-C stops.")
    if config.log:
        say(f"  records  {Path(config.log).expanduser()}")


def config_profile(config: ProxyConfig) -> Profile:
    """The profile `config` runs (checked already by ProxyConfig), for a process without a proxy
    of its own: the parent of `--workers N`."""
    return config.profile_settings.build()


def profile_name(config: ProxyConfig) -> str:
    """The name plus overrides of the profile `config` runs: what the run plays."""
    return str(config_profile(config).effective_name)
