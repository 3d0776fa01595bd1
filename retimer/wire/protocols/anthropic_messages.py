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

from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape, text_field
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.sse_json import SSEJSONAdapter, posts_event_stream
from retimer.wire.sse import SSEEvent

__all__ = ["AnthropicMessagesAdapter"]

_DELTA_FIELDS: dict[str, tuple[str, Channel]] = {
    "text_delta": ("text", Channel.TEXT),
    "thinking_delta": ("thinking", Channel.REASONING),
    "input_json_delta": ("partial_json", Channel.TOOL_ARGS),
}


class AnthropicMessagesAdapter(SSEJSONAdapter):
    """Adapter for the Messages API event stream (also Claude Code and the SDKs' beta paths)."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "anthropic-messages"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /messages (query allowed), answered with an event stream."""
        return posts_event_stream(request, content_type, "/messages")

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        if obj.get("type") != "content_block_delta":
            return Event(raw=sse.raw)
        delta = obj.get("delta")
        spec = _DELTA_FIELDS.get(text_field(delta, "type")) if isinstance(delta, dict) else None
        if spec is None:
            return Event(raw=sse.raw)
        field, channel = spec
        text = delta.get(field)  # type: ignore[union-attr]
        if not isinstance(text, str) or not text:
            return Event(raw=sse.raw)
        return Event(raw=sse.raw, texts=((channel, text),), payload=JSONTarget(sse, obj, ("delta", field)))

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """Every piece is the same event with the string replaced."""
        return target.with_text(piece)
