"""What `retimer` prints once it listens: where, with which timing, and how to point each kind
of client at it (or, in a study, the blinded lines instead of the timing)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from retimer.cli.proxy.options import ProxyConfig

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
    console.print(f"[bold]retimer[/bold] listening on {proxy}")
    if config.workers > 1:
        console.print(f"  workers  {config.workers} processes on this one port, balanced by the kernel "
                      "(SO_REUSEPORT)")
    if config.listen_host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"  [bold red]warning[/bold red]: {config.listen_host} is reachable from other machines; "
            "anyone with the proxy credentials can use this proxy"
        )
    if config.study_banner:  # blinded: no profile, seed or timing lines
        for line in config.study_banner:
            console.print(line, markup=False)
    else:
        console.print(f"  profile  {profile.effective_name}: TTFT {ttft}, {rate}, seed {seed}")
        if not profile.passthrough:
            console.print(f"  thinking {thinking_text(profile)}", markup=False)
    extras = [f"strategy {config.strategy}"] if config.strategy != "live" else []
    if profile.speed != 1:
        extras.append(f"speed {profile.speed:g}x")
    if config.cache:
        extras.append(f"cache {Path(config.cache).expanduser()}")
    if extras and not config.study_banner:
        console.print(f"  timing   {', '.join(extras)}")
    if config.record:
        console.print(f"  cassette recording this session's calls into {Path(config.record).expanduser()}",
                      markup=False)
    elif config.replay:
        rest = "others go upstream" if config.replay_diverged == "upstream" else "no upstream"
        console.print(f"  cassette answering calls from {Path(config.replay).expanduser()}, {rest} "
                      "(any speed)", markup=False)
    elif not profile.passthrough and not config.study_banner:
        console.print("  note     a live stream is never sped up past its upstream: --record, --replay",
                      markup=False)
    if config.upstream:
        from retimer.cli.launch.env import proxy_url
        from retimer.proxy.reverse import base_url_hint

        listen = proxy_url(config.listen_host, config.listen_port)
        console.print(f"  reverse  serving {config.upstream} as plain HTTP at {listen}: no proxy or CA needed")
        console.print(f"  clients  {base_url_hint(config.upstream, listen)}")
        console.print("  Ctrl-C stops.")
        if config.log:
            console.print(f"  records  {Path(config.log).expanduser()}")
        return
    console.print(f"  CA cert  {ca}")
    console.print(f"  bundle   {bundle} (system roots + the CA, for SDKs and CLIs)")
    console.print(f"  curl     curl --proxy {proxy} --cacert {bundle} -N https://api.openai.com/...")
    console.print(f"  Python   HTTPS_PROXY={proxy} SSL_CERT_FILE={bundle} python app.py")
    console.print(f"  Node     HTTPS_PROXY={proxy} NODE_USE_ENV_PROXY=1 NODE_EXTRA_CA_CERTS={ca} node app.js")
    console.print(f"  browser  proxy {config.listen_host}:{config.listen_port} for HTTP and HTTPS; trust {ca}")
    console.print(f"  PAC      {proxy}/proxy.pac (LLM hosts via retimer, the rest DIRECT)")
    console.print("  any app  retimer run \\[options] -- COMMAND  (or: eval \"$(retimer env)\")")
    console.print("  only LLM hosts are intercepted; everything else is tunnelled untouched. Ctrl-C stops.")
    if config.log:
        console.print(f"  records  {Path(config.log).expanduser()}")


def config_profile(config: ProxyConfig) -> Profile:
    """The profile `config` runs (checked already by ProxyConfig), for a process without a proxy
    of its own: the parent of `--workers N`."""
    return config.profile_settings.build()


def profile_name(config: ProxyConfig) -> str:
    """The name plus overrides of the profile `config` runs: what the run plays."""
    return str(config_profile(config).effective_name)
