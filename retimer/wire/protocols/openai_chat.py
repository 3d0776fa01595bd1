"""OpenAI Chat Completions streams, and every OpenAI-compatible server's.

One adapter covers OpenAI, Azure, Groq, OpenRouter, DeepSeek, Z.ai, Mistral, vLLM, TGI and
the rest: they share `data: {chat.completion.chunk}` framing and differ in extra fields,
which are carried along untouched. Token strings live in `choices[*].delta`:
`content` and `refusal` (answer text), `reasoning_content` / `reasoning` (reasoning), and
`tool_calls[*].function.arguments` (tool arguments).

Some providers repeat one string on several fields (OpenRouter: `reasoning` and
`reasoning_details[*].text`; some vLLM versions: `reasoning` and `reasoning_content`). Such a
mirror is counted once, and a split replaces it in every place, so a client reading either
field sees the same text.

A delta that repeats all the text counted at its place (a choice's content, refusal or
reasoning, a tool call's arguments) and goes on, as cumulative gateways send, or the whole
answer again in a last chunk, counts only what it adds and is sent whole (see repeats.py).

A split keeps what a client needs once where it expects it: the first piece keeps the whole
original delta (role, tool call id/type/name, ...), the pieces after it carry only the text,
and the last piece carries finish_reason, logprobs, usage and the choice's other fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape, text_field
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.repeats import SoFar
from retimer.wire.protocols.sse_json import SSEJSONAdapter, posts_event_stream
from retimer.wire.sse import SSEEvent

__all__ = ["NULL_UNTIL_LAST", "OpenAIChatAdapter", "item_index"]

_DELTA_TEXT_FIELDS: dict[str, Channel] = {
    "content": Channel.TEXT,
    "refusal": Channel.TEXT,
    "reasoning_content": Channel.REASONING,
    "reasoning": Channel.REASONING,
}
_REASONING_FIELDS = ("reasoning", "reasoning_content")
_DETAIL_TEXT_FIELDS = {"reasoning.text": "text", "reasoning.summary": "summary"}
# Choice fields that say "this is where the choice ends"; null on every piece but the last.
NULL_UNTIL_LAST = frozenset(
    {"finish_reason", "logprobs", "native_finish_reason", "stop_reason", "matched_stop"}
)
_MAX_LIST_DEPTH = 8


# A chunk's split target (a JSONTarget) has one of two paths: ("choices", choice position,
# "delta", key) for a delta string, or ("choices", choice, "delta", "tool_calls", call position,
# "function", "arguments"); its mirrors are ("choices", choice, "delta", other key) and at most
# one ("choices", choice, "delta", "reasoning_details", entry position, "text" or "summary").
Target = JSONTarget[SSEEvent]


@dataclass(slots=True)
class _Scan:
    """What classifying one chunk found."""

    texts: list[tuple[Channel, str]]
    seen: SoFar | None = None  # the stream's text so far, for repeats
    target: Target | None = None
    atomic: bool = False

    def add(self, place: tuple[Any, ...], channel: Channel, text: str) -> None:
        """Count `text` at `place`, or what it adds when it repeats the text counted there."""
        if self.seen is not None:
            text, again = self.seen.new(place, text)
            self.atomic = self.atomic or again
        if text:
            self.texts.append((channel, text))


class OpenAIChatAdapter(SSEJSONAdapter):
    """Adapter for `POST .../chat/completions` with `stream: true`."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "openai-chat"

    def __init__(self) -> None:
        super().__init__()
        self._seen = SoFar()

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /chat/completions, answered with an event stream."""
        return posts_event_stream(request, content_type, "/chat/completions")

    def piece(self, target: Target, piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """See the module docstring for what goes on the first and the last piece."""
        return _piece(target, piece, first=first, last=last)

    # -- classification --------------------------------------------------------------
    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        scan = _scan_chunk(sse, obj, self._seen)
        if not scan.texts:
            return Event(raw=sse.raw)
        atomic = scan.atomic or scan.target is None or obj.get("error") is not None
        return Event(raw=sse.raw, texts=tuple(scan.texts), payload=scan.target, atomic=atomic)


def _scan_chunk(sse: SSEEvent, obj: dict[str, Any], seen: SoFar | None = None) -> _Scan:
    """Collect every token string of a chunk; remember the location of the last one."""
    scan = _Scan(texts=[], seen=seen)
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return scan
    for ci, choice in enumerate(choices):
        if isinstance(choice, dict) and isinstance(delta := choice.get("delta"), dict):
            _scan_delta(sse, obj, ci, delta, scan)
    return scan


def _scan_delta(sse: SSEEvent, obj: dict[str, Any], ci: int, delta: dict[str, Any], scan: _Scan) -> None:
    """Scan one choice's delta, counting mirrored strings once."""
    reasoning_mirrors = _reasoning_mirror(delta)
    choice = item_index(obj["choices"][ci], ci)
    for key, value in delta.items():
        channel = _DELTA_TEXT_FIELDS.get(key)
        if channel is not None:
            if isinstance(value, str):
                if value and key not in reasoning_mirrors[1:]:
                    place = "reasoning" if key in _REASONING_FIELDS else key
                    scan.add((choice, place), channel, value)
                    mirrors = reasoning_mirrors[1:] if key in reasoning_mirrors else ()
                    scan.target = JSONTarget(sse, obj, ("choices", ci, "delta", key),
                                             tuple(("choices", ci, "delta", m) for m in mirrors))
            elif isinstance(value, list):  # Mistral: typed content chunks
                found = list(_list_texts(value, channel, 0))
                if found:
                    scan.texts.extend(found)
                    scan.atomic = True
        elif key == "tool_calls" and isinstance(value, list):
            for ti, call in enumerate(value):
                fn = call.get("function") if isinstance(call, dict) else None
                args = fn.get("arguments") if isinstance(fn, dict) else None
                if isinstance(args, str) and args:
                    scan.add((choice, "tool", item_index(call, ti)), Channel.TOOL_ARGS, args)
                    scan.target = JSONTarget(sse, obj, ("choices", ci, "delta", key, ti, "function", "arguments"))
                    if not isinstance(call.get("index"), int):
                        scan.atomic = True  # no index: clients cannot merge continuation pieces
    details = delta.get("reasoning_details")
    if isinstance(details, list):
        _scan_details(ci, details, delta, scan)


