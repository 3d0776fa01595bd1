"""Prompt estimation from request bodies (every API shape) and the session's prompt cache."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from retimer.wire.prompt import (
    MEDIA_TOKENS,
    MESSAGE_OVERHEAD,
    PromptCache,
    PromptInfo,
    TurnPrompts,
    estimate_prompt,
)
from retimer.wire.request import RequestBody
from retimer.wire.tokenizer import count_tokens

SYSTEM = "You are a careful assistant. Answer briefly and cite sources."
QUESTION = "What is the capital of France, and why did it become the capital?"
ANSWER = "Paris. It grew around the Île de la Cité and the Capetian kings ruled from it."
IMAGE = base64.b64encode(bytes(range(256)) * 40).decode()
C = count_tokens


def est(body: dict[str, Any], scope: str = "") -> PromptInfo:
    return estimate_prompt(json.dumps(body).encode(), scope)


# ---------------------------------------------------------------- body shapes


def test_openai_chat_messages_with_parts_and_an_image() -> None:
    body = {"model": "gpt-5", "max_tokens": 100, "max_completion_tokens": 900, "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [
            {"type": "text", "text": QUESTION},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE}"}}]},
    ]}
    info = est(body)
    assert info.api == "chat" and info.model == "gpt-5"
    assert info.tokens == C(SYSTEM) + C(QUESTION) + MEDIA_TOKENS + 2 * MESSAGE_OVERHEAD
    assert info.max_output_tokens == 900  # max_completion_tokens wins over the legacy key
    assert [n for n, _ in info.prefixes] == [C(SYSTEM) + 3, info.tokens]


def test_openai_responses_input_and_instructions() -> None:
    as_text = est({"model": "o3", "instructions": SYSTEM, "input": QUESTION,
                   "max_output_tokens": 2000, "reasoning": {"effort": "high"}})
    assert as_text.api == "responses" and as_text.max_output_tokens == 2000
    assert as_text.tokens == C(SYSTEM) + C(QUESTION)
    items = est({"input": [
        {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        {"type": "function_call_output", "call_id": "call_1", "output": ANSWER},
        {"type": "reasoning", "encrypted_content": "gAAAA" + "x" * 400, "summary": []}]})
    assert items.tokens == C(QUESTION) + C(ANSWER) + 3 * MESSAGE_OVERHEAD
    assert len(items.prefixes) == 3


def test_anthropic_system_blocks_tools_thinking_and_tool_results() -> None:
    tools = [{"name": "search", "description": "Search the web",
              "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8000, "tools": tools,
            "thinking": {"type": "enabled", "budget_tokens": 4000},
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Let me think.", "signature": "Eq" * 300},
                    {"type": "tool_use", "id": "tu_1", "name": "search", "input": {"q": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": ANSWER}]}]}
    info = est(body)
    tool_tokens = C(json.dumps(tools, separators=(",", ":")))  # schemas reach the model as text
    assert info.api == "chat" and info.max_output_tokens == 8000 and info.reasoning_budget == 4000
    assert info.tokens == (tool_tokens + C(SYSTEM) + C(QUESTION) + C("Let me think.")
                           + C("search") + C("Paris") + C(ANSWER) + 3 * MESSAGE_OVERHEAD)
    assert len(info.prefixes) == 4  # tools + system, then one per message
    assert est({**body, "thinking": {"type": "disabled"}}).reasoning_budget == 0


def test_gemini_contents_system_instruction_and_generation_config() -> None:
    body = {"systemInstruction": {"parts": [{"text": SYSTEM}]},
            "contents": [{"role": "user", "parts": [
                {"text": QUESTION}, {"inlineData": {"mimeType": "image/png", "data": IMAGE}}]},
                {"role": "model", "parts": [{"text": ANSWER}]}],
            "generationConfig": {"maxOutputTokens": 1024, "thinkingConfig": {"thinkingBudget": 0}}}
    info = est(body)
    assert info.api == "gemini" and info.max_output_tokens == 1024 and info.reasoning_budget == 0
    assert info.tokens == C(SYSTEM) + C(QUESTION) + MEDIA_TOKENS + C(ANSWER) + 2 * MESSAGE_OVERHEAD
    snake = est({"system_instruction": {"parts": [{"text": SYSTEM}]},
                 "contents": [{"parts": [{"text": QUESTION}]}],
                 "generation_config": {"max_output_tokens": 77}})
    assert snake.tokens == C(SYSTEM) + C(QUESTION) + 3 and snake.max_output_tokens == 77


def test_ollama_chat_and_generate() -> None:
    chat = est({"model": "llama3.2", "options": {"num_predict": 256}, "messages": [
        {"role": "user", "content": QUESTION, "images": [IMAGE]}]})
    assert chat.api == "chat" and chat.max_output_tokens == 256
    assert chat.tokens == C(QUESTION) + MEDIA_TOKENS + MESSAGE_OVERHEAD
    gen = est({"model": "llama3.2", "prompt": QUESTION, "system": SYSTEM,
               "context": list(range(500)), "options": {"num_predict": -1}})
    assert gen.api == "generate" and gen.max_output_tokens is None  # -1 means unlimited
    assert gen.tokens == C(SYSTEM) + 500 + C(QUESTION)  # `context` holds earlier token ids


def test_generic_text_empty_and_binary_bodies() -> None:
    generic = est({"action": "next", "conversation": {"parts": [QUESTION, ANSWER]}, "n": 3})
    assert generic.api == "generic" and generic.tokens == C("next") + C(QUESTION) + C(ANSWER)
    assert estimate_prompt(json.dumps([QUESTION, ANSWER])).tokens == C(QUESTION) + C(ANSWER)
    text = estimate_prompt(f"f.req={QUESTION}".encode())
    assert text.api == "text" and text.tokens == C(f"f.req={QUESTION}")
    assert estimate_prompt(b"") == PromptInfo(0, "empty") and not estimate_prompt(b"").known
    assert estimate_prompt(b"{}").known
    assert estimate_prompt(None).tokens == 0
    assert estimate_prompt(b"\xff\xfe\x00binary").api == "binary"
    assert estimate_prompt(b'{"messages": [truncated').api == "text"  # never an exception


@pytest.mark.parametrize("body,hint", [
    ({"max_tokens": 50}, 50), ({"max_completion_tokens": 60}, 60), ({"max_output_tokens": 70}, 70),
    ({"generationConfig": {"maxOutputTokens": 80}}, 80), ({"options": {"num_predict": 90}}, 90),
    ({"inferenceConfig": {"maxTokens": 100}}, 100), ({"max_tokens": 0}, None),
    ({"max_tokens": "lots"}, None), ({"max_tokens": True}, None), ({}, None),
])
def test_max_output_hints(body: dict[str, Any], hint: int | None) -> None:
    assert est({"messages": [], **body}).max_output_tokens == hint


def test_a_long_body_is_sampled_close_to_the_exact_count_and_fast() -> None:
    prose = "The committee reviewed forty-two proposals, 17 of them late. " * 12_000
    code = "def add(a: int, b: int) -> int:\n    return a + b  # sum\n\n" * 8_000
    body = json.dumps({"messages": [{"role": "user", "content": prose},
                                    {"role": "user", "content": code}]}).encode()
    start = time.process_time()  # CPU, not wall time: a busy machine must not fail it
    info = estimate_prompt(body)
    elapsed = time.process_time() - start
    exact = C(prose) + C(code) + 2 * MESSAGE_OVERHEAD
    assert abs(info.tokens - exact) / exact < 0.01
    assert elapsed < 0.15  # 1.2 MB: counting it all would take ~0.3 s of CPU


# ---------------------------------------------------------------- prefixes and the cache


def chat(*contents: str, scope: str = "api", model: str = "m") -> PromptInfo:
    roles = ["user", "assistant"]
    return est({"model": model, "messages": [{"role": roles[i % 2], "content": c}
                                             for i, c in enumerate(contents)]}, scope)


LONG = "background material " * 700  # ~1,400 tokens


def test_a_growing_conversation_shares_its_earlier_prefixes() -> None:
    one, two = chat(LONG, QUESTION), chat(LONG, QUESTION, ANSWER, "Thanks, and Lyon?")
    assert two.prefixes[:2] == one.prefixes
    assert chat(LONG + "!", QUESTION).prefixes[0][1] != one.prefixes[0][1]
    assert chat(LONG, QUESTION, model="other").prefixes[0][1] != one.prefixes[0][1]
    assert chat(LONG, QUESTION, scope="elsewhere").prefixes[0][1] != one.prefixes[0][1]


def responses(*items: str, previous: str | None = None) -> RequestBody:
    """A Responses request as Codex sends it on a WebSocket (`response.create`, its tools)."""
    body: dict[str, Any] = {"type": "response.create", "model": "gpt-5", "tools": [{"name": "shell"}],
                            "input": [{"type": "message", "role": "user", "content": t} for t in items]}
    if previous is not None:
        body["previous_response_id"] = previous
    return RequestBody(json.dumps(body).encode())


def test_a_websocket_turn_that_names_the_previous_response_continues_its_prompt() -> None:
    """Codex over a WebSocket sends only the new input after `previous_response_id`: the turn's
    prompt is the previous turn's, its answer and the new items, as the same session over SSE
    (every item, each time) gives it; its prefixes continue the previous turn's."""
    turns = TurnPrompts()
    first = turns.estimate(responses(LONG, QUESTION), "h", answered=0)
    assert first == estimate_prompt(responses(LONG, QUESTION), "h")
    second = turns.estimate(responses("Thanks, and Lyon?", previous="resp_1"), "h", answered=40)
    whole = estimate_prompt(responses(LONG, QUESTION, "Thanks, and Lyon?"), "h")
    assert second.tokens == first.tokens + 40 + C("Thanks, and Lyon?") + MESSAGE_OVERHEAD
    assert second.tokens == pytest.approx(whole.tokens + 40, abs=2)
    assert second.prefixes[: len(first.prefixes)] == first.prefixes
    assert second.api == "responses" and second.model == "gpt-5"
    cache = PromptCache()
    cache.lookup(first, 0.0, 1024, 300)
    assert cache.lookup(second, 1.0, 1024, 300) == first.tokens  # the earlier turn is cached
    # a turn that names no previous response is a prompt of its own, as is the first one
    fresh = turns.estimate(responses(QUESTION), "h", answered=10)
    assert fresh == estimate_prompt(responses(QUESTION), "h")
    lone = TurnPrompts().estimate(responses(QUESTION, previous="resp_0"), "h", answered=10)
    assert lone == estimate_prompt(responses(QUESTION, previous="resp_0"), "h")


