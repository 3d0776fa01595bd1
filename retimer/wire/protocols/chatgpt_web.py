"""ChatGPT web app streams (chatgpt.com / chat.openai.com `POST /backend-api/conversation`,
`/backend-api/f/conversation`; `/backend-anon/...` when logged out).

Two wire formats, told apart per stream:

delta_encoding v1 (an `event: delta_encoding` / `data: "v1"` header in newer captures; every
patch event is `event: delta`). Each event is a JSON-patch-like op {"p": path, "o": op,
"v": value, "c": message index}. A missing `p` or `o` is inherited from the previous delta
event, so a bare {"v": "..."} appends to the last path, and a bare {"v": [...]} after a
patch is another patch. A patch's items carry their own `p` (relative to the patch's `p`)
and `o`. `p: "", o: "add"` with a `message` starts a new message; the ops that follow apply
to it. Tokens are string appends to `/message/content/parts/N` or `/message/content/text`
(answer text; tool arguments when the message's recipient is a tool; reasoning when its
channel is "analysis") and to `/message/content/thoughts/N/content|summary` (reasoning).
Whole thoughts added at once, and a message added with its text already in it, are counted
but sent whole (atomic); a whole value that repeats text already counted at its place (the
same message id added again, a thought or the thought list replaced whole) counts only what
it adds to it. Typed events (`{"type": "title_generation", ...}`, markers,
metadata, the resume token) and `[DONE]` pass unchanged.

A split keeps the inherited state the client ends with exactly as the original left it:
- a plain append keeps its keys on the first piece; later pieces are bare {"v": piece},
  which inherit that path and `append`, as does whatever bare event follows;
- a patch batch with one text append becomes several patches with the original's top-level
  keys (so its `p`/`o` state is unchanged): ops before the append go on the first piece,
  ops after it (status, end_turn, metadata) on the last.
Pieces are compact JSON; the upstream's trailing-space padding and ", " separators stay on
every event that is not split.

Legacy cumulative (2023-2024, no event names): each event is the whole message object with
`parts[0]` = all text so far. An event's tokens are the new suffix relative to the previous
event of the same message id (all of it for a message's first event). A split emits the same
object with `parts[0]` cut after each piece; the last piece is the original event verbatim.
A text that is not an extension of the previous one counts its differing tail but is sent
whole, as is a finished message's event (a client may stop at the first finished event).
Full message frames inside a v1 stream pass unchanged (their text was counted from patches).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape, check_split
from retimer.wire.protocols.jsontarget import JSONPath, JSONTarget
from retimer.wire.protocols.sse_json import SSEJSONAdapter, dumps, posts_event_stream
from retimer.wire.sse import SSEEvent, format_event

__all__ = ["ChatGPTWebAdapter"]

_PATHS = (
    "/backend-api/conversation",
    "/backend-api/f/conversation",
    "/backend-anon/conversation",
    "/backend-anon/f/conversation",
)
_TEXT_PATH = re.compile(r"/message/content/(?:parts/\d+|text)\Z")
_THOUGHT_FIELD = re.compile(r"/message/content/thoughts/\d+/(?:content|summary)\Z")
_THOUGHT_ITEM = re.compile(r"/message/content/thoughts/\d+\Z")
_THOUGHTS = "/message/content/thoughts"
_EVENT_KEYS = frozenset({"p", "o", "v", "c"})  # a splittable event has no other keys
_ITEM_KEYS = frozenset({"p", "o", "v"})  # nor a splittable patch item
_DELTA_KEYS = frozenset({"p", "o", "v"})  # an untyped object with any of them is a delta
# a legacy split repeats the text so far in every piece: an event whose new text's length
# times its size passes this is sent whole (a 64 KB jump would otherwise become ~130 MB)
_MAX_SPLIT_OUTPUT = 32 << 20
_CONTEXT_OPS = {"/message/recipient": "recipient", "/message/channel": "channel",
                "/message/content/content_type": "content_type"}


@dataclass(slots=True)
class _Message:
    """What the message being patched is, which decides the channel of its text."""

    role: Any = "assistant"  # before any message is seen (an excerpt): assume the answer
    recipient: Any = "all"
    channel: Any = None
    content_type: Any = "text"
    key: Any = None  # its id (hashable), under which the text counted at each place is kept
    thoughts: int = 0  # how many thoughts it has

    @classmethod
    def of(cls, message: dict[str, Any]) -> _Message:
        author = message.get("author")
        content = message.get("content")
        key = message.get("id")
        return cls(
            role=author.get("role") if isinstance(author, dict) else None,
            recipient=message.get("recipient"),
            channel=message.get("channel"),
            content_type=content.get("content_type") if isinstance(content, dict) else None,
            key=key if isinstance(key, str) else object(),
        )

    def text_channel(self) -> Channel | None:
        """The channel of this message's text; None for what the model did not write."""
        if self.role != "assistant":
            return None  # system and user echoes, tool output
        if self.recipient not in ("all", None):
            return Channel.TOOL_ARGS  # code or a query addressed to a tool
        if self.content_type == "thoughts" or self.channel == "analysis":
            return Channel.REASONING
        return Channel.TEXT


