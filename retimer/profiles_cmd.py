"""`retimer profiles`: the built-in profiles as a table."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from .profile import ProfileError, builtin_profiles, load_profile


def print_profiles(args: list[str]) -> None:
    """Print every built-in profile, or the full source notes of the ones named."""
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
    if args:
        for name in args:
            try:
                p = load_profile(name)
            except ProfileError as e:
                print(f"retimer: error: {e}", file=sys.stderr)
                raise SystemExit(2) from None
            console.print(f"[bold]{p.name}[/bold] ({', '.join(p.aliases) or 'no aliases'})")
            console.print(f"  {p.description}")
            console.print(f"  file: {p.path}")
            console.print(f"  source: {p.source}")
        return
    table = Table(title="retimer built-in profiles (retimer profiles NAME for sources)")
    for col, justify in (("name", "left"), ("aliases", "left"), ("TTFT p50", "right"),
                         ("tok/s", "right"), ("description", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for p in builtin_profiles():
        ttft = "-" if p.ttft is None else f"{p.ttft.p50 * 1000:.0f} ms"
        tps = "-" if p.tps is None else f"{p.tps:g}"
        table.add_row(p.name, ", ".join(p.aliases), ttft, tps, p.description)
    console.print(table)