def test_cache_returns_the_longest_earlier_prefix_above_the_minimum() -> None:
    cache = PromptCache()
    one, two = chat(LONG, QUESTION), chat(LONG, QUESTION, ANSWER, "Thanks, and Lyon?")
    assert cache.lookup(one, 0.0, 1024, 300) == 0  # cold
    assert cache.lookup(two, 10.0, 1024, 300) == one.tokens  # the earlier turn is cached
    assert cache.lookup(two, 20.0, 1024, 300) == two.tokens  # the identical request, whole
    small = chat("short", QUESTION)
    assert cache.lookup(small, 30.0, 1024, 300) == 0
    assert cache.lookup(small, 40.0, 1024, 300) == 0  # below min_tokens: never cached
    assert cache.lookup(small, 50.0, 10, 300) == 0  # ...unless the minimum allows: stored now
    assert cache.lookup(small, 60.0, 10, 300) == small.tokens


def test_cache_entries_expire_after_ttl_and_a_hit_refreshes_them() -> None:
    cache = PromptCache()
    one = chat(LONG, QUESTION)
    cache.lookup(one, 0.0, 1024, 300)
    assert cache.lookup(one, 299.0, 1024, 300) == one.tokens  # a hit refreshes it to 299
    assert cache.lookup(one, 598.0, 1024, 300) == one.tokens
    assert cache.lookup(one, 899.0, 1024, 300) == 0  # 301 s idle: gone
    other = chat(LONG, "another question")
    assert cache.lookup(other, 900.0, 1024, 300) == other.prefixes[0][0]  # stored at 899


def test_cache_is_bounded_and_evicts_the_least_recently_used() -> None:
    cache = PromptCache(max_entries=4)
    prompts = [chat(LONG + str(i), QUESTION) for i in range(3)]  # 2 prefixes each
    for i, p in enumerate(prompts):
        cache.lookup(p, float(i), 1024, 1e9)
    assert len(cache) == 4
    assert cache.lookup(prompts[0], 10.0, 1024, 1e9) == 0  # evicted
    assert cache.lookup(prompts[2], 11.0, 1024, 1e9) == prompts[2].tokens
    with pytest.raises(ValueError):
        PromptCache(max_entries=0)


def test_odd_bodies_never_raise() -> None:
    deep = "[" * 100_000 + "]" * 100_000  # deeper than the recursion limit
    assert estimate_prompt(deep).api == "text"
    big_list = json.dumps(["some words here"] * 50_000)
    info = estimate_prompt(big_list)
    assert info.api == "generic" and abs(info.tokens - 150_000) / 150_000 < 0.01
    assert estimate_prompt(b"null").tokens == 0 and estimate_prompt(b"42").api == "generic"
    assert estimate_prompt(json.dumps({"messages": "not a list", "prompt": None})).api == "generate"
