"""`retimer profiles`: the built-in profiles as a table, or one profile's timing in full."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .profile import Profile, ProfileError, builtin_profiles, load_profile


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.3g} s"


def _tokens(n: float) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"


def timing_lines(p: Profile) -> list[str]:
    """One plain-text line per timing key the profile sets (what `profiles NAME` shows)."""
    if p.passthrough or p.ttft is None or p.tps is None:
        return ["timing: none (the upstream's own timing passes through)"]
    t = p.ttft
    lines = [f"ttft: p50 {_ms(t.p50)}, p90 {_ms(t.p90)}, p99 {_ms(t.p99)}",
             f"decode: {p.tps:g} tok/s mean; gap p90 {p.gap[0]:g}x, p99 {p.gap[1]:g}x the median"]
    if p.speculative is not None:
        s = p.speculative
        sizes = ", ".join(f"{k}: {v:.2f}" for k, v in s.chunks().items())
        lines.append(f"speculative: {s.draft_tokens} draft tokens, acceptance {s.acceptance:g}; "
                     f"tokens per step {{{sizes}}}, at a steady step cadence")
    else:
        sizes = ", ".join(f"{k}: {v:g}" for k, v in p.chunking)
        lines.append(f"chunking: tokens per event {{{sizes}}}")
    if p.jitter != 1.0:
        lines.append(f"jitter: {p.jitter:g}")
    if p.prefill is not None:
        f = p.prefill
        lines.append(f"prefill: {f.tps:g} tok/s; the TTFT quantiles are for a "
                     f"{f.reference_tokens}-token prompt ({_ms(f.reference_s)} of prefill)")
    if p.prompt_cache is not None:
        c = p.prompt_cache
        lines.append(f"prompt cache: a prefix of {c.min_tokens}+ tokens sent again within "
                     f"{c.ttl / 60:g} min prefills {c.discount:.0%} faster")
    if p.context is not None:
        lines.append(f"context: decode rate halves at {_tokens(p.context.half_rate_at)} "
                     "tokens of prompt + output")
    if p.reasoning is not None:
        h = p.reasoning.hidden_tokens
        lines.append(f"reasoning: hidden thinking p50 {h.p50:.0f}, p90 {h.p90:.0f}, p99 "
                     f"{h.p99:.0f} tokens at the decode rate before the first visible token "
                     f"(about {_ms(h.p50 / p.tps)} at p50)")
    if p.stalls is not None:
        st, d = p.stalls, p.stalls.duration
        lines.append(f"stalls: {st.per_1000_tokens:g} per 1000 tokens ({st.where}), lasting "
                     f"p50 {_ms(d.p50)}, p90 {_ms(d.p90)}, p99 {_ms(d.p99)}")
    if p.speed != 1.0:
        lines.append(f"speed: {p.speed:g}x (applied to every value above)")
    return lines


def print_profiles(args: list[str]) -> None:
    """Print every built-in profile, or the timing and full source notes of the ones named."""
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
    if args:
        for name in args:
            try:
                p = load_profile(name)
            except ProfileError as e:
                print(f"retimer: error: {e}", file=sys.stderr)
                raise SystemExit(2) from None
            aliases = escape(", ".join(p.aliases) or "no aliases")
            console.print(f"[bold]{escape(p.name)}[/bold] ({aliases})")
            console.print(f"  {escape(p.description)}")
            console.print(f"  file: {escape(str(p.path))}")
            for line in timing_lines(p):
                console.print(f"  {escape(line)}")
            console.print(f"  source: {escape(p.source)}")
        return
    table = Table(title="retimer built-in profiles (retimer profiles NAME for details)")
    for col, justify in (("name", "left"), ("aliases", "left"), ("TTFT p50", "right"),
                         ("tok/s", "right"), ("description", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for p in builtin_profiles():
        ttft = "-" if p.ttft is None else f"{p.ttft.p50 * 1000:.0f} ms"
        tps = "-" if p.tps is None else f"{p.tps:g}"
        table.add_row(escape(p.name), escape(", ".join(p.aliases)), ttft, tps,
                      escape(p.description))
    console.print(table)
