"""Every captured stream under tests/fixtures/streams, with the request it answers and what handles it.

TABLE maps each file to its request and to what handles it: an adapter found by `find_adapter`,
"generic" (no adapter; `fallback_adapter` paces whole events for an LLM host) or "passthrough"
(deliberately not paced). A file without a row fails `test_table_covers_every_file`. Payload-only
files are framed back as their provider's SSE (tests/support/payload_streams.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import Adapter, Channel, Event, RequestShape
from retimer.wire.protocols.generic import GenericStreamAdapter
from tests.support.adapter_checks import (
    parse,
    rechunk,
)
from tests.support.fixture_streams import load
from tests.support.payload_streams import PAYLOAD_FIXTURES, as_sse

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
