"""What the fuzz tests share: the properties every adapter must keep, the mutations, and a
CPU-time guard against hangs (the adapters and their seeds are in `fuzz_specs`).

The properties (see `check_stream`), for any input bytes and any chunking:
  1. parsing never raises; the events' raw bytes concatenate back to the input, and the text
     per channel does not depend on how the input was chunked;
  2. a pass-through pacer (no splits) sends exactly the input bytes;
  3. a pacing pacer (splits at token groups) never falls back because of an exception, and its
     output re-parses to the same text per channel;
  4. every split of every splittable event (random pieces) re-parses piece by piece
     (`check_split_output`, after `adapter_checks.check_integrity`).
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from hypothesis import strategies as st

from retimer.timing.pacer import StreamPacer
from retimer.timing.strategy import Strategy
from retimer.wire.eventstream import EventStreamFramer
from retimer.wire.protocols.base import Adapter, Channel, Event
from tests.support.adapter_checks import SplitRecord, channel_texts, random_pieces, rechunk, resplit
from tests.support.fuzz_specs import SPEC_BY_NAME, SPECS, Spec

__all__ = ["MB", "SPECIALS", "SPECS", "SPEC_BY_NAME", "Spec", "check_stream", "cpu_limit",
           "cuts_for", "eventstream_pieces", "mutated_stream", "parse_chunks", "run_pacer"]

MB = 1 << 20


# -- hang guard ------------------------------------------------------------------------
@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the code under test once it has used `seconds` of CPU.

    Sans-io code never blocks, so a hang is a busy loop and burns CPU: SIGPROF (process CPU
    time) catches it without touching SIGALRM, which pytest-timeout uses.
    """

    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"an example used more than {seconds}s of CPU (a hang?)")

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


# -- parsing and pacing helpers --------------------------------------------------------
def parse_chunks(adapter: Adapter, chunks: Sequence[bytes]) -> list[Event]:
    events: list[Event] = []
    for chunk in chunks:
        events.extend(adapter.feed(chunk))
    events.extend(adapter.end())
    return events


class FuzzTiming:
    """A stream timing with random network-event sizes (1-6 tokens), no waiting."""

    ttft = 0.0

    def __init__(self, rnd: random.Random) -> None:
        self._rnd = rnd

    def gap(self) -> float:
        return 0.001

    def chunk_size(self) -> int:
        return self._rnd.randint(1, 6)


def run_pacer(adapter: Adapter, chunks: Sequence[bytes], *, passthrough: bool,
              rnd: random.Random | None = None, strategy: Strategy = Strategy.LIVE
              ) -> tuple[bytes, StreamPacer]:
    """Drive a pacer as the proxy does (feed, pop what is due, finish); return its output."""
    timing = FuzzTiming(rnd or random.Random(0))
    pacer = StreamPacer(adapter, timing, 0.0, passthrough=passthrough, strategy=strategy,
                        target_tps=1000.0)
    out: list[bytes] = []
    now = 0.0
    for chunk in chunks:
        now += 0.01
        pacer.feed(chunk, now)
        out.extend(e.data for e in pacer.pop_due(now))
    pacer.finish(now + 0.01)
    out.extend(e.data for e in pacer.pop_all())
    return b"".join(out), pacer


def check_stream(spec: Spec, data: bytes, cuts: Sequence[int], seed: int = 0,
                 *, strict: bool = True) -> None:
    """The four properties of the module docstring, for one input and one chunking.

    `strict=False` (retimer's internal WebSocket records fed garbage) allows the adapter to
    raise, as long as the pacer falls back and sends the input unchanged.
    """
    chunks = rechunk(data, cuts)
    rnd = random.Random(seed)
    if not strict:
        out, pacer = run_pacer(spec.make(), chunks, passthrough=True)
        assert out == data
        out, pacer = run_pacer(spec.make(), chunks, passthrough=False, rnd=rnd)
        if pacer.failure is not None:
            return
    whole = parse_chunks(spec.make(), [data])
    events = parse_chunks(spec.make(), chunks)
    assert b"".join(e.raw for e in whole) == data
    assert b"".join(e.raw for e in events) == data
    expected = channel_texts(whole)
    assert channel_texts(events) == expected
    out, pacer = run_pacer(spec.make(), chunks, passthrough=True)
    assert pacer.failure is None
    assert out == data
    strategy = rnd.choice(list(Strategy))
    out, pacer = run_pacer(spec.make(), chunks, passthrough=False, rnd=rnd, strategy=strategy)
    assert pacer.failure is None, pacer.failure
    assert channel_texts(parse_chunks(spec.make(), [out])) == expected
    output, records = resplit(spec.make, data, lambda e: random_pieces(e.text, rnd))  # type: ignore[arg-type]
    check_split_output(spec, records, output, [c for c in cuts if c < len(output)])


def _runs(events: Sequence[Event]) -> list[bytes | tuple[tuple[Channel, str], ...]]:
    """Token events' texts, and the bytes of each run of non-token events between them.

    Runs, not single events: bytes an adapter passes through unparsed come out as one event
    per read, so only their concatenation does not depend on the chunking. Line endings at a
    run's edges are dropped: a split piece ends with its event's first line ending, so a CR
    there may pair with an LF the next event started with (the same blank line, read again).
    """
    out: list[bytes | tuple[tuple[Channel, str], ...]] = []
    for event in events:
        if event.texts:
            out.append(event.texts)
        elif out and isinstance(out[-1], bytes):
            out[-1] += event.raw
        else:
            out.append(event.raw)
    return [r.strip(b"\r\n") if isinstance(r, bytes) else r for r in out
            if not isinstance(r, bytes) or r.strip(b"\r\n")]


