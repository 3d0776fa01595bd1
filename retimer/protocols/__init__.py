"""Registry of protocol adapters: which wire format a flow speaks.

Order matters: the first adapter whose `accepts()` is true handles the flow, so more
specific shapes go before broader ones.
"""

from __future__ import annotations

from .anthropic_messages import AnthropicMessagesAdapter
from .base import Adapter, Channel, Event, RequestShape
from .gemini_json import GeminiJSONArrayAdapter
from .gemini_sse import GeminiSSEAdapter
from .generic import GenericStreamAdapter
from .ollama import OllamaAdapter
from .openai_chat import OpenAIChatAdapter
from .openai_responses import OpenAIResponsesAdapter

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AnthropicMessagesAdapter",
    "Channel",
    "Event",
    "GeminiJSONArrayAdapter",
    "GeminiSSEAdapter",
    "GenericStreamAdapter",
    "OllamaAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "RequestShape",
    "find_adapter",
]

ADAPTERS: tuple[type[Adapter], ...] = (
    OpenAIChatAdapter,
    AnthropicMessagesAdapter,
    OpenAIResponsesAdapter,
    OllamaAdapter,
    GeminiSSEAdapter,
    GeminiJSONArrayAdapter,
)


def find_adapter(request: RequestShape, content_type: str) -> type[Adapter] | None:
    """The adapter class for this request and response content type, or None (pass through)."""
    for adapter in ADAPTERS:
        if adapter.accepts(request, content_type):
            return adapter
    return None


def fallback_adapter(content_type: str) -> Adapter | None:
    """The generic adapter (whole events paced, bytes never altered) for an LLM host's other
    event streams and NDJSON; the caller decides that the host is an LLM host."""
    if GenericStreamAdapter.accepts(RequestShape("", "", "", {}, b""), content_type):
        return GenericStreamAdapter.for_content_type(content_type)
    return None
