"""The study page's responses and files: strict headers on every answer (no framing, no
sniffing, a Content-Security-Policy with no inline script), and the page's script, style and
libraries read once from the package."""

from __future__ import annotations

import json
from pathlib import Path

from mitmproxy import http

from retimer.study.design import StudyError
from retimer.study.page_app import ASSETS

__all__ = ["CSP", "headers", "html_response", "json_response", "read_assets", "redirect"]

CSP = ("default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
       "img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
PACKAGE = Path(__file__).resolve().parents[2]  # retimer/: the page's files are under it


def read_assets() -> dict[str, tuple[bytes, str]]:
    """The page's script, style and libraries, read once (a missing one is one line)."""
    out: dict[str, tuple[bytes, str]] = {}
    for name, (relative, ctype) in ASSETS.items():
        try:
            out[name] = ((PACKAGE / relative).read_bytes(), ctype)
        except OSError as e:
            raise StudyError(f"page: cannot read the page's {relative}: {e.strerror}") from None
    return out



def headers(ctype: str) -> dict[str, str]:
    return {"content-type": ctype, "cache-control": "no-store", "x-content-type-options": "nosniff",
            "content-security-policy": CSP, "referrer-policy": "no-referrer",
            "x-frame-options": "DENY"}


def json_response(status: int, obj: object) -> http.Response:
    return http.Response.make(status, json.dumps(obj).encode("utf-8"), headers("application/json"))


def html_response(status: int, page: str) -> http.Response:
    return http.Response.make(status, page.encode("utf-8"), headers("text/html; charset=utf-8"))


def redirect(location: str) -> http.Response:
    response = http.Response.make(303, b"", headers("text/plain"))
    response.headers["location"] = location
    return response
