"""`retimer demo` without a browser: option parsing, the text sources, the stream the content
server sends (read back by the proxy's own adapter), the content server's answers, and the
command's one-line errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retimer.cache.entry import new_entry
from retimer.cache.store import CacheStore
from retimer.cli.demo.command import MAX_PANES, parse_panes, read_source
from retimer.cli.demo.server import STATIC, DemoServer, Response, stream_batches
from retimer.cli.demo.source import (
    Block,
    Source,
    SourceError,
    anthropic_stream,
    builtin,
    delta_texts,
    from_capture,
    from_text_file,
)
from retimer.profile.model import ProfileError
from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Channel
from retimer.wire.tokenizer import count_tokens
from tests.support.paths import ROOT
from tests.support.proxy import run_cli

REPO = ROOT
FIXTURES = REPO / "tests" / "fixtures" / "streams"


# -- --profiles --------------------------------------------------------------------------------

def test_profiles_with_per_pane_overrides():
    panes = parse_panes("cerebras, gpt-5:tps=40 ,o3:thinking=high:ttft=2s", {"jitter": "0"})
    assert [p.spec for p in panes] == ["cerebras", "gpt-5:tps=40", "o3:thinking=high:ttft=2s"]
    assert panes[0].profile.name == "cerebras-llama-3.3-70b" and panes[0].profile.jitter == 0
    assert panes[1].profile.tps == 40
    assert panes[2].profile.thinking == "high"
    assert panes[2].profile.effective_name.startswith("openai-o3")
    # a pane's own override wins over the global one
    assert parse_panes("gpt-5:tps=40", {"tps": "10"})[0].profile.tps == 40


@pytest.mark.parametrize("spec, words", [
    ("nope", ["'nope'"]),
    ("gpt-5:tps", ["'gpt-5:tps'", "key=value"]),
    ("gpt-5:color=red", ["'gpt-5:color=red'", "ttft, tps"]),
    ("gpt-5:tps=fast", ["'gpt-5:tps=fast'"]),
    ("cerebras,,o3", ["empty item"]),
    ("", ["at least one"]),
    ("passthrough", ["passthrough"]),
    (",".join(["cerebras"] * (MAX_PANES + 1)), [f"at most {MAX_PANES}"]),
])
def test_bad_profile_specs_are_named(spec: str, words: list[str]):
    with pytest.raises(ProfileError) as e:
        parse_panes(spec, {})
    message = str(e.value)
    assert message.startswith("--profiles") and "\n" not in message
    for word in words:
        assert word in message


# -- sources -----------------------------------------------------------------------------------

def test_text_file_is_played_byte_for_byte(tmp_path: Path):
    path = tmp_path / "a.md"
    path.write_text("# Hi\n\nSome *text* and `code`.\n", encoding="utf-8")
    assert from_text_file(str(path)).blocks == (Block("text", path.read_text(encoding="utf-8")),)


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("dir", "is a directory"), (b"\xff\xfe\x00bad", "not UTF-8"), (b"  \n", "is empty"),
])
def test_bad_text_files(tmp_path: Path, content: bytes | str | None, message: str):
    path = tmp_path / "x.md"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(SourceError, match=message):
        read_source(str(path), "", "")


def test_entry_needs_cache():
    with pytest.raises(SourceError, match="--entry: needs --cache"):
        read_source("", "", "abc")


def test_builtin_capture_has_reasoning_then_a_markdown_answer():
    source = builtin()
    assert [b.kind for b in source.blocks] == ["reasoning", "text"]
    assert sum(count_tokens(b.text) for b in source.blocks) > 600
    assert "**" in source.blocks[0].text and "\n1. " in source.blocks[1].text


def _store_entry(cache: Path, rel: str, protocol: str, created: str) -> str:
    store = CacheStore(cache)
    body = (FIXTURES / rel).read_bytes()
    key = hashlib.sha256(rel.encode()).hexdigest()
    store.put(key, new_entry(200, "OK", [("content-type", "text/event-stream")], body,
                             url="https://api.example/v1", method="POST", protocol=protocol, created=created))
    return key


def test_cache_plays_the_newest_readable_entry(tmp_path: Path):
    cache = tmp_path / "cache"
    old = _store_entry(cache, "anthropic/llm-anthropic-haiku45-thinking.sse", "anthropic-messages",
                       "2026-01-01T00:00:00+00:00")
    _store_entry(cache, "mistral/mistral-magistral-thinking-chunks.sse", "openai-chat",
                 datetime.now(UTC).isoformat(timespec="seconds"))
    _store_entry(cache, "anthropic/pydantic-ai-thinking-stream.sse", "no-such-protocol",
                 "2027-01-01T00:00:00+00:00")  # newest, but nothing retimer can read
    newest = read_source("", str(cache), "")
    assert newest.label.startswith("cache entry") and "street" in newest.blocks[-1].text
    assert [b.kind for b in newest.blocks][:2] == ["reasoning", "text"]
    chosen = read_source("", str(cache), old[:10])
    assert chosen.blocks == from_capture("anthropic-messages", (FIXTURES / "anthropic/llm-anthropic-haiku45-thinking.sse")
                                         .read_bytes(), "x").blocks
    with pytest.raises(SourceError, match="no cache entry"):
        read_source("", str(cache), "ffff")
    with pytest.raises(SourceError, match="no such directory"):
        read_source("", str(tmp_path / "none"), "")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="holds no streamed response"):
        read_source("", str(tmp_path / "empty"), "")


# -- the stream every pane gets ----------------------------------------------------------------

def _texts() -> list[str]:
    texts = [b.text for b in builtin().blocks]
    texts += [(REPO / name).read_text(encoding="utf-8") for name in ("README.md", "docs/cli.md", "docs/records.md")]
    texts.append("supercalifragilistic  spaces\t\ttabs 東京👍🏽 don't 1234567 streamGenerateContent")
    return texts


@pytest.mark.parametrize("text", _texts())
def test_deltas_keep_the_token_count(text: str):
    """The proxy counts tokens per upstream delta, the page per whole block: they must agree."""
    deltas = delta_texts(text)
    assert "".join(deltas) == text
    assert sum(count_tokens(d) for d in deltas) == count_tokens(text)
    assert len(deltas) < count_tokens(text)  # several tokens per event, as a real upstream


def test_stream_reads_back_as_the_source_through_the_proxy_adapter():
    source = Source("t", (Block("reasoning", "Let me think **hard**."), Block("text", "# Answer\n\n`x = 1`\n"),
                          Block("tool", '{"city": "Paris", "unit": "C"}'), Block("text", "Done.")))
    adapter = AnthropicMessagesAdapter()
    events = adapter.feed(anthropic_stream(source)) + adapter.end()
    by_channel: dict[Channel, str] = {}
    for event in events:
        for channel, text in event.texts:
            by_channel[channel] = by_channel.get(channel, "") + text
    assert by_channel == {Channel.REASONING: "Let me think **hard**.", Channel.TEXT: "# Answer\n\n`x = 1`\nDone.",
                          Channel.TOOL_ARGS: '{"city": "Paris", "unit": "C"}'}
    assert adapter.failure is None and adapter.anomaly is None
    assert from_capture("anthropic-messages", anthropic_stream(source), "t").blocks == source.blocks


# -- the content server ------------------------------------------------------------------------

def _server() -> DemoServer:
    body = anthropic_stream(builtin())
    return DemoServer({"panes": [], "source": {"tokens": 1}}, body, b"warm",
                      lambda run: [{"demo_pane": 0, "demo_run": run}] if run == "r1" else [])


def test_content_server_answers():
    server = _server()
    page = server.answer("GET", "/")
    assert page.status == 200 and page.content_type.startswith("text/html") and b"pane-template" in page.body
    for name in STATIC:
        assert server.answer("GET", f"/demo/assets/{name}").status == 200
    assert server.answer("GET", "/demo/assets/../demo_cmd.py").status == 404
    assert server.answer("GET", "/demo/assets/capture.sse").status == 404  # only the listed files
    assert json.loads(server.answer("GET", "/demo/config.json").body)["source"] == {"tokens": 1}
    assert json.loads(server.answer("GET", "/demo/records?run=r1").body) == [{"demo_pane": 0, "demo_run": "r1"}]
    assert json.loads(server.answer("GET", "/demo/records?run=zz").body) == []
    stream = server.answer("POST", "/v1/messages")
    assert stream.content_type.startswith("text/event-stream") and stream.body == server.stream_body
    assert server.answer("POST", "/v1/messages?warmup=1").body == b"warm"
    assert server.streams == 1
    assert server.answer("POST", "/").status == 405
    assert server.answer("GET", "/nope").status == 404


def test_content_server_over_http():
    """A real HTTP exchange: keep-alive, the page's security headers, the stream in pieces."""
    async def exchange() -> tuple[bytes, bytes]:
        server = _server()
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /demo/config.json HTTP/1.1\r\nhost: x\r\n\r\n")
            first = await reader.readuntil(b'"tokens": 1}}')
            body = b'{"stream": true}'
            writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            second = await reader.read(-1)
            writer.close()
            return first, second
        finally:
            server.stop()

    first, second = asyncio.run(exchange())
    assert b"content-security-policy: default-src 'none'" in first and b"200" in first.split(b"\r\n")[0]
    assert b"\r\ntransfer-encoding: chunked\r\n" in second.lower() and b"message_stop" in second


