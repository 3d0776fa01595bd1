"""What a call to an LLM API is, for matching a live call to a recorded one: its method, path,
model and API, and digests of its preamble (tools, system prompt) and of each message. Pure:
a request body in, a `CallShape` out; digests only, never the text (a cassette's index holds
no prompt).

A second run of an agent never sends quite the same requests: tool calls get new ids, tool
output names other temporary files and other timings, a system prompt carries today's date.
So every string is normalised before it is digested, by these rules (`VOLATILE`, in order):
a client's own stamp on each request (Claude Code's `x-anthropic-billing-header:` line in the
system prompt, whose checksum changes with every call), UUIDs, ISO 8601 dates and times,
Unix timestamps (10 or 13 digits; as JSON numbers too, such as Codex's `create_time`),
durations ("1.2s", "340 ms"), temporary paths (/tmp/..., /var/folders/...), ids with a known prefix
(`call_`, `toolu_`, `fc_`, `msg_`, `resp_`, `chatcmpl-`, ...) or 16+ characters mixing
letters and digits; each becomes a placeholder. Two digests per message: `messages` (every
normalised string) and `loose` (the same, but a tool's output counts only as "a tool output":
an agent's test run or file listing may differ in ways no rule can foresee).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from retimer.wire.prompt import segments
from retimer.wire.request import RequestBody

__all__ = ["VOLATILE", "CallShape", "call_shape", "normalize"]

VOLATILE: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("client stamp", re.compile(r"x-anthropic-billing-header:[^\n]*"), "<client stamp>"),
    ("UUID", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                        r"[0-9a-fA-F]{12}\b"), "<uuid>"),
    ("date and time", re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                                 r"(?:Z|[+-]\d{2}:?\d{2})?)?\b"), "<time>"),
    ("time of day", re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    ("Unix timestamp", re.compile(r"\b1\d{9}(?:\d{3})?(?:\.\d+)?\b"), "<time>"),
    ("duration", re.compile(r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds|m|min)\b"),
     "<duration>"),
    ("temporary path", re.compile(r"(?:/private)?(?:/tmp|/var/folders|/var/tmp)/[^\s\"'`:,;)]*"),
     "<tmp>"),
    ("prefixed id", re.compile(r"\b(?:call|toolu|fc|msg|resp|rs|chatcmpl|req|run|srvtoolu|ws)"
                               r"[_-][A-Za-z0-9_-]{6,}\b"), "<id>"),
    ("long id", re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])"
                           r"[A-Za-z0-9_-]{16,}\b"), "<id>"),
)
"""(what it is, pattern, placeholder): the parts of a string that vary between runs."""

_TOOL_OUTPUT = "<a tool output>"


def normalize(text: str) -> str:
    """`text` with every volatile part replaced by its placeholder."""
    for _, pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


def _normalized(value: Any, *, loose: bool) -> Any:
    """A JSON value with its strings and timestamps normalised; with `loose`, tool outputs
    abstracted."""
    if isinstance(value, str):
        return normalize(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and _is_timestamp(value):
        return "<time>"
    if isinstance(value, list):
        return [_normalized(v, loose=loose) for v in value]
    if isinstance(value, dict):
        if loose and _is_tool_output(value):
            return _TOOL_OUTPUT
        return {k: _normalized(v, loose=loose) for k, v in value.items()}
    return value


def _is_timestamp(number: float) -> bool:
    """A Unix time in seconds or milliseconds between 2001 and 2286 (a JSON number)."""
    return 1e9 <= number < 1e10 or 1e12 <= number < 1e13


def _is_tool_output(item: dict[str, Any]) -> bool:
    """A tool's result as each API carries it: an OpenAI chat `tool` (or `function`) message,
    an Anthropic `tool_result` block, a Responses `*_call_output` item, a Gemini
    `functionResponse` part."""
    if item.get("role") in ("tool", "function") and "content" in item:
        return True
    kind = item.get("type")
    if kind == "tool_result" or (isinstance(kind, str) and kind.endswith("_call_output")):
        return True
    return "functionResponse" in item or "function_response" in item


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


@dataclass(frozen=True)
class CallShape:
    """A call as the matcher sees it; `messages` and `loose` hold one digest per message."""

    method: str
    path: str  # without the query
    api: str  # chat, responses, gemini, generate, generic; "" for a body that is not JSON
    model: str
    preamble: str  # digest of the tools and the system prompt, normalised
    messages: tuple[str, ...]
    loose: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "api": self.api, "model": self.model,
                "preamble": self.preamble, "messages": list(self.messages),
                "loose": list(self.loose)}

    @classmethod
    def from_json(cls, obj: Any) -> CallShape:
        """The shape a cassette's index holds (ValueError: not one)."""
        if not isinstance(obj, dict):
            raise ValueError("a call's shape is not a JSON object")
        strings = {k: obj.get(k) for k in ("method", "path", "api", "model", "preamble")}
        lists = {k: obj.get(k) for k in ("messages", "loose")}
        if not all(isinstance(v, str) for v in strings.values()):
            raise ValueError("a call's shape has a field that is not a string")
        if not all(isinstance(v, list) and all(isinstance(d, str) for d in v)
                   for v in lists.values()):
            raise ValueError("a call's shape has digests that are not a list of strings")
        messages, loose = tuple(lists["messages"] or ()), tuple(lists["loose"] or ())
        if len(messages) != len(loose):
            raise ValueError("a call's shape has loose digests for another number of messages")
        return cls(str(strings["method"]), str(strings["path"]), str(strings["api"]),
                   str(strings["model"]), str(strings["preamble"]), messages, loose)


def call_shape(method: str, path: str, body: RequestBody | bytes | None) -> CallShape:
    """The shape of a request. A body that is not a JSON object counts as one message, its
    bytes' digest (a WebSocket message or a gRPC call gives its own body here)."""
    path_only = path.split("?", 1)[0]
    request = RequestBody.of(body)
    obj = request.object if request.is_json else None
    if obj is None:
        raw = hashlib.blake2b(request.raw, digest_size=12).hexdigest()
        return CallShape(method.upper(), path_only, "", "", "", (raw,), (raw,))
    api, preamble, messages = segments(obj)
    pre = [p.value if hasattr(p, "value") else p for p in preamble]  # tools come wrapped
    return CallShape(
        method.upper(), path_only, api, str(obj.get("model") or ""),
        _digest(_normalized(pre, loose=False)),
        tuple(_digest(_normalized(m, loose=False)) for m in messages),
        tuple(_digest(_normalized(m, loose=True)) for m in messages))
