"""Non-streaming LLM responses: held until they would have finished at the profile's speed.

A client that asked for a whole response (no `stream`) sees nothing until the last token, so
the whole body is held until TTFT + the gaps of its tokens, drawn like a stream's. The body is
never changed. Its tokens are estimated from the completion's text fields (the generic
adapter's estimate over a compact copy of the JSON); a body without text (embeddings, model
lists, errors) is not held.
"""

from __future__ import annotations

import json

from retimer.wire.media import EVENT_STREAM
from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import RequestShape

__all__ = ["is_llm_call", "timing_line"]

_JSON_TYPES = ("application/json", "+json")


def is_llm_call(request: RequestShape, content_type: str, llm_host: bool) -> bool:
    """A completion-like POST answered with JSON: an LLM API path, or any POST to an LLM host."""
    if request.method.upper() != "POST":
        return False
    ctype = content_type.lower()
    if not any(t in ctype for t in _JSON_TYPES):
        return False
    return llm_host or find_adapter(request, EVENT_STREAM) is not None


def timing_line(body: bytes) -> bytes | None:
    """The body as one compact NDJSON line for the token estimate (None: not a JSON object)."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or "error" in obj:
        return None
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
