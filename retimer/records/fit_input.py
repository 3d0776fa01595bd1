"""The records a profile can be fitted to (`retimer fit`): their upstream sides as streams.

Why here and not in retimer.profile.fit: which records count is a question about records (how
they ended, whether a cache answered them); the fit itself knows only token events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from retimer.profile.fit import UpstreamStream, network_events
from retimer.records.parse import number
from retimer.records.schema import StreamRecord
from retimer.timing.metrics import TRACE_UNIT_MS, decode_side

__all__ = ["streams_from"]


def streams_from(records: Iterable[StreamRecord]) -> tuple[list[UpstreamStream], Counter[str]]:
    """The fit-worthy streams, and why the others were left out (reason -> count)."""
    out: list[UpstreamStream] = []
    skipped: Counter[str] = Counter()
    for rec in records:
        stream = _upstream_stream(rec)
        if isinstance(stream, UpstreamStream):
            out.append(stream)
        else:
            skipped[stream] += 1
    return out, skipped


def _upstream_stream(rec: StreamRecord) -> UpstreamStream | str:
    """The record's upstream side as a stream to fit, or why it is left out."""
    trace = rec.trace
    if rec.outcome != "complete":
        return "not complete"
    if rec.protocol == "non-streaming":
        return "non-streaming"
    if rec.cache == "hit":
        return "cache hit"
    if rec.fallback:
        return "unparsed"
    if trace is None or not isinstance(side := trace.get("upstream"), dict):
        return "no trace"
    t, n = decode_side(side, number(trace.get("unit_ms", TRACE_UNIT_MS)) or TRACE_UNIT_MS)
    exact = side.get("exact")
    exact = exact if isinstance(exact, int) and 0 <= exact <= len(t) else len(t)
    t, n, exact = network_events(t, n, exact)
    if len(t) == 0:
        return "no tokens"
    prompt = rec.model.prompt_tokens
    return UpstreamStream(t, n, exact, prompt if prompt is not None and prompt > 0 else None,
                          str(rec.protocol))
