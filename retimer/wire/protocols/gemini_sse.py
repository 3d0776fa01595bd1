"""Gemini `streamGenerateContent?alt=sse` streams (Gemini API and Vertex AI).

Every event is one GenerateContentResponse: `data: {json}` with CRLF framing, no event names
and no `[DONE]`. Tokens are the `text` of `candidates[*].content.parts[*]`; a part with
`thought: true` carries reasoning. `functionCall` parts arrive whole (Gemini does not stream
arguments): their arguments count as tool-argument tokens, as OpenAI's argument deltas do, so a
turn that only calls a tool still waits its TTFT and rate, but the chunk is never split. Every
other part kind passes unchanged as non-token content.

An event is splittable only when its single candidate has exactly one part and that part is
non-empty text. Clients (google-genai's `.text`, pydantic-ai, llm) concatenate text parts
across chunks, so pieces are placed like this: the first keeps every field except those that
describe the whole chunk; `usageMetadata`, `finishReason`, grounding, citations, safety
ratings, logprobs and the part's `thoughtSignature` go on the last piece only; `responseId`,
`modelVersion`, `createTime`, the candidate `index`, the content `role` and the part's
`thought` flag are on every piece. The helpers here are shared with the JSON-array adapter.

Chunks are incremental, but Gemini-compatible servers have been seen sending each chunk with
the candidate's whole text so far, or a last chunk repeating it: a text part that starts with
all the text counted for its candidate and channel (16 characters or more) counts only what
follows, and its chunk is sent whole (see repeats.py).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.jsontarget import JSONPath, JSONTarget
from retimer.wire.protocols.repeats import SoFar
from retimer.wire.protocols.sse_json import SSEJSONAdapter
from retimer.wire.sse import SSEEvent, is_event_stream

__all__ = ["GeminiSSEAdapter", "classify_response", "is_stream_generate", "piece_response", "wants_sse"]

# Where each field of a split chunk goes: on every piece, on the last only, else on the first.
_EVERY_TOP = frozenset({"responseId", "modelVersion", "createTime"})
_LAST_TOP = frozenset({"usageMetadata"})
_EVERY_CANDIDATE = frozenset({"index"})
_LAST_CANDIDATE = frozenset({
    "finishReason", "finishMessage", "groundingMetadata", "citationMetadata", "safetyRatings",
    "avgLogprobs", "logprobsResult", "urlContextMetadata", "urlRetrievalMetadata", "tokenCount",
    "groundingAttributions",
})
_EVERY_CONTENT = frozenset({"role"})
_EVERY_PART = frozenset({"thought"})
_LAST_PART = frozenset({"thoughtSignature"})
_EMPTY: frozenset[str] = frozenset()


def is_stream_generate(path: str) -> bool:
    """True when the path (query excluded) names the `streamGenerateContent` method."""
    bare = unquote(path.split("?", 1)[0].split("#", 1)[0]).rstrip("/")
    return bare.endswith(":streamGenerateContent")


def wants_sse(path: str) -> bool:
    """True when the query asks for SSE framing (`alt=sse`, also Google's `$alt=sse`)."""
    query = path.split("?", 1)[1].split("#", 1)[0] if "?" in path else ""
    return any(k in ("alt", "$alt") and v.lower() == "sse" for k, v in parse_qsl(query))


def classify_response(
    obj: dict[str, Any], seen: SoFar | None = None
) -> tuple[tuple[tuple[Channel, str], ...], JSONPath | None]:
    """The token texts of one GenerateContentResponse, and the path of its one text part when
    it is splittable (never when a part repeated the text counted for its candidate, see
    repeats.py): ("candidates", candidate, "content", "parts", part, "text")."""
    candidates = obj.get("candidates")
    if not isinstance(candidates, list):
        return (), None
    texts: list[tuple[Channel, str]] = []
    where: list[tuple[int, int]] = []
    nparts = 0
    repeated = False
    for ci, cand in enumerate(candidates):
        content = cand.get("content") if isinstance(cand, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            continue
        nparts += len(parts)
        for pi, part in enumerate(parts):
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and text:
                channel = Channel.REASONING if part.get("thought") is True else Channel.TEXT
                if seen is not None:
                    text, again = seen.new((ci, channel), text)
                    repeated = repeated or again
                if text:
                    texts.append((channel, text))
                    where.append((ci, pi))
            elif isinstance(part, dict) and isinstance(call := part.get("functionCall"), dict):
                arguments = call.get("args") or {}  # "{}" for none: the call still waits
                texts.append((Channel.TOOL_ARGS, json.dumps(
                    arguments, ensure_ascii=False, separators=(",", ":"))))
                repeated = True  # whole: the call is sent as it came, never split
    path: JSONPath | None = None
    if len(candidates) == 1 and nparts == 1 and len(texts) == 1 and not repeated:
        ci, pi = where[0]
        path = ("candidates", ci, "content", "parts", pi, "text")
    return tuple(texts), path


def _pick(d: dict[str, Any], every: frozenset[str], last_only: frozenset[str], *,
          first: bool, last: bool, skip: str = "") -> dict[str, Any]:
    """The fields of `d` that belong on a piece (original key order kept)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key == skip:
            continue
        if key in every or (last and key in last_only) or (first and key not in last_only):
            out[key] = value
    return out


def piece_response(target: JSONTarget[Any], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
    """The GenerateContentResponse of one piece of a split chunk (target: classify_response's path)."""
    obj = target.obj
    _, candidate, _, _, part_index, _ = target.path
    cand = obj["candidates"][candidate]
    content = cand["content"]
    part = content["parts"][part_index]
    new_part = _pick(part, _EVERY_PART, _LAST_PART, first=first, last=last, skip="text")
    new_part = _insert(part, new_part, "text", piece)
    new_content = _pick(content, _EVERY_CONTENT, _EMPTY, first=first, last=last, skip="parts")
    new_content = _insert(content, new_content, "parts", [new_part])
    new_cand = _pick(cand, _EVERY_CANDIDATE, _LAST_CANDIDATE, first=first, last=last, skip="content")
    new_cand = _insert(cand, new_cand, "content", new_content)
    out = _pick(obj, _EVERY_TOP, _LAST_TOP, first=first, last=last, skip="candidates")
    return _insert(obj, out, "candidates", [new_cand])


def _insert(original: dict[str, Any], picked: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`picked` with `key` set to `value` at the position `key` had in `original`."""
    out: dict[str, Any] = {}
    for k in original:
        if k == key:
            out[key] = value
        elif k in picked:
            out[k] = picked[k]
    return out


class GeminiSSEAdapter(SSEJSONAdapter):
    """Adapter for `models/*:streamGenerateContent?alt=sse` (Gemini API, Vertex AI)."""

    template_pieces: ClassVar[bool] = True  # piece() is pure: see SSEJSONAdapter

    name: ClassVar[str] = "gemini-sse"

    def __init__(self) -> None:
        super().__init__()
        self._seen = SoFar()

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a `:streamGenerateContent` path, answered with an event stream."""
        return (
            request.method.upper() == "POST"
            and is_stream_generate(request.path)
            and is_event_stream(content_type)
        )

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        texts, path = classify_response(obj, self._seen)
        if not texts:
            return Event(raw=sse.raw)
        payload = None if path is None else JSONTarget(sse, obj, path)
        return Event(raw=sse.raw, texts=texts, payload=payload, atomic=path is None)

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        return piece_response(target, piece, first=first, last=last)
