"""What `retimer report` shows, as plain data: the page, the tables and the PNG files read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from retimer.records.schema import StreamRecord
from retimer.report.svgplot import Chart
from retimer.report.whatif import SessionResult


@dataclass(slots=True)
class StreamView:
    """One record as the report draws it: its three cumulative-token staircases."""

    number: int
    record: StreamRecord
    group: str
    profile: str
    scores: dict[str, float | bool] = field(default_factory=dict)  # its latest ratings
    target: tuple[list[float], list[float]] | None = None
    upstream: tuple[list[float], list[float]] | None = None
    client: tuple[list[float], list[float]] | None = None


@dataclass(slots=True)
class Report:
    """Everything the HTML (and the PNG files) show."""

    title: str
    group_by: str  # "condition" or "profile"
    streams: list[StreamView]
    distributions: list[Chart] = field(default_factory=list)
    bad_lines: int = 0
    whatif_by: str = ""  # what a session is in `whatif` (retimer.report.whatif.sessions_of)
    whatif: list[SessionResult] = field(default_factory=list)  # the session(s) at other speeds
