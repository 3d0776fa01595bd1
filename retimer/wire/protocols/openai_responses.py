"""OpenAI Responses API streams (`POST .../responses`), also OpenRouter's and DeepSeek's.

Tokens arrive in `response.*.delta` events, each one string in `delta`: output text and
refusals (answer text), reasoning summaries and raw reasoning text (reasoning), and function
call / custom tool / code interpreter / MCP arguments (tool arguments). The `.done` events
repeat the whole text and pass unchanged, like every other event. OpenRouter sends no
`event:` lines and ends with `data: [DONE]`; AWS Bedrock puts `event:` after `data:`; early
2025 streams have no `sequence_number`. All of that is framing the base class keeps.

A split repeats the event with `delta` replaced. `logprobs` (one entry per token) goes whole
on the last piece and `[]` on the others; `obfuscation` (random padding hiding the length)
is kept on the last piece only.

Renumbering: `sequence_number` counts events, so after an event is split in k pieces every
later event needs its number raised by k - 1. The adapter keeps a running `shift` (pieces
inserted so far); events parsed once it is non-zero get it applied as they are classified.
Numbered events already handed out are kept until the next `feed()` (the pacer handles each
batch in order, splitting as it goes, before feeding more): when `split()` raises the shift,
the ones after the split event get their `raw` rewritten in place, before the pacer reads
it. Only the number's digits are rewritten (verified by re-parsing; otherwise the event is
re-serialised compactly), so every other byte is kept. Events before the first split, and
events without a number, are never touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape, text_field
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.sse_json import SSEJSONAdapter, dumps, posts_event_stream, request_path
from retimer.wire.sse import SSEEvent, SSEParser, format_event, is_event_stream

__all__ = ["OpenAIResponsesAdapter"]

_DELTA_CHANNELS: dict[str, Channel] = {
    "response.output_text.delta": Channel.TEXT,
    "response.refusal.delta": Channel.TEXT,
    "response.reasoning_summary_text.delta": Channel.REASONING,
    "response.reasoning_text.delta": Channel.REASONING,
    "response.function_call_arguments.delta": Channel.TOOL_ARGS,
    "response.custom_tool_call_input.delta": Channel.TOOL_ARGS,
    "response.code_interpreter_call_code.delta": Channel.TOOL_ARGS,
    "response.mcp_call_arguments.delta": Channel.TOOL_ARGS,
}
_LAST_ONLY = ("obfuscation",)  # dropped from every piece but the last
_SEQ = "sequence_number"
_RESUME_PATH = re.compile(r"/responses/resp_[A-Za-z0-9_-]+$")
_SEQ_RE = re.compile(rb'"sequence_number"(\s*:\s*)(\d+)')


@dataclass(slots=True)
class _Numbered:
    """An event carrying a sequence_number, as parsed: what renumbering needs."""

    event: Event
    sse: SSEEvent
    obj: dict[str, Any]
    seq: int  # the upstream number
    span: tuple[int, int] | None = None  # where its digits are in sse.raw, once verified
    checked: bool = False  # span has been looked for

    def shift(self, shift: int) -> None:
        """Rewrite the event's raw with its number raised by `shift`."""
        seq = self.seq + shift
        sse = self.sse
        if not self.checked:
            self.checked = True
            self.span = _digits_span(sse, {**self.obj, _SEQ: seq}, seq)
        if self.span is not None:
            a, b = self.span
            self.event.raw = sse.raw[:a] + str(seq).encode() + sse.raw[b:]
        else:
            body = dumps({**self.obj, _SEQ: seq})
            self.event.raw = sse.preamble + format_event(
                sse.event, body, sse.newline, event_id=sse.id, retry=sse.retry
            )
        self.event.upstream_size = len(sse.raw)  # the pacer's fail-open bookkeeping


