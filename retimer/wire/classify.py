"""What a flow is to retimer, decided once from its request and its response's head.

One pure function, `classify`: a stream an adapter reads (re-timed), a whole LLM answer (held
until the profile would have finished it), or not ours (streamed through as it comes, or left
to mitmproxy). The shell (the Retimer addon) calls it once per flow and acts on the `Verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from retimer.wire.encoding import Decoder, decoder_for
from retimer.wire.media import EVENT_STREAM, is_streamed
from retimer.wire.protocols import fallback_adapter, find_adapter
from retimer.wire.protocols.base import Adapter, RequestShape
from retimer.wire.protocols.generic import GenericStreamAdapter

__all__ = ["Treatment", "Verdict", "classify", "is_answer_with_body", "is_llm_call"]

_JSON_TYPES = ("application/json", "+json")


class Treatment(StrEnum):
    PACE = "pace"  # a stream an adapter reads: re-timed
    HOLD = "hold"  # a whole LLM answer: held until the profile would have finished it
    STREAM = "stream"  # not ours: streamed through as it comes, never buffered whole
    LEAVE = "leave"  # not ours, and mitmproxy's own handling (the body read whole) will do


@dataclass(frozen=True, slots=True)
class Verdict:
    """`adapter` (PACE, HOLD) and `decoder` (PACE); `warning`: why a stream that looked ours is not."""

    treatment: Treatment
    adapter: Adapter | None = None
    decoder: Decoder | None = None
    warning: str = ""


_STREAM = Verdict(Treatment.STREAM)
_LEAVE = Verdict(Treatment.LEAVE)


def is_llm_call(request: RequestShape, content_type: str, llm_host: bool) -> bool:
    """A completion-like POST answered with JSON: an LLM API path, or any POST to an LLM host."""
    if request.method.upper() != "POST":
        return False
    ctype = content_type.lower()
    if not any(t in ctype for t in _JSON_TYPES):
        return False
    return llm_host or find_adapter(request, EVENT_STREAM) is not None


def is_answer_with_body(method: str, status: int) -> bool:
    """A successful response that carries a body: the only kind retimer re-times. Errors
    (their bodies explain the failure: delaying them helps nobody), 204/205, 304 and answers
    to HEAD pass as they come."""
    return 200 <= status < 300 and status not in (204, 205) and method.upper() != "HEAD"


def classify(
    request: RequestShape, status: int, content_type: str, content_encoding: str, llm_host: bool,
) -> Verdict:
    """What to do with a response, from its request (`request.host` is where it went) and head.
    `llm_host`: that host is a known LLM API."""
    streamed = is_streamed(content_type)
    if not is_answer_with_body(request.method, status):
        return _STREAM if streamed else _LEAVE
    adapter_cls = find_adapter(request, content_type)
    adapter: Adapter | None = adapter_cls() if adapter_cls is not None else None
    if adapter is None:
        if not streamed:
            if not is_llm_call(request, content_type, llm_host):
                return _STREAM  # a dev server's page, a download, an MCP reply: never buffered whole
            # its tokens are counted over the answer as one NDJSON line (retimer.wire.whole)
            return Verdict(Treatment.HOLD, GenericStreamAdapter("ndjson")) if status == 200 else _LEAVE
        if not llm_host:
            return _STREAM
        adapter = fallback_adapter(content_type)
        if adapter is None:
            return _STREAM
    decoder = decoder_for(content_encoding)
    if decoder is None:
        return Verdict(Treatment.STREAM, warning=f"unknown content-encoding {content_encoding!r} from "
                       f"{request.host}; passing the stream through unchanged")
    return Verdict(Treatment.PACE, adapter, decoder)
