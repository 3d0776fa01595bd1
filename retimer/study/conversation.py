"""Which requests are study units, and which conversation a request belongs to. Pure: no I/O.

A unit is an LLM call: a POST whose method, path and body have the shape of a format retimer
re-times (`find_adapter`), or a WebSocket to an LLM host or API path. Everything else a page
sends (analytics, title generation, model lists) is not a unit.

Conversation keys, in order (the first that applies):
- claude.ai: the conversation id in the URL (`.../chat_conversations/{id}/completion`).
- ChatGPT (`/backend-api/conversation`): the body's `conversation_id`. A first turn has none:
  its key is its own (`chatgpt-new:` + the body's hash), and the `conversation_id` the response
  names is linked to it, so the next turns join it (`links`, `response_links`).
- DeepSeek: the body's `chat_session_id`; Z.ai: its `chat_id`.
- OpenAI Responses: `conversation` (the Conversations API); else `previous_response_id`,
  linked to the conversation of the response with that id; else the first input below.
- any API that sends the history (OpenAI Chat, Anthropic, Gemini, Ollama, Bedrock): the hash
  of the system prompt and the first user message, which stay the same as a conversation
  grows. Two conversations that open with the same words and system prompt are one unit.
- anything else: the hash of the whole body (each request its own conversation).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from retimer.wire.hosts import is_llm_host
from retimer.wire.media import AMAZON_EVENT_STREAM, EVENT_STREAM, JSON, NDJSON, TEXT
from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import RequestShape
from retimer.wire.protocols.websocket import is_llm_websocket_path

__all__ = ["ConversationId", "conversation_key", "is_unit_request", "response_links"]

_CANDIDATE_TYPES = (EVENT_STREAM, NDJSON, JSON, AMAZON_EVENT_STREAM, TEXT)
_CLAUDE = re.compile(r"/chat_conversations/([^/?#]+)/")
_CHATGPT = re.compile(r"/backend-(?:api|anon)/(?:f/)?conversation\Z")
_RESPONSES = re.compile(r"/responses\Z")
_CHATGPT_ID = re.compile(rb'"conversation_id"\s*:\s*"([^"\\]{1,200})"')
_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[^"\\]{1,200})"')


@dataclass(frozen=True)
class ConversationId:
    key: str  # stable identity of the conversation
    links: str | None = None  # the kind of ids its response names that later turns refer to


def is_unit_request(shape: RequestShape, websocket: bool = False) -> bool:
    """Whether a request is a study unit (an LLM call retimer would re-time)."""
    if websocket:
        return is_llm_host(shape.host) or is_llm_websocket_path(shape.path)
    if shape.method.upper() != "POST":
        return False
    return any(find_adapter(shape, ctype) is not None for ctype in _CANDIDATE_TYPES)


def _digest(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _text_id(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, dict):  # {"id": ...}, as the Responses API's `conversation` may be
        return _text_id(value.get("id"))
    return None


def _first_user(items: object) -> object:
    """The first user turn of a message list (OpenAI/Anthropic/Ollama/Bedrock/Responses/Gemini)."""
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, dict) and item.get("role") in ("user", None) and (
            "content" in item or "parts" in item
        ):
            return item.get("content", item.get("parts"))
    return None


def _system(body: Mapping[str, object]) -> object:
    for name in ("system", "instructions", "systemInstruction", "system_instruction"):
        if name in body:
            return body[name]
    messages = body.get("messages")
    if isinstance(messages, list):
        return [m.get("content") for m in messages
                if isinstance(m, dict) and m.get("role") in ("system", "developer")][:1]
    return None


def conversation_key(shape: RequestShape) -> ConversationId:
    """The conversation a request belongs to (see the module docstring)."""
    path = shape.path.split("?", 1)[0]
    m = _CLAUDE.search(path)
    if m:
        return ConversationId(f"claude:{m.group(1)}")
    body = shape.parsed_body.object  # parsed once, shared with the adapters' `accepts`
    if body is None:
        return ConversationId(f"body:{hashlib.sha256(shape.body).hexdigest()[:32]}")
    if _CHATGPT.search(path):
        cid = _text_id(body.get("conversation_id"))
        if cid:
            return ConversationId(f"chatgpt:{cid}")
        return ConversationId(f"chatgpt-new:{_digest(body)}", links="chatgpt")
    for field, prefix in (("chat_session_id", "deepseek"), ("chat_id", "zai")):
        cid = _text_id(body.get(field))
        if cid:
            return ConversationId(f"{prefix}:{cid}")
    if _RESPONSES.search(path):
        cid = _text_id(body.get("conversation"))
        if cid:
            return ConversationId(f"openai-conversation:{cid}")
        prev = _text_id(body.get("previous_response_id"))
        if prev:
            return ConversationId(f"openai-response:{prev}", links="openai-responses")
        first = _first_user(body.get("input"))
        return ConversationId(f"first-user:{_digest([_system(body), first])}",
                              links="openai-responses")
    for field in ("messages", "contents"):
        first = _first_user(body.get(field))
        if first is not None:
            return ConversationId(f"first-user:{_digest([_system(body), first])}")
    for field in ("prompt", "inputs", "input"):
        if isinstance(body.get(field), str):
            return ConversationId(f"first-user:{_digest([_system(body), body[field]])}")
    return ConversationId(f"body:{_digest(body)}")


def response_links(kind: str, body: bytes) -> list[str]:
    """Keys a later request of the same conversation will carry, found in a response body."""
    if kind == "chatgpt":
        m = _CHATGPT_ID.search(body)
        return [f"chatgpt:{m.group(1).decode('utf-8', 'replace')}"] if m else []
    if kind == "openai-responses":
        found = (m.group(1).decode("utf-8", "replace") for m in _RESPONSE_ID.finditer(body))
        ids = dict.fromkeys(found)
        return [f"openai-response:{i}" for i in ids]
    return []
