"""Recorded LLM streams in tests/fixtures/streams, grouped by the adapter that reads them.

See tests/fixtures/streams/SOURCES.md for where each capture comes from and its quirks.
"""

from __future__ import annotations

from functools import cache

from tests.support.paths import STREAMS_DIR

_MISC_OPENAI_CHAT = (
    "misc/crusoe-vllm-style.sse",
    "misc/hf-tgi-chat-completions-data-nospace.sse",
    "misc/huggingface-router-novita.sse",
    "misc/snowflake-cortex-chat.sse",
    "misc/zai-glm-thinking-reasoning-content.sse",
)


def _glob(pattern: str) -> list[str]:
    return sorted(p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.glob(pattern))


def _openai_chat() -> tuple[str, ...]:
    names = [
        *_glob("openai-chat/*.sse"),
        *_glob("azure-openai/*.sse"),
        *_glob("groq/*.sse"),
        *(n for n in _glob("openrouter/*.sse") if "responses" not in n),
        "deepseek/deepseek-reasoner-reasoning-content.sse",
        *_glob("mistral/*.sse"),
        *_MISC_OPENAI_CHAT,
    ]
    return tuple(names)


OPENAI_CHAT_FIXTURES: tuple[str, ...] = _openai_chat()
ANTHROPIC_FIXTURES: tuple[str, ...] = tuple(_glob("anthropic/*.sse"))
ALL_SSE_FIXTURES: tuple[str, ...] = tuple(_glob("**/*.sse"))


@cache
def load(name: str) -> bytes:
    """The bytes of one fixture, by its path relative to tests/fixtures/streams."""
    path = STREAMS_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"missing stream fixture {name} (looked in {STREAMS_DIR})")
    return path.read_bytes()
GEMINI_SSE_FIXTURES: tuple[str, ...] = tuple(_glob("gemini/*.sse"))
GEMINI_JSON_FIXTURES: tuple[str, ...] = tuple(_glob("gemini/*.json-stream"))
RESPONSES_FIXTURES: tuple[str, ...] = (
    *_glob("openai-responses/*.sse"),
    "openrouter/openrouter-responses-api-reasoning-text.sse",
    "deepseek/deepseek-responses-api-reasoning-text.sse",
)
