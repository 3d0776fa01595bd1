"""The response cache's pure core: request keys and entry (de)serialisation, no I/O.

A request identical to a cached one is answered from the cache with the profile's exact
timing, with no upstream call: the way to show a slow model at Cerebras speed, and to give
every study condition identical content. "Identical" is decided by `cache_key`.

What the key covers, and why:
- the method, and scheme + host + port + path + query. Query parameters that carry secrets
  (Gemini's `key=`, `access_token`, signatures) are left out, so another API key still hits,
  and so are a few per-request counters (`VOLATILE_QUERY`).
- the request body. A JSON body is parsed and re-serialised with sorted keys, so key order
  and whitespace do not matter, minus the fields in `VOLATILE_FIELDS`: values that differ
  between otherwise identical calls but do not change what the model answers. When in
  doubt a field stays in the key: a needless miss costs one upstream call, a wrong hit
  serves the wrong content. Kept on purpose: `seed` and every sampling option (they change
  the content), `stream_options` (include_usage adds a usage event), `service_tier` and
  `store` (echoed in the response), `previous_response_id`, `conversation` and ChatGPT's
  `conversation_id` (history kept server-side: another conversation is other content).
  Other bodies (form data, binary) count byte for byte.
- of the headers only those that change the response's content or shape and carry no
  secret (`KEY_HEADERS`: the body's media type, Anthropic's version and beta features,
  OpenAI's beta flag). Authorization, cookies and API keys never enter the key.

An entry keeps the status, the response headers minus framing, hop-by-hop and anything
secret or per-session (`storable_headers`), the decoded body, and metadata: the URL with
secrets redacted, when it was made and the protocol. Request headers are never stored.

Limits: web apps that keep the history server-side hit only on the same conversation:
claude.ai names it in the URL, ChatGPT in `conversation_id` (a ChatGPT first turn, whose
message and parent ids are random, does hit); Gemini web's form body carries a per-session
token (`at=`), so it hits only within a session.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qsl

from retimer.records.redact import redact_url
from retimer.wire.request import RequestBody

__all__ = [
    "CHATGPT_VOLATILE_FIELDS",
    "FORMAT",
    "KEY_HEADERS",
    "VOLATILE_FIELDS",
    "VOLATILE_QUERY",
    "CacheEntry",
    "CorruptEntry",
    "cache_key",
    "canonical_body",
    "decode_entry",
    "encode_entry",
    "is_secret_param",
    "key_query",
    "new_entry",
    "storable_headers",
    "stored_headers",
]

FORMAT = 1  # bump when the key derivation or the entry layout changes

# Top-level JSON fields ignored in the key: identifiers and hints that vary per call, user or
# session but do not change the answer.
VOLATILE_FIELDS: dict[str, str] = {
    "user": "OpenAI end-user id for abuse monitoring",
    "safety_identifier": "OpenAI's successor of `user`",
    "prompt_cache_key": "OpenAI prompt-cache routing hint",
    "metadata": "OpenAI stored-completion tags; Anthropic metadata.user_id "
    "(per session in Claude Code)",
    "keep_alive": "Ollama: how long the model stays loaded",
}

# ChatGPT web (`/backend-api/conversation`): ids and timestamps the page makes per message.
CHATGPT_VOLATILE_FIELDS: dict[str, str] = {
    "websocket_request_id": "random per request",
    "client_contextual_info": "page size, time since load",
    "arkose_token": "anti-bot proof, per request",
    "messages[].id": "random per message",
    "messages[].create_time": "timestamp",
    "parent_message_id (without conversation_id)": "a random root id for a new conversation; "
    "with a conversation_id it picks the branch, so it stays",
}
_CHATGPT_PATH = re.compile(r"/backend-(?:api|anon)/(?:f/)?conversation\Z")

# Query parameters left out of the key that are not secrets: per-request counters.
VOLATILE_QUERY = frozenset({"_reqid", "_", "x-amz-date"})
_SECRET_WORDS = frozenset({
    "key", "apikey", "token", "auth", "authorization", "secret", "sig", "signature",
    "password", "passwd", "session", "sid", "credential", "credentials", "cred",
})

KEY_HEADERS = ("content-type", "anthropic-version", "anthropic-beta", "openai-beta")

# Response headers never stored: framing (the replay sets its own), hop-by-hop, cookies,
# and values that are stale or name an account.
_DROP_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade", "content-length",
    "content-encoding", "set-cookie", "set-cookie2", "date", "age", "www-authenticate",
})
_SECRET_HEADER_WORDS = frozenset({
    "cookie", "auth", "authorization", "authenticate", "token", "secret", "key", "session",
    "credential", "signature", "organization", "org", "project", "account", "user",
})


class CorruptEntry(ValueError):
    """A stored entry that cannot be trusted; the message says why."""


def _words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def is_secret_param(name: str) -> bool:
    """True for query parameters that look like credentials (`key`, `api_key`, `X-Amz-Signature`).

    Matched on whole words of the name, so `max_tokens` is not taken for a token."""
    return bool(_words(name) & _SECRET_WORDS)


def key_query(query: str) -> list[tuple[str, str]]:
    """The query parameters that count for the key, in their order."""
    return [
        (k, v)
        for k, v in parse_qsl(query, keep_blank_values=True)
        if not is_secret_param(k) and k.lower() not in VOLATILE_QUERY
    ]


def _chatgpt_canonical(obj: dict[str, object]) -> dict[str, object]:
    out = {k: v for k, v in obj.items()
           if k not in ("websocket_request_id", "client_contextual_info", "arkose_token")}
    if not obj.get("conversation_id"):
        out.pop("parent_message_id", None)
    messages = out.get("messages")
    if isinstance(messages, list):
        out["messages"] = [
            {k: v for k, v in m.items() if k not in ("id", "create_time")}
            if isinstance(m, dict) else m
            for m in messages
        ]
    return out


def canonical_body(body: RequestBody | bytes, path: str) -> dict[str, object]:
    """The body as it counts for the key: JSON without volatile fields, else its bytes' hash."""
    request = RequestBody.of(body)
    if request.raw.lstrip()[:1] in (b"{", b"["):
        if request.too_deep:  # as before the shared parse: no key, the caller's hook fails
            raise RecursionError("the request body nests deeper than the JSON parser follows")
        obj = request.value
        if isinstance(obj, dict):
            obj = {k: v for k, v in obj.items() if k not in VOLATILE_FIELDS}
            if _CHATGPT_PATH.search(path.split("?", 1)[0]):
                obj = _chatgpt_canonical(obj)
            return {"json": obj}
        if isinstance(obj, list):
            return {"json": obj}
    return {"sha256": hashlib.sha256(request.raw).hexdigest()}


