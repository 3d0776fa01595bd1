"""Strings that are not generated text although they read as text: ids, URLs, UUIDs and long
token-like runs (keys, hashes, base64). Shared by the adapters that find text without a schema
(retimer.wire.protocols.generic, retimer.wire.protobuf_text)."""

from __future__ import annotations

import re

__all__ = ["looks_like_blob"]

_TOKEN_LIKE = re.compile(r"[A-Za-z0-9+/_.=-]{40,}")
_URL = re.compile(r"(?:https?|wss?|data):\S*\Z", re.IGNORECASE)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


def looks_like_blob(text: str) -> bool:
    """Ids, URLs, UUIDs and base64 runs are not generated text."""
    s = text.strip()
    if not s or " " in s:
        return False
    if _URL.match(s) or _UUID.match(s):
        return True
    return _TOKEN_LIKE.fullmatch(s) is not None and any(c.isdigit() for c in s)