def check_split_output(spec: Spec, records: Sequence[SplitRecord], output: bytes,
                       cuts: Sequence[int]) -> None:
    """`adapter_checks.check_integrity`, with runs of non-token events compared as bytes."""
    again = parse_chunks(spec.make(), rechunk(output, cuts))
    expected: list[Event] = []
    for r in records:
        if r.pieces is None:
            expected.append(r.event)
        else:
            channel = r.event.texts[0][0]
            expected.extend(Event(raw=b"", texts=((channel, p),)) for p in r.pieces)
    assert channel_texts(again) == channel_texts(r.event for r in records)
    assert _runs(again) == _runs(expected)


# -- mutations -------------------------------------------------------------------------
SPECIALS: tuple[bytes, ...] = (
    b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b"data: ", b"data:", b"event: ", b": ping\n",
    b"id: 7\n", b"retry: 10\n", b"[DONE]", b"{", b"}", b"[", b"]", b",", b'"', b"\\", b'\\"',
    b"\\u", b"\\ud83d", b"\x00", b"\xef\xbb\xbf", b"\xff", b"\xfe", b"\xc3", b"\xe2\x82",
    b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf", b")]}'", b"99999", b"0\n", b"\x00\x00\x00\x10",
    b"\xe6\xbc\xa2", b"\xf0\x9f\x98\x80", b'{"v":"x"}', b'{"p":"","o":"add","v":{}}',
    b"null", b"1e999", b"-0", b"true",
)
_UNICODE = ("é", "漢", "😀", "\u200b", "\u2028", "ﬁ", "e\u0301", "𝕏")


def _apply(op: str, data: bytes, draw: st.DrawFn) -> bytes:
    """One byte-level mutation."""
    n = len(data)
    pos = draw(st.integers(0, n))
    if op == "flip" and n:
        i = min(pos, n - 1)
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    if op == "truncate":
        return data[:pos]
    if op == "delete":
        return data[:pos] + data[pos + draw(st.integers(1, 64)) :]
    if op == "insert":
        junk = draw(st.sampled_from(SPECIALS) | st.binary(min_size=1, max_size=12))
        return data[:pos] + junk + data[pos:]
    if op == "unicode":  # multi-byte characters where ASCII letters were (JSON stays valid)
        letter = draw(st.sampled_from([b"e", b"o", b"a", b" ", b"t"]))
        return data.replace(letter, draw(st.sampled_from(_UNICODE)).encode(), draw(st.integers(1, 50)))
    if op == "newlines":
        return data.replace(b"\n", draw(st.sampled_from([b"\r\n", b"\r", b"\n\n", b"\r\r"])))
    return data


_BYTE_OPS = ("flip", "truncate", "delete", "insert", "insert", "unicode", "newlines")
_UNIT_OPS = ("duplicate", "drop", "swap", "inner", "inner", "none")


@st.composite
def mutated_stream(draw: st.DrawFn, spec: Spec, max_units: int = 40) -> bytes:
    """A seed stream (a window of at most `max_units` of its events) with a few mutations:
    events duplicated, dropped or swapped; payloads changed inside their framing (length
    prefixes and CRCs recomputed); raw bytes flipped, cut, deleted or inserted."""
    seed = draw(st.sampled_from(spec.seeds()))
    units = [e.raw for e in parse_chunks(spec.make(), [seed])]
    if len(units) > max_units:
        start = draw(st.integers(0, len(units) - max_units))
        if draw(st.booleans()):  # keep the stream's opening (headers, guards)
            units = units[:3] + units[start + 3 : start + max_units]
        else:
            units = units[start : start + max_units]
    for op in draw(st.lists(st.sampled_from(_UNIT_OPS), max_size=3)):
        if not units or op == "none":
            continue
        i = draw(st.integers(0, len(units) - 1))
        if op == "duplicate":
            units.insert(i, units[i])
        elif op == "drop":
            del units[i]
        elif op == "swap":
            j = draw(st.integers(0, len(units) - 1))
            units[i], units[j] = units[j], units[i]
        elif op == "inner":
            body, wrap = spec.unwrap(units[i]) if spec.unwrap else (units[i], lambda b: b)
            units[i] = wrap(_apply(draw(st.sampled_from(_BYTE_OPS)), body, draw))
    data = b"".join(units)
    if spec.internal_framing:  # retimer writes these records itself: only payloads vary
        return data
    for op in draw(st.lists(st.sampled_from(_BYTE_OPS), max_size=2)):
        data = _apply(op, data, draw)
    return data


@st.composite
def cuts_for(draw: st.DrawFn, data: bytes) -> list[int]:
    """Chunk boundaries: anywhere, and often inside multi-byte characters and line endings."""
    n = len(data)
    if n < 2:
        return []
    cuts = draw(st.lists(st.integers(1, n - 1), max_size=24))
    tricky = [i for i in range(1, n) if data[i] >= 0x80 or data[i - 1 : i] == b"\r"]
    if tricky:
        cuts += draw(st.lists(st.sampled_from(tricky), max_size=8))
    if n < 400 and draw(st.integers(0, 9)) == 0:
        cuts = list(range(1, n))  # byte by byte
    return cuts


def eventstream_pieces(data: bytes, chunks: Sequence[bytes]) -> tuple[bytes, list[bytes], str | None]:
    """Feed the Bedrock framer; return every byte it handed back, the frames, its failure."""
    framer = EventStreamFramer()
    frames: list[bytes] = []
    out = bytearray()
    for chunk in chunks:
        for frame in framer.feed(chunk):
            frames.append(frame.raw)
            out += frame.raw
        out += framer.passthrough()
    out += framer.end()
    return bytes(out), frames, framer.failure
