"""Session cassettes' matching (retimer.cassette.shape, retimer.cassette.match): what varies
between two runs of an agent is normalised away, a live call is answered by the recorded call
at its position or the nearest one with the same conversation, tool outputs that differ match
loosely, and a call that differs otherwise diverges with its reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retimer.cassette.match import CassetteMatcher, Match
from retimer.cassette.shape import CallShape, call_shape, normalize


@pytest.mark.parametrize("volatile, stable", [
    ("id 3f2b8c1e-9a4d-4c2e-8b1a-0f6e5d4c3b2a", "id <uuid>"),
    ("at 2026-12-05T14:03:11.123Z today", "at <time> today"),
    ("Today's date is 2026-12-05.", "Today's date is <time>."),
    ("started 14:03:11", "started <time>"),
    ("mtime 1764943391 and 1764943391123", "mtime <time> and <time>"),
    ("4 passed in 0.31s", "4 passed in <duration>"),
    ("took 340 ms", "took <duration>"),
    ("wrote /tmp/pytest-of-me/pytest-12/test_x0/out.txt", "wrote <tmp>"),
    ("tool call_aB3dE5fG7hJ9 and toolu_01XyZabc123", "tool <id> and <id>"),
    ("session 9f8e7d6c5b4a39281706", "session <id>"),
    ("x-anthropic-billing-header: cc_version=2.1.332.abe; cch=c03ec;\nYou are Claude Code",
     "<client stamp>\nYou are Claude Code"),
])
def test_what_varies_between_runs_is_replaced(volatile: str, stable: str) -> None:
    assert normalize(volatile) == stable


@pytest.mark.parametrize("text", [
    "def parse(line): return line.split(',')[2]",
    "3 messages, 12 files, version 1.2.3",
    "Please refactor the parser module",
    "the test_parse_fields function",
])
def test_what_the_model_reads_as_content_stays(text: str) -> None:
    assert normalize(text) == text


@given(st.text(max_size=200))
def test_normalising_twice_changes_nothing_more(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


def chat(*messages: dict[str, Any], model: str = "gpt-4.1") -> bytes:
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    return json.dumps({"model": model, "stream": True, "tools": tools,
                       "messages": [{"role": "system", "content": "You are an agent."},
                                    *messages]}).encode()


def agent_turns(call_id: str, output: str) -> list[bytes]:
    """An agent's two calls: the task, then the task with a tool call and its output."""
    task = {"role": "user", "content": "Run the tests"}
    called = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": call_id, "content": output}
    return [chat(task), chat(task, called, result)]


def shapes(bodies: list[bytes]) -> list[CallShape]:
    return [call_shape("POST", "/v1/chat/completions?x=1", b) for b in bodies]


def test_a_second_run_with_other_ids_and_timings_is_replayed_call_for_call() -> None:
    recorded = shapes(agent_turns("call_Ab12Cd34Ef56", "4 passed in 0.31s at /tmp/run-a1/x"))
    live = shapes(agent_turns("call_Zz98Yy76Xx54", "4 passed in 0.52s at /tmp/run-b7/x"))
    matcher = CassetteMatcher(recorded)
    verdicts = [matcher.match(s) for s in live]
    assert [(v.match, v.index) for v in verdicts] == [(Match.REPLAYED, 0), (Match.REPLAYED, 1)]
    assert matcher.unused == []


def test_a_timestamp_as_a_json_number_varies_but_other_numbers_count() -> None:
    """Codex stamps each input item with `create_time` (seconds, a float); other numbers
    (a count in a tool's arguments, a year) are the conversation's."""
    def item(when: float, count: int = 3) -> bytes:
        return json.dumps({"model": "gpt-5.5", "input": [{"role": "user", "content": "Run it",
                           "meta": {"create_time": when, "ms": int(when * 1000), "n": count}}]}).encode()

    first, again = (call_shape("POST", "/v1/responses", item(t)) for t in (1796488314.47, 1796488323.33))
    assert first == again
    assert call_shape("POST", "/v1/responses", item(1796488314.47, count=4)) != first
    assert call_shape("POST", "/v1/responses", item(2026.0)) != call_shape("POST", "/v1/responses", item(2027.0))


def test_a_tool_output_that_differs_matches_loosely_and_other_content_diverges() -> None:
    recorded = shapes(agent_turns("call_Ab12Cd34Ef56", "4 passed"))
    matcher = CassetteMatcher(recorded)
    assert matcher.match(shapes(agent_turns("call_Zz98Yy76Xx54", "4 passed"))[0]).match is Match.REPLAYED
    loose = matcher.match(shapes(agent_turns("call_Zz98Yy76Xx54", "3 passed, 1 failed"))[1])
    assert (loose.match, loose.index, loose.reason) == (Match.LOOSE, 1, "matched loosely")

    matcher = CassetteMatcher(recorded)
    other = chat({"role": "user", "content": "Run the linter"})
    diverged = matcher.match(call_shape("POST", "/v1/chat/completions", other))
    assert (diverged.match, diverged.index) == (Match.DIVERGED, None)
    assert diverged.reason == "its message 2 differs from the recorded call's"


