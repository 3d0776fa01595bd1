"""The contract every wire-format adapter fulfils.

An adapter is a sans-io state machine in the style of h11: feed it upstream bytes, get back
complete events; ask it to split a token-bearing event into several valid events carrying
consecutive slices of its text. It never does I/O and never looks at a clock.

Input an adapter cannot read raises AdapterError (the shell then passes the rest of the stream
through unchanged); any other exception from an adapter is a bug.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from retimer.wire.errors import AdapterError
from retimer.wire.request import RequestBody

__all__ = ["Adapter", "AdapterError", "Channel", "Event", "RequestShape", "check_split", "text_field"]


class Channel(StrEnum):
    """What kind of tokens an event carries; records count them apart."""

    TEXT = "text"
    REASONING = "reasoning"
    TOOL_ARGS = "tool_args"


@dataclass(slots=True)
class Event:
    """One complete wire event as it arrived.

    `raw` is the exact upstream bytes, framing included, so an event that is not split goes
    out byte-identical. `texts` lists every token-bearing string the event carries, in order,
    with its channel. Only an event with exactly one non-empty entry can be split, and only
    when the adapter has not marked it `atomic` (its text is counted, but the adapter cannot
    re-serialise it in pieces safely, e.g. Mistral's list-typed content).
    """

    raw: bytes
    texts: tuple[tuple[Channel, str], ...] = ()
    payload: Any = field(default=None, repr=False)  # adapter-private parsed form, for split()
    atomic: bool = False
    # upstream bytes this event stands for when the adapter rewrote `raw` (None: len(raw));
    # e.g. a Responses event renumbered after a split. The pacer's fail-open bookkeeping uses it.
    upstream_size: int | None = None

    @property
    def splittable(self) -> bool:
        return not self.atomic and len(self.texts) == 1 and self.texts[0][1] != ""

    @property
    def text(self) -> str:
        texts = self.texts
        if len(texts) == 1:
            return texts[0][1]  # the usual event: one string, no join
        return "".join(t for _, t in texts)


@dataclass(slots=True, frozen=True)
class RequestShape:
    """What an adapter may look at to decide whether it handles a flow (no mitmproxy types).

    `parsed_body` wraps `body` once, so the adapters asked in turn (and the study) share one
    JSON parse of it, made only if one of them looks.
    """

    method: str
    host: str
    path: str  # path with query string
    headers: Mapping[str, str]  # lower-cased names
    body: bytes
    parsed_body: RequestBody = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        content_type = self.headers.get("content-type", "")
        object.__setattr__(self, "parsed_body", RequestBody(self.body, content_type))

    @classmethod
    def of_body(
        cls, method: str, host: str, path: str, headers: Mapping[str, str], body: RequestBody,
    ) -> RequestShape:
        """A shape that shares an already wrapped body: the proxy parses a flow's body once."""
        shape = cls(method, host, path, headers, body.raw)
        object.__setattr__(shape, "parsed_body", body)
        return shape


class Adapter(ABC):
    """Base class of a protocol adapter; one instance per stream."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """True when the request has this API's shape and the response is its stream type."""

    @abstractmethod
    def feed(self, data: bytes) -> list[Event]:
        """Parse more upstream bytes; return the events completed by them, in order."""

    @abstractmethod
    def end(self) -> list[Event]:
        """The upstream ended: return what is left (a trailing partial event goes out verbatim)."""

    def keepalive(self) -> bytes | None:
        """Bytes every client of this format ignores, valid between two events, that keep an
        idle connection alive (an SSE comment); None when the format has none (JSON arrays,
        NDJSON, binary frames)."""
        return None

    @property
    def failure(self) -> str | None:
        """Why the adapter gave up parsing and passes the rest through itself (None: it did not)."""
        return None

    @property
    def anomaly(self) -> str | None:
        """The first malformed part the adapter passed on unchanged while parsing on (an event
        that is not JSON, bytes that are not UTF-8): worth one warning, not a fallback."""
        return self._anomaly

    _anomaly: str | None = None

    @property
    def api_error(self) -> bool:
        """The stream carried the API's own error (an error event, an exception frame): it
        reaches the client as sent, but is no answer to keep (the response cache skips it)."""
        return self._api_error

    _api_error: bool = False

    def _note(self, anomaly: str) -> None:
        """Keep the first anomaly (the caller warns once per stream)."""
        if self._anomaly is None:
            self._anomaly = anomaly

    @abstractmethod
    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        """Serialise `event` as len(pieces) valid events whose texts are `pieces`, in order.

        Precondition: event.splittable and "".join(pieces) == event.text. Fields that must
        appear once (ids and names on the first, finish reasons and usage on the last) are
        placed where the format expects them.
        """

    def split_lazily(self, event: Event, pieces: Sequence[str]) -> Iterator[bytes]:
        """The bytes of `split(event, pieces)`, one piece at a time, serialised as they are
        taken: the pacer takes them as they fall due (a 10k-token event is not serialised
        whole before its first token). This default splits at once; adapters that can do
        better override it."""
        return iter(self.split(event, pieces))


def check_split(event: Event, pieces: Sequence[str]) -> None:
    """Raise ValueError unless `split(event, pieces)` may be called (the contract above)."""
    if not event.splittable or event.payload is None:
        raise ValueError("event is not splittable")
    if not pieces or "".join(pieces) != event.text:
        raise ValueError("pieces do not add up to the event's text")


def text_field(obj: Mapping[str, Any], key: str) -> str:
    """`obj[key]` when it is a string, else "": a malformed event's `"type": {...}` must not
    reach a dict lookup (an unhashable key raises)."""
    value = obj.get(key)
    return value if isinstance(value, str) else ""
