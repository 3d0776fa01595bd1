"""Ollama's native streaming API: NDJSON from `POST /api/chat` and `POST /api/generate`.

One JSON object per line (`application/x-ndjson`), the last one `done: true` with the stop
reason and timing stats (and, for /api/generate, the `context` token array); Ollama leaves
the last line without its newline. Tokens: `/api/chat` `message.content` (answer text),
`message.thinking` (reasoning) and `message.tool_calls` (whole calls, counted as tool
arguments, never split); `/api/generate` `response` and `thinking`. Error lines
(`{"error": ...}`) and anything that is not a JSON object pass unchanged.

A split repeats the line with the string replaced. The final-only fields (`done_reason`, the
stats, `context`, `logprobs`) go on the last piece, and every other piece says `done: false`.
Pieces are compact JSON lines ending like the original line (the last piece of an
unterminated final line stays unterminated, as Ollama sends it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from retimer.wire.ndjson import NDJSONLine, NDJSONParser, is_ndjson
from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape, check_split
from retimer.wire.protocols.jsontarget import JSONTarget, replaced
from retimer.wire.protocols.jsontext import MalformedJSON
from retimer.wire.protocols.sse_json import dumps, request_path

__all__ = ["OllamaAdapter"]

_PATHS = ("/api/chat", "/api/generate")

# Fields that describe the whole response (or the tokens of this line) and must appear once.
_FINAL_ONLY = frozenset({
    "done_reason",
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
    "context",
    "logprobs",
})


class OllamaAdapter(Adapter):
    """Adapter for Ollama's /api/chat and /api/generate NDJSON streams."""

    name: ClassVar[str] = "ollama"

    def __init__(self) -> None:
        self._parser = NDJSONParser()

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /api/chat or /api/generate, answered with NDJSON."""
        return (
            request.method.upper() == "POST"
            and request_path(request.path).endswith(_PATHS)
            and is_ndjson(content_type)
        )

    def feed(self, data: bytes) -> list[Event]:
        return [self._event(line) for line in self._parser.feed(data)]

    def end(self) -> list[Event]:
        """The unterminated last line is a whole object in Ollama streams: parse it too."""
        return [self._event(line) for line in self._parser.end()]

    def _event(self, line: NDJSONLine) -> Event:
        if line.text is None or not line.text.strip():
            return Event(raw=line.raw)
        try:
            obj = jsontext.loads(line.text.lstrip("\ufeff"))
        except MalformedJSON:
            self._note("a line that is not JSON")
            return Event(raw=line.raw)
        if not isinstance(obj, dict):
            return Event(raw=line.raw)
        if "error" in obj:
            self._api_error = True
            return Event(raw=line.raw)
        message = obj.get("message")
        if isinstance(message, dict):
            source, in_message = message, True
            fields = (("thinking", Channel.REASONING), ("content", Channel.TEXT))
        else:
            source, in_message = obj, False
            fields = (("thinking", Channel.REASONING), ("response", Channel.TEXT))
        texts: list[tuple[Channel, str]] = []
        keys: list[str] = []
        for key, channel in fields:
            value = source.get(key)
            if isinstance(value, str) and value:
                texts.append((channel, value))
                keys.append(key)
        tool_args = _tool_args(message.get("tool_calls")) if isinstance(message, dict) else ""
        if tool_args:
            texts.append((Channel.TOOL_ARGS, tool_args))
            return Event(raw=line.raw, texts=tuple(texts), atomic=True)
        if len(texts) != 1:
            return Event(raw=line.raw, texts=tuple(texts))
        # the frame is the line's ending; the string is in message (chat) or at the top (generate)
        target = JSONTarget(line.newline, obj, ("message", keys[0]) if in_message else (keys[0],))
        return Event(raw=line.raw, texts=tuple(texts), payload=target)

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        check_split(event, pieces)
        target: JSONTarget[str] = event.payload
        if len(pieces) == 1:
            return [event.raw]
        last = len(pieces) - 1
        between = target.frame or "\n"
        out: list[bytes] = []
        for i, piece in enumerate(pieces):
            obj = _piece(target, piece, last=i == last)
            newline = target.frame if i == last else between
            out.append((dumps(obj) + newline).encode("utf-8"))
        return out


def _piece(target: JSONTarget[str], piece: str, *, last: bool) -> dict[str, Any]:
    """The line's object with its string replaced; final-only fields on the last piece."""
    obj = target.obj
    if not last:
        obj = {k: v for k, v in obj.items() if k not in _FINAL_ONLY}
        if "done" in obj:
            obj["done"] = False
    out: dict[str, Any] = replaced(obj, target.path, piece)
    return out


def _tool_args(calls: Any) -> str:
    """The tool calls of a line as one string to count: each call's name and arguments."""
    if not isinstance(calls, list):
        return ""
    parts: list[str] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        args = function.get("arguments")
        if isinstance(name, str):
            parts.append(name)
        if args is not None:
            parts.append(args if isinstance(args, str) else dumps(args))
    return "".join(parts)
