"""Registry of protocol adapters: which wire format a flow speaks.

Order matters: the first adapter whose `accepts()` is true handles the flow, so more
specific shapes go before broader ones.
"""

from __future__ import annotations

from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape
from retimer.wire.protocols.bedrock import BedrockEventStreamAdapter
from retimer.wire.protocols.chatgpt_web import ChatGPTWebAdapter
from retimer.wire.protocols.claude_web import ClaudeWebAdapter
from retimer.wire.protocols.cohere_chat import CohereChatAdapter
from retimer.wire.protocols.connect import ConnectStreamAdapter
from retimer.wire.protocols.deepseek_web import DeepSeekWebAdapter
from retimer.wire.protocols.gemini_interactions import GeminiInteractionsAdapter
from retimer.wire.protocols.gemini_json import GeminiJSONArrayAdapter
from retimer.wire.protocols.gemini_sse import GeminiSSEAdapter
from retimer.wire.protocols.gemini_web import GeminiWebAdapter
from retimer.wire.protocols.generic import GenericStreamAdapter
from retimer.wire.protocols.grpc import GrpcStreamAdapter
from retimer.wire.protocols.ollama import OllamaAdapter
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.protocols.openai_completions import OpenAICompletionsAdapter
from retimer.wire.protocols.openai_responses import OpenAIResponsesAdapter
from retimer.wire.protocols.tgi import TGIGenerateStreamAdapter
from retimer.wire.protocols.zai_web import ZaiWebAdapter

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AnthropicMessagesAdapter",
    "BedrockEventStreamAdapter",
    "ChatGPTWebAdapter",
    "Channel",
    "ClaudeWebAdapter",
    "CohereChatAdapter",
    "ConnectStreamAdapter",
    "DeepSeekWebAdapter",
    "Event",
    "GeminiInteractionsAdapter",
    "GeminiJSONArrayAdapter",
    "GeminiSSEAdapter",
    "GeminiWebAdapter",
    "GenericStreamAdapter",
    "GrpcStreamAdapter",
    "OllamaAdapter",
    "OpenAIChatAdapter",
    "OpenAICompletionsAdapter",
    "OpenAIResponsesAdapter",
    "RequestShape",
    "TGIGenerateStreamAdapter",
    "ZaiWebAdapter",
    "find_adapter",
]

ADAPTERS: tuple[type[Adapter], ...] = (
    ZaiWebAdapter,  # chat.z.ai only; its path also looks like OpenAI Chat
    OpenAIChatAdapter,
    OpenAICompletionsAdapter,  # /completions but not /chat/completions
    ClaudeWebAdapter,  # claude.ai's completion paths; Anthropic-like events
    AnthropicMessagesAdapter,
    OpenAIResponsesAdapter,
    CohereChatAdapter,
    OllamaAdapter,
    GeminiSSEAdapter,
    GeminiInteractionsAdapter,
    GeminiJSONArrayAdapter,
    GeminiWebAdapter,
    ChatGPTWebAdapter,
    DeepSeekWebAdapter,
    BedrockEventStreamAdapter,
    ConnectStreamAdapter,  # by content type, any path
    GrpcStreamAdapter,
    TGIGenerateStreamAdapter,  # last: it also accepts a TGI-shaped body at any path
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
