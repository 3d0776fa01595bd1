"""How `retimer report` reads a record's fields: numbers, sides, and which group it is in.

Why one module: the report's summary, tables and charts must agree on which group a stream is
in and on which values count as numbers; the record's types (retimer.records.schema) already
read every number as a finite one or None.
"""

from __future__ import annotations

from retimer.records.parse import number as num
from retimer.records.schema import StreamRecord

__all__ = ["group_of", "num", "profile_of", "side_value"]


def side_value(rec: StreamRecord, side: str, key: str) -> float | None:
    """`rec.<side>.<key>` as a number: side is target, upstream or emitted (the client's)."""
    part = getattr(rec, side)
    return None if part is None else num(getattr(part, key))


def profile_of(rec: StreamRecord) -> str:
    """The name of the profile the stream ran (with its overrides), "-" when it has none."""
    return rec.profile_name


def group_of(rec: StreamRecord, group_by: str) -> str:
    """The report's group of a record: its study condition, or its profile."""
    if group_by == "profile":
        return profile_of(rec)
    return rec.condition or "-"
