"""Reverse mode: retimer serves plain HTTP on loopback as one API (`--upstream URL`).

Clients then only change their base URL (OPENAI_BASE_URL=http://127.0.0.1:8080/v1): no proxy
setting and no CA to trust, which suits SDKs and tools that ignore proxy variables.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_-]{1,63})*\.?$")

# Which base-URL variable each API's SDKs read, and the path they expect under it.
_CLIENT_HINTS: tuple[tuple[str, str, str], ...] = (
    ("anthropic.com", "ANTHROPIC_BASE_URL", ""),
    ("generativelanguage.googleapis.com", "GOOGLE_GEMINI_BASE_URL", ""),
)


class UpstreamError(ValueError):
    """An --upstream value mitmproxy's reverse mode cannot serve; the message says why."""


def parse_upstream(url: str) -> str:
    """Check an --upstream URL and return it normalised as scheme://host[:port]."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as e:
        raise UpstreamError(f"{url!r} is not a URL ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise UpstreamError(f"{url!r}: expected an http:// or https:// URL, e.g. https://api.openai.com")
    host = parts.hostname or ""
    if not host or not _valid_host(host):
        raise UpstreamError(f"{url!r} has no valid host name")
    if parts.username or parts.password:
        raise UpstreamError(f"{url!r}: credentials in the URL are not supported")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UpstreamError(
            f"{url!r}: give the origin only (e.g. https://api.openai.com); clients keep "
            "their path, such as /v1, in their base URL"
        )
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return f"{parts.scheme}://{netloc}"


def upstream_host(upstream: str) -> str:
    """The host name of a normalised --upstream URL."""
    return urlsplit(upstream).hostname or ""


def base_url_hint(upstream: str, listen: str) -> str:
    """An example of pointing a client at reverse-mode retimer listening on `listen` (a URL)."""
    host = upstream_host(upstream)
    for suffix, var, path in _CLIENT_HINTS:
        if host == suffix or host.endswith("." + suffix):
            return f"{var}={listen}{path}"
    return f"OPENAI_BASE_URL={listen}/v1  (or ANTHROPIC_BASE_URL={listen})"


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(host))