def cache_key(
    method: str, scheme: str, host: str, port: int, path: str,
    headers: Mapping[str, str], body: RequestBody | bytes,
) -> str:
    """sha256 hex of what makes a request the same request; `headers` has lower-case names."""
    path_only, _, query = path.partition("?")
    key_headers = {}
    for name in KEY_HEADERS:
        value = headers.get(name)
        if value is not None:
            key_headers[name] = " ".join(value.split()).lower() if name == "content-type" else value
    canonical = {
        "v": FORMAT,
        "method": method.upper(),
        "scheme": scheme.lower(),
        "host": host.lower().rstrip("."),
        "port": port,
        "path": path_only,
        "query": key_query(query),
        "headers": key_headers,
        "body": canonical_body(body, path),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def storable_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Response headers worth replaying: no framing, hop-by-hop, cookie or secret-looking one."""
    out: list[tuple[str, str]] = []
    for name, value in headers:
        low = name.lower()
        if low in _DROP_HEADERS or _words(low) & _SECRET_HEADER_WORDS:
            continue
        out.append((name, value))
    return out


@dataclass(slots=True)
class CacheEntry:
    """One cached response: what the replay sends, and where it came from (for people)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    url: str = ""  # redacted
    method: str = ""
    protocol: str | None = None
    created: str = ""  # ISO 8601, UTC
    reason: str = ""

    @property
    def reason_phrase(self) -> str:
        if self.reason:
            return self.reason
        try:
            return HTTPStatus(self.status).phrase
        except ValueError:
            return ""


def new_entry(
    status: int, reason: str, headers: Iterable[tuple[str, str]], body: bytes, *,
    url: str, method: str, protocol: str | None, created: str,
) -> CacheEntry:
    """An entry from a finished response, with secrets and framing already left out."""
    return CacheEntry(
        status=status, headers=storable_headers(headers), body=body, url=redact_url(url),
        method=method, protocol=protocol, created=created, reason=reason,
    )


def encode_entry(entry: CacheEntry) -> tuple[bytes, bytes]:
    """(metadata JSON, body) as stored; the metadata names the body's size and hash."""
    meta = {
        "format": FORMAT,
        "status": entry.status,
        "reason": entry.reason,
        "headers": [[k, v] for k, v in entry.headers],
        "url": entry.url,
        "method": entry.method,
        "protocol": entry.protocol,
        "created": entry.created,
        "body_size": len(entry.body),
        "body_sha256": hashlib.sha256(entry.body).hexdigest(),
    }
    return json.dumps(meta, ensure_ascii=False, indent=1).encode(), entry.body


def stored_headers(value: object) -> list[tuple[str, str]] | None:
    """Headers as an entry stores them (a list of [name, value] strings), or None if not."""
    if not isinstance(value, list) or not all(
        isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h) for h in value
    ):
        return None
    return [(k, v) for k, v in value]


def decode_entry(meta_bytes: bytes, body: bytes) -> CacheEntry:
    """The entry these stored bytes hold; CorruptEntry when anything does not add up."""
    try:
        meta = json.loads(meta_bytes)
    except ValueError as e:
        raise CorruptEntry(f"metadata is not JSON ({e})") from None
    except RecursionError:
        raise CorruptEntry("metadata is not JSON a reader can take (nested too deeply)") from None
    if not isinstance(meta, dict):
        raise CorruptEntry("metadata is not a JSON object")
    if meta.get("format") != FORMAT:
        raise CorruptEntry(f"format {meta.get('format')!r}, expected {FORMAT}")
    status, headers = meta.get("status"), stored_headers(meta.get("headers"))
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise CorruptEntry(f"bad status {status!r}")
    if headers is None:
        raise CorruptEntry("bad headers")
    if meta.get("body_size") != len(body):
        raise CorruptEntry(f"body has {len(body)} bytes, expected {meta.get('body_size')}")
    if meta.get("body_sha256") != hashlib.sha256(body).hexdigest():
        raise CorruptEntry("body hash mismatch")
    names = ("reason", "url", "method", "created")
    strings = {k: v for k in names if isinstance(v := meta.get(k), str)}
    if len(strings) != len(names):
        raise CorruptEntry("bad metadata field")
    protocol = meta.get("protocol")
    return CacheEntry(
        status=status, headers=headers, body=body,
        url=strings["url"], method=strings["method"],
        protocol=protocol if isinstance(protocol, str) else None,
        created=strings["created"], reason=strings["reason"],
    )
