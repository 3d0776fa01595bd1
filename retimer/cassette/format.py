"""A cassette's index (`cassette.json`): its calls in the order they were made, each with its
shape (digests only), its response's status and headers (secrets left out, as the response
cache keeps them), the name, size and sha256 of its body file, and the upstream's timing.
Pure: (de)serialisation and checks; `retimer.cassette.store` reads and writes the files.

    {"format": 3, "retimer": "0.x", "created": "2026-12-05T14:00:00+00:00",
     "calls": [{"shape": {...}, "status": 200, "reason": "OK", "headers": [["content-type",
                "text/event-stream"]], "url": "https://api.openai.com/v1/chat/completions",
                "method": "POST", "protocol": "openai-chat", "created": "...",
                "body": "calls/0001.body", "body_size": 5120, "body_sha256": "...",
                "upstream": {"ttft_ms": 412.0, "duration_ms": 2310.5, "tokens": 180}}]}

A gRPC call over HTTP/2 keeps its trailers (`"trailers": [["grpc-status", "0"], ...]`: the
status, its message and trailing metadata, secrets left out as from headers), which the replay
sends after the body.

A WebSocket's turns are calls of their own, with `"socket": N` (the session's N-th recorded
socket) and `"turn": T` (answering the socket's T-th client message; 0: what the server sent
before any), the method `WEBSOCKET` in their shape, status 101 and the handshake's headers;
their body is the server's messages, each as `retimer.wire.protocols.websocket.encode_message`
frames it (a type byte, a 4-byte length, the payload).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from retimer.cache.entry import CacheEntry, stored_headers
from retimer.cassette.shape import CallShape
from retimer.wire.protocols import ADAPTERS

__all__ = ["FORMAT", "CassetteCall", "CorruptCassette", "IndexedCall", "UpstreamTiming",
           "body_name", "check_body", "decode_index", "encode_index"]

# what a call's `protocol` may name: a stream's adapter, a whole answer, a WebSocket turn
KNOWN_PROTOCOLS = frozenset({a.name for a in ADAPTERS} | {"non-streaming", "websocket"})
FORMAT = 3  # bump when the index's layout or the shape's digests change (2: WebSocket turns,
# timestamps as JSON numbers normalised; 3: HTTP/2 trailers)
READS = frozenset({2, 3})  # a format-2 index is a format-3 one without trailers
_BODY = re.compile(r"calls/\d{4,}\.body\Z")


class CorruptCassette(ValueError):
    """A cassette that cannot be trusted: the message says what is wrong."""


@dataclass(frozen=True)
class UpstreamTiming:
    """How the upstream answered when the call was recorded (None: not measured)."""

    ttft_ms: float | None = None
    duration_ms: float | None = None
    tokens: int | None = None


@dataclass(frozen=True)
class CassetteCall:
    """One recorded call: what matches it, what replays it, and how it went."""

    shape: CallShape
    entry: CacheEntry
    upstream: UpstreamTiming
    socket: int | None = None  # a WebSocket turn's socket, from 1
    turn: int | None = None  # and its turn: the client message it answers (0: none)
    trailers: list[tuple[str, str]] | None = None  # HTTP/2 trailers (gRPC's status), if any


@dataclass(frozen=True)
class IndexedCall:
    """A call as the index describes it, before its body is read and checked."""

    shape: CallShape
    entry: CacheEntry  # its body empty until `check_body`
    upstream: UpstreamTiming
    body: str  # the body file, relative to the cassette
    body_size: int
    body_sha256: str
    socket: int | None = None
    turn: int | None = None
    trailers: list[tuple[str, str]] | None = None


def body_name(number: int) -> str:
    """The body file of the `number`-th call (from 1)."""
    return f"calls/{number:04d}.body"


def encode_index(calls: Sequence[CassetteCall], *, created: str, version: str) -> bytes:
    """The index of `calls` (bodies in `body_name(i)`, i from 1)."""
    out = []
    for i, call in enumerate(calls, start=1):
        e = call.entry
        out.append({
            "shape": call.shape.to_json(), "status": e.status, "reason": e.reason,
            "headers": [[k, v] for k, v in e.headers], "url": e.url, "method": e.method,
            "protocol": e.protocol, "created": e.created, "body": body_name(i),
            "body_size": len(e.body), "body_sha256": hashlib.sha256(e.body).hexdigest(),
            "upstream": {"ttft_ms": call.upstream.ttft_ms,
                         "duration_ms": call.upstream.duration_ms,
                         "tokens": call.upstream.tokens}})
        if call.socket is not None:
            out[-1].update(socket=call.socket, turn=call.turn)
        if call.trailers is not None:
            out[-1]["trailers"] = [[k, v] for k, v in call.trailers]
    doc = {"format": FORMAT, "retimer": version, "created": created, "calls": out}
    return json.dumps(doc, ensure_ascii=False, indent=1).encode()


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise CorruptCassette(f"{what} is not a number >= 0")
    return float(value)


def _call(obj: Any, n: int) -> IndexedCall:
    if not isinstance(obj, dict):
        raise CorruptCassette(f"call {n} is not a JSON object")
    try:
        shape = CallShape.from_json(obj.get("shape"))
    except ValueError as e:
        raise CorruptCassette(f"call {n}: {e}") from None
    status, headers = obj.get("status"), stored_headers(obj.get("headers"))
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise CorruptCassette(f"call {n} has a bad status {status!r}")
    if headers is None:
        raise CorruptCassette(f"call {n} has bad headers")
    strings = {k: obj.get(k) for k in ("reason", "url", "method", "created", "body", "body_sha256")}
    if not all(isinstance(v, str) for v in strings.values()):
        raise CorruptCassette(f"call {n} has a field that is not a string")
    if not _BODY.match(str(strings["body"])):
        raise CorruptCassette(f"call {n} names a body file outside calls/: {strings['body']!r}")
    size = obj.get("body_size")
    if not _count(size) or size is None:
        raise CorruptCassette(f"call {n} has a bad body size")
    protocol = obj.get("protocol")
    if protocol is not None and protocol not in KNOWN_PROTOCOLS:
        raise CorruptCassette(f"call {n} is in a format this retimer does not know "
                              f"({protocol!r}): record it with this retimer")
    up = obj.get("upstream") or {}
    if not isinstance(up, dict):
        raise CorruptCassette(f"call {n} has a bad upstream timing")
    tokens = up.get("tokens")
    if tokens is not None and not _count(tokens):
        raise CorruptCassette(f"call {n}'s upstream tokens is not a whole number >= 0")
    upstream = UpstreamTiming(_number(up.get("ttft_ms"), f"call {n}'s upstream TTFT"),
                              _number(up.get("duration_ms"), f"call {n}'s upstream duration"),
                              tokens)
    entry = CacheEntry(status=status, headers=headers, body=b"",
                       url=str(strings["url"]), method=str(strings["method"]),
                       protocol=protocol if isinstance(protocol, str) else None,
                       created=str(strings["created"]), reason=str(strings["reason"]))
    socket, turn = obj.get("socket"), obj.get("turn")
    if socket is not None and not (_count(socket) and socket >= 1 and _count(turn)):
        raise CorruptCassette(f"call {n} has a bad WebSocket socket or turn")
    trailers = None if obj.get("trailers") is None else stored_headers(obj.get("trailers"))
    if obj.get("trailers") is not None and trailers is None:
        raise CorruptCassette(f"call {n} has bad trailers")
    return IndexedCall(shape, entry, upstream, str(strings["body"]), size,
                       str(strings["body_sha256"]), socket, turn, trailers)


def _count(value: Any) -> bool:
    """A whole number >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def decode_index(data: bytes) -> tuple[dict[str, str], list[IndexedCall]]:
    """(the cassette's format, version and creation time as text, its calls in order);
    CorruptCassette when anything does not add up."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise CorruptCassette(f"not JSON ({e})") from None
    except RecursionError:
        raise CorruptCassette("not JSON a reader can take (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise CorruptCassette("not a JSON object")
    if doc.get("format") not in READS:
        raise CorruptCassette(f"format {doc.get('format')!r}; this retimer reads formats "
                              f"{', '.join(map(str, sorted(READS)))} "
                              f"(recorded by retimer {doc.get('retimer', 'unknown')})")
    calls = doc.get("calls")
    if not isinstance(calls, list):
        raise CorruptCassette("it has no list of calls")
    about = {"retimer": str(doc.get("retimer", "")), "created": str(doc.get("created", ""))}
    return about, [_call(c, n) for n, c in enumerate(calls, start=1)]


def check_body(call: IndexedCall, body: bytes) -> CassetteCall:
    """The call with its body, once the body is the one the index names."""
    if len(body) != call.body_size:
        raise CorruptCassette(f"it has {len(body)} bytes, the index says {call.body_size}")
    if hashlib.sha256(body).hexdigest() != call.body_sha256:
        raise CorruptCassette("it is not the body the index names (sha256 differs)")
    return CassetteCall(call.shape, replace(call.entry, body=body), call.upstream, call.socket,
                        call.turn, call.trailers)
