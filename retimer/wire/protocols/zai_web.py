"""Z.ai web app streams (chat.z.ai `POST /api/v2/chat/completions`).

Data-only SSE of `{"type":"chat:completion","data":{...}}`. Tokens are `data.delta_content`,
whose channel is `data.phase`: "thinking" is reasoning, "answer" is answer text. Every other
phase ("other" with usage, which may arrive before the last answer delta; "done"; tool or
search phases) and every other event type pass unchanged.

A split repeats the event with `delta_content` replaced. Only a plain delta (data holding
nothing but delta_content, phase and `done: false`) is split: an event that also carries
usage, `done: true`, `edit_content`/`edit_index` (the web app's rewrite of earlier content at
an offset, e.g. closing the thinking block) or unknown fields is counted but sent whole, since
where those belong among pieces is not known. `edit_content` alone is a rewrite, not new
tokens, and is not counted.

The path ends in /chat/completions like OpenAI's, so `accepts` requires the chat.z.ai host
and the adapter must come before OpenAIChatAdapter in the registry.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.sse_json import SSEJSONAdapter, request_path
from retimer.wire.sse import SSEEvent, is_event_stream

__all__ = ["ZaiWebAdapter"]

_HOSTS = frozenset({"chat.z.ai"})
_PATHS = frozenset({"/api/v2/chat/completions", "/api/chat/completions"})
_PHASES: dict[str, Channel] = {"thinking": Channel.REASONING, "answer": Channel.TEXT}
_TOP_KEYS = frozenset({"type", "data"})
_PLAIN_KEYS = frozenset({"delta_content", "phase"})


class ZaiWebAdapter(SSEJSONAdapter):
    """Adapter for the chat.z.ai web app's completion stream."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "zai-web"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST from chat.z.ai to its chat completions endpoint, answered with SSE."""
        host = request.host.lower().rstrip(".").split(":", 1)[0]
        return (
            request.method.upper() == "POST"
            and host in _HOSTS
            and request_path(request.path) in _PATHS
            and is_event_stream(content_type)
        )

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        data = obj.get("data")
        if obj.get("type") != "chat:completion" or not isinstance(data, dict):
            return Event(raw=sse.raw)
        phase, text = data.get("phase"), data.get("delta_content")
        channel = _PHASES.get(phase) if isinstance(phase, str) else None
        if channel is None or not isinstance(text, str) or not text:
            return Event(raw=sse.raw)
        extra = data.keys() - _PLAIN_KEYS
        plain = obj.keys() <= _TOP_KEYS and (not extra or (extra == {"done"} and data["done"] is False))
        if not plain:
            return Event(raw=sse.raw, texts=((channel, text),), atomic=True)
        return Event(raw=sse.raw, texts=((channel, text),), payload=JSONTarget(sse, obj, ("data", "delta_content")))

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """Every piece is the same event with delta_content replaced."""
        return target.with_text(piece)