@dataclass(slots=True, frozen=True)
class _Hit:
    """One token-bearing string an op carries; `item` is its index in a patch batch."""

    channel: Channel
    text: str
    item: int | None
    splittable: bool


@dataclass(slots=True, frozen=True)
class _Cumulative:
    """The frame of a legacy full-message event, and the text its message had before it."""

    sse: SSEEvent
    prefix: str


# Split targets: a v1 append is JSONTarget[SSEEvent] at ("v",) (the op itself) or
# ("v", item, "v") (item `item` of a patch); a legacy event is JSONTarget[_Cumulative] at
# ("message", "content", "parts", 0).
_LEGACY_TEXT: JSONPath = ("message", "content", "parts", 0)


class ChatGPTWebAdapter(SSEJSONAdapter):
    """Adapter for the ChatGPT web app's conversation stream (v1 deltas or legacy frames)."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "chatgpt-web"

    def __init__(self) -> None:
        super().__init__()
        self._v1 = False  # seen the delta_encoding header or a delta event
        self._path: Any = None  # inherited `p` and `o` of v1 deltas
        self._op: Any = None
        self._message = _Message()  # the message v1 ops apply to
        self._texts: dict[Any, str] = {}  # legacy: last parts[0] per message id
        self._counted: dict[tuple[Any, str], str] = {}  # v1: (message, place) -> text counted there

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to the web app's conversation path (query allowed), answered with SSE."""
        return posts_event_stream(request, content_type, _PATHS)

    # -- parsing ---------------------------------------------------------------------
    def _event(self, sse: SSEEvent) -> Event:
        """Note the v1 header (its data is a JSON string, not an object) before decoding."""
        if sse.complete and sse.event in ("delta_encoding", "delta"):
            self._v1 = True
        return super()._event(sse)

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        if sse.event == "delta" or (
            sse.event is None and "type" not in obj and "message" not in obj
            and not _DELTA_KEYS.isdisjoint(obj)
        ):
            self._v1 = True
            return self._delta(sse, obj)
        message = obj.get("message")
        if not self._v1 and isinstance(message, dict) and "v" not in obj:
            return self._frame(sse, obj, message)
        return Event(raw=sse.raw)

    def _delta(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        """Apply one v1 op (with inheritance) to the state; its strings are the tokens."""
        if "p" in obj:
            self._path = obj["p"]
        if "o" in obj:
            self._op = obj["o"]
        path, op, value = self._path, self._op, obj.get("v")
        hits: list[_Hit] = []
        if op == "patch" and isinstance(value, list):
            base = path if isinstance(path, str) else ""
            for i, item in enumerate(value):
                if isinstance(item, dict) and isinstance(item.get("p"), str):
                    self._op_apply(base + item["p"], item.get("o"), item.get("v"), hits, i)
        else:
            self._op_apply(path, op, value, hits, None)
        if not hits:
            return Event(raw=sse.raw)
        texts = tuple((h.channel, h.text) for h in hits)
        [first, *rest] = hits
        if rest or not first.splittable or not _EVENT_KEYS.issuperset(obj) or (
            first.item is not None and not _ITEM_KEYS.issuperset(value[first.item])  # type: ignore[index]
        ):
            return Event(raw=sse.raw, texts=texts, atomic=True)
        where: JSONPath = ("v",) if first.item is None else ("v", first.item, "v")
        return Event(raw=sse.raw, texts=texts, payload=JSONTarget(sse, obj, where))

    def _op_apply(self, path: Any, op: Any, value: Any, hits: list[_Hit], item: int | None) -> None:
        """Follow one op: track the message it patches, collect the text it adds."""
        if (path in ("", None) and op in ("add", None) and isinstance(value, dict)
                and isinstance(value.get("message"), dict)):
            self._start(value["message"], hits, item)
        elif path == "/message" and op in ("add", "replace") and isinstance(value, dict):
            self._start(value, hits, item)
        elif not isinstance(path, str):
            return
        elif path in _CONTEXT_OPS and op in ("add", "replace"):
            setattr(self._message, _CONTEXT_OPS[path], value)
        elif op == "append" and isinstance(value, str) and value:
            if _THOUGHT_FIELD.match(path):
                hits.append(_Hit(Channel.REASONING, value, item, True))
            elif _TEXT_PATH.match(path) and (channel := self._message.text_channel()):
                hits.append(_Hit(channel, value, item, True))
            else:
                return
            place = (self._message.key, path[len("/message/content/"):])
            self._counted[place] = self._counted.get(place, "") + value
        elif op in ("add", "append", "replace") and path == _THOUGHTS and isinstance(value, list):
            first = self._message.thoughts if op == "append" else 0
            self._thought_hits(value, first, hits, item)
        elif op in ("add", "append", "replace") and _THOUGHT_ITEM.match(path) and isinstance(value, dict):
            self._thought_hits([value], int(path.rsplit("/", 1)[1]), hits, item)

    def _whole(self, place: str, text: str) -> str:
        """What a whole value at `place` of the current message adds to the text counted there."""
        key = (self._message.key, place)
        prev = self._counted.get(key, "")
        self._counted[key] = text
        return text[len(os.path.commonprefix([prev, text])):]

    def _thought_hits(self, thoughts: list[Any], first: int, hits: list[_Hit], item: int | None) -> None:
        """Reasoning delivered whole: what each thought's summary and content add."""
        for i, thought in enumerate(thoughts, first):
            if isinstance(thought, dict):
                for field in ("summary", "content"):
                    text = thought.get(field)
                    if isinstance(text, str) and text and (new := self._whole(f"thoughts/{i}/{field}", text)):
                        hits.append(_Hit(Channel.REASONING, new, item, False))
        self._message.thoughts = max(self._message.thoughts, first + len(thoughts))

    def _start(self, message: dict[str, Any], hits: list[_Hit], item: int | None) -> None:
        """A new message: later ops patch it; text it already holds arrives whole."""
        self._message = _Message.of(message)
        content = message.get("content")
        if not isinstance(content, dict):
            return
        parts = content.get("parts")
        channel = self._message.text_channel()
        if channel is not None and isinstance(parts, list):
            for i, part in enumerate(parts):
                if isinstance(part, str) and part and (new := self._whole(f"parts/{i}", part)):
                    hits.append(_Hit(channel, new, item, False))
        if self._message.role == "assistant" and isinstance(content.get("thoughts"), list):
            self._thought_hits(content["thoughts"], 0, hits, item)

    def _frame(self, sse: SSEEvent, obj: dict[str, Any], message: dict[str, Any]) -> Event:
        """A legacy cumulative event: its tokens are what it adds to the message's text."""
        content = message.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list) or not parts or not isinstance(parts[0], str):
            return Event(raw=sse.raw)
        key = message.get("id")
        key = key if isinstance(key, str) else None
        text = parts[0]
        prev = self._texts.get(key, "")  # nothing yet: the first event of the message
        self._texts[key] = text
        channel = _Message.of(message).text_channel()
        if channel is None:
            return Event(raw=sse.raw)
        extends = text.startswith(prev)
        new = text[len(prev) if extends else len(os.path.commonprefix([prev, text])):]
        if not new:
            return Event(raw=sse.raw)
        if (not extends or message.get("status") not in ("in_progress", None)
                or len(new) * len(sse.raw) > _MAX_SPLIT_OUTPUT):
            return Event(raw=sse.raw, texts=((channel, new),), atomic=True)
        target = JSONTarget(_Cumulative(sse, prev), obj, _LEGACY_TEXT)
        return Event(raw=sse.raw, texts=((channel, new),), payload=target)

    # -- splitting -------------------------------------------------------------------
    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        target = event.payload
        if target is None or not isinstance(target.frame, _Cumulative):
            return super().split(event, pieces)
        check_split(event, pieces)
        if len(pieces) == 1:
            return [event.raw]
        sse = target.frame.sse
        out: list[bytes] = []
        text = target.frame.prefix
        for piece in pieces[:-1]:
            text += piece
            out.append(format_event(sse.event, dumps(target.with_text(text)), sse.newline))
        out[0] = sse.preamble + out[0]
        out.append(sse.raw[sse.body_start:])  # the full text: the original event, verbatim
        return out

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """See the module docstring: the state the client inherits must stay the same."""
        obj = target.obj
        if len(target.path) == 1:
            return target.with_text(piece) if first else {"v": piece}
        items: list[Any] = obj["v"]
        i = target.path[1]
        assert isinstance(i, int)
        op = {**items[i], "v": piece}
        return {**obj, "v": [*(items[:i] if first else ()), op, *(items[i + 1:] if last else ())]}

