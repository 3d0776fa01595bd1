"""What `retimer whatif` shows: the rows of its table, its chart, its JSON and the report's section.

Why one module for all of them: the terminal table, `--json`, the HTML section and the PNG must
give the same figures, so each is made from the same rows. Every string from a log is escaped
in the HTML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from html import escape

from retimer.report.svgplot import Chart, render
from retimer.report.whatif import Figures, SessionResult, combined, start_text

__all__ = ["Row", "change_text", "duration_text", "rows", "section_html", "to_json",
           "whatif_chart"]

JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: recorded, upstream alone, or a profile."""

    label: str
    kind: str  # recorded | upstream | profile
    waiting_s: float
    calls_s: float
    total_s: float
    between_s: float


def rows(result: SessionResult) -> list[Row]:
    b = result.between_s
    out = [Row("as recorded", "recorded", *_fig(result.recorded), b),
           Row("upstream alone", "upstream", *_fig(result.upstream), b)]
    out += [Row(p.profile, "profile", p.waiting_s, p.calls_s, p.total_s, b)
            for p in result.profiles]
    return out


def _fig(f: Figures) -> tuple[float, float, float]:
    return f.waiting_s, f.calls_s, f.total_s


def duration_text(seconds: float) -> str:
    """A duration people read at a glance: 850 ms, 12.4 s, 3 min 05 s, 2 h 04 min."""
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f} ms"
    if round(seconds, 1) < 60:
        return f"{seconds:.2f} s" if round(seconds, 2) < 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


def change_text(value: float, recorded: float) -> str:
    """The change against the recorded figure: -35 %, +120 %, 4.2x (large ones as a factor)."""
    if recorded <= 0:
        return "-"
    ratio = value / recorded
    if ratio >= 3:
        return f"{ratio:.1f}x"
    pct = (ratio - 1) * 100
    return "same" if abs(pct) < 0.5 else f"{pct:+.0f} %"


def whatif_chart(result: SessionResult) -> Chart:
    """Total session time per row, the between-call part (the same in every row) in grey."""
    bars = [(r.label, r.total_s, f"{duration_text(r.total_s)} (waiting {duration_text(r.waiting_s)})")
            for r in rows(result)]
    return Chart(f"Session time: between calls (grey) + waiting on the model, {result.session}",
                 bars=bars, bar_base=result.between_s,
                 bar_base_label=f"between calls: {duration_text(result.between_s)}")


def _session_json(r: SessionResult) -> dict[str, object]:
    def fig(f: Figures) -> dict[str, float]:
        return {k: round(v, 3) for k, v in asdict(f).items()}

    out: dict[str, object] = {
        "session": r.session, "start": start_text(r), "calls": r.calls,
        "timed": r.timed,
        "unmodelled": dict(r.unmodelled), "prompt_unknown": r.prompt_unknown,
        "between_s": round(r.between_s, 3),
        "recorded": fig(r.recorded), "upstream": fig(r.upstream),
        "profiles": [{"profile": p.profile,
                      **{k: round(v, 3) for k, v in asdict(p).items() if k != "profile"}}
                     for p in r.profiles],
    }
    if r.waits:
        out["waits"] = {k: [round(v, 3) for v in vs] for k, vs in r.waits.items()}
    return out


def to_json(by: str, results: Sequence[SessionResult]) -> dict[str, object]:
    """The figures for scripts (docs/whatif.md, "JSON")."""
    return {
        "version": JSON_VERSION, "by": by,
        "profiles": [p.profile for p in results[0].profiles] if results else [],
        "sessions": [_session_json(r) for r in results],
        "all": _session_json(combined(results)) if results else None,
    }


def notes(result: SessionResult) -> list[str]:
    """What the figures leave out or assume, one short sentence each."""
    out = []
    if result.unmodelled:
        parts = ", ".join(f"{n} {why}" for why, n in sorted(result.unmodelled.items()))
        out.append(f"Calls kept at their recorded wait under every profile: {parts}.")
    if result.prompt_unknown:
        out.append(f"{result.prompt_unknown} calls have no prompt estimate (passthrough or "
                   "older records): timed as a reference-size prompt.")
    return out


def section_html(by: str, results: Sequence[SessionResult]) -> str:
    """The report's "This session at other speeds" section: one table, one chart."""
    if not results:
        return ""
    total = combined(results)
    head = (f"{total.calls} calls in {len(results)} sessions (by {escape(by)}), added up"
            if len(results) > 1 else f"{total.calls} calls, one session ({escape(by)}: "
            f"{escape(results[0].session)})")
    recorded = total.recorded
    body = []
    for r in rows(total):
        cls = f' class="{r.kind}"'
        body.append(
            f"<tr{cls}><td class=\"l\">{escape(r.label)}</td>"
            f"<td>{duration_text(r.waiting_s)}</td><td>{change_text(r.waiting_s, recorded.waiting_s)}</td>"
            f"<td>{duration_text(r.between_s)}</td><td>{duration_text(r.total_s)}</td>"
            f"<td>{change_text(r.total_s, recorded.total_s)}</td>"
            f"<td>{duration_text(r.calls_s)}</td></tr>")
    table = ('<div class="table-wrap"><table class="whatif"><thead><tr><th class="l">timing</th>'
             "<th>waiting on the model</th><th>vs recorded</th><th>between calls</th>"
             "<th>session total</th><th>vs recorded</th><th>calls' own waits, summed</th></tr>"
             f"</thead><tbody>{''.join(body)}</tbody></table></div>")
    chart = whatif_chart(total)
    notes_html = "".join(f"<li>{escape(n)}</li>" for n in notes(total))
    return "\n".join([
        '<div id="whatif"><h2>This session at other speeds</h2>',
        f'<p class="meta">{head}, from {escape(start_text(total)[:19].replace("T", " "))} UTC. '
        "Waiting on the model: the time at least one call was running; between calls: tools and the human, the same "
        "in every row. Profiles give each call their mean wait for its prompt, cached and "
        "output tokens (retimer whatif; docs/whatif.md).</p>",
        table, render(chart, 900, 40 + 26 * len(chart.bars), "whatif"),
        f'<ul class="meta">{notes_html}</ul>' if notes_html else "", "</div>"])
