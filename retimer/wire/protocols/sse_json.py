"""What every SSE-framed JSON stream adapter shares: framing, decoding, and split output.

A subclass says which events carry tokens (`classify`) and what one piece of a split event
looks like (`piece`); this base parses the frames, guards against malformed data, and writes
the pieces as SSE events with the original event name, line ending, `id` and `retry`.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, Event, RequestShape, check_split
from retimer.wire.protocols.jsontarget import JSONTarget, value_at
from retimer.wire.protocols.jsontext import MalformedJSON
from retimer.wire.sse import SSEEvent, SSEParser, format_event, is_event_stream

SSE_KEEPALIVE = b": keep-alive\n\n"
# `type` of the events that report a failed answer (Anthropic, OpenAI Responses)
_ERROR_TYPES = ("error", "response.failed")


class SSEJSONAdapter(Adapter):
    """Base class of adapters for `data: {json}` event streams."""

    # `piece` is a pure function of its arguments that puts the piece's text where the text
    # goes (and at its mirrors) and nowhere else: a split event's pieces may then be written
    # from a template of the event's shape (`PieceTemplates`), to the byte what `piece` and
    # `dumps` would write. An adapter whose pieces count or keep state leaves this False.
    template_pieces: ClassVar[bool] = False

    def __init__(self) -> None:
        self._parser = SSEParser()
        self._templates = PieceTemplates()

    def feed(self, data: bytes) -> list[Event]:
        """Parse more upstream bytes into events."""
        return [self._event(sse) for sse in self._parser.feed(data)]

    def end(self) -> list[Event]:
        """Return what is left; an unterminated trailing event is passed on as is."""
        return [self._event(sse) for sse in self._parser.end()]

    def keepalive(self) -> bytes | None:
        """An SSE comment line: parsers drop it without dispatching an event."""
        return SSE_KEEPALIVE

    def _event(self, sse: SSEEvent) -> Event:
        """Decode the JSON payload; anything malformed becomes a non-token event (noted)."""
        try:
            sse.raw.decode("utf-8")
        except UnicodeDecodeError:
            self._note("bytes that are not UTF-8 text")
            return Event(raw=sse.raw)
        if not sse.complete or not sse.data or sse.data == "[DONE]":
            return Event(raw=sse.raw)
        try:
            obj = jsontext.loads(sse.data)
        except MalformedJSON:
            self._note("an event whose data is not JSON")
            return Event(raw=sse.raw)
        if not isinstance(obj, dict):
            return Event(raw=sse.raw)
        if sse.event == "error" or obj.get("error") or obj.get("type") in _ERROR_TYPES:
            self._api_error = True
        return self.classify(sse, obj)

    @abstractmethod
    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        """The Event for one decoded JSON object (payload: its JSONTarget when splittable)."""

    @abstractmethod
    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """The JSON object of one piece of a split event."""

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        return list(self._pieces(event, pieces))

    def split_lazily(self, event: Event, pieces: Sequence[str]) -> Iterator[bytes]:
        """Each piece serialised when it is taken (unless `split` is rewritten: a subclass that
        renumbers its pieces, an instrumented instance); then all at once, by that `split`."""
        if getattr(self.split, "__func__", None) is not SSEJSONAdapter.split:
            return iter(self.split(event, pieces))
        return self._pieces(event, pieces)

    def _pieces(self, event: Event, pieces: Sequence[str]) -> Iterator[bytes]:
        check_split(event, pieces)
        target: JSONTarget[SSEEvent] = event.payload
        if len(pieces) == 1:
            yield event.raw
            return
        sse = target.frame
        last = len(pieces) - 1
        shape = self._templates.shape(target) if self.template_pieces else None
        for i, piece in enumerate(pieces):
            first, final = i == 0, i == last
            data = None
            if shape is not None:
                data = self._templates.fill(shape, first, final, piece, self._piece_event, target)
            if data is None:
                data = self._piece_event(target, piece, first, final)
            yield sse.preamble + data if first else data

    def _piece_event(self, target: JSONTarget[SSEEvent], piece: str, first: bool, last: bool) -> bytes:
        """One piece as an SSE event: its JSON, the original's name and line ending, `retry`
        on the first piece and `id` on the last."""
        sse = target.frame
        return format_event(sse.event, dumps(self.piece(target, piece, first=first, last=last)),
                            sse.newline, event_id=sse.id if last else None,
                            retry=sse.retry if first else None)


# A piece whose text is this marks where the text goes in a template; no JSON string holds
# NUL characters unescaped, and an event that holds the marker's text is never templated.
_SENTINEL = "\x00retimer-piece\x00"
_SENTINEL_JSON = json.encoder.encode_basestring(_SENTINEL)[1:-1].encode()
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
Shape = tuple[object, ...]


class PieceTemplates:
    """The pieces of split events written from templates, one per event shape and kind of
    piece (first, middle, last), made from `piece` with a marker for the text and kept per
    stream: consecutive events of a stream mostly differ only in their text.

    An event's shape is its raw JSON around the text's encoding, when that encoding occurs
    once. Two events of one shape are then the same object but for the text at the same place
    (had the match been elsewhere, the rest, the text's place included, is equal: so are the
    texts), so a template made from one writes the other's pieces exactly: JSON encodes a
    string the same wherever it stands. Anything else (the text not found or found twice, the
    marker in the event, a piece that cannot be UTF-8, a template that needed ASCII escapes)
    goes the ordinary way."""

    __slots__ = ("_made",)

    MAX_SHAPES = 16  # per stream; past it, the templates start afresh

    def __init__(self) -> None:
        self._made: dict[tuple[Shape, bool, bool], list[bytes] | None] = {}

    def shape(self, target: JSONTarget[SSEEvent]) -> Shape | None:
        """The event's shape (None: it cannot be templated)."""
        sse = target.frame
        data, text = sse.data, value_at(target.obj, target.path)
        if data is None or not isinstance(text, str) or "retimer-piece" in data \
                or _SURROGATE.search(data):
            return None  # a lone surrogate would make dumps write the event in ASCII escapes
        encoded = json.encoder.encode_basestring(text)
        if data.count(encoded) != 1:
            return None
        head, _, tail = data.partition(encoded)
        return (head, tail, target.path, target.mirrors, sse.event, sse.newline, sse.id, sse.retry)

    def fill(self, shape: Shape, first: bool, last: bool, piece: str,
             make: Callable[[JSONTarget[SSEEvent], str, bool, bool], bytes],
             target: JSONTarget[SSEEvent]) -> bytes | None:
        """The piece's bytes from its template (the first time, made by `make`, which writes
        a piece of `target` the ordinary way, with the marker for its text); None: write it
        the ordinary way."""
        key = (shape, first, last)
        if key not in self._made:
            if len(self._made) >= self.MAX_SHAPES:
                self._made.clear()
            self._made[key] = _template(make(target, _SENTINEL, first, last))
        parts = self._made[key]
        if parts is None:
            return None
        try:
            text = json.encoder.encode_basestring(piece)[1:-1].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: dumps writes the whole event in ASCII
            return None
        return text.join(parts)


