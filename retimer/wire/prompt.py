"""What a request asks for: estimated prompt tokens, the max-output hint, cacheable prefixes.

Why: TTFT grows with the prompt (prefill) and shrinks when a prefix was sent before (prompt
caching), so the timing model needs the prompt's size and its message boundaries. Pure
functions of the request body bytes; anything unparseable yields an estimate, never an error.

Counts use `retimer.wire.tokenizer.count_tokens` (long bodies are sampled: BUDGET_CHARS), plus
MESSAGE_OVERHEAD per message (chat templates add role markers), and MEDIA_TOKENS per inline
image or file (base64 or data: URL: its characters say nothing about its token cost).
Server-side state is invisible to one body (Responses `previous_response_id`, ChatGPT web
conversations): the estimate then covers only what the body carries. On a WebSocket, where
the turns are seen in order, `TurnPrompts` follows a Responses chain from turn to turn.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from retimer.wire.request import RequestBody
from retimer.wire.tokenizer import count_tokens

__all__ = ["BUDGET_CHARS", "MEDIA_TOKENS", "MESSAGE_OVERHEAD", "PromptCache", "PromptInfo",
           "TurnPrompts", "estimate_prompt", "estimate_text_tokens", "segments"]

MESSAGE_OVERHEAD = 3
"""Tokens per message for role markers (OpenAI's cookbook counts 3 per chat message)."""

MEDIA_TOKENS = 1000
"""An inline image or file. CHOSEN: OpenAI bills a 1024 px high-detail image ~765 tokens,
Anthropic ~1,600 for a 1.15-megapixel one."""

BUDGET_CHARS = 65536
"""At most about this many characters of a body are run through the splitter (~16 ms); the
rest of a longer body is sampled in spread windows and scaled. An agent's prompt of 400 KB
must not stall the proxy's event loop for 100 ms."""

_MIN_WINDOW = 256
_WINDOWS = 4
# keys whose string values are protocol metadata or opaque state, not prompt text
_SKIP_KEYS = frozenset({
    "role", "type", "id", "tool_call_id", "tool_use_id", "call_id", "cache_control", "model",
    "media_type", "mime_type", "mimeType", "signature", "encrypted_content", "status",
})
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-\s]+")


@dataclass(frozen=True, slots=True)
class PromptInfo:
    """A request's prompt as the timing model sees it."""

    tokens: int  # estimated prompt tokens
    api: str  # the body shape recognised: chat, responses, gemini, generate, generic, text, empty
    max_output_tokens: int | None = None  # the request's max-tokens hint (an upper bound)
    reasoning_budget: int | None = None  # thinking budget_tokens / thinkingBudget, if set
    model: str | None = None
    # (tokens up to the end of segment i, hash of segments 0..i), one per message boundary
    prefixes: tuple[tuple[int, bytes], ...] = ()

    @property
    def known(self) -> bool:
        """The body said something about the prompt (not empty, not binary)."""
        return self.api not in ("empty", "binary")


def _is_media(text: str) -> bool:
    return len(text) >= 256 and (
        text.startswith("data:") or (" " not in text and _BASE64.fullmatch(text) is not None)
    )


def estimate_text_tokens(text: str, fraction: float = 1.0) -> int:
    """count_tokens of text, or of `fraction` of it in spread windows, scaled; a base64 blob
    or a data: URL counts as one medium (MEDIA_TOKENS)."""
    return MEDIA_TOKENS if _is_media(text) else _sampled_count(text, fraction)


