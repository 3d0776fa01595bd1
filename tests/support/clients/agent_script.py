"""Scripting the fake LLM API (tests/support/clients/fakeapi.py): what the model answers to a request.

A Script is any callable `(ApiRequest) -> Reply`; `AgentScript` calls a tool when the request
offers it and the conversation holds no tool result yet, and answers with text otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_TEXT = "The fake model answers: retimer keeps every word and changes only the time between them."


@dataclass(slots=True)
class Reply:
    """What the fake model answers: `text`, then (if `tool`) one tool call with `arguments`."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""  # filled in by the server when empty
    # OpenAI Responses only: a custom (freeform) tool call, `custom_tool_call`, whose input is this
    # raw text (Codex's apply_patch); `arguments` is then unused
    custom_input: str | None = None

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class ApiRequest:
    """One logged request (an HTTP request, or one client message on a WebSocket)."""

    api: str  # openai-chat | openai-responses | openai-responses-ws | openai-realtime |
    #           anthropic-messages | gemini | ollama-chat | ollama-generate | models | other | unknown
    method: str  # HTTP method, or "WS" for a WebSocket client message
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased, auth headers removed
    body: Any  # parsed JSON (or text, or None)
    host: str = ""
    stream: bool = False
    model: str = ""
    tools: list[str] = field(default_factory=list)  # names of the tools offered
    has_tool_result: bool = False  # the conversation already holds a tool result
    reply: Reply | None = None
    time: float = 0.0  # wall time it arrived
    tls: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Script = Callable[[ApiRequest], Reply]


class AgentScript:
    """Default script: call `tool` (if offered, and no tool result yet), else answer `text`.

    `tool` may be a name, a list of names (the first one offered is used), or None (always text).
    `text_before_tool` is said before the tool call.
    """

    def __init__(self, text: str = DEFAULT_TEXT, tool: str | list[str] | None = None,
                 arguments: dict[str, Any] | None = None, text_before_tool: str = "") -> None:
        self.text, self.tool, self.arguments = text, tool, arguments or {}
        self.text_before_tool = text_before_tool

    def __call__(self, req: ApiRequest) -> Reply:
        names = [self.tool] if isinstance(self.tool, str) else list(self.tool or [])
        offered = [n for n in names if n in req.tools]
        if offered and not req.has_tool_result:
            return Reply(self.text_before_tool, offered[0], dict(self.arguments))
        return Reply(self.text)


def offered_tools(api: str, body: dict) -> list[str]:
    """The names of the tools a request offers, in that API's shape."""
    names: list[str] = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if api == "gemini":
            for d in t.get("functionDeclarations") or t.get("function_declarations") or []:
                names.append(d.get("name", ""))
        elif isinstance(t.get("function"), dict):  # OpenAI Chat, Ollama
            names.append(t["function"].get("name", ""))
        elif t.get("name"):  # Anthropic, Responses function/custom tools
            names.append(t["name"])
        elif t.get("type"):  # Responses built-ins (local_shell, web_search, ...)
            names.append(t["type"])
    return [n for n in names if n]


def holds_tool_result(api: str, body: dict) -> bool:
    """Whether the conversation a request sends already holds a tool result."""
    if api in ("openai-chat", "ollama-chat"):
        return any(isinstance(m, dict) and m.get("role") in ("tool", "function")
                   for m in body.get("messages") or [])
    if api.startswith("openai-responses") or api == "openai-realtime":
        items = body.get("input")
        return isinstance(items, list) and any(
            isinstance(i, dict) and str(i.get("type", "")).endswith("_output") for i in items)
    if api == "anthropic-messages":
        return any(isinstance(b, dict) and b.get("type") == "tool_result"
                   for m in body.get("messages") or [] if isinstance(m, dict)
                   for b in (m.get("content") if isinstance(m.get("content"), list) else []))
    if api == "gemini":
        return any(isinstance(p, dict) and ("functionResponse" in p or "function_response" in p)
                   for c in body.get("contents") or [] if isinstance(c, dict)
                   for p in c.get("parts") or [])
    return False


def load_script(spec: str) -> Script:
    """`path/to/file.py:NAME` -> the callable NAME in that file (called with no args if a class)."""
    path, _, name = spec.rpartition(":")
    mod_spec = importlib.util.spec_from_file_location(f"fakeapi_script_{uuid.uuid4().hex}", path)
    assert mod_spec and mod_spec.loader, spec
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    obj = getattr(mod, name)
    return obj() if isinstance(obj, type) else obj
