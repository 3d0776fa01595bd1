"""Cohere v2 Chat streams (`POST /v2/chat` with `stream: true`).

Events are `event: <type>` + `data: {"type": <type>, ...}`. Tokens arrive in:

* `content-delta`: `delta.message.content.text` (answer text) or `.thinking` (reasoning
  models' thoughts, in a block opened by `content-start` with type "thinking");
* `tool-plan-delta`: `delta.message.tool_plan`, the plan the model writes before calling
  tools (reasoning: it is not part of the answer);
* `tool-call-delta`: `delta.message.tool_calls.function.arguments` (tool arguments).

Everything else (message-start/end, content-start/end, tool-call-start/end, citation-start/
end, debug, `[DONE]`) passes unchanged. A `tool-call-start` or `content-start` that already
carries text (not seen in recordings: they carry "") is counted but not split, since its id
and name must appear once.

A split repeats the event with the string replaced, so every piece keeps the block `index`;
a top-level `logprobs` (one entry per token) goes on the last piece only.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape, text_field
from retimer.wire.protocols.jsontarget import JSONTarget, value_at
from retimer.wire.protocols.sse_json import SSEJSONAdapter, posts_event_stream
from retimer.wire.sse import SSEEvent

__all__ = ["CohereChatAdapter"]

# event type -> (path under delta.message, channel), in the order they are tried
_DELTAS: dict[str, tuple[tuple[tuple[str, ...], Channel], ...]] = {
    "content-delta": ((("content", "text"), Channel.TEXT), (("content", "thinking"), Channel.REASONING)),
    "tool-plan-delta": ((("tool_plan",), Channel.REASONING),),
    "tool-call-delta": ((("tool_calls", "function", "arguments"), Channel.TOOL_ARGS),),
}
# starts that may carry a first string: counted, never split
_STARTS: dict[str, tuple[tuple[tuple[str, ...], Channel], ...]] = {
    "content-start": _DELTAS["content-delta"],
    "tool-call-start": _DELTAS["tool-call-delta"],
}
_LAST_ONLY = ("logprobs",)


class CohereChatAdapter(SSEJSONAdapter):
    """Adapter for Cohere's v2 chat event stream."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "cohere-chat"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /v2/chat (query allowed), answered with an event stream."""
        return posts_event_stream(request, content_type, "/v2/chat")

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        kind = text_field(obj, "type")
        specs = _DELTAS.get(kind) or _STARTS.get(kind)
        delta = obj.get("delta")
        message = delta.get("message") if isinstance(delta, dict) else None
        if specs is None or not isinstance(message, dict):
            return Event(raw=sse.raw)
        texts: list[tuple[Channel, str]] = []
        target: JSONTarget[SSEEvent] | None = None
        for path, channel in specs:
            value = value_at(message, path)
            if isinstance(value, str) and value:
                texts.append((channel, value))
                target = JSONTarget(sse, obj, ("delta", "message", *path))
        if not texts:
            return Event(raw=sse.raw)
        atomic = kind in _STARTS or len(texts) > 1
        return Event(raw=sse.raw, texts=tuple(texts), payload=None if atomic else target,
                     atomic=atomic)

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """The same event with the string replaced; logprobs only on the last piece."""
        return {k: v for k, v in target.with_text(piece).items() if last or k not in _LAST_ONLY}



