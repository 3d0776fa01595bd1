"""The five lines that open `retimer report`: what ran, and did it hit its target.

Why: a reader should know at a glance how many streams there were and how they ended,
which profiles ran, whether the client got the target's TTFT and rate (medians, over the
streams that had a target and a measured value, so both numbers describe the same
streams), and how often a slower upstream held the stream back. Sans-io: records in,
lines out; the HTML escapes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from statistics import median

from retimer.records.schema import StreamRecord
from retimer.report.fields import profile_of, side_value

MAX_PROFILES_LISTED = 8  # more would wrap the line; the group table lists them all


@dataclass(frozen=True, slots=True)
class SummaryLine:
    """One line: a bold label and its sentence."""

    label: str
    text: str


def _counts(counter: Counter[str]) -> str:
    """`a (3), b (1)`: most first, ties by name."""
    return ", ".join(f"{k} ({n})" for k, n in sorted(counter.items(), key=lambda kv: (-kv[1],
                                                                                     kv[0])))


def _vs(records: Sequence[StreamRecord], key: str, unit: str, digits: int) -> str:
    pairs = [(got, want) for r in records
             if (got := side_value(r, "emitted", key)) is not None
             and (want := side_value(r, "target", key)) is not None]
    if not pairs:
        return "no stream with both a target and a measured value"
    got, want = median(p[0] for p in pairs), median(p[1] for p in pairs)
    return (f"{got:,.{digits}f} {unit} achieved vs {want:,.{digits}f} {unit} target "
            f"({len(pairs)} streams with both)")


def summary(records: Sequence[StreamRecord]) -> list[SummaryLine]:
    """Streams, profiles, TTFT, rate, upstream-bound share: always five lines."""
    outcomes = Counter(r.outcome or "unknown" for r in records)
    profiles = Counter(profile_of(r) for r in records)
    listed = Counter(dict(sorted(profiles.items(), key=lambda kv: (-kv[1], kv[0]))
                          [:MAX_PROFILES_LISTED]))
    more = len(profiles) - len(listed)
    bound = sum(bool(r.upstream_bound) for r in records)
    share = bound / len(records) if records else 0.0
    return [
        SummaryLine("Streams", f"{len(records)}: {_counts(outcomes)}" if records else "0"),
        SummaryLine("Profiles", f"{len(profiles)}: {_counts(listed)}"
                    + (f" and {more} more" if more else "")),
        SummaryLine("TTFT, median", _vs(records, "ttft_ms", "ms", 0)),
        SummaryLine("Rate, median", _vs(records, "tps", "tok/s", 1)),
        SummaryLine("Upstream-bound", f"{bound} of {len(records)} streams ({share:.0%}) "
                    "were held back by a slower upstream"),
    ]


def summary_html(lines: list[SummaryLine]) -> str:
    """The lines as a list, every text escaped."""
    return '<ul class="summary">' + "".join(
        f'<li><b>{escape(line.label)}</b> <span>{escape(line.text)}</span></li>'
        for line in lines) + "</ul>"
