"""A URL fit to be written down: no credentials, no secret-looking query values.

Pure, apart from the record writer, so the cache's pure core can redact the URLs it keeps
without importing file I/O.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact_url"]

_SECRET_PARAM = re.compile(r"key|token|auth|secret|sig|password|session|cred", re.IGNORECASE)


def redact_url(url: str) -> str:
    """The URL without credentials, and with secret-looking query values (Gemini's `key=`)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = parts.query
    if query:
        query = urlencode([
            (k, "REDACTED" if _SECRET_PARAM.search(k) else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ])
    return urlunsplit(parts._replace(netloc=netloc, query=query))
