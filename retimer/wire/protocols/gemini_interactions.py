"""Gemini Interactions API streams (`POST /v1beta/interactions` with `stream: true`).

The Interactions API is Google's step-based successor to `streamGenerateContent`; its SSE
events are `event: <event_type>` + `data: {"event_type": ..., ...}`. Tokens arrive only in
`step.delta` events, as one string in `delta`:

* `{"type": "text", "text"}` (answer text);
* `{"type": "thought_summary", "content": {"type": "text", "text"}}` (reasoning);
* `{"type": "arguments_delta", "arguments"}` (function call arguments, partial JSON).

Older streams (steps disabled) send `content.delta` with the same `text` delta. Everything
else (interaction.created/status_update/completed, step.start/stop, thought signatures,
annotations, images, built-in tool calls and results, errors) passes unchanged.
`GET /v1beta/interactions/{id}?stream=true` resumes a stream and is read the same way.

A split repeats the event with the string replaced, so every piece keeps the step `index`.
`event_id` (the resume token: resuming from it must not skip the rest of the event) and
`metadata` (cumulative usage) go on the last piece only.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape, text_field
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.sse_json import SSEJSONAdapter, request_path
from retimer.wire.sse import SSEEvent, is_event_stream

__all__ = ["GeminiInteractionsAdapter"]

_DELTA_EVENTS = frozenset({"step.delta", "content.delta"})
# delta type -> (path inside the delta, channel)
_DELTAS: dict[str, tuple[tuple[str, ...], Channel]] = {
    "text": (("text",), Channel.TEXT),
    "thought_summary": (("content", "text"), Channel.REASONING),
    "arguments_delta": (("arguments",), Channel.TOOL_ARGS),
}
_LAST_ONLY = ("event_id", "metadata")
_RESUME = re.compile(r"/interactions/[^/]+\Z")


class GeminiInteractionsAdapter(SSEJSONAdapter):
    """Adapter for the Interactions API event stream (Gemini API and Vertex AI)."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "gemini-interactions"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST .../interactions, or GET .../interactions/{id} (resume), answered with SSE."""
        if not is_event_stream(content_type):
            return False
        path = request_path(request.path)
        method = request.method.upper()
        return (method == "POST" and path.endswith("/interactions")) or (
            method == "GET" and _RESUME.search(path) is not None
        )

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        delta = obj.get("delta")
        if obj.get("event_type") not in _DELTA_EVENTS or not isinstance(delta, dict):
            return Event(raw=sse.raw)
        spec = _DELTAS.get(text_field(delta, "type"))
        if spec is None:
            return Event(raw=sse.raw)
        path, channel = spec
        value: Any = delta
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, str) or not value:
            return Event(raw=sse.raw)
        if path == ("content", "text") and delta["content"].get("type", "text") != "text":
            return Event(raw=sse.raw)
        return Event(raw=sse.raw, texts=((channel, value),), payload=JSONTarget(sse, obj, ("delta", *path)))

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """The same event with the string replaced; event_id and metadata last only."""
        return {k: v for k, v in target.with_text(piece).items() if last or k not in _LAST_ONLY}
