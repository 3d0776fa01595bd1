"""The media types of LLM streams, declared once: which responses stream, and in which framing.

Types are compared on the media type alone (parameters and case ignored), except by
`is_streamed`, which keeps the proxy's older, looser test: a Content-Type containing a marker
anywhere streams, so a vendor type such as `application/x-ndjson-stream` is never buffered.
"""

from __future__ import annotations

__all__ = [
    "AMAZON_EVENT_STREAM",
    "EVENT_STREAM",
    "JSON",
    "NDJSON",
    "NDJSON_TYPES",
    "STREAM_MARKERS",
    "TEXT",
    "envelope_codec",
    "is_amazon_event_stream",
    "is_event_stream",
    "is_json",
    "is_ndjson",
    "is_streamed",
    "media_type",
]

EVENT_STREAM = "text/event-stream"
NDJSON = "application/x-ndjson"
NDJSON_TYPES = frozenset({
    NDJSON,
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonl",
    "application/jsonlines",
    "application/json-seq",
})
AMAZON_EVENT_STREAM = "application/vnd.amazon.eventstream"
JSON = "application/json"
TEXT = "text/plain"
# streams of 5-byte length-prefixed envelopes (retimer.wire.envelope): type -> (protocol, codec)
ENVELOPE_TYPES: dict[str, tuple[str, str]] = {
    "application/connect+proto": ("connect", "proto"),
    "application/connect+json": ("connect", "json"),
    "application/grpc": ("grpc", "proto"),
    "application/grpc+proto": ("grpc", "proto"),
    "application/grpc+json": ("grpc", "json"),
    "application/grpc-web": ("grpc-web", "proto"),
    "application/grpc-web+proto": ("grpc-web", "proto"),
    "application/grpc-web+json": ("grpc-web", "json"),
}
# substrings of a Content-Type that make the proxy stream the response, never buffer it
STREAM_MARKERS = (EVENT_STREAM, NDJSON, "application/jsonl", "ndjson", AMAZON_EVENT_STREAM)


def media_type(content_type: str) -> str:
    """The media type without parameters, lower-cased: `Text/Event-Stream; charset=x` -> `text/event-stream`."""
    return content_type.split(";", 1)[0].strip().lower()


def is_event_stream(content_type: str) -> bool:
    """True for `text/event-stream`, whatever its parameters and case."""
    return media_type(content_type) == EVENT_STREAM


def is_ndjson(content_type: str) -> bool:
    """True for the NDJSON / JSON Lines media types, whatever their parameters and case."""
    return media_type(content_type) in NDJSON_TYPES


def is_amazon_event_stream(content_type: str) -> bool:
    """True for `application/vnd.amazon.eventstream` (parameters and case ignored)."""
    return media_type(content_type) == AMAZON_EVENT_STREAM


def envelope_codec(content_type: str) -> tuple[str, str] | None:
    """(connect | grpc | grpc-web, proto | json) for an enveloped stream's type, else None
    (gRPC-Web's base64 `-text` types are not enveloped bytes)."""
    return ENVELOPE_TYPES.get(media_type(content_type))


def is_json(content_type: str) -> bool:
    """True for `application/json` itself (not `+json` suffixes), parameters and case ignored."""
    return media_type(content_type) == JSON


def is_streamed(content_type: str) -> bool:
    """A response to stream, never buffer whole: its Content-Type contains a STREAM_MARKERS entry."""
    lowered = content_type.lower()
    return any(marker in lowered for marker in STREAM_MARKERS)
