"""`retimer demo`: one page, one pane per profile, all playing the same real response at the
same moment through the real proxy (one flow per pane, each paced with its own profile).

The proxy runs in reverse mode in this process in front of a small content server
(retimer.cli.demo.server) that serves the page and the response; the demo addon
(retimer.proxy.demo_addon) picks each pane's profile. The page only draws what arrives, when
it arrives: no timing happens in JavaScript.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import webbrowser
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retimer.cli.cmdline import OneLineParser, fail
from retimer.cli.demo.source import Source, SourceError, builtin, from_cache, from_text_file
from retimer.profile.loader import OVERRIDE_KEYS, parse_profile_spec, profile_specs
from retimer.profile.model import Profile, ProfileError
from retimer.profile.settings import ProfileSettings

if TYPE_CHECKING:
    pass

DEFAULT_PROFILES = "cerebras,groq,gpt-5,o3,human-reading"
DEFAULT_PORT = 8765
MAX_PANES = 6  # a browser opens at most 6 HTTP/1.1 connections to one origin


def demo_parser() -> OneLineParser:
    p = OneLineParser(
        prog="retimer demo",
        description="A local page with one pane per profile, all playing the same real response "
        "at the same moment through the real proxy: each pane one stream with its profile's "
        "timing, with live TTFT, tok/s, elapsed time and a replay button.",
        epilog="Examples: retimer demo --profiles cerebras,gpt-5,o3 --text README.md   |   "
        "retimer demo --profiles \"cerebras,gpt-5:tps=40,o3:thinking=high:ttft=2s\"   |   "
        "retimer demo --cache ~/.retimer/cache (the newest answer retimer cached). "
        "Open the page with ?autoplay=1 to start all panes on load.",
    )
    p.add_argument("--profiles", default=DEFAULT_PROFILES, metavar="LIST",
                   help="comma-separated profiles, one pane each, as `retimer profiles` names them; "
                   "per-pane overrides after colons: gpt-5:tps=40, o3:thinking=high:ttft=2s "
                   f"(keys: {', '.join(OVERRIDE_KEYS)}; default: {DEFAULT_PROFILES}; at most {MAX_PANES})")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--text", metavar="FILE", default="", help="play this markdown file as the answer")
    source.add_argument("--cache", metavar="DIR", default="",
                        help="play the newest streamed response in this response cache (retimer --cache DIR)")
    p.add_argument("--entry", metavar="KEY", default="",
                   help="with --cache: the entry whose key starts with KEY instead of the newest")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port of the page on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--no-browser", action="store_true", help="print the page's URL, do not open a browser")
    p.add_argument("--seed", type=int, default=None, help="seed for the timing model (reproducible draws)")
    for key, what in (("ttft", "median time to first token, e.g. 400ms"), ("tps", "decode rate (tokens/s)"),
                      ("jitter", "jitter scale; 0 turns it off"), ("speed", "playback factor, e.g. 2x"),
                      ("thinking", "hidden thinking: off, low, medium, high or a token count")):
        p.add_argument(f"--{key}", default="", metavar="VALUE",
                       help=f"every pane's {what} (a pane's own override wins)")
    return p


@dataclass(frozen=True)
class Pane:
    """One pane: the spec as typed, and the profile it runs."""

    spec: str
    profile: Profile


def parse_panes(specs: str, defaults: dict[str, str]) -> list[Pane]:
    """`cerebras,gpt-5:tps=40` as panes (the grammar of `retimer whatif --profiles`:
    retimer.profile.loader.parse_profile_spec); a bad spec raises ProfileError naming it."""
    if not specs.strip():
        raise ProfileError("--profiles: name at least one profile")
    if any(not s.strip() for s in specs.split(",")):
        raise ProfileError(f"--profiles: {specs!r} has an empty item")
    panes: list[Pane] = []
    for item in profile_specs(specs):
        try:
            name, overrides = parse_profile_spec(item)
            profile = ProfileSettings(name, **{**defaults, **overrides}).build()
        except ProfileError as e:
            raise ProfileError(f"--profiles: {item!r}: {e}") from None
        if profile.passthrough:
            raise ProfileError(f"--profiles: {item!r} is passthrough: it has no timing to show")
        panes.append(Pane(item, profile))
    if len(panes) > MAX_PANES:
        raise ProfileError(f"--profiles: at most {MAX_PANES} panes (a browser opens 6 connections "
                           f"to one page), got {len(panes)}")
    return panes


def pane_config(pane: Pane) -> dict[str, object]:
    """What the page shows of a pane's profile before anything plays."""
    p = pane.profile
    return {"spec": pane.spec, "name": p.name, "profile": p.effective_name,
            "description": p.description, "tps": p.tps,
            "ttft_p50_ms": round(p.first_token_median() * 1000, 1)}


