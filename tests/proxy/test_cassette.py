"""Session cassettes through the real proxy (retimer.proxy.cassette_addon) with the real openai
SDK: an agent-like session recorded once against an upstream, then replayed with the upstream
gone at 15,000 tok/s: each call answered with its own recorded reply (its tool ids and timings
differ in the second run), the records naming each match; a call the cassette does not hold is
a 400 in the API's error shape; bad options are one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from retimer.cassette.store import INDEX, read_cassette
from tests.support.fixture_streams import load
from tests.support.inproc_proxy import InProcessProxy
from tests.support.proxy import run_cli
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

REPLIES = ["I will run the tests first.", "All four tests pass; the parser is fixed."]
FAST = ("--profile", "human-reading", "--ttft", "20ms", "--tps", "3000", "--jitter", "0")


def session(url: str, proxy: str, call_id: str, output: str,
            on_reply: Any = None) -> list[str]:
    """Two calls of an agent: the task, then the task with a tool call and its output."""
    with openai.DefaultHttpxClient(proxy=proxy) as http:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", http_client=http)
        task: list[Any] = [{"role": "user", "content": "Fix the parser and run the tests"}]
        turns = [task, [*task, {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": call_id, "content": output}]]
        texts = []
        for i, messages in enumerate(turns):
            if on_reply:
                on_reply(i)
            stream = client.chat.completions.create(model="gpt-test", messages=messages, stream=True)
            texts.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
        return texts


def test_a_session_recorded_once_replays_with_no_upstream_call_by_call(tmp_path: Path) -> None:
    cassette = tmp_path / "cassette"
    with FakeLLM() as fake:
        def reply(i: int) -> None:
            fake.openai_body = make_openai_stream(REPLIES[i])

        with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)) as proxy:
            recorded = session(fake.url, proxy.url, "call_Ab12Cd34Ef56", "4 passed in 0.31s", reply)
            proxy.records(2)
        url = fake.url
    assert recorded == REPLIES
    _, calls = read_cassette(cassette)
    assert [c.entry.status for c in calls] == [200, 200]
    assert [len(c.shape.messages) for c in calls] == [1, 3]
    assert all(c.upstream.tokens and c.upstream.ttft_ms is not None for c in calls)
    assert "Fix the parser" not in (cassette / INDEX).read_text()  # digests only
    shown = run_cli("cassette", "show", str(cassette))
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and lines[0].startswith(f"cassette {cassette}: 2 calls, recorded ")
    assert [line.split()[:5] for line in lines[2:]] == [
        ["1", "openai-chat", "gpt-test", "1", "200"], ["2", "openai-chat", "gpt-test", "3", "200"]]
    assert all(len(line) <= 80 for line in lines[1:])
    as_json = json.loads(run_cli("cassette", "show", str(cassette), "--json").stdout)
    assert [(c["call"], c["messages"], c["tokens"]) for c in as_json["calls"]] == [
        (1, 1, calls[0].upstream.tokens), (2, 3, calls[1].upstream.tokens)]

    # the upstream is gone: every call comes from the cassette
    with InProcessProxy(tmp_path / "play", "--profile", "human-reading", "--tps", "15000",
                        "--ttft", "50ms", "--replay", str(cassette)) as proxy:
        replayed = session(url, proxy.url, "call_Zz98Yy76Xx54", "4 passed in 0.52s")
        records = proxy.records(2)
        with openai.DefaultHttpxClient(proxy=proxy.url) as http:
            client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", http_client=http,
                                   max_retries=0)
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(
                    model="gpt-test", stream=True,
                    messages=[{"role": "user", "content": "Something else entirely"}])
    assert replayed == REPLIES
    assert [r["cassette"] for r in records] == [
        {"match": "replayed", "call": 1, "reason": "replayed"},
        {"match": "replayed", "call": 2, "reason": "replayed"}]
    assert all(r["outcome"] == "complete" and r["target"]["tps"] == 15000 for r in records)
    assert "matches no recorded call" in str(refused.value)
    assert "the cassette's 2 calls are used up" in str(refused.value)


def test_a_tool_output_that_differs_is_matched_loosely(tmp_path: Path) -> None:
    cassette = tmp_path / "cassette"
    with FakeLLM(make_openai_stream("done")) as fake:
        with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)) as proxy:
            session(fake.url, proxy.url, "call_Ab12Cd34Ef56", "a.txt b.txt")
            proxy.records(2)
        with InProcessProxy(tmp_path / "play", *FAST, "--replay", str(cassette)) as proxy:
            session(fake.url, proxy.url, "call_Ab12Cd34Ef56", "a.txt c.txt")
            records = proxy.records(2)
            served = len(fake.requests)
    assert [r["cassette"]["match"] for r in records] == ["replayed", "matched loosely"]
    assert served == 2  # the recording's two calls only: the replay sent none upstream


@pytest.mark.parametrize("args, message", [
    (["--record", "{d}", "--replay", "{d}"], "retimer: error: --record and --replay: one at a time"),
    (["--replay", "{d}/none"], "/none/cassette.json: no cassette here"),
    (["--record", "{d}/c", "--workers", "2"], "--record: one process records a session, in order; leave out --workers"),
    (["--replay", "{d}/none", "--workers", "2"], "/none/cassette.json: no cassette here"),  # said by each worker
])
def test_bad_cassette_options_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli(*[a.format(d=tmp_path) for a in args], "--listen-port", "0",
                     "--set", f"confdir={tmp_path}", timeout=60)
    assert result.returncode != 0
    assert message in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_damaged_cassette_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / INDEX).write_text(json.dumps({"format": 99, "calls": []}))
    result = run_cli("--replay", str(tmp_path / "c"), "--listen-port", "0", timeout=30)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "format 99; this retimer reads formats 2, 3" in result.stderr, result.stderr


NOTICE = "streams so far were upstream-bound: the upstream is slower than the profile"


@pytest.mark.parametrize("slow_upstream", [True, False], ids=["upstream-bound", "paced"])
def test_a_run_whose_streams_are_upstream_bound_is_told_once_how_to_feel_that_speed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, slow_upstream: bool) -> None:
    body = make_openai_stream(" ".join(f"w{i}" for i in range(12)))
    upstream = FakeLLM(body, per_event_gap=0.03) if slow_upstream else FakeLLM(body)
    profile = ("--tps", "5000", "--ttft", "1ms") if slow_upstream else ("--tps", "200", "--ttft", "300ms")
    with upstream as fake, InProcessProxy(tmp_path, "--profile", "human-reading", "--jitter", "0",
                                          *profile) as proxy:
        with openai.DefaultHttpxClient(proxy=proxy.url) as http:
            client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", http_client=http)
            for _ in range(7):
                list(client.chat.completions.create(model="m", stream=True,
                                                    messages=[{"role": "user", "content": "hi"}]))
        records = proxy.records(7)
    said = [r.getMessage() for r in caplog.records if NOTICE in r.getMessage()]
    bound = sum(bool(r["upstream_bound"]) for r in records)
    if slow_upstream:
        assert bound >= 5 and len(said) == 1, (bound, said)
        assert "--record DIR" in said[0] and "--replay DIR" in said[0]
    else:
        assert bound == 0 and said == []


def test_a_whole_answer_is_recorded_decoded_and_replayed_held_by_the_profile(tmp_path: Path) -> None:
    """A non-streaming call (Gemini CLI's router, a title call), gzip-encoded by its upstream:
    the cassette keeps the decoded body, the replay sends it whole, byte for byte, held until
    the replay's profile would have finished it."""
    fixture = "nonstream/openai-chat-completion.json"
    cassette = tmp_path / "cassette"

    def call(proxy: InProcessProxy, url: str) -> httpx.Response:
        with httpx.Client(proxy=proxy.url, timeout=30) as client:
            return client.post(url + "/v1/chat/completions", headers={"x-fake-fixture": fixture},
                               json={"model": "gpt-test", "messages": [
                                   {"role": "user", "content": "Route this, 2026-12-05T10:00:00Z"}]})

    with FakeLLM(gzip=True) as fake:
        with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)) as proxy:
            first = call(proxy, fake.url)
            proxy.records(1)
        url = fake.url
    _, calls = read_cassette(cassette)
    assert [(c.entry.protocol, c.entry.body) for c in calls] == [("non-streaming", load(fixture))]
    with InProcessProxy(tmp_path / "play", "--profile", "human-reading", "--ttft", "300ms",
                        "--tps", "15000", "--jitter", "0", "--replay", str(cassette)) as proxy:
        again = call(proxy, url)
        [record] = proxy.records(1)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content == load(fixture)
    assert record["protocol"] == "non-streaming" and record["cassette"]["match"] == "replayed"
    assert record["emitted"]["tokens"] == calls[0].upstream.tokens > 30
    assert record["emitted"]["ttft_ms"] >= 299  # held for the replay's TTFT at least


