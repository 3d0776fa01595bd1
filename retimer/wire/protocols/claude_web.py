"""The claude.ai web app's completion stream.

`POST /api/organizations/{org}/chat_conversations/{id}/completion` (and `/retry_completion`,
the app's "retry" button) answers with the Messages API event stream plus web-app extras:
UI fields on content blocks (timestamps, flags, icons, approval options), a `message_limit`
event with rate-limit windows, `citation_start_delta` / `citation_end_delta`, SSE comment
pings between events, and no usage. All of these are non-token events and pass unchanged,
so the Messages adapter does the work.

One difference in meaning: the results of the app's server-side tools (web search, weather,
MCP) are `tool_result` blocks whose content streams as `input_json_delta`. That text is tool
output, not model tokens, so it is not paced: those deltas pass unchanged. The adapter
remembers each block's type from its `content_block_start` to tell them apart.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Event, RequestShape
from retimer.wire.protocols.sse_json import request_path
from retimer.wire.sse import SSEEvent, is_event_stream

__all__ = ["ClaudeWebAdapter"]

_ENDPOINTS = ("completion", "retry_completion")
_UNPACED_BLOCKS = frozenset({"tool_result"})  # server tool output streamed as deltas


class ClaudeWebAdapter(AnthropicMessagesAdapter):
    """Adapter for claude.ai's chat completion stream."""

    name: ClassVar[str] = "claude-web"

    def __init__(self) -> None:
        super().__init__()
        self._block_types: dict[Any, str] = {}  # block index -> content_block.type

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST .../organizations/{org}/chat_conversations/{id}/(retry_)completion, as SSE."""
        parts = request_path(request.path).split("/")
        return (
            request.method.upper() == "POST"
            and len(parts) >= 6
            and parts[-1] in _ENDPOINTS
            and parts[-3] == "chat_conversations"
            and parts[-5] == "organizations"
            and parts[-2] != ""
            and parts[-4] != ""
            and is_event_stream(content_type)
        )

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        kind = obj.get("type")
        index = obj.get("index")
        if kind == "message_start":
            self._block_types.clear()
        elif kind == "content_block_start":
            block = obj.get("content_block")
            block_type = block.get("type") if isinstance(block, dict) else None
            if isinstance(index, (int, str)) and isinstance(block_type, str):
                self._block_types[index] = block_type
        elif (
            kind == "content_block_delta"
            and isinstance(index, (int, str))
            and self._block_types.get(index) in _UNPACED_BLOCKS
        ):
            return Event(raw=sse.raw)
        return super().classify(sse, obj)