def item_index(item: dict[str, Any], position: int) -> int:
    """The `index` an item names (a choice, a tool call), else its position."""
    index = item.get("index")
    return index if type(index) is int else position


def _reasoning_mirror(delta: dict[str, Any]) -> tuple[str, ...]:
    """Keys among reasoning/reasoning_content holding one same non-empty string, in key order."""
    first = delta.get("reasoning")
    if isinstance(first, str) and first and first == delta.get("reasoning_content"):
        return tuple(k for k in delta if k in _REASONING_FIELDS)
    return ()


def _scan_details(ci: int, details: list[Any], delta: dict[str, Any], scan: _Scan) -> None:
    """OpenRouter reasoning_details: a mirror of `reasoning` is not counted twice."""
    target = scan.target
    primary = None
    if target is not None and target.path[1] == ci and target.path[3] in _REASONING_FIELDS:
        primary = delta.get(target.path[3])
    for di, entry in enumerate(details):
        if not isinstance(entry, dict):
            continue
        fname = _DETAIL_TEXT_FIELDS.get(text_field(entry, "type"))
        text = entry.get(fname) if fname else None
        if not isinstance(text, str) or not text:
            continue
        if target is not None and text == primary and _detail(target) is None:
            mirror = ("choices", ci, "delta", "reasoning_details", di, fname or "text")
            target = scan.target = replace(target, mirrors=(*target.mirrors, mirror))
        else:
            scan.texts.append((Channel.REASONING, text))
            scan.atomic = True


def _list_texts(items: list[Any], channel: Channel, depth: int) -> list[tuple[Channel, str]]:
    """Text inside typed content chunks; a "thinking" chunk's text is reasoning."""
    found: list[tuple[Channel, str]] = []
    if depth > _MAX_LIST_DEPTH:
        return found
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text" and isinstance(text := item.get("text"), str) and text:
            found.append((channel, text))
        elif kind == "thinking":
            inner = item.get("thinking")
            if isinstance(inner, str) and inner:
                found.append((Channel.REASONING, inner))
            elif isinstance(inner, list):
                found.extend(_list_texts(inner, Channel.REASONING, depth + 1))
    return found


# -- splitting ---------------------------------------------------------------------------
def _detail(t: Target) -> tuple[int, str] | None:
    """The reasoning_details entry mirroring the target's string, and its text field."""
    for mirror in t.mirrors:
        if len(mirror) == 6:
            return mirror[4], mirror[5]  # type: ignore[return-value]
    return None


def _piece(t: Target, piece: str, *, first: bool, last: bool) -> dict[str, Any]:
    """The chunk object for one piece; top-level fields are copied, usage goes last."""
    target_choice = t.path[1]
    out: dict[str, Any] = {}
    for key, value in t.obj.items():
        if key == "choices":
            out[key] = [
                _choice(t, choice, piece, first=first, last=last) if ci == target_choice else choice
                for ci, choice in enumerate(value)
                if ci == target_choice or last
            ]
        elif key == "usage" and not last:
            out[key] = None
        else:
            out[key] = value
    return out


def _choice(t: Target, choice: dict[str, Any], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
    """One choice: its end-of-choice fields only on the last piece."""
    out: dict[str, Any] = {}
    for key, value in choice.items():
        if key == "delta":
            out[key] = _delta(t, value, piece, first=first)
        elif key == "index" or last:
            out[key] = value
        elif key in NULL_UNTIL_LAST or value is None:
            out[key] = None
        # other fields (content_filter_results, token_ids, ...) wait for the last piece
    return out


def _delta(t: Target, delta: dict[str, Any], piece: str, *, first: bool) -> dict[str, Any]:
    """The first piece keeps the whole delta; later ones carry the text (and its mirrors)."""
    mirror_keys = {m[3] for m in t.mirrors if len(m) == 4}
    detail = _detail(t)
    out: dict[str, Any] = {}
    for key, value in delta.items():
        if key == t.path[3]:
            out[key] = _tool_calls(t, value, piece, first=first) if key == "tool_calls" else piece
        elif key in mirror_keys:
            out[key] = piece
        elif key == "reasoning_details" and detail is not None:
            out[key] = _details(detail, value, piece, first=first)
        elif first:
            out[key] = value
    return out


def _tool_calls(t: Target, calls: list[Any], piece: str, *, first: bool) -> list[Any]:
    """Tool call list: later pieces carry only `{"index", "function": {"arguments"}}`."""
    tool = t.path[4]
    assert isinstance(tool, int)
    call = calls[tool]
    if not first:
        return [{"index": call["index"], "function": {"arguments": piece}}]
    new_call = dict(call)
    new_call["function"] = {**call["function"], "arguments": piece}
    out = list(calls)
    out[tool] = new_call
    return out


def _details(detail: tuple[int, str], details: list[Any], piece: str, *, first: bool) -> list[Any]:
    """reasoning_details: the mirrored entry gets the piece; its signature stays on the first."""
    position, field = detail
    entry = details[position]
    if not first:
        return [{k: (piece if k == field else v) for k, v in entry.items() if k != "signature"}]
    out = list(details)
    out[position] = {**entry, field: piece}
    return out
