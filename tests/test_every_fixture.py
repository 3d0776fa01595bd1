"""Every recorded stream goes through the adapter its request selects, and comes out intact.

TABLE maps each file under tests/fixtures/streams to the request it answers and to what
handles it: an adapter found by `find_adapter`, "generic" (no adapter; `fallback_adapter`
paces whole events for an LLM host) or "passthrough" (deliberately not paced). A file
without a row fails `test_table_covers_every_file`. Payload-only files are framed back as
their provider's SSE (tests/payload_streams.py).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.profile.loader import load_profile
from retimer.timing.model import StreamTiming
from retimer.timing.pacer import StreamPacer
from retimer.timing.scheduler import NoTiming
from retimer.wire.hosts import is_llm_host
from retimer.wire.protocols import fallback_adapter, find_adapter
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape
from retimer.wire.protocols.generic import GenericStreamAdapter
from retimer.wire.tokenizer import split_tokens
from tests.adapter_checks import SplitRecord, channel_texts, check_integrity, event_key, parse, random_pieces, rechunk
from tests.fixture_streams import STREAMS_DIR, load
from tests.payload_streams import PAYLOAD_FIXTURES, as_sse, payloads

SSE, NDJSON, JSON = "text/event-stream", "application/x-ndjson", "application/json"
EVENTSTREAM = "application/vnd.amazon.eventstream"
TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS


@dataclass(frozen=True)
class Row:
    """The request a fixture answers and what is expected to handle it."""

    method: str
    host: str
    path: str
    ctype: str
    expect: str  # an adapter name, "generic" or "passthrough"
    why: str = ""  # for generic / passthrough rows: why there is no dedicated adapter

    def shape(self) -> RequestShape:
        return RequestShape(self.method, self.host, self.path, {}, b'{"stream": true}')


def post(host: str, path: str, expect: str, ctype: str = SSE) -> Row:
    return Row("POST", host, path, ctype, expect)


def chat(host: str, path: str = "/v1/chat/completions") -> Row:
    return post(host, path, "openai-chat")


ANTHROPIC = post("api.anthropic.com", "/v1/messages", "anthropic-messages")
ANTHROPIC_BETA = post("api.anthropic.com", "/v1/messages?beta=true", "anthropic-messages")
OPENAI = post("api.openai.com", "/v1/chat/completions", "openai-chat")
RESPONSES = post("api.openai.com", "/v1/responses", "openai-responses")
AZURE = post("myres.openai.azure.com",
             "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21", "openai-chat")
GROQ = post("api.groq.com", "/openai/v1/chat/completions", "openai-chat")
OPENROUTER = post("openrouter.ai", "/api/v1/chat/completions", "openai-chat")
MISTRAL = post("api.mistral.ai", "/v1/chat/completions", "openai-chat")
CHATGPT = post("chatgpt.com", "/backend-api/conversation", "chatgpt-web")
CLAUDE_WEB = post("claude.ai", "/api/organizations/0f1e2d3c/chat_conversations/8a7b6c5d/completion",
                  "claude-web")
GEMINI_WEB = post("gemini.google.com", "/_/BardChatUi/data/assistant.lamda.BardFrontendService/"
                  "StreamGenerate?bl=boq_assistant-bard-web-server_20260317.00_p6&_reqid=1&rt=c",
                  "gemini-web", "application/json+protobuf; charset=UTF-8")


def bedrock(model: str, op: str = "converse-stream") -> Row:
    return post("bedrock-runtime.us-east-1.amazonaws.com", f"/model/{model}/{op}",
                "bedrock-eventstream", EVENTSTREAM)


def gemini(model: str, sse: bool) -> Row:
    path = f"/v1beta/models/{model}:streamGenerateContent" + ("?alt=sse" if sse else "")
    return post("generativelanguage.googleapis.com", path, "gemini-sse" if sse else "gemini-json",
                SSE if sse else "application/json; charset=UTF-8")


TABLE: dict[str, Row] = {
    **{f"anthropic/{n}.sse": ANTHROPIC for n in (
        "issue-litellm-4562-midstream-error-excerpt", "llm-anthropic-haiku45-thinking",
        "llm-anthropic-opus46-adaptive-thinking", "llm-anthropic-sonnet45-text-padded",
        "llm-anthropic-sonnet45-thinking-signature", "llm-anthropic-tool-result-followup",
        "llm-anthropic-tool-use-input-json-delta", "llm-anthropic-web-search-server-tool-citations",
        "sdk-py-padded-tool-use-max-tokens", "sdk-py-semisynthetic-server-tool-websearch-padded",
        "sdk-py-semisynthetic-thinking-signature-padded", "sdk-py-tool-use-input-json-delta")},
    **{f"anthropic/{n}.sse": ANTHROPIC_BETA for n in (
        "pydantic-ai-redacted-thinking-stream", "pydantic-ai-single-delta", "pydantic-ai-thinking-stream")},
    "azure-openai/azure-chat-text-content-filter.sse": AZURE,
    "azure-openai/azure-chat-tool-call-content-filter.sse": AZURE,
    "bedrock/converse-stream-claude-sonnet4-reasoning.bin":
        bedrock("us.anthropic.claude-sonnet-4-20250514-v1%3A0"),
    "bedrock/converse-stream-claude37-redacted-reasoning.bin":
        bedrock("us.anthropic.claude-3-7-sonnet-20250219-v1%3A0"),
    "bedrock/converse-stream-gpt-oss-empty-text-delta.bin": bedrock("openai.gpt-oss-120b-1%3A0"),
    "bedrock/converse-stream-nova-micro-text.bin": bedrock("us.amazon.nova-micro-v1%3A0"),
    "bedrock/invoke-with-response-stream-titan-chunk.bin": bedrock("amazon.titan-text-express-v1",
                                                                   "invoke-with-response-stream"),
    "bedrock/sk-converse-stream-short.bin": bedrock("amazon.titan-text-premier-v1%3A0"),
    "chatgpt-web/backend-api-conversation-legacy-cumulative-2024-10-gpt-4o-mini.sse":
        post("chat.openai.com", "/backend-api/conversation", "chatgpt-web"),
    "chatgpt-web/backend-api-conversation-v1-2024-10-gpt-4o-padded.sse": CHATGPT,
    "chatgpt-web/f-conversation-v1-free-gpt-5-2-list.sse":
        post("chatgpt.com", "/backend-api/f/conversation", "chatgpt-web"),
    "chatgpt-web/f-conversation-v1-team-gpt-5-3-tail-excerpt-padded.sse":
        post("chatgpt.com", "/backend-api/f/conversation", "chatgpt-web"),
    "claude-web/claudeai-completion-head-excerpt-tool-use.sse": CLAUDE_WEB,
    "claude-web/claudeai-completion-hi-sonnet46-from-doc.sse": CLAUDE_WEB,
    "claude-web/claudeai-completion-tail-excerpt-citations-ping-comment.sse": CLAUDE_WEB,
    "deepseek/chat-deepseek-com-web-api-v0-completion.sse":
        post("chat.deepseek.com", "/api/v0/chat/completion", "deepseek-web"),
    "deepseek/deepseek-reasoner-reasoning-content.sse": chat("api.deepseek.com", "/chat/completions"),
    "deepseek/deepseek-responses-api-reasoning-text.sse":
        post("api.deepseek.com", "/responses", "openai-responses"),
    "gemini-web/streamgenerate-rt-c-head-excerpt.txt": GEMINI_WEB,
    "gemini-web/streamgenerate-rt-c-tail-excerpt.txt": GEMINI_WEB,
    "gemini/llm-gemini-2.5-flash-parallel-functioncall.json-stream": gemini("gemini-2.5-flash", False),
    "gemini/llm-gemini-3-flash-functioncall-thoughtsig.json-stream": gemini("gemini-3-flash-preview", False),
    "gemini/llm-gemini-3-flash-functioncall-with-id.json-stream": gemini("gemini-3-flash-preview", False),
    "gemini/llm-gemini-3-flash-short-text.json-stream": gemini("gemini-3-flash-preview", False),
    "gemini/llm-gemini-flash-json-schema-output.json-stream": gemini("gemini-flash-latest", False),
    "gemini/llm-gemini-flash-thoughts-signature.json-stream": gemini("gemini-flash-latest", False),
    "gemini/sse-gemini-2.0-flash-text.sse": gemini("gemini-2.0-flash-exp", True),
    "gemini/sse-gemini-2.0-flash-two-function-calls-single-event.sse": gemini("gemini-2.0-flash", True),
    "gemini/sse-gemini-2.5-flash-usage-mid-stream.sse": gemini("gemini-2.5-flash", True),
    "gemini/sse-gemini-2.5-pro-grounding.sse": gemini("gemini-2.5-pro", True),
    "gemini/sse-gemini-2.5-pro-thoughts.sse": gemini("gemini-2.5-pro", True),
    "gemini/sse-gemini-3-pro-functioncall-thoughtsig.sse": gemini("gemini-3-pro-preview", True),
    "gemini/sse-vertex-gemini-3-flash.sse": post(
        "aiplatform.googleapis.com", "/v1beta1/projects/p/locations/global/publishers/google/models/"
        "gemini-3-flash-preview:streamGenerateContent?alt=sse", "gemini-sse"),
    "groq/groq-compound-web-search-x-groq.sse": GROQ,
    "groq/groq-gpt-oss-midstream-event-error.sse": GROQ,
    "groq/groq-tool-call-x-groq-usage.sse": GROQ,
    "misc/chat-z-ai-web-api-v2-completions.sse": post("chat.z.ai", "/api/v2/chat/completions", "zai-web"),
    "misc/jetbrains-ai-chat-stream-v7.sse": Row(
        "POST", "api.jetbrains.ai", "/user/v5/llm/chat/stream/v7", SSE, "generic",
        "JetBrains AI Assistant's own event shape: paced by whole events on its host"),
    "misc/crusoe-vllm-style.sse": chat("api.inference.crusoecloud.com"),
    "misc/doubao-web-2024-11-protobuf-base64-sse.sse": Row(
        "POST", "www.doubao.com", "/samantha/chat/completion", SSE, "generic",
        "protobuf frames in base64 SSE data: no dedicated adapter; whole events, text estimated"),
    "misc/hf-tgi-chat-completions-data-nospace.sse": chat("localhost"),
    "misc/hf-tgi-generate-stream-tokens.sse": post("localhost", "/generate_stream", "tgi-generate-stream"),
    "misc/huggingface-router-novita.sse": chat("router.huggingface.co", "/novita/v3/openai/chat/completions"),
    "misc/snowflake-cortex-chat.sse": chat("acme.snowflakecomputing.com", "/api/v2/cortex/v1/chat/completions"),
    "misc/zai-glm-thinking-reasoning-content.sse": post("api.z.ai", "/api/paas/v4/chat/completions",
                                                        "openai-chat", "text/event-stream;charset=UTF-8"),
    **{f"mistral/{n}.sse": MISTRAL for n in (
        "mistral-magistral-thinking-chunks", "sk-mistral-after-function-call", "sk-mistral-function-call",
        "sk-mistral-tiny-2024")},
    "nonstream/gemini-generate-content.json": Row(
        "POST", "generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash:generateContent",
        JSON, "passthrough", "a whole JSON response, not a stream: held and sent as it came"),
    "nonstream/openai-chat-completion.json": Row(
        "POST", "api.openai.com", "/v1/chat/completions", JSON, "passthrough",
        "a whole JSON response, not a stream: held and sent as it came"),
    "ollama/sk-phi3-api-chat-tail-excerpt.ndjson": post("localhost", "/api/chat", "ollama", NDJSON),
    "ollama/sk-phi3-api-generate-tail-excerpt.ndjson": post("localhost", "/api/generate", "ollama", NDJSON),
    **{f"openai-chat/{n}.sse": OPENAI for n in (
        "gpt-moderation-field-stream", "gpt4o-content-logprobs", "gpt4o-max-tokens-length",
        "gpt4o-mini-tool-call-obfuscation", "gpt4o-n3-multiple-choices", "gpt4o-parallel-tool-calls-usage",
        "gpt4o-refusal-deltas", "gpt4o-structured-output-tool-args-obfuscation", "gpt4o-text-include-usage",
        "gpt4o-tool-call-nonstrict-usage", "gpt4o-two-tool-calls-obfuscation")},
    "openai-responses/aws-bedrock-mantle-responses.sse": post("bedrock-mantle.us-east-1.api.aws",
                                                              "/openai/v1/responses", "openai-responses"),
    "openai-responses/background-resume-starting-after.sse": Row(
        "GET", "api.openai.com", "/v1/responses/resp_68b1?starting_after=0&stream=true", SSE,
        "openai-responses", "a resumed background response is a GET of the response"),
    **{f"openai-responses/{n}.sse": RESPONSES for n in (
        "background-mode-queued", "function-call-args-sequence-number-obfuscation",
        "gpt4o-function-call-arguments-delta", "gpt4o-output-text-delta-early", "output-text-delta-logprobs",
        "reasoning-summary-code-interpreter", "reasoning-summary-text-delta-long",
        "text-then-function-call-phase")},
    **{f"openrouter/{n}.sse": OPENROUTER for n in (
        "openrouter-claude-reasoning-details", "openrouter-midstream-error-chunk",
        "openrouter-reasoning-long", "openrouter-web-search-annotations")},
    "openrouter/openrouter-responses-api-reasoning-text.sse":
        post("openrouter.ai", "/api/v1/responses", "openai-responses"),
    # payload-only: framed back as SSE, sent to the provider's streaming endpoint
    "vercel-ai-payloads/alibaba--alibaba-tool-call.payloads.ndjson": post(
        "dashscope-intl.aliyuncs.com", "/compatible-mode/v1/chat/completions", "openai-chat"),
    "vercel-ai-payloads/anthropic--anthropic-refusal.payloads.ndjson": ANTHROPIC,
    "vercel-ai-payloads/cerebras--cererebras-structured-output-tools.1.payloads.ndjson":
        chat("api.cerebras.ai"),
    **{f"vercel-ai-payloads/cohere--cohere-{n}.payloads.ndjson":
       post("api.cohere.com", "/v2/chat", "cohere-chat") for n in ("reasoning", "text", "tool-call")},
    "vercel-ai-payloads/deepseek--deepseek-tool-call.payloads.ndjson": chat("api.deepseek.com", "/chat/completions"),
    "vercel-ai-payloads/google--basic.payloads.ndjson": post(
        "generativelanguage.googleapis.com", "/v1beta/interactions", "gemini-interactions"),
    "vercel-ai-payloads/groq--groq-tool-call.payloads.ndjson": GROQ,
    "vercel-ai-payloads/mistral--mistral-reasoning.payloads.ndjson": MISTRAL,
    "vercel-ai-payloads/moonshotai--moonshotai-stream.payloads.ndjson": chat("api.moonshot.ai"),
    "vercel-ai-payloads/openai--openai-completion-text.payloads.ndjson":
        post("api.openai.com", "/v1/completions", "openai-completions"),
    "vercel-ai-payloads/openai--openai-error.1.payloads.ndjson": RESPONSES,
    "vercel-ai-payloads/perplexity--perplexity-citations.payloads.ndjson":
        chat("api.perplexity.ai", "/chat/completions"),
    "vercel-ai-payloads/xai--xai-text.payloads.ndjson": chat("api.x.ai"),
    "vercel-ai-payloads/xai--xai-tool-call.payloads.ndjson": chat("api.x.ai"),
}
DOCS = {"SOURCES.md", "nonstream/README.md"}  # notes, not responses
# generic rows whose host is not in hosts.LLM_HOSTS: the proxy passes them through unpaced
NOT_LLM_HOSTS: set[str] = set()
PACED = sorted(n for n, row in TABLE.items() if row.expect != "passthrough")


def wire(name: str) -> bytes:
    """The bytes a client would receive: payload-only files framed back as SSE."""
    return as_sse(name) if name in PAYLOAD_FIXTURES else load(name)


def factory(name: str) -> Callable[[], Adapter]:
    """A fresh adapter for the fixture, found the way the addon finds it."""
    row = TABLE[name]
    found = find_adapter(row.shape(), row.ctype)
    if found is not None:
        return found
    return lambda: GenericStreamAdapter.for_content_type(row.ctype)


def read(make: Callable[[], Adapter], data: bytes, cuts: Iterable[int] = ()) -> list[Event]:
    """The events a fresh adapter makes of `data` fed in chunks cut at `cuts`."""
    return parse(make, rechunk(data, cuts))  # type: ignore[arg-type]  # a factory will do


_SEQ = re.compile(rb'("sequence_number"\s*:\s*)\d+')


def _ending(data: bytes) -> bytes:
    """The line-ending bytes a stream or event ends with (b"" when it ends mid-line)."""
    return data[len(data.rstrip(b"\r\n")):]


def same_bytes(raw: bytes) -> bytes:
    """Event bytes as they must survive: a Responses split renumbers later events, by design."""
    return _SEQ.sub(rb"\1#", raw)


# -- the table ---------------------------------------------------------------------------
def test_table_covers_every_file() -> None:
    files = {p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.rglob("*") if p.is_file()}
    assert files - DOCS - set(TABLE) == set(), "fixtures without a row in TABLE"
    assert set(TABLE) - files == set(), "rows for missing fixtures"
    assert set(PAYLOAD_FIXTURES) <= set(TABLE)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_request_selects_expected_adapter(name: str) -> None:
    row = TABLE[name]
    found = find_adapter(row.shape(), row.ctype)
    if row.expect in ("generic", "passthrough"):
        assert found is None and row.why
        fallback = fallback_adapter(row.ctype)
        if row.expect == "generic":
            assert isinstance(fallback, GenericStreamAdapter)
            assert is_llm_host(row.host) is (name not in NOT_LLM_HOSTS)
        else:
            assert fallback is None
    else:
        assert found is not None and found.name == row.expect


# -- integrity under re-chunking and random splits --------------------------------------
def _stream(make: Callable[[], Adapter], data: bytes, cuts: list[int],
            choose: Callable[[Event], list[str] | None]) -> tuple[bytes, list[SplitRecord]]:
    """Feed chunk by chunk and split as events arrive, as the pacer does."""
    adapter = make()
    records: list[SplitRecord] = []
    for batch in [*(adapter.feed(c) for c in rechunk(data, cuts)), adapter.end()]:
        for event in batch:
            pieces = choose(event) if event.splittable else None
            out = adapter.split(event, pieces) if pieces else [event.raw]
            records.append(SplitRecord(event, pieces, out))
    return b"".join(b for r in records for b in r.out), records


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32))
@pytest.mark.parametrize("name", PACED)
def test_rechunked_and_split_stream_keeps_its_text_and_events(name: str, data: st.DataObject,
                                                              seed: int) -> None:
    make, raw, rnd = factory(name), wire(name), random.Random(seed)
    whole = read(make, raw)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=60), label="cuts")
    assert [event_key(e) for e in read(make, raw, cuts)] == [event_key(e) for e in whole]
    output, records = _stream(make, raw, cuts,
                              lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.7 else None)
    out_cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=60), label="out_cuts")
    again = check_integrity(make, raw, records, output, out_cuts)  # type: ignore[arg-type]
    assert channel_texts(again) == channel_texts(whole)
    assert _non_token(again) == _non_token(whole)
    # the stream ends as it ended: an unterminated tail or a missing final newline survives
    if not whole[-1].texts:
        assert same_bytes(output).endswith(same_bytes(whole[-1].raw))
    elif TABLE[name].ctype != EVENTSTREAM:  # a split last event keeps its line ending
        assert _ending(again[-1].raw) == _ending(whole[-1].raw)
    assert _ending(output) == _ending(raw) or TABLE[name].ctype == EVENTSTREAM
    if not any(r.pieces and len(r.pieces) > 1 for r in records):
        assert output == raw


def _non_token(events: list[Event]) -> list[bytes]:
    return [same_bytes(e.raw) for e in events if not e.texts]


def _fast_timing() -> StreamTiming:
    profile = load_profile("cerebras").with_overrides(ttft="1ms", tps="5000", jitter=0)
    return profile.stream_timing(np.random.default_rng(7))


@pytest.mark.parametrize("timing", ["passthrough", "jitter-0"])
@pytest.mark.parametrize("name", PACED)
def test_pacer_output(name: str, timing: str) -> None:
    make, raw = factory(name), wire(name)
    adapter = make()
    splits: list[int] = []
    real_split = adapter.split

    def counting_split(event: Event, pieces: list[str]) -> list[bytes]:
        splits.append(len(pieces))
        return real_split(event, pieces)

    adapter.split = counting_split  # type: ignore[method-assign]
    passthrough = timing == "passthrough"
    timing_ = NoTiming() if passthrough else _fast_timing()
    pacer = StreamPacer(adapter, timing_, start=0.0, passthrough=passthrough)
    for i, part in enumerate(rechunk(raw, range(0, len(raw), 97))):
        pacer.feed(part, now=i * 0.001)
    pacer.finish(now=1.0)
    out = b"".join(e.data for e in pacer.pop_all())
    assert pacer.fallback is None
    if not splits:
        assert out == raw
    else:
        assert not passthrough
        assert channel_texts(read(make, out)) == channel_texts(read(make, raw))
        assert _non_token(read(make, out)) == _non_token(read(make, raw))
    if not passthrough and any(e.splittable and len(split_tokens(e.text)) > 1 for e in read(make, raw)):
        assert splits, "a metronome timing cuts multi-token events into tokens"


# -- payload-only files: each payload's text, read independently -------------------------
def _chat_texts(obj: dict) -> list[tuple[Channel, str]]:
    """OpenAI-compatible chunks: content/refusal, reasoning, tool arguments, legacy `text`."""
    out: list[tuple[Channel, str]] = []
    for choice in obj.get("choices") or []:
        if isinstance(choice.get("text"), str):
            out.append((TEXT, choice["text"]))
        delta = choice.get("delta") or {}
        for key, value in delta.items():
            if key in ("content", "refusal") and isinstance(value, str):
                out.append((TEXT, value))
            elif key == "content" and isinstance(value, list):  # Mistral typed chunks
                for item in value:
                    if item["type"] == "text":
                        out.append((TEXT, item["text"]))
                    elif item["type"] == "thinking":
                        out += [(REASONING, t["text"]) for t in item["thinking"] if t["type"] == "text"]
            elif key in ("reasoning_content", "reasoning") and isinstance(value, str):
                out.append((REASONING, value))
            elif key == "tool_calls":
                out += [(TOOL_ARGS, c["function"]["arguments"]) for c in value
                        if isinstance((c.get("function") or {}).get("arguments"), str)]
    return out


def _typed_texts(obj: dict) -> list[tuple[Channel, str]]:
    """Anthropic, Responses, Cohere v2 and Gemini Interactions events."""
    kind, delta = obj.get("type") or obj.get("event_type"), obj.get("delta")
    msg = delta.get("message", {}) if isinstance(delta, dict) else {}
    found: list[tuple[Channel, object]] = {
        "content_block_delta": lambda: [(TEXT, delta.get("text")), (REASONING, delta.get("thinking")),
                                        (TOOL_ARGS, delta.get("partial_json"))],
        "response.output_text.delta": lambda: [(TEXT, delta)],
        "content-delta": lambda: [(TEXT, msg["content"].get("text")),
                                  (REASONING, msg["content"].get("thinking"))],
        "tool-plan-delta": lambda: [(REASONING, msg["tool_plan"])],
        "tool-call-delta": lambda: [(TOOL_ARGS, msg["tool_calls"]["function"]["arguments"])],
        "step.delta": lambda: [(TEXT, delta.get("text")), (TOOL_ARGS, delta.get("arguments")),
                               (REASONING, (delta.get("content") or {}).get("text"))],
    }.get(kind, lambda: [])()
    return [(c, t) for c, t in found if isinstance(t, str)]


@pytest.mark.parametrize("name", PAYLOAD_FIXTURES)
def test_each_payload_text_is_found(name: str) -> None:
    events = [e for e in read(factory(name), wire(name)) if b"data: {" in e.raw]
    lines = payloads(name)
    assert [e.raw.split(b"data: ", 1)[1].rstrip(b"\n") for e in events] == lines
    for line, event in zip(lines, events, strict=True):
        obj = json.loads(line)
        expected = [(c, t) for c, t in (_chat_texts(obj) or _typed_texts(obj)) if t]
        assert list(event.texts) == expected, line[:200]
    assert any(e.texts for e in events) or "refusal" in name or "error" in name


@pytest.mark.parametrize("name", PACED)
def test_only_streams_with_the_apis_error_say_so(name: str) -> None:
    """`api_error` keeps transient failures out of the response cache: it is set by the error
    captures and by nothing else (ChatGPT's `"error": null` is no error)."""
    adapter = factory(name)()
    read(lambda: adapter, wire(name))
    assert adapter.api_error == ("error" in name.rsplit("/", 1)[-1])
    assert adapter.anomaly is None  # the real captures are well-formed
