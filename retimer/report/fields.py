"""How `retimer report` reads a record's fields: numbers, sides, and which profile ran.

Why one module: the report's summary, tables and charts must agree on what a stream's
profile is and on which values count as numbers (a log may hold nulls, strings, NaN from
other tools). The profile a stream ran is read in one place, `profile_of`, so the switch
to a record's effective profile (base profile plus overrides, e.g. `openai-gpt-5 tps=10`)
is one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# The record fields naming the profile a stream ran, the first present wins: an effective
# profile (base plus --tps/--ttft/--speed overrides) when records carry one, else the base.
PROFILE_FIELDS = ("effective_profile", "profile")


def num(v: object) -> float | None:
    """A finite number, or None (booleans are not numbers here)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        and math.isfinite(v) else None


def side_value(rec: Mapping[str, object], side: str, key: str) -> float | None:
    """`rec[side][key]` as a number: side is target, upstream or emitted (the client's)."""
    part = rec.get(side)
    return num(part.get(key)) if isinstance(part, dict) else None


def profile_of(rec: Mapping[str, object]) -> str:
    """The name of the profile the stream ran, "-" when the record has none."""
    for name in PROFILE_FIELDS:
        if rec.get(name):
            return str(rec[name])
    return "-"


def group_of(rec: Mapping[str, object], group_by: str) -> str:
    """The report's group of a record: its study condition, or its profile."""
    if group_by == "profile":
        return profile_of(rec)
    return str(rec.get(group_by) or "-")