def _template(rendered: bytes) -> list[bytes] | None:
    """The parts of a piece rendered with the marker, around each of its places (None: the
    marker is nowhere)."""
    parts = rendered.split(_SENTINEL_JSON)
    return parts if len(parts) > 1 else None


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_COMPACT_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def _reusable(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """`encoder.encode`, with its C serialiser made once: `encode` makes a new one on every
    call, which costs more than serialising a small chunk. No circular-reference check: what
    is serialised here is decoded JSON, which cannot hold a cycle. Without the C module (or if
    its signature changed), `encoder.encode` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = json.encoder.encode_basestring_ascii if encoder.ensure_ascii else json.encoder.encode_basestring
    try:
        serialise = make(None, encoder.default, quote, None, encoder.key_separator,
                         encoder.item_separator, encoder.sort_keys, encoder.skipkeys,
                         encoder.allow_nan) if make is not None else None
    except TypeError:
        serialise = None
    if serialise is None:
        return encoder.encode

    def encode(obj: Any) -> str:
        if isinstance(obj, str):
            return quote(obj)
        return "".join(serialise(obj, 0))

    return encode


_encode_compact = _reusable(_COMPACT)
_encode_compact_ascii = _reusable(_COMPACT_ASCII)


def dumps(obj: Any) -> str:
    """Compact JSON; falls back to ASCII escapes when a lone surrogate cannot be UTF-8.
    (One encoder each, made once: json.dumps with options builds a new one per call.)"""
    text = _encode_compact(obj)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _encode_compact_ascii(obj)
    return text


def posts_event_stream(request: RequestShape, content_type: str, suffixes: str | tuple[str, ...]) -> bool:
    """The common `accepts`: a POST to a path ending in one of `suffixes`, answered with SSE."""
    return (
        request.method.upper() == "POST"
        and request_path(request.path).endswith(suffixes)
        and is_event_stream(content_type)
    )


def request_path(path: str) -> str:
    """The path without query, fragment or trailing slash, for `accepts` checks."""
    return path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
