"""`retimer profiles`: the built-in profiles as a table, or one profile's timing in full.

Why one headline function: the banner, `retimer browser` and this table must print the same
number, and that number is the median wait for the first visible token (TTFT plus any hidden
thinking, `Profile.first_token_median`), never a part of it; tests hold every profile to it.
"""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from retimer.cli.cmdline import wrapped
from retimer.profile.loader import builtin_profiles, load_profile
from retimer.profile.model import Profile, ProfileError

WIDE_TABLE = 140  # columns from which the table has room for every profile's description


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.3g} s"


def _tokens(n: float) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"


def first_token_text(p: Profile) -> str:
    """The median wait for the first visible token with a short prompt, thinking included."""
    if p.passthrough or p.ttft is None:
        return "as upstream"
    total = p.first_token_median()
    if p.reasoning is None:
        return f"{_ms(total)} median"
    return (f"{_ms(total)} median ({_ms(p.ttft.p50)} + thinking {p.thinking} "
            f"≈ {_ms(p.thinking_median_s())} median)")


def thinking_text(p: Profile) -> str:
    """The chosen hidden thinking and the levels on offer, each with its median time."""
    if p.passthrough or p.tps is None:
        return "-"
    now = "off" if p.reasoning is None else f"{p.thinking} ≈ {_ms(p.thinking_median_s())} median"
    if p.reasoning is not None and p.thinking_tps is not None and p.thinking_tps != p.tps:
        now += f" (at the profile's own {p.thinking_tps:g} tok/s)"
    others = [f"{k} ≈ {_ms(p.thinking_median_s(k))}" for k, _ in p.thinking_levels
              if k != p.thinking]
    return now + (f"; --thinking {', '.join(others)}" if others else "")


def timing_lines(p: Profile) -> list[str]:
    """One plain-text line per timing key the profile sets (what `profiles NAME` shows)."""
    if p.passthrough or p.ttft is None or p.tps is None:
        return ["timing: none (the upstream's own timing passes through)"]
    t = p.ttft
    lines = [f"first token: {first_token_text(p)} for a short prompt",
             f"ttft: p50 {_ms(t.p50)}, p90 {_ms(t.p90)}, p99 {_ms(t.p99)}",
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
    lines.append(f"thinking: {thinking_text(p)}")
    for name, spec in p.thinking_levels:
        h = spec.hidden_tokens
        lines.append(f"  {name}: hidden tokens p50 {h.p50:.0f}, p90 {h.p90:.0f}, p99 {h.p99:.0f} "
                     f"before the first visible token; first token "
                     f"{_ms(p.first_token_median(name))} median")
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
            console.print("  source:")  # one sentence a line, indented: not a wall of text
            for line in wrapped(p.source):
                console.print(line, markup=False)
        return
    narrow = console.width < WIDE_TABLE
    table = Table(title="retimer built-in profiles (retimer profiles NAME for details)",
                  box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD)
    profiles = builtin_profiles()
    if narrow:  # names never folded, aliases under them, one thinking level a line
        table.add_column("name (aliases)", min_width=max(len(p.name) for p in profiles))
    else:
        table.add_column("name", no_wrap=True)
        table.add_column("aliases", overflow="fold")
    table.add_column("TTFT p50", justify="right", no_wrap=True)
    table.add_column("tok/s", justify="right", no_wrap=True)
    table.add_column("thinking (median)", overflow="fold")
    if not narrow:
        table.add_column("description", overflow="fold")
    for p in profiles:
        ttft = "-" if p.ttft is None else _ms(p.first_token_median())
        tps = "-" if p.tps is None else f"{p.tps:g}"
        aliases = escape(", ".join(p.aliases))
        if narrow:
            name = escape(p.name) + (f"\n  [dim]{aliases}[/dim]" if aliases else "")
            table.add_row(name, ttft, tps, escape(thinking_levels(p)))
        else:
            table.add_row(escape(p.name), aliases, ttft, tps, escape(thinking_text(p)),
                          escape(p.description))
    console.print(table)
    if narrow:
        console.print(f"(descriptions: in a terminal {WIDE_TABLE}+ columns wide, or retimer profiles NAME)")


def thinking_levels(p: Profile) -> str:
    """`thinking_text` one level a line: the chosen first, then each `--thinking` level's median."""
    if p.passthrough or p.tps is None:
        return "-"
    chosen = "off" if p.reasoning is None else f"{p.thinking} {_ms(p.thinking_median_s())}"
    return "\n".join([chosen, *(f"{k} {_ms(p.thinking_median_s(k))}" for k, _ in p.thinking_levels
                                 if k != p.thinking)])
