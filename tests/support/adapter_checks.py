"""Shared checks for protocol adapters: re-chunking, splitting and the integrity invariant."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from retimer.wire.protocols.base import Adapter, Channel, Event
from retimer.wire.sse import SSEEvent, SSEParser


def rechunk(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """Cut `data` at the given offsets (any order, duplicates allowed)."""
    points = sorted({c for c in cuts if 0 < c < len(data)})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def parse(adapter_cls: type[Adapter], chunks: Iterable[bytes]) -> list[Event]:
    """Feed every chunk to a fresh adapter, then end it."""
    adapter = adapter_cls()  # type: ignore[call-arg]
    events: list[Event] = []
    for chunk in chunks:
        events.extend(adapter.feed(chunk))
    events.extend(adapter.end())
    return events


def event_key(event: Event) -> tuple[bytes, tuple[tuple[Channel, str], ...], bool]:
    """What must not depend on how the input was chunked."""
    return (event.raw, event.texts, event.splittable)


def channel_texts(events: Iterable[Event]) -> dict[Channel, str]:
    """Concatenated text per channel, in stream order."""
    out: dict[Channel, str] = {}
    for event in events:
        for channel, text in event.texts:
            out[channel] = out.get(channel, "") + text
    return out


def random_pieces(text: str, rnd: random.Random, max_pieces: int = 6) -> list[str]:
    """Cut `text` into 1..max_pieces non-empty consecutive slices at random code points."""
    k = rnd.randint(1, min(max_pieces, len(text)))
    cuts = sorted(rnd.sample(range(1, len(text)), k - 1)) if k > 1 else []
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def two_pieces(text: str) -> list[str]:
    """Deterministic split in two (or one piece for a single character)."""
    if len(text) < 2:
        return [text]
    mid = len(text) // 2
    return [text[:mid], text[mid:]]


def sse_events(data: bytes) -> list[SSEEvent]:
    """Parse bytes with the SSE framer in one go."""
    parser = SSEParser()
    return parser.feed(data) + parser.end()


@dataclass
class SplitRecord:
    """One event of a re-emitted stream and what became of it."""

    event: Event
    pieces: list[str] | None  # None: passed raw
    out: list[bytes]


def resplit(
    adapter_cls: type[Adapter], data: bytes, choose: Callable[[Event], Sequence[str] | None]
) -> tuple[bytes, list[SplitRecord]]:
    """Parse `data`, split each splittable event as `choose` says, return the output bytes."""
    adapter = adapter_cls()  # type: ignore[call-arg]
    records: list[SplitRecord] = []
    for event in [*adapter.feed(data), *adapter.end()]:
        pieces = list(choose(event) or []) if event.splittable else []
        if pieces:
            records.append(SplitRecord(event, pieces, adapter.split(event, pieces)))
        else:
            records.append(SplitRecord(event, None, [event.raw]))
    return b"".join(b for r in records for b in r.out), records


def check_integrity(adapter_cls: type[Adapter], data: bytes, records: list[SplitRecord], output: bytes,
                    cuts: Iterable[int] = ()) -> list[Event]:
    """The integrity invariant: same text per channel, same non-token events, piece by piece.

    Re-parses `output` (re-chunked at `cuts`) with a fresh adapter and returns its events.
    """
    again = parse(adapter_cls, rechunk(output, cuts))
    original = [r.event for r in records]
    assert channel_texts(again) == channel_texts(original)
    assert [e.raw for e in again if not e.texts] == [e.raw for e in original if not e.texts]
    expected: list[tuple[tuple[Channel, str], ...]] = []
    for r in records:
        if r.pieces is None:
            if r.event.texts:
                expected.append(r.event.texts)
        else:
            channel = r.event.texts[0][0]
            expected.extend(((channel, p),) for p in r.pieces)
    assert [e.texts for e in again if e.texts] == expected
    return again
