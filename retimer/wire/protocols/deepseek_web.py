"""DeepSeek web app streams (chat.deepseek.com `POST /api/v0/chat/completion`).

The stream edits one JSON document, the response, with patch events. Named events (ready,
update_session, title, close, finish, ...) are side information and pass unchanged. Unnamed
`data:` events are patches `{"p": path, "o": op, "v": value}`:

- `p` and `o` are sticky: a patch without them reuses the last ones given. So after
  `{"p":"response/fragments/-1/content","o":"APPEND","v":"，"}` a bare `{"v":"用户"}` appends
  to the same content, and `{"p":".../content","v":"！"}` right after an APPEND of fragments
  is an APPEND too (the capture shows it continuing "你好" into "你好！").
- No `p` ever given means the root: the first patch `{"v":{"response":{...}}}` sets the
  whole document. No `o` ever given means SET, except a string on a content path (APPEND).
- `BATCH` applies a list of sub-patches whose paths are relative to `p` (SET unless they say
  otherwise), e.g. `{"p":"response","o":"BATCH","v":[{"p":"fragments","o":"APPEND",...}]}`.
- Text lives in `response.fragments[i].content`; a fragment's `type` says what it is:
  THINK (reasoning) or RESPONSE (answer). A content path names its fragment by position, and
  `-1` means the last fragment *when the patch is applied*, not when the path was first
  given: once a SET, an APPEND to `response/fragments` or a BATCH adds a fragment, a patch on
  `response/fragments/-1/content` goes to the new one. Older streams used the paths
  `response/thinking_content` (reasoning) and `response/content` (answer) instead.

The adapter keeps a skeleton of the document (appended strings are not stored, only the
structure and fragment types) to know which fragment, and so which channel, every string
goes to. A plain string APPEND to a content path (explicit or bare) can be split: the first
piece is the original patch with `v` cut, the others bare `{"v": piece}`, which apply to the
same path with the same op because both are sticky, and leave the sticky state as the
original did. Text arriving inside a snapshot, a new fragment or a BATCH is counted but
atomic, and so is a patch with fields besides p/o/v. SET on a content path replaces text
instead of adding it: it is not counted. A snapshot or fragment that brings a fragment (by
id) or a legacy field whose text was counted already counts only what it adds to it.
Unknown fragment types carry no tokens.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.sse_json import SSEJSONAdapter, posts_event_stream
from retimer.wire.sse import SSEEvent

__all__ = ["DeepSeekWebAdapter"]

# Endpoints answering with this stream for a new answer: a new message, an edited one. Not
# /api/v0/chat/continue: its first snapshot may hold the text already shown, which would be
# paced as if new (no capture to check it against).
_PATHS = ("/api/v0/chat/completion", "/api/v0/chat/edit_message")
_PATCH_KEYS = frozenset({"p", "o", "v"})
_FRAGMENT_CHANNELS: dict[str, Channel] = {"THINK": Channel.REASONING, "RESPONSE": Channel.TEXT}
_LEGACY_PATHS: dict[tuple[str, ...], Channel] = {
    ("response", "thinking_content"): Channel.REASONING,
    ("response", "content"): Channel.TEXT,
}
_APPEND, _SET, _BATCH = "APPEND", "SET", "BATCH"
_INDEX = re.compile(r"-?\d+")
_MAX_DEPTH = 8

Texts = list[tuple[Channel, str]]


class DeepSeekWebAdapter(SSEJSONAdapter):
    """Adapter for the DeepSeek web app's patch stream; tracks sticky path/op and fragments."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "deepseek-web"

    def __init__(self) -> None:
        super().__init__()
        self._doc: Any = None  # skeleton of the response document
        self._path: str | None = None  # sticky path (None: root)
        self._op: str | None = None  # sticky op (None: none given yet)
        self._counted: dict[Any, str] = {}  # fragment id (or legacy field) -> text counted for it

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to /api/v0/chat/completion (or edit_message), answered with SSE."""
        return posts_event_stream(request, content_type, _PATHS)

    # -- classification -----------------------------------------------------------------
    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        p, o = obj.get("p"), obj.get("o")
        if sse.event not in (None, "message") or "v" not in obj:
            return Event(raw=sse.raw)
        if (p is not None and not isinstance(p, str)) or (o is not None and not isinstance(o, str)):
            return Event(raw=sse.raw)
        if p is not None:
            self._path = p
        if o is not None:
            self._op = o
        segs = _segments(self._path)
        value = obj["v"]
        op = self._effective_op(segs, self._op, value)
        channel = self._content_channel(segs) if op == _APPEND and isinstance(value, str) else None
        texts = self._apply(segs, op, value, 0)
        if not texts:
            return Event(raw=sse.raw)
        if channel is not None and obj.keys() <= _PATCH_KEYS:
            return Event(raw=sse.raw, texts=((channel, value),), payload=JSONTarget(sse, obj, ("v",)))
        return Event(raw=sse.raw, texts=tuple(texts), atomic=True)

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """The original patch on the first piece; bare `{"v": ...}` (sticky path/op) after it."""
        return target.with_text(piece) if first else {"v": piece}

    # -- the document skeleton ----------------------------------------------------------
    def _effective_op(self, segs: list[str], op: str | None, value: Any) -> str:
        """The op in force: the given/sticky one, else APPEND for text on a content path."""
        if op is not None:
            return op
        if isinstance(value, str) and self._content_channel(segs) is not None:
            return _APPEND
        return _SET

    def _content_channel(self, segs: list[str]) -> Channel | None:
        """The channel of the text at `segs`, if it is a known content path."""
        legacy = _LEGACY_PATHS.get(tuple(segs))
        if legacy is not None:
            return legacy
        if len(segs) == 4 and segs[:2] == ["response", "fragments"] and segs[3] == "content":
            fragment = _resolve(self._doc, segs[:3])
            if isinstance(fragment, dict):
                return _fragment_channel(fragment)
        return None

    def _apply(self, segs: list[str], op: str, value: Any, depth: int) -> Texts:
        """Apply one patch to the skeleton; return the token texts it adds, in order."""
        if op == _BATCH:
            if not isinstance(value, list) or depth >= _MAX_DEPTH:
                return []
            out: Texts = []
            for sub in value:
                if not isinstance(sub, dict) or "v" not in sub:
                    continue
                sub_p, sub_o = sub.get("p", ""), sub.get("o")
                if not isinstance(sub_p, str) or (sub_o is not None and not isinstance(sub_o, str)):
                    continue
                sub_segs = segs + _segments(sub_p)
                sub_op = self._effective_op(sub_segs, sub_o, sub["v"])
                out += self._apply(sub_segs, sub_op, sub["v"], depth + 1)
            return out
        if op == _APPEND:
            if isinstance(value, str):
                channel = self._content_channel(segs)
                if channel is None or not value:
                    return []
                key = _text_key(self._doc, segs)
                self._counted[key] = self._counted.get(key, "") + value
                return [(channel, value)]
            target = _resolve(self._doc, segs)
            if not isinstance(target, list):
                return []
            items = value if isinstance(value, list) else [value]
            target.extend(copy.deepcopy(items))
            return self._new(_inserted_texts(segs, items)) if _is_fragments(segs) else []
        if op == _SET:
            texts = self._new(_inserted_texts(segs, value))
            self._set(segs, value)
            return texts
        return []  # an op this adapter does not know: the text it may carry is not counted

    def _new(self, found: list[tuple[Any, Channel, str]]) -> Texts:
        """What whole texts add to the text counted for their fragment (or legacy field)."""
        out: Texts = []
        for key, channel, text in found:
            prev = self._counted.get(key, "") if key is not None else ""
            if key is not None:
                self._counted[key] = text
            new = text[len(os.path.commonprefix([prev, text])):]
            if new:
                out.append((channel, new))
        return out

    def _set(self, segs: list[str], value: Any) -> None:
        """Store `value` at `segs` (strings and all: a SET is one-off, unlike APPENDs)."""
        if not segs:
            self._doc = copy.deepcopy(value)
            return
        parent = _resolve(self._doc, segs[:-1])
        key = segs[-1]
        if isinstance(parent, dict):
            parent[key] = copy.deepcopy(value)
        elif isinstance(parent, list):
            index = _list_index(parent, key)
            if index is not None:
                parent[index] = copy.deepcopy(value)


def _segments(path: str | None) -> list[str]:
    return path.split("/") if path else []


def _list_index(items: list[Any], seg: str) -> int | None:
    """A list position from a path segment; negative counts from the end."""
    if not _INDEX.fullmatch(seg):
        return None
    index = int(seg)
    if index < 0:
        index += len(items)
    return index if 0 <= index < len(items) else None


def _resolve(doc: Any, segs: list[str]) -> Any:
    """The node at `segs`, or None when the path does not exist."""
    node = doc
    for seg in segs:
        if isinstance(node, dict):
            node = node.get(seg)
        elif isinstance(node, list):
            index = _list_index(node, seg)
            if index is None:
                return None
            node = node[index]
        else:
            return None
    return node


def _is_fragments(segs: list[str]) -> bool:
    return segs == ["response", "fragments"]


def _fragment_channel(fragment: dict[str, Any]) -> Channel | None:
    kind = fragment.get("type")
    return _FRAGMENT_CHANNELS.get(kind.upper()) if isinstance(kind, str) else None


Found = list[tuple[Any, Channel, str]]  # (fragment id or legacy field, channel, whole text)


def _text_key(doc: Any, segs: list[str]) -> Any:
    """Whose text a content path holds: its fragment's id, or the legacy field's name."""
    if tuple(segs) in _LEGACY_PATHS:
        return segs[-1]
    fragment = _resolve(doc, segs[:3])
    return ("id", fragment.get("id")) if isinstance(fragment, dict) and "id" in fragment else None


def _fragment_texts(fragments: Any) -> Found:
    """The content of new fragments (THINK/RESPONSE), in order."""
    out: Found = []
    for fragment in fragments if isinstance(fragments, list) else ():
        if isinstance(fragment, dict):
            channel, content = _fragment_channel(fragment), fragment.get("content")
            if channel is not None and isinstance(content, str) and content:
                key = ("id", fragment["id"]) if "id" in fragment else None
                out.append((key, channel, content))
    return out


def _response_texts(response: Any) -> Found:
    """The text in a whole response object: its fragments, or the legacy fields."""
    if not isinstance(response, dict):
        return []
    out = _fragment_texts(response.get("fragments"))
    for key, channel in (("thinking_content", Channel.REASONING), ("content", Channel.TEXT)):
        text = response.get(key)
        if isinstance(text, str) and text:
            out.append((key, channel, text))
    return out


def _inserted_texts(segs: list[str], value: Any) -> Found:
    """The text a SET or APPEND of a structure at `segs` brings in."""
    if not segs:
        return _response_texts(value.get("response")) if isinstance(value, dict) else []
    if segs == ["response"]:
        return _response_texts(value)
    if _is_fragments(segs):
        return _fragment_texts(value if isinstance(value, list) else [value])
    if len(segs) == 3 and _is_fragments(segs[:2]):
        return _fragment_texts([value])
    return []
