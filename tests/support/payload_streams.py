"""The payload-only fixtures (vercel-ai-payloads/*.payloads.ndjson) framed back as SSE.

Those files keep each event's parsed `data:` JSON, one per line, and lose the framing (see
SOURCES.md). Each provider's framing is put back here as its API sends it: `event:` lines
where the API names its events (Anthropic, OpenAI Responses, Cohere v2, Gemini
Interactions), `data: [DONE]` where it ends the stream with one. The payload bytes are kept
as recorded, so the adapter reads exactly the recorded JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests.support.fixture_streams import STREAMS_DIR, load


@dataclass(frozen=True)
class Framing:
    """How one provider frames its JSON payloads as SSE."""

    event_key: str | None  # JSON key whose value is the SSE event name (None: no event: lines)
    done: bool  # the stream ends with `data: [DONE]`


CHAT_SSE = Framing(None, True)  # OpenAI Chat / Completions and every compatible API
FRAMINGS: dict[str, Framing] = {
    "alibaba": CHAT_SSE,
    "anthropic": Framing("type", False),
    "cerebras": CHAT_SSE,
    "cohere": Framing("type", True),
    "deepseek": CHAT_SSE,
    "google": Framing("event_type", False),
    "groq": CHAT_SSE,
    "mistral": CHAT_SSE,
    "moonshotai": CHAT_SSE,
    "openai": CHAT_SSE,  # the Responses file gets Framing("type", False): see framing()
    "perplexity": CHAT_SSE,
    "xai": CHAT_SSE,
}

PAYLOAD_FIXTURES: tuple[str, ...] = tuple(sorted(
    p.relative_to(STREAMS_DIR).as_posix()
    for p in (STREAMS_DIR / "vercel-ai-payloads").glob("*.payloads.ndjson")
))


def provider(name: str) -> str:
    """The provider a payload file was recorded from (its name's prefix)."""
    return name.rsplit("/", 1)[-1].split("--", 1)[0]


def payloads(name: str) -> list[bytes]:
    """The recorded JSON payloads of a payload-only fixture, one per event."""
    return [line for line in load(name).split(b"\n") if line.strip()]


def framing(name: str) -> Framing:
    """The provider's framing; OpenAI's Responses stream names its events."""
    lines = payloads(name)
    if provider(name) == "openai" and json.loads(lines[0]).get("type", "").startswith("response."):
        return Framing("type", False)
    return FRAMINGS[provider(name)]


def as_sse(name: str) -> bytes:
    """The payload file as the SSE stream its provider would send."""
    how = framing(name)
    out = bytearray()
    for line in payloads(name):
        if how.event_key is not None:
            out += f"event: {json.loads(line)[how.event_key]}\n".encode()
        out += b"data: " + line + b"\n\n"
    if how.done:
        out += b"data: [DONE]\n\n"
    return bytes(out)