def test_stream_is_written_in_batches_that_add_up():
    body = anthropic_stream(builtin())
    pieces = stream_batches(Response(200, body, "text/event-stream"))
    assert len(pieces) > 5 and b"".join(pieces) == body
    assert all(p.endswith(b"\n\n") for p in pieces)
    assert stream_batches(Response(200, b"{}", "application/json")) == [b"{}"]


# -- the command -------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--profiles", "gpt-5:tps=x"], "--profiles: 'gpt-5:tps=x'"),
    (["--profiles", "nope"], "--profiles: 'nope'"),
    (["--text", "/no/such.md"], "--text: /no/such.md: no such file"),
    (["--entry", "ab"], "--entry: needs --cache"),
    (["--port", "70000"], "--port: 70000"),
    (["--seed", "-1"], "--seed"),
    (["--text", "a", "--cache", "b"], "not allowed with"),
])
def test_command_errors_are_one_line(args: list[str], message: str):
    done = run_cli("demo", *args, "--no-browser")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_command_port_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("demo", "--port", str(port), "--no-browser")
    assert done.returncode == 2
    assert done.stderr.strip() == (f"retimer: error: --port: cannot listen on 127.0.0.1:{port}: "
                                   "Address already in use (try --port 0 for any free port)")


def test_command_help():
    done = run_cli("demo", "--help")
    assert done.returncode == 0
    for words in ("--profiles", "--text", "--cache", "--port", "--no-browser", "--seed", "autoplay"):
        assert words in done.stdout
