"""Whole (non-streaming) LLM responses are held until the profile would have finished them."""

from __future__ import annotations

import json

import httpx
import pytest

from retimer.wire.classify import is_llm_call
from retimer.wire.protocols.base import RequestShape
from retimer.wire.whole import timing_line
from tests.support.fixture_streams import load
from tests.support.proxy import RetimerProxy
from tests.support.upstream import FakeLLM

FIXTURE = "nonstream/openai-chat-completion.json"
pytestmark = pytest.mark.fake_llm(scope="module")  # the fake of the tests that need one


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method, "h", path, {}, b"")


@pytest.mark.parametrize(("method", "path", "ctype", "llm_host", "expected"), [
    ("POST", "/v1/chat/completions", "application/json", False, True),
    ("POST", "/v1/messages", "application/json; charset=utf-8", False, True),
    ("POST", "/v1/embeddings", "application/json", True, True),  # held only if it has text
    ("POST", "/v1/embeddings", "application/json", False, False),
    ("GET", "/v1/chat/completions", "application/json", True, False),
    ("POST", "/v1/chat/completions", "text/html", True, False),
])
def test_which_calls_are_llm_calls(method: str, path: str, ctype: str, llm_host: bool,
                                   expected: bool) -> None:
    assert is_llm_call(shape(path, method), ctype, llm_host) is expected


def test_timing_line() -> None:
    assert timing_line(b'{"a": [1, 2],\n "b": "x"}') == b'{"a":[1,2],"b":"x"}\n'
    assert timing_line(b"[1, 2]") is None
    assert timing_line(b"{broken") is None
    assert timing_line(b'{"error": {"message": "bad key"}}') is None


def test_whole_response_is_held_and_unchanged(tmp_path, fake: FakeLLM) -> None:
    with RetimerProxy(tmp_path, "--profile", "gpt-5", "--ttft", "500ms", "--tps", "40",
                      "--jitter", "0") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as c:
            r = c.post(fake.url + "/v1/chat/completions", json={"messages": []},
                       headers={"x-fake-fixture": FIXTURE})
        assert r.status_code == 200
        assert r.content == load(FIXTURE)
        [record] = proxy.records(1)
    assert record["protocol"] == "non-streaming"
    tokens = record["emitted"]["tokens"]
    assert tokens == record["upstream"]["tokens"] > 30
    # the body left when the profile's last token was due: TTFT + (n - 1) gaps of 25 ms
    expected_ms = 500 + (tokens - 1) * 25
    assert record["emitted"]["ttft_ms"] >= expected_ms - 2
    assert record["target"]["ttft_ms"] == 500


def test_error_bodies_and_other_json_are_not_held(tmp_path, fake: FakeLLM) -> None:
    with RetimerProxy(tmp_path, "--profile", "gpt-5", "--ttft", "2s", "--jitter", "0") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as c:
            r = c.get(fake.url + "/v1/models")  # GET: not a completion
            assert r.status_code == 200 and json.loads(r.content)["ok"]
            r = c.post(fake.url + "/v1/chat/completions", json={},
                       headers={"x-fake-fixture": "nonstream/missing.json"})
            assert r.status_code == 404
        assert proxy.records(0, timeout=0.5) == []


def test_passthrough_records_a_whole_response_without_holding_it(tmp_path, fake: FakeLLM) -> None:
    """A passthrough run (a study's control condition) records every call, as its streams do."""
    with RetimerProxy(tmp_path, "--profile", "passthrough") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as c:
            r = c.post(fake.url + "/v1/chat/completions", json={"messages": []},
                       headers={"x-fake-fixture": FIXTURE})
        assert r.content == load(FIXTURE)
        [record] = proxy.records(1)
    assert (record["protocol"], record["profile"], record["outcome"]) == (
        "non-streaming", "passthrough", "complete")
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 5


def test_reverse_mode_holds_every_llm_call_of_its_upstream(tmp_path, fake: FakeLLM) -> None:
    """In reverse mode the upstream is an LLM API by definition: a non-streaming Gemini call
    (Gemini CLI's router) to a loopback upstream is held and recorded like a streaming one."""
    gemini = "nonstream/gemini-generate-content.json"
    with RetimerProxy(tmp_path, "--upstream", fake.url, "--profile", "gpt-5", "--ttft", "400ms",
                      "--jitter", "0") as proxy:
        with httpx.Client(timeout=30) as c:
            r = c.post(proxy.url + "/v1beta/models/gemini-2.5-flash:generateContent",
                       json={"contents": [{"role": "user", "parts": [{"text": "route me"}]}]},
                       headers={"x-fake-fixture": gemini})
            models = c.get(proxy.url + "/v1beta/models")  # not a call: never held
        assert r.status_code == 200 and r.content == load(gemini)
        assert models.status_code == 200
        [record] = proxy.records(1)
    assert (record["protocol"], record["outcome"]) == ("non-streaming", "complete")
    assert record["url"].endswith(":generateContent")
    assert record["emitted"]["ttft_ms"] >= 400 - 2 and record["target"]["ttft_ms"] == 400
