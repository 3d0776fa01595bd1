"""The chat web apps, Bedrock and TGI through the real proxy: each format gets its own adapter,
the client sees the same text per channel, and Bedrock's real client (botocore) reads the
re-timed event stream."""

from __future__ import annotations

import httpx
import pytest

from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import RequestShape
from tests.support.fixture_streams import load
from tests.support.proxy import RetimerProxy
from tests.support.upstream import FakeLLM

PROFILE = ("--profile", "gpt-5", "--tps", "3000", "--ttft", "150ms")

CTYPES = {".sse": "text/event-stream", ".txt": "text/plain", ".bin": "application/vnd.amazon.eventstream"}
pytestmark = [pytest.mark.fake_llm(bursts=3, scope="module"),
              pytest.mark.retimer_proxy(*PROFILE, scope="module")]


def _channels(host: str, path: str, ctype: str, data: bytes) -> tuple[str, dict[str, str]]:
    adapter_cls = find_adapter(RequestShape("POST", host, path, {}, b"{}"), ctype)
    assert adapter_cls is not None
    adapter = adapter_cls()
    out: dict[str, str] = {}
    for event in [*adapter.feed(data), *adapter.end()]:
        for channel, text in event.texts:
            out[channel] = out.get(channel, "") + text
    return adapter_cls.name, out


CASES = [
    ("chatgpt.com", "/backend-api/f/conversation", "chatgpt-web/f-conversation-v1-free-gpt-5-2-list.sse",
     "chatgpt-web"),
    ("chatgpt.com", "/backend-api/conversation",
     "chatgpt-web/backend-api-conversation-legacy-cumulative-2024-10-gpt-4o-mini.sse", "chatgpt-web"),
    ("claude.ai", "/api/organizations/o-1/chat_conversations/c-1/completion",
     "claude-web/claudeai-completion-tail-excerpt-citations-ping-comment.sse", "claude-web"),
    ("gemini.google.com",
     "/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?bl=x&rt=c",
     "gemini-web/streamgenerate-rt-c-head-excerpt.txt", "gemini-web"),
    ("chat.deepseek.com", "/api/v0/chat/completion",
     "deepseek/chat-deepseek-com-web-api-v0-completion.sse", "deepseek-web"),
    ("chat.z.ai", "/api/v2/chat/completions", "misc/chat-z-ai-web-api-v2-completions.sse", "zai-web"),
    ("tgi.local", "/generate_stream", "misc/hf-tgi-generate-stream-tokens.sse", "tgi-generate-stream"),
    ("bedrock-runtime.us-east-1.amazonaws.com", "/model/m/converse-stream",
     "bedrock/converse-stream-claude-sonnet4-reasoning.bin", "bedrock-eventstream"),
]


@pytest.mark.parametrize(("host", "path", "fixture", "protocol"), CASES, ids=[c[3] + ":" + c[2].split("/")[1][:30] for c in CASES])
def test_format_through_the_proxy(proxy: RetimerProxy, fake: FakeLLM, host: str, path: str,
                                  fixture: str, protocol: str) -> None:
    before = len(proxy.records(0, timeout=0))
    ctype = CTYPES[fixture[fixture.rindex("."):]]
    with httpx.Client(proxy=proxy.url, timeout=30) as c:
        headers = {"x-fake-fixture": fixture, "host": host}
        with c.stream("POST", fake.url + path, json={"stream": True}, headers=headers) as r:
            assert r.status_code == 200
            out = b"".join(r.iter_raw())
    name, expected = _channels(host, path, ctype, load(fixture))
    assert name == protocol
    assert _channels(host, path, ctype, out) == (name, expected)
    assert expected, "the fixture carries tokens"
    record = proxy.records(before + 1)[-1]
    assert record["protocol"] == protocol
    assert record["fallback"] is None
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 0
    assert record["emitted"]["ttft_ms"] >= record["target"]["ttft_ms"] - 2  # never early


def test_botocore_converse_stream_through_the_proxy(proxy: RetimerProxy, fake: FakeLLM) -> None:
    """The real AWS client parses the re-timed event stream (split frames, fresh CRCs)."""
    import botocore.session
    from botocore.config import Config

    fixture = "bedrock/converse-stream-nova-micro-text.bin"
    session = botocore.session.get_session()
    client = session.create_client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=fake.url,
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
        config=Config(proxies={"http": proxy.url}, retries={"max_attempts": 0}),
    )

    def add_fixture(request, **_: object) -> None:
        request.headers["x-fake-fixture"] = fixture

    client.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_fixture)
    before = len(proxy.records(0, timeout=0))
    response = client.converse_stream(
        modelId="us.amazon.nova-micro-v1:0",
        messages=[{"role": "user", "content": [{"text": "hi"}]}],
    )
    text, kinds = "", []
    for event in response["stream"]:
        kind = next(iter(event))
        kinds.append(kind)
        if kind == "contentBlockDelta":
            text += event[kind]["delta"].get("text", "")
    _, expected = _channels("h", "/model/m/converse-stream", CTYPES[".bin"], load(fixture))
    assert text == expected["text"]
    assert kinds[0] == "messageStart" and kinds[-1] == "metadata"
    record = proxy.records(before + 1)[-1]
    assert record["protocol"] == "bedrock-eventstream"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 0
