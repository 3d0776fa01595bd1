"""WebSocket messages from LLM services (OpenAI Realtime and Responses WebSocket mode, Gemini Live,
and any other text messages), as an adapter the pacer can drive like a byte stream.

A WebSocket carries whole messages, not bytes, and a message can only be re-sent whole. So the
shell hands the adapter each upstream message wrapped in a small internal record
(`encode_message`), and turns whatever the pacer emits back into messages with
`decode_messages`; one record is one event, and a split event becomes several records.

Known JSON shapes are split by replacing their one string: OpenAI `response.*.delta` events
(`delta`; answer text, audio transcripts, reasoning, tool arguments) and Gemini Live
`serverContent.modelTurn.parts[0].text`. A split keeps `event_id` unique (pieces after the
first get a `-N` suffix) and renumbers later `sequence_number`s as the Responses SSE adapter
does. Other text messages are paced whole by their estimated tokens; binary messages (audio)
carry no tokens and keep their place in the order.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any, ClassVar

from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, AdapterError, Channel, Event, RequestShape, check_split
from retimer.wire.protocols.generic import GenericStreamAdapter
from retimer.wire.protocols.jsontarget import JSONPath, JSONTarget
from retimer.wire.protocols.jsontext import MalformedJSON
from retimer.wire.protocols.sse_json import dumps
from retimer.wire.request import RequestBody

__all__ = [
    "BrokenRecord",
    "WebSocketMessageAdapter",
    "decode_messages",
    "encode_message",
    "is_llm_websocket_path",
    "turn_request",
]

_HEADER = struct.Struct(">cI")  # b"t" (text) or b"b" (binary), payload length
_TEXT, _BINARY = b"t", b"b"

_DELTA_CHANNELS: dict[str, Channel] = {
    "response.text.delta": Channel.TEXT,
    "response.output_text.delta": Channel.TEXT,
    "response.refusal.delta": Channel.TEXT,
    "response.audio_transcript.delta": Channel.TEXT,
    "response.output_audio_transcript.delta": Channel.TEXT,
    "response.reasoning_summary_text.delta": Channel.REASONING,
    "response.reasoning_text.delta": Channel.REASONING,
    "response.function_call_arguments.delta": Channel.TOOL_ARGS,
    "response.custom_tool_call_input.delta": Channel.TOOL_ARGS,
    "response.code_interpreter_call_code.delta": Channel.TOOL_ARGS,
    "response.mcp_call_arguments.delta": Channel.TOOL_ARGS,
}
# Gemini Live's server message kinds (one key each); any other key is not Gemini Live's
_GEMINI_LIVE_KEYS = frozenset({
    "setupComplete", "serverContent", "toolCallCancellation", "usageMetadata", "goAway",
    "sessionResumptionUpdate",
})
_SEQ_RE = re.compile(rb'"sequence_number"(\s*:\s*)(\d+)')
_LLM_WS_PATH = re.compile(r"/realtime\b|BidiGenerateContent|/v1/responses\b|/backend-api/", re.I)


class BrokenRecord(AdapterError):
    """Bytes that are not a sequence of whole internal message records."""


def encode_message(payload: bytes, *, is_text: bool) -> bytes:
    """One WebSocket message as an internal record (type, length, payload)."""
    return _HEADER.pack(_TEXT if is_text else _BINARY, len(payload)) + payload


def decode_messages(data: bytes) -> list[tuple[bytes, bool]]:
    """Records back into (payload, is_text) messages; raises BrokenRecord on a broken one."""
    out: list[tuple[bytes, bool]] = []
    pos, size = 0, len(data)
    while pos < size:
        if size - pos < _HEADER.size:
            raise BrokenRecord("truncated WebSocket record header")
        kind, length = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        if kind not in (_TEXT, _BINARY) or start + length > size:
            raise BrokenRecord("broken WebSocket record")
        out.append((data[start : start + length], kind == _TEXT))
        pos = start + length
    return out


def is_llm_websocket_path(path: str) -> bool:
    """Paths of LLM WebSocket APIs on any host (OpenAI Realtime, Gemini Live, ...)."""
    return bool(_LLM_WS_PATH.search(path))


def turn_request(payload: bytes) -> RequestBody:
    """The request a client message makes, for its turn's prompt estimate: a `response.create`'s
    fields at the top level (Codex, Copilot: the Responses body itself) or under `response`
    (Realtime), else the message as it is."""
    body = RequestBody(payload, "application/json")
    nested = body.get("response")
    if isinstance(nested, dict) and "input" not in (body.object or {}):
        return RequestBody.from_text(dumps(nested), "application/json")
    return body


class WebSocketMessageAdapter(Adapter):
    """Server-to-client messages of one WebSocket, fed one record per message."""

    name: ClassVar[str] = "websocket"

    def __init__(self) -> None:
        self._buf = bytearray()
        self._estimator = GenericStreamAdapter("ndjson")
        self._shift = 0  # sequence numbers inserted by splits so far

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        return is_llm_websocket_path(request.path)

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        events: list[Event] = []
        while len(self._buf) >= _HEADER.size:
            _, length = _HEADER.unpack_from(self._buf)
            end = _HEADER.size + length
            if len(self._buf) < end:
                break
            record = bytes(self._buf[:end])
            del self._buf[:end]
            events.append(self._event(record))
        return events

    def end(self) -> list[Event]:
        tail = bytes(self._buf)
        self._buf.clear()
        return [Event(raw=tail)] if tail else []

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        check_split(event, pieces)
        if len(pieces) == 1:
            return [event.raw]
        target: JSONTarget[None] = event.payload
        out: list[bytes] = []
        for i, piece in enumerate(pieces):
            obj = target.with_text(piece)
            if i and isinstance(obj.get("event_id"), str):
                obj["event_id"] = f"{obj['event_id']}-{i}"
            if i and isinstance(obj.get("sequence_number"), int):
                obj["sequence_number"] += i
            out.append(encode_message(dumps(obj).encode(), is_text=True))
        self._shift += len(pieces) - 1
        return out

    # -- internals -----------------------------------------------------------------------
    def _event(self, record: bytes) -> Event:
        [(payload, is_text)] = decode_messages(record)
        if not is_text:
            return Event(raw=record)
        if self._shift and b'"sequence_number"' in payload:
            payload = self._renumber(payload)
            upstream_size = len(record)
            record = encode_message(payload, is_text=True)
        else:
            upstream_size = None
        try:
            text = payload.decode("utf-8")
            obj = jsontext.loads(text)
        except (UnicodeDecodeError, MalformedJSON):
            return self._estimated(record, payload, upstream_size)
        if not isinstance(obj, dict):
            return self._estimated(record, payload, upstream_size)
        found = _find_text(obj)
        if found is None:
            if _is_known_envelope(obj):  # a protocol event whose text, if any, was counted
                return Event(raw=record, upstream_size=upstream_size)
            return self._estimated(record, payload, upstream_size)
        channel, path, value = found
        if not value:
            return Event(raw=record, upstream_size=upstream_size)
        return Event(raw=record, texts=((channel, value),), payload=JSONTarget(None, obj, path),
                     upstream_size=upstream_size)

    def _estimated(self, record: bytes, payload: bytes, upstream_size: int | None) -> Event:
        estimate = self._estimator.estimate(payload.decode("utf-8", "replace"))
        if not estimate:
            return Event(raw=record, upstream_size=upstream_size)
        return Event(raw=record, texts=((Channel.TEXT, estimate),), atomic=True,
                     upstream_size=upstream_size)

    def _renumber(self, payload: bytes) -> bytes:
        shift = self._shift
        return _SEQ_RE.sub(lambda m: b'"sequence_number"' + m[1] + str(int(m[2]) + shift).encode(),
                           payload, count=1)


def _is_known_envelope(obj: dict[str, Any]) -> bool:
    """A message of a protocol retimer knows whose new tokens `_find_text` would have found.

    OpenAI's Realtime and Responses WebSocket events are typed with dotted names
    (`response.output_text.done`, `response.completed`, `session.created`, `error`): the
    `.done` and `response.completed`/`response.done` events repeat text already counted from
    the deltas, and the rest (audio, lifecycle, rate limits) carry no answer text, so none of
    them costs a token, as over SSE. Gemini Live's lifecycle messages (set-up, turn complete,
    usage, audio-only model turns) carry none either; a model turn with text parts this
    adapter cannot split, and tool calls, are estimated as before.
    """
    kind = obj.get("type")
    if isinstance(kind, str):
        return "." in kind or kind == "error"
    if not obj or not all(key in _GEMINI_LIVE_KEYS for key in obj):
        return False
    content = obj.get("serverContent")
    turn = content.get("modelTurn") if isinstance(content, dict) else None
    parts = turn.get("parts") if isinstance(turn, dict) else None
    return not (isinstance(parts, list)
                and any(isinstance(p, dict) and "text" in p for p in parts))


def _find_text(obj: dict[str, Any]) -> tuple[Channel, JSONPath, str] | None:
    """The one token-bearing string of a known message shape, with its channel and place."""
    kind = obj.get("type")
    if isinstance(kind, str) and isinstance(obj.get("delta"), str):
        if kind in _DELTA_CHANNELS:
            return _DELTA_CHANNELS[kind], ("delta",), obj["delta"]
        if _is_unknown_response_text_delta(kind):
            return Channel.TEXT, ("delta",), obj["delta"]
    content = obj.get("serverContent")
    if isinstance(content, dict):
        turn = content.get("modelTurn")
        parts = turn.get("parts") if isinstance(turn, dict) else None
        if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], dict):
            text = parts[0].get("text")
            if isinstance(text, str):
                channel = Channel.REASONING if parts[0].get("thought") else Channel.TEXT
                return channel, ("serverContent", "modelTurn", "parts", 0, "text"), text
        transcript = content.get("outputTranscription")
        has_text = isinstance(parts, list) and any(isinstance(p, dict) and "text" in p
                                                   for p in parts)
        if isinstance(transcript, dict) and isinstance(transcript.get("text"), str) and not has_text:
            return Channel.TEXT, ("serverContent", "outputTranscription", "text"), transcript["text"]
    return None


def _is_unknown_response_text_delta(kind: str) -> bool:
    """A `response.*.delta` this adapter does not list yet: text, unless it is audio (base64)."""
    if not (kind.startswith("response.") and kind.endswith(".delta")):
        return False
    return "audio" not in kind or "transcript" in kind

