"""A whole (non-streaming) JSON answer, read for its tokens.

A client that asked for a whole response (no `stream`) sees nothing until the last token, so
the proxy holds the whole body until the profile would have finished it
(`retimer.timing.whole`). The body is never changed. Its tokens are estimated from the
completion's text fields: the generic adapter's estimate over `timing_line`, a compact copy of
the JSON; a body without text (embeddings, model lists, errors) is not held.
"""

from __future__ import annotations

import json

__all__ = ["timing_line"]


def timing_line(body: bytes) -> bytes | None:
    """The body as one compact NDJSON line for the token estimate (None: not a JSON object)."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or "error" in obj:
        return None
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