def _sampled_count(text: str, fraction: float) -> int:
    n = len(text)
    size = max(_MIN_WINDOW, int(n * fraction) // _WINDOWS)
    if size * _WINDOWS >= n:
        return count_tokens(text)
    step = (n - size) / (_WINDOWS - 1)
    sampled = sum(count_tokens(text[int(i * step):int(i * step) + size]) for i in range(_WINDOWS))
    return round(sampled * n / (size * _WINDOWS))


def _strings(value: Any) -> Iterator[str]:
    """Every string leaf worth counting, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in _SKIP_KEYS:
                yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _leaves(value: Any) -> list[str | int]:
    """A JSON value's countable parts: its text leaves, or a token-id list as its length."""
    if isinstance(value, _Json):
        return [json.dumps(value.value, separators=(",", ":"), ensure_ascii=False)]
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        return [len(value)]  # pre-tokenized input (OpenAI completions, Ollama `context`)
    return list(_strings(value))


def _fraction(groups: list[list[str | int]]) -> float:
    """The share of the text to run through the splitter so that it stays within budget."""
    chars = sum(len(x) for g in groups for x in g if isinstance(x, str) and not _is_media(x))
    return min(1.0, BUDGET_CHARS / chars) if chars else 1.0


def _count(leaves: list[str | int], fraction: float) -> int:
    """Tokens of a group of leaves; over budget, its texts are joined (by spaces, which BPE
    folds into the next word) and sampled as one, so many short strings cost no more."""
    if fraction >= 1.0:
        return sum(x if isinstance(x, int) else estimate_text_tokens(x) for x in leaves)
    texts = [x for x in leaves if isinstance(x, str) and not _is_media(x)]
    other = sum(x if isinstance(x, int) else MEDIA_TOKENS for x in leaves
                if not isinstance(x, str) or _is_media(x))
    return other + (_sampled_count(" ".join(texts), fraction) if texts else 0)


class _Json:
    """A preamble part counted as its JSON text: tool schemas reach the model as text, keys
    and types included."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def segments(body: dict[str, Any]) -> tuple[str, list[Any], list[Any]]:
    """(api, preamble parts, messages) for the known body shapes, else the generic walk."""
    tools = [_Json(body[k]) for k in ("tools", "functions") if body.get(k)]
    if isinstance(body.get("contents"), list):  # Gemini generateContent / streamGenerateContent
        system = body.get("systemInstruction", body.get("system_instruction"))
        return "gemini", [*tools, *([system] if system else [])], body["contents"]
    if isinstance(body.get("messages"), list):  # OpenAI chat, Anthropic, Ollama chat, Bedrock
        system = body.get("system")
        return "chat", [*tools, *([system] if system else [])], body["messages"]
    if "input" in body or "instructions" in body:  # OpenAI Responses
        items = body.get("input")
        items = [items] if isinstance(items, str) else items if isinstance(items, list) else []
        instructions = body.get("instructions")
        return "responses", [*tools, *([instructions] if instructions else [])], items
    if "prompt" in body:  # Ollama /api/generate, OpenAI completions, TGI-like
        pre = [body[k] for k in ("system", "context") if body.get(k)]
        prompt = body["prompt"]
        return "generate", pre, [prompt, *([body["images"]] if body.get("images") else [])]
    return "generic", [], [body]


def _hash(prev: bytes, part: Any) -> bytes:
    data = json.dumps(part, separators=(",", ":"), ensure_ascii=False, sort_keys=True,
                      default=lambda j: j.value)
    return hashlib.blake2b(prev + data.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def estimate_prompt(body: RequestBody | bytes | str | None, scope: str = "") -> PromptInfo:
    """Estimate a request body's prompt tokens, max-output hint and cacheable prefixes.

    `scope` separates caches (pass the host and model path: prefixes only match within it).
    Shapes: OpenAI chat `messages`, Responses `input`/`instructions`, Anthropic
    `system`+`messages`, Gemini `contents`/`systemInstruction`, Ollama `messages`/`prompt`;
    other JSON counts all its strings; non-JSON text counts as text; binary counts 0.
    """
    request = RequestBody.of(body)
    if not request.raw:
        return PromptInfo(0, "empty")
    text = request.text
    if text is None:
        return PromptInfo(0, "binary")
    try:
        if request.json_text:
            return _estimate_json(request, scope)
    except (ValueError, RecursionError):  # nested too deep to walk
        pass
    return PromptInfo(estimate_text_tokens(text, min(1.0, BUDGET_CHARS / len(text))), "text")


def _estimate_json(request: RequestBody, scope: str) -> PromptInfo:
    data = request.value
    if not isinstance(data, dict):
        return PromptInfo(_count(_leaves(data), _fraction([_leaves(data)])), "generic")
    api, preamble, messages = segments(data)
    model = request.model
    overhead = MESSAGE_OVERHEAD if api in ("chat", "gemini", "responses") else 0
    parts = ([preamble] if preamble else []) + messages
    leaves = [[x for p in preamble for x in _leaves(p)]] if preamble else []
    leaves += [_leaves(m) for m in messages]
    fraction = _fraction(leaves)
    h = hashlib.blake2b(f"{scope}\0{model or ''}".encode(), digest_size=16).digest()
    total = 0
    prefixes: list[tuple[int, bytes]] = []
    for i, (part, group) in enumerate(zip(parts, leaves, strict=True)):
        is_message = isinstance(part, dict) and not (preamble and i == 0)
        total += _count(group, fraction) + (overhead if is_message else 0)
        h = _hash(h, part)
        prefixes.append((total, h))
    return PromptInfo(total, api, request.max_output_tokens, request.reasoning_budget, model,
                      tuple(prefixes))


class TurnPrompts:
    """The prompts of one WebSocket's turns. A Responses `response.create` that names
    `previous_response_id` (Codex's WebSocket transport) sends only the new input items: the
    model sees the previous turn's prompt, that turn's answer and the new items, as the same
    session's SSE requests send them whole. Such a turn is estimated so, its prefixes
    continuing the previous turn's (a provider's prompt cache holds them)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: PromptInfo | None = None

    def estimate(self, body: RequestBody, scope: str, answered: int) -> PromptInfo:
        """The prompt of the turn `body` opens; `answered`: the previous turn's output tokens."""
        last = self._last
        if last is not None and last.known and isinstance(body.get("previous_response_id"), str):
            info = _continued(last, answered, body)
        else:
            info = estimate_prompt(body, scope)
        self._last = info
        return info


def _continued(last: PromptInfo, answered: int, request: RequestBody) -> PromptInfo:
    items = request.get("input")
    items = [items] if isinstance(items, str) else items if isinstance(items, list) else []
    leaves = [_leaves(m) for m in items]
    fraction = _fraction(leaves)
    total = last.tokens + answered
    h = last.prefixes[-1][1] if last.prefixes else b""
    prefixes = list(last.prefixes)
    if answered:  # the previous answer, held by the server: its text is in no body
        h = _hash(h, answered)
        prefixes.append((total, h))
    for item, group in zip(items, leaves, strict=True):
        total += _count(group, fraction) + (MESSAGE_OVERHEAD if isinstance(item, dict) else 0)
        h = _hash(h, item)
        prefixes.append((total, h))
    return PromptInfo(total, "responses", request.max_output_tokens, request.reasoning_budget,
                      request.model or last.model, tuple(prefixes))


class PromptCache:
    """The provider's prompt cache, sans-io: a bounded LRU of prefix hashes with last-use times.

    Prefixes end at message boundaries (where agents and chats grow their prompts). A lookup
    returns the longest earlier-seen prefix of at least min_tokens used within ttl seconds,
    then records every prefix of the prompt at or above min_tokens as used now (providers
    write the cache while they prefill, and a hit refreshes the entry's lifetime).
    """

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._used: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._used)

    def lookup(self, prompt: PromptInfo | Sequence[tuple[int, bytes]], now: float,
               min_tokens: int, ttl: float) -> int:
        """Leading tokens of `prompt` already cached at time `now` (seconds, any clock)."""
        prefixes = prompt.prefixes if isinstance(prompt, PromptInfo) else prompt
        cached = 0
        for tokens, key in reversed(prefixes):
            if tokens < min_tokens:
                break
            last = self._used.get(key)
            if last is not None and 0.0 <= now - last <= ttl:
                cached = tokens
                break
        for tokens, key in prefixes:
            if tokens >= min_tokens:
                self._used[key] = now
                self._used.move_to_end(key)
        while len(self._used) > self.max_entries:
            self._used.popitem(last=False)
        return cached