@pytest.mark.parametrize("change, reason", [
    ({"model": "gpt-5"}, "its model differs from the recorded call's"),
    ({"path": "/v1/responses"}, "its path differs from the recorded call's"),
    ({"tools": "[]"}, "its tools or system prompt differ from the recorded call's"),
    ({"system": "You are a poet."}, "its message 1 differs from the recorded call's"),
])
def test_a_call_to_another_model_path_or_preamble_diverges_and_says_why(
        change: dict[str, str], reason: str) -> None:
    recorded = shapes(agent_turns("call_a", "ok"))
    body = json.loads(agent_turns("call_a", "ok")[0])
    if "model" in change:
        body["model"] = change["model"]
    if "system" in change:
        body["messages"][0]["content"] = change["system"]
    if "tools" in change:
        body["tools"] = json.loads(change["tools"])
    live = call_shape("POST", change.get("path", "/v1/chat/completions"), json.dumps(body).encode())
    verdict = CassetteMatcher(recorded).match(live)
    assert (verdict.match, verdict.reason) == (Match.DIVERGED, reason)


def test_calls_sent_side_by_side_in_another_order_each_find_their_own() -> None:
    a = chat({"role": "user", "content": "Write a title for this chat"}, model="gpt-4.1-mini")
    b = chat({"role": "user", "content": "Run the tests"})
    matcher = CassetteMatcher(shapes([a, b]))
    first, second = matcher.match(shapes([b])[0]), matcher.match(shapes([a])[0])
    assert (first.match, first.index, first.reason) == (Match.REPLAYED, 1,
                                                        "replayed (recorded as call 2)")
    assert (second.match, second.index) == (Match.REPLAYED, 0)


def test_a_conversation_that_grew_is_a_new_call_and_a_used_up_cassette_says_so() -> None:
    turns = agent_turns("call_a", "ok")
    matcher = CassetteMatcher(shapes(turns[:1]))
    assert matcher.match(shapes(turns[:1])[0]).match is Match.REPLAYED
    verdict = matcher.match(shapes(turns[1:])[0])
    assert (verdict.match, verdict.reason) == (Match.DIVERGED, "the cassette's 1 calls are used up")


@pytest.mark.parametrize("body", [
    {"model": "claude-sonnet-4-5", "messages": [  # Anthropic: a tool_result block
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01AbCdEf", "name": "ls",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01AbCdEf",
                                      "content": "OUTPUT"}]}]},
    {"model": "gpt-5", "input": [  # Responses: a function_call_output item
        {"role": "user", "content": "list files"},
        {"type": "function_call", "call_id": "call_AbCdEf12", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_AbCdEf12", "output": "OUTPUT"}]},
    {"contents": [  # Gemini: a functionResponse part
        {"role": "user", "parts": [{"text": "list files"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls",
                                                        "response": {"out": "OUTPUT"}}}]}]},
])
def test_each_apis_tool_output_is_what_may_differ_loosely(body: dict[str, Any]) -> None:
    def shape(output: str) -> CallShape:
        return call_shape("POST", "/x", json.dumps(body).replace("OUTPUT", output).encode())

    a, b = shape("a.txt b.txt"), shape("a.txt c.txt")
    assert a.messages[:2] == b.messages[:2] and a.messages[2] != b.messages[2]
    assert a.loose == b.loose
    assert CassetteMatcher([a]).match(b).match is Match.LOOSE


def test_a_shape_keeps_digests_only_and_reads_back() -> None:
    (shape,) = shapes([chat({"role": "user", "content": "my secret project plan"})])
    stored = json.dumps(shape.to_json())
    assert "secret" not in stored and "You are an agent" not in stored
    assert CallShape.from_json(json.loads(stored)) == shape
    assert shape.path == "/v1/chat/completions" and shape.model == "gpt-4.1" and shape.api == "chat"


@pytest.mark.parametrize("bad, message", [
    ([], "not a JSON object"),
    ({"method": "POST", "path": "/", "api": "chat", "model": 1, "preamble": ""}, "not a string"),
    ({"method": "POST", "path": "/", "api": "chat", "model": "m", "preamble": "",
      "messages": ["a"], "loose": []}, "another number of messages"),
    ({"method": "POST", "path": "/", "api": "chat", "model": "m", "preamble": "",
      "messages": "a", "loose": "a"}, "not a list of strings"),
])
def test_a_broken_shape_is_one_error(bad: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CallShape.from_json(bad)


def test_a_body_that_is_not_json_counts_by_its_bytes() -> None:
    a, b = (call_shape("POST", "/rpc", x) for x in (b"\x00\x01grpc", b"\x00\x02grpc"))
    assert a.api == "" and len(a.messages) == 1 and a.messages != b.messages
    assert CassetteMatcher([a]).match(call_shape("POST", "/rpc", b"\x00\x01grpc")).match is Match.REPLAYED