def check_demo_port(port: int) -> None:
    """A taken port in one line that names this command's flag (the proxy's says --listen-port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            fail(f"--port: cannot listen on 127.0.0.1:{port}: {e.strerror} (try --port 0 for any free port)")


def read_source(text: str, cache: str, entry: str) -> Source:
    if entry and not cache:
        raise SourceError("--entry: needs --cache DIR")
    if text:
        return from_text_file(text)
    if cache:
        return from_cache(cache, entry)
    return builtin()


def main(argv: list[str]) -> None:
    args = demo_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        fail(f"--port: {args.port} is not a port number")
    if args.seed is not None and args.seed < 0:
        fail(f"--seed: expected a number >= 0, got {args.seed}")
    defaults = {k: getattr(args, k) for k in OVERRIDE_KEYS if getattr(args, k)}
    try:
        panes = parse_panes(args.profiles, defaults)
        source = read_source(args.text, args.cache, args.entry)
    except (ProfileError, SourceError) as e:
        fail(str(e))
    if args.port:
        check_demo_port(args.port)
    try:
        asyncio.run(run_demo(panes, source, args.port, args.seed, not args.no_browser))
    except KeyboardInterrupt:
        pass


async def run_demo(panes: list[Pane], source: Source, port: int, seed: int | None, browser: bool) -> None:
    """Serve the page behind the proxy until stopped (Ctrl-C)."""
    from retimer.cli.demo.server import WARMUP_BODY_TEXT, DemoServer
    from retimer.cli.demo.source import Block, anthropic_stream
    from retimer.cli.demo.tokens import js_token_pattern
    from retimer.cli.proxy.options import ProxyConfig
    from retimer.cli.proxy.runner import build_proxy, listening_port, serve
    from retimer.proxy.demo_addon import DemoAddon
    from retimer.wire.tokenizer import count_tokens

    addon = DemoAddon([p.profile for p in panes], ProfileSettings("cerebras", jitter="0").build())
    config = {
        "source": {"label": source.label, "tokens": sum(count_tokens(b.text) for b in source.blocks)},
        "panes": [pane_config(p) for p in panes],
        "token_pattern": js_token_pattern(),
    }
    warmup = anthropic_stream(Source("warm-up", (Block("text", WARMUP_BODY_TEXT),)))
    server = DemoServer(config, anthropic_stream(source), warmup, addon.records)
    await server.start()
    proxy = ProxyConfig(
        profile=panes[0].profile.name, ttft="", tps="", jitter="", speed="", thinking="",
        listen_host="127.0.0.1", listen_port=port, seed=seed, log="", strategy="live", cache="",
        cache_max_mb=0, intercept=(), sets=(), quiet=True,
        upstream=f"http://127.0.0.1:{server.port}", allow_remote=False, proxy_auth="",
    ).checked()
    m, _, view = build_proxy(proxy)
    m.addons.add(addon)
    running = asyncio.create_task(serve(m, view))
    try:
        listening = await listening_port(m, running)
        if listening is None:
            await running
            return
        await warm_up(listening)
        url = f"http://127.0.0.1:{listening}/"
        names = ", ".join(p.spec for p in panes)
        print(f"retimer demo: {url}  ({names}; {source.label})", flush=True)
        print(f"  autoplay: {url}?autoplay=1   stop: Ctrl-C", flush=True)
        if browser:
            webbrowser.open(url)
        await running
    finally:
        server.stop()


async def warm_up(port: int) -> None:
    """One short stream through the proxy before the page opens: the first stream of a process
    pays one-off costs (imports, first pacer, first upstream connection) that no pane should."""
    from retimer.cli.demo.server import STREAM_PATH, WARMUP_QUERY
    from retimer.proxy.demo_addon import WARMUP_HEADER

    body = (b'{"model": "retimer-demo", "stream": true, "max_tokens": 16, '
            b'"messages": [{"role": "user", "content": "hi"}]}')
    head = (f"POST {STREAM_PATH}?{WARMUP_QUERY} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
            f"content-type: application/json\r\n{WARMUP_HEADER}: 1\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        writer.write(head + body)
        await asyncio.wait_for(reader.read(-1), 10)
        writer.close()
    except (OSError, TimeoutError) as e:
        print(f"retimer demo: warm-up stream failed ({e}); the first play may start late", file=sys.stderr)
