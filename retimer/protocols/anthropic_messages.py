"""Anthropic Messages streams (`POST /v1/messages` with `stream: true`).

Tokens arrive only in `content_block_delta` events: `text_delta.text` (answer text),
`thinking_delta.thinking` (reasoning) and `input_json_delta.partial_json` (tool input, also
for server tools such as web search). Everything else (message_start/delta/stop, block
start/stop, ping, signature_delta, citations_delta, error) passes unchanged.

A split repeats the event with the string replaced: every piece is self-contained, so block
index and delta type are on each. The API pads data lines with spaces (length obfuscation);
re-serialised pieces are compact, which clients cannot tell apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..sse import SSEEvent, SSEParser, format_event, is_event_stream
from .base import Adapter, Channel, Event, RequestShape

__all__ = ["AnthropicMessagesAdapter"]

_DELTA_FIELDS: dict[str, tuple[str, Channel]] = {
    "text_delta": ("text", Channel.TEXT),
    "thinking_delta": ("thinking", Channel.REASONING),
    "input_json_delta": ("partial_json", Channel.TOOL_ARGS),
}


@dataclass(slots=True, frozen=True)
class _Target:
    """The parsed event and which delta field holds its string."""

    sse: SSEEvent
    obj: dict[str, Any]
    field: str


class AnthropicMessagesAdapter(Adapter):
    """Adapter for the Messages API event stream (also Claude Code and the SDKs' beta paths)."""

    name: ClassVar[str] = "anthropic-messages"

    def __init__(self) -> None:
        self._parser = SSEParser()

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /messages (query allowed), answered with an event stream."""
        path = request.path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
        return request.method.upper() == "POST" and path.endswith("/messages") and is_event_stream(content_type)

    def feed(self, data: bytes) -> list[Event]:
        """Parse more upstream bytes into events."""
        return [self._classify(sse) for sse in self._parser.feed(data)]

    def end(self) -> list[Event]:
        """Return what is left; an unterminated trailing event is passed on as is."""
        return [self._classify(sse) for sse in self._parser.end()]

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        """Serialise `event` as one content_block_delta per piece."""
        target = event.payload
        if not event.splittable or not isinstance(target, _Target):
            raise ValueError("event is not splittable")
        if not pieces or "".join(pieces) != event.text:
            raise ValueError("pieces do not add up to the event's text")
        if len(pieces) == 1:
            return [event.raw]
        sse = target.sse
        last = len(pieces) - 1
        out: list[bytes] = []
        for i, piece in enumerate(pieces):
            obj = {**target.obj, "delta": {**target.obj["delta"], target.field: piece}}
            out.append(
                format_event(
                    sse.event,
                    _dumps(obj),
                    sse.newline,
                    event_id=sse.id if i == last else None,
                    retry=sse.retry if i == 0 else None,
                )
            )
        out[0] = sse.preamble + out[0]
        return out

    @staticmethod
    def _classify(sse: SSEEvent) -> Event:
        """Turn an SSE event into an Event; anything unexpected becomes a non-token event."""
        if not sse.complete or not sse.data:
            return Event(raw=sse.raw)
        try:
            sse.raw.decode("utf-8")
            obj = json.loads(sse.data)
        except (ValueError, RecursionError):
            return Event(raw=sse.raw)
        if not isinstance(obj, dict) or obj.get("type") != "content_block_delta":
            return Event(raw=sse.raw)
        delta = obj.get("delta")
        spec = _DELTA_FIELDS.get(delta.get("type")) if isinstance(delta, dict) else None  # type: ignore[arg-type]
        if spec is None:
            return Event(raw=sse.raw)
        field, channel = spec
        text = delta.get(field)  # type: ignore[union-attr]
        if not isinstance(text, str) or not text:
            return Event(raw=sse.raw)
        return Event(raw=sse.raw, texts=((channel, text),), payload=_Target(sse, obj, field))


def _dumps(obj: Any) -> str:
    """Compact JSON; falls back to ASCII escapes when a lone surrogate cannot be UTF-8."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    return text
