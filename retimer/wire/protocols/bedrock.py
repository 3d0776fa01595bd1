"""AWS Bedrock Runtime streams: binary event stream frames (see retimer/wire/eventstream.py).

ConverseStream (`POST .../model/{id}/converse-stream`): tokens arrive in `contentBlockDelta`
frames, in `delta.text` (answer), `delta.reasoningContent.text` (reasoning) and
`delta.toolUse.input` (tool arguments). Reasoning signatures, `redactedContent`, tool results,
citations and every other frame pass unchanged.

InvokeModelWithResponseStream (`.../invoke-with-response-stream`): `chunk` frames carry
`{"bytes": base64(model-native JSON)}`. Two inner formats are split: Anthropic Messages events
(`content_block_delta` text/thinking/input_json deltas) and Titan's `outputText`. Other models'
chunks are counted (Llama's `generation`, else the generic text estimate, kept per stream so
that a final chunk repeating the answer, e.g. Cohere Command R's stream-end `response.text`
and chat_history, counts nothing) and sent whole.

A split re-encodes the frame with the original header bytes (same `:event-type`,
`:content-type`, `:message-type`) and fresh CRCs. Payloads carry `"p"`, random padding that
hides the length from network observers: botocore and the other AWS SDKs parse payloads as
shape members and ignore unknown ones, so it is kept on the last piece and dropped from the
others (the proxy-to-client hop is local, so there is no length to hide). Titan's first chunk
alone carries `inputTextTokenCount` and the last alone `completionReason`,
`totalOutputTextTokenCount` and the invocation metrics; pieces keep that pattern (null where a
real mid-stream chunk has null) so clients that stop at a completion reason do not stop early.

A frame whose CRC or layout is wrong ends the parsing: it and everything after it pass
through byte-identical (`failure` says why), as a real client would see them without the proxy.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from retimer.wire.eventstream import EventStreamFramer, Frame
from retimer.wire.media import JSON, is_amazon_event_stream
from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape, check_split, text_field
from retimer.wire.protocols.generic import GenericStreamAdapter
from retimer.wire.protocols.jsontarget import JSONTarget, replaced
from retimer.wire.protocols.jsontext import MalformedJSON
from retimer.wire.protocols.sse_json import dumps, request_path

__all__ = ["BedrockEventStreamAdapter"]

_PATH = re.compile(r"/model/.+/(?:converse-stream|invoke-with-response-stream)\Z")
_PAD = "p"
# ConverseStream delta member paths, each a union member holding exactly one string
_CONVERSE_FIELDS: tuple[tuple[tuple[str, str | None], Channel], ...] = (
    (("text", None), Channel.TEXT),
    (("reasoningContent", "text"), Channel.REASONING),
    (("toolUse", "input"), Channel.TOOL_ARGS),
)
_CONVERSE_KEYS = frozenset({"contentBlockIndex", "delta", _PAD})
_ANTHROPIC_DELTAS: dict[str, tuple[str, Channel]] = {
    "text_delta": ("text", Channel.TEXT),
    "thinking_delta": ("thinking", Channel.REASONING),
    "input_json_delta": ("partial_json", Channel.TOOL_ARGS),
}
_ANTHROPIC_EVENTS = frozenset({
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "error",
})
_TITAN_FIRST = ("inputTextTokenCount",)  # null on every piece but the first
_TITAN_LAST = ("totalOutputTextTokenCount", "completionReason")  # null but on the last
_TITAN_LAST_ONLY = ("amazon-bedrock-invocationMetrics",)  # absent but on the last


@dataclass(slots=True, frozen=True)
class _Chunk:
    """An invoke `chunk` frame and its outer payload, whose `bytes` hold the inner event."""

    frame: Frame
    outer: dict[str, Any]


# Split targets: a contentBlockDelta is JSONTarget[Frame] at ("delta", member[, field]); an invoke
# chunk is JSONTarget[_Chunk] on its decoded inner event, at ("delta", field) for Anthropic's
# events and at _TITAN_TEXT for Titan's.
_TITAN_TEXT = ("outputText",)


def _converse_piece(target: JSONTarget[Frame], text: str, *, last: bool) -> dict[str, Any]:
    return _padded(target.with_text(text), last)


def _chunk_piece(target: JSONTarget[_Chunk], text: str, *, first: bool, last: bool) -> dict[str, Any]:
    """The outer payload of one piece: the inner event with the text replaced, re-encoded."""
    inner = target.obj
    if target.path == _TITAN_TEXT:
        inner = {k: v for k, v in inner.items() if last or k not in _TITAN_LAST_ONLY}
        inner = replaced(inner, target.path, text)
        for key in (*_TITAN_FIRST, *_TITAN_LAST):
            if key in inner and not (first if key in _TITAN_FIRST else last):
                inner[key] = None
    else:
        inner = target.with_text(text)
    data = base64.b64encode(dumps(inner).encode("utf-8")).decode("ascii")
    return _padded({**target.frame.outer, "bytes": data}, last)


class BedrockEventStreamAdapter(Adapter):
    """Adapter for Bedrock Runtime's ConverseStream and InvokeModelWithResponseStream."""

    name: ClassVar[str] = "bedrock-eventstream"

    def __init__(self) -> None:
        self._framer = EventStreamFramer()
        self._estimator = GenericStreamAdapter("ndjson")  # other models' chunks, per stream

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to .../model/{id}/converse-stream or /invoke-with-response-stream, any host."""
        return (
            request.method.upper() == "POST"
            and _PATH.search(request_path(request.path)) is not None
            and is_amazon_event_stream(content_type)
        )

    @property
    def failure(self) -> str | None:
        """Why the stream fell back to pass-through, if it did."""
        return self._framer.failure

    def feed(self, data: bytes) -> list[Event]:
        events = [self._event(frame) for frame in self._framer.feed(data)]
        rest = self._framer.passthrough()
        if rest:
            events.append(Event(raw=rest))
        return events

    def end(self) -> list[Event]:
        rest = self._framer.end()
        return [Event(raw=rest)] if rest else []

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        check_split(event, pieces)
        if len(pieces) == 1:
            return [event.raw]
        target = event.payload  # JSONTarget[Frame] or JSONTarget[_Chunk]
        last = len(pieces) - 1
        out: list[bytes] = []
        for i, text in enumerate(pieces):
            if isinstance(target.frame, _Chunk):
                frame, obj = target.frame.frame, _chunk_piece(target, text, first=i == 0, last=i == last)
            else:
                frame, obj = target.frame, _converse_piece(target, text, last=i == last)
            out.append(frame.with_payload(dumps(obj).encode("utf-8")))
        return out

    # -- classification --------------------------------------------------------------------
    def _event(self, frame: Frame) -> Event:
        """The Event for one frame; only JSON `event` messages can carry tokens."""
        if frame.header(":message-type") in ("exception", "error"):
            self._api_error = True
        if frame.header(":message-type") != "event" or frame.header(":content-type") not in (
            None, JSON
        ):
            return Event(raw=frame.raw)
        kind = frame.header(":event-type")
        obj = _json_object(frame.payload) if kind in ("contentBlockDelta", "chunk") else None
        if obj is None:
            return Event(raw=frame.raw)
        if kind == "contentBlockDelta":
            return _converse_event(frame, obj)
        return _chunk_event(frame, obj, self._estimator)


def _converse_event(frame: Frame, obj: dict[str, Any]) -> Event:
    """A contentBlockDelta; atomic when anything beside the one string would be repeated."""
    delta = obj.get("delta")
    if not isinstance(delta, dict):
        return Event(raw=frame.raw)
    for (member, field), channel in _CONVERSE_FIELDS:
        holder = delta.get(member)
        if field is None:
            text, extra = holder, False
        elif isinstance(holder, dict):
            text, extra = holder.get(field), set(holder) != {field}
        else:
            continue
        if isinstance(text, str) and text:
            atomic = extra or set(delta) != {member} or not set(obj) <= _CONVERSE_KEYS
            target = JSONTarget(frame, obj, ("delta", member) if field is None else ("delta", member, field))
            return Event(raw=frame.raw, texts=((channel, text),), payload=target, atomic=atomic)
    return Event(raw=frame.raw)


def _chunk_event(frame: Frame, obj: dict[str, Any], estimator: GenericStreamAdapter) -> Event:
    """An invoke chunk: split Anthropic and Titan inner events, count the others."""
    data = obj.get("bytes")
    try:
        inner = _json_object(base64.b64decode(data, validate=True)) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        inner = None
    if inner is None:
        return Event(raw=frame.raw)
    outer_extra = not set(obj) <= {"bytes", _PAD}
    kind = inner.get("type")
    if isinstance(kind, str) and kind in _ANTHROPIC_EVENTS:
        return _anthropic_event(frame, obj, inner, outer_extra)
    titan = inner.get("outputText")
    if isinstance(titan, str):
        if not titan:
            return Event(raw=frame.raw)
        target = JSONTarget(_Chunk(frame, obj), inner, _TITAN_TEXT)
        return Event(raw=frame.raw, texts=((Channel.TEXT, titan),), payload=target, atomic=outer_extra)
    generation = inner.get("generation")  # Meta Llama
    text = generation if isinstance(generation, str) else estimator.estimate(dumps(inner))
    if not text:
        return Event(raw=frame.raw)
    return Event(raw=frame.raw, texts=((Channel.TEXT, text),), atomic=True)


def _anthropic_event(frame: Frame, obj: dict[str, Any], inner: dict[str, Any], atomic: bool) -> Event:
    """An Anthropic Messages event inside a chunk: only content_block_delta carries tokens."""
    delta = inner.get("delta")
    if inner.get("type") != "content_block_delta" or not isinstance(delta, dict):
        return Event(raw=frame.raw)
    spec = _ANTHROPIC_DELTAS.get(text_field(delta, "type"))
    text = delta.get(spec[0]) if spec is not None else None
    if spec is None or not isinstance(text, str) or not text:
        return Event(raw=frame.raw)
    target = JSONTarget(_Chunk(frame, obj), inner, ("delta", spec[0]))
    return Event(raw=frame.raw, texts=((spec[1], text),), payload=target, atomic=atomic)


def _json_object(data: bytes) -> dict[str, Any] | None:
    """The payload as a JSON object, or None for anything else (which then passes as is)."""
    try:
        obj = jsontext.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, MalformedJSON):
        return None
    return obj if isinstance(obj, dict) else None


def _padded(obj: dict[str, Any], last: bool) -> dict[str, Any]:
    """`obj` with the padding field kept only on the last piece."""
    return obj if last else {k: v for k, v in obj.items() if k != _PAD}