class OpenAIResponsesAdapter(SSEJSONAdapter):
    """Adapter for the Responses API event stream; keeps `sequence_number` increasing."""

    name: ClassVar[str] = "openai-responses"

    def __init__(self) -> None:
        super().__init__()
        self._shift = 0  # extra pieces inserted so far by splits of numbered events
        self._pending: list[_Numbered] = []  # numbered events handed out, maybe not yet reached
        self._next_seq: int | None = None  # number of the next piece while splitting

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /responses (query allowed), or the GET that resumes a
        background response (`/responses/{id}?stream=true`), answered with an event stream."""
        if posts_event_stream(request, content_type, "/responses"):
            return True
        return (
            request.method.upper() == "GET"
            and _RESUME_PATH.search(request_path(request.path)) is not None
            and is_event_stream(content_type)
        )

    # -- parsing ---------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Event]:
        """Parse more bytes; the previous batch has been processed by now (pacer contract)."""
        self._pending.clear()
        return super().feed(data)

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        seq = _sequence_number(obj)
        event = Event(raw=sse.raw)
        if seq is not None:
            record = _Numbered(event, sse, obj, seq)
            self._pending.append(record)
            if self._shift:
                record.shift(self._shift)
        channel = _DELTA_CHANNELS.get(text_field(obj, "type"))
        text = obj.get("delta")
        if channel is not None and isinstance(text, str) and text:
            event.texts = ((channel, text),)
            event.payload = JSONTarget(sse, obj, ("delta",))
            event.atomic = "logprobs" in obj and not isinstance(obj["logprobs"], list)
        return event

    # -- splitting -------------------------------------------------------------------
    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        """Split as the base does, numbering the pieces from n + shift; then shift later events."""
        target: JSONTarget[SSEEvent] | None = event.payload
        seq = None if target is None else _sequence_number(target.obj)
        if seq is None or len(pieces) < 2:
            return super().split(event, pieces)
        self._next_seq = seq + self._shift
        try:
            out = super().split(event, pieces)
        finally:
            self._next_seq = None
        self._shift += len(pieces) - 1
        at = next((i for i, r in enumerate(self._pending) if r.event is event), None)
        if at is not None:
            del self._pending[: at + 1]  # the split event and those before it are out
        for later in self._pending:
            later.shift(self._shift)
        return out

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """The same event with `delta` replaced; logprobs and obfuscation on the last piece."""
        out: dict[str, Any] = {}
        for key, value in target.obj.items():
            if key == "delta":
                out[key] = piece
            elif key == _SEQ and self._next_seq is not None:
                out[key] = self._next_seq
                self._next_seq += 1
            elif key == "logprobs" and not last:
                out[key] = []
            elif key in _LAST_ONLY and not last:
                continue
            else:
                out[key] = value
        return out


def _sequence_number(obj: dict[str, Any]) -> int | None:
    """The event's upstream sequence_number, when it has a usable one."""
    seq = obj.get(_SEQ)
    return seq if type(seq) is int and seq >= 0 else None


def _digits_span(sse: SSEEvent, expected: dict[str, Any], seq: int) -> tuple[int, int] | None:
    """The span of the number's digits in sse.raw, if replacing them changes nothing else.

    Checked once by re-parsing the event with `seq` in place (any other digits then work as
    well); None means the event must be re-serialised instead.
    """
    matches = list(_SEQ_RE.finditer(sse.raw))
    if len(matches) != 1:
        return None
    a, b = matches[0].span(2)
    raw = sse.raw[:a] + str(seq).encode() + sse.raw[b:]
    return (a, b) if _same_event(raw, sse, expected) else None


def _same_event(raw: bytes, sse: SSEEvent, expected: dict[str, Any]) -> bool:
    """True when `raw` parses as one event like `sse` whose JSON equals `expected`."""
    parser = SSEParser()
    events = parser.feed(raw) + parser.end()
    if len(events) != 1:
        return False
    [ev] = events
    if (ev.event, ev.id, ev.retry, ev.comments, ev.complete) != (
        sse.event, sse.id, sse.retry, sse.comments, sse.complete
    ):
        return False
    try:
        return ev.data is not None and json.loads(ev.data) == expected
    except (ValueError, RecursionError):
        return False