def test_a_replay_that_diverges_from_its_start_is_told_once_that_it_is_another_session(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cassette = tmp_path / "cassette"
    with FakeLLM(make_openai_stream("done")) as fake:
        with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)) as proxy:
            session(fake.url, proxy.url, "call_Ab12Cd34Ef56", "a.txt")
            proxy.records(2)
        url = fake.url
    with InProcessProxy(tmp_path / "play", *FAST, "--replay", str(cassette)) as proxy:
        with openai.DefaultHttpxClient(proxy=proxy.url) as http:
            client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", http_client=http,
                                   max_retries=0)
            for task in ("Write a poem", "Write another", "And a third", "And a fourth"):
                with pytest.raises(openai.BadRequestError):
                    client.chat.completions.create(model="gpt-test", stream=True, messages=[
                        {"role": "user", "content": task}])
    said = [r.getMessage() for r in caplog.records if "all diverged" in r.getMessage()]
    assert said == [f"retimer: cassette: the session's first 3 calls all diverged from {cassette}: "
                    "it does not follow the recording (another task, working directory, model or "
                    "client version?); record it again"]


def test_a_call_that_diverges_goes_upstream_when_asked_and_its_key_stays_out_of_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--replay-diverged upstream: a call the cassette does not hold is answered live (the
    upstream's reply, paced by the profile), its record says it diverged; the warning names its
    path with a key in the query (Gemini's `?key=`) redacted."""
    cassette = tmp_path / "cassette"
    with FakeLLM() as fake:
        fake.openai_body = make_openai_stream("recorded")
        with InProcessProxy(tmp_path / "rec", *FAST, "--record", str(cassette)) as proxy:
            session(fake.url, proxy.url, "call_Ab12Cd34Ef56", "a.txt")
            proxy.records(2)
        fake.openai_body = make_openai_stream("live from the upstream")
        before = len(fake.requests)
        with InProcessProxy(tmp_path / "play", *FAST, "--replay", str(cassette),
                            "--replay-diverged", "upstream") as proxy:
            with openai.DefaultHttpxClient(proxy=proxy.url) as http:
                client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", http_client=http,
                                       max_retries=0, default_query={"key": "QKEY-SECRET-123"})
                stream = client.chat.completions.create(model="gpt-test", stream=True, messages=[
                    {"role": "user", "content": "Something else entirely"}])
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            (record,) = proxy.records(1)
        sent = len(fake.requests) - before
    assert text == "live from the upstream" and sent == 1
    assert record["cassette"]["match"] == "diverged" and record["outcome"] == "complete"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "a call to /v1/chat/completions?key=REDACTED diverged" in logged
    assert "QKEY-SECRET-123" not in logged


@pytest.mark.parametrize("args, line", [
    (["--record", "{d}/c"], "  cassette recording this session's calls into {d}/c"),
    (["--replay", "{d}/c"], "  cassette answering calls from {d}/c, no upstream (any speed)"),
    (["--replay", "{d}/c", "--replay-diverged", "upstream"],
     "  cassette answering calls from {d}/c, others go upstream (any speed)"),
    ([], "  note     a live stream is never sped up past its upstream: --record, --replay"),
])
def test_the_banner_says_where_the_calls_come_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], line: str) -> None:
    from retimer.cli.proxy.banner import print_banner
    from retimer.cli.proxy.options import ProxyConfig, proxy_parser
    from retimer.proxy.certs import ensure_ca

    ensure_ca(tmp_path)
    parsed = proxy_parser().parse_args(
        ["--profile", "cerebras", "--set", f"confdir={tmp_path}", *(a.format(d=tmp_path) for a in args)])
    print_banner(ProxyConfig.from_args(parsed), None, None)
    shown = capsys.readouterr().out.splitlines()
    assert line.format(d=tmp_path) in shown, shown
    assert sum("cassette" in s or s.startswith("  note") for s in shown) == 1, shown
