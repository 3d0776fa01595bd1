"""Streams of enveloped messages (Connect, gRPC, gRPC-Web): each message is an event, its text
found without a schema. Shared by retimer.wire.protocols.connect and .grpc.

A message's text: in protobuf, the length-delimited fields that read as prose
(retimer.wire.protobuf_text); in JSON, the string values that read as prose (ids, URLs and
model names are not). A message with exactly one such string is split into messages carrying
consecutive slices of it, every other field copied into each (a schema-less split cannot tell
which fields must appear once); a message with several is paced whole and counted. A
compressed message (flag 0x01) is read when it is gzip (the encoding both protocols default
to; it names itself); its pieces go out uncompressed, which both protocols allow whatever
the stream's encoding. Control messages (Connect's end of stream, gRPC-Web's trailers) and
anything unreadable pass whole and byte-identical. gRPC's status travels in HTTP/2 trailers,
which the proxy forwards after the body.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from retimer.wire.blobs import looks_like_blob
from retimer.wire.envelope import COMPRESSED, END_STREAM, TRAILERS, Envelope, EnvelopeFramer, encode_envelope
from retimer.wire.errors import MalformedJSON
from retimer.wire.media import envelope_codec
from retimer.wire.protobuf_text import Schema, find_texts, replace_text
from retimer.wire.protocols import jsontext
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape, check_split
from retimer.wire.protocols.generic import SKIP_KEYS, TEXT_KEYS
from retimer.wire.protocols.jsontarget import JSONPath, replaced
from retimer.wire.protocols.sse_json import dumps

__all__ = ["EnvelopedMessageAdapter"]

MAX_INFLATED = 16 * 1024 * 1024  # a compressed message that inflates past this is paced whole
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a message's one text is: a protobuf field path, or a JSON path in `obj`."""

    proto_path: tuple[int, ...] | None
    json_path: JSONPath | None
    message: bytes  # the (inflated) message
    obj: Any = None


class EnvelopedMessageAdapter(Adapter):
    """Base of the Connect and gRPC adapters: `protocols` are the envelope_codec protocols the
    subclass accepts."""

    name: ClassVar[str] = "enveloped"
    protocols: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self._framer = EnvelopeFramer()
        self._schema: Schema = {}  # what the stream's messages showed of its fields' types

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        found = envelope_codec(content_type)
        return request.method.upper() == "POST" and found is not None and found[0] in cls.protocols

    @property
    def failure(self) -> str | None:
        return self._framer.failure

    def feed(self, data: bytes) -> list[Event]:
        events = [self._event(e) for e in self._framer.feed(data)]
        if self._framer.failure is not None:
            rest = self._framer.passthrough()
            if rest:
                events.append(Event(raw=rest))
        return events

    def end(self) -> list[Event]:
        rest = self._framer.rest()
        return [Event(raw=rest)] if rest else []

    # -- reading ---------------------------------------------------------------------------
    def _event(self, envelope: Envelope) -> Event:
        if envelope.flags & (END_STREAM | TRAILERS):
            self._api_error = self._api_error or _ends_in_error(envelope)
            return Event(raw=envelope.raw)  # control messages pass whole
        if envelope.flags & ~COMPRESSED:
            return Event(raw=envelope.raw)  # flags no protocol defines
        message = envelope.message
        if envelope.compressed:
            inflated = _gunzip(message)
            if inflated is None:
                self._note("a compressed message that is not gzip: paced whole, not counted")
                return Event(raw=envelope.raw)
            message = inflated
        if message[:1] == b"{":  # the +json codecs (a protobuf message cannot start so: group)
            return self._json_event(envelope, message)
        texts = find_texts(message, self._schema)
        if not texts:
            return Event(raw=envelope.raw)
        clear = len(texts) == 1 and not texts[0].ambiguous
        return Event(raw=envelope.raw, texts=tuple((Channel.TEXT, t.text) for t in texts),
                     payload=_Target(texts[0].path, None, message) if clear else None,
                     atomic=not clear)

    def _json_event(self, envelope: Envelope, message: bytes) -> Event:
        try:
            obj = jsontext.loads(message)
        except MalformedJSON:
            self._note("a message that is not JSON: paced whole")
            return Event(raw=envelope.raw)
        found: list[tuple[JSONPath, str]] = []
        _prose_strings(obj, (), found)
        if not found:
            return Event(raw=envelope.raw)
        one = len(found) == 1
        return Event(raw=envelope.raw, texts=tuple((Channel.TEXT, t) for _, t in found),
                     payload=_Target(None, found[0][0], message, obj) if one else None,
                     atomic=not one)

    # -- writing ---------------------------------------------------------------------------
    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        check_split(event, pieces)
        target: _Target = event.payload
        out: list[bytes] = []
        for piece in pieces:
            if target.proto_path is not None:
                message = replace_text(target.message, target.proto_path, piece)
            else:
                assert target.json_path is not None
                message = dumps(replaced(target.obj, target.json_path, piece)).encode("utf-8")
            out.append(encode_envelope(message))
        return out


def _ends_in_error(envelope: Envelope) -> bool:
    """Connect's end-of-stream message with an `error`, or gRPC-Web trailers with a status other
    than 0: the stream is the API's error, not an answer to keep (the cache skips it)."""
    message = envelope.message
    if envelope.compressed:
        message = _gunzip(message) or b""
    if envelope.flags & END_STREAM:
        try:
            end = jsontext.loads(message) if message else {}
        except MalformedJSON:
            return True
        return not isinstance(end, dict) or end.get("error") is not None
    for line in message.decode("utf-8", "replace").splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "grpc-status":
            return value.strip() != "0"
    return False


def _gunzip(data: bytes) -> bytes | None:
    if not data.startswith(_GZIP_MAGIC):
        return None
    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(data, MAX_INFLATED)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
        return out
    except (zlib.error, gzip.BadGzipFile):
        return None


def _prose_strings(obj: Any, path: JSONPath, out: list[tuple[JSONPath, str]],
                   key: str | None = None) -> None:
    """Strings under the keys unknown JSON keeps its text in (the generic adapter's: `text`,
    `content`, `delta`, ...), outside ids, usage and metadata."""
    if isinstance(obj, str):
        if obj and key in TEXT_KEYS and not looks_like_blob(obj):
            out.append((path, obj))
    elif isinstance(obj, dict):
        for k, value in obj.items():
            if isinstance(k, str) and k.lower() not in SKIP_KEYS:
                _prose_strings(value, (*path, k), out, k.lower())
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            _prose_strings(value, (*path, i), out, key)
