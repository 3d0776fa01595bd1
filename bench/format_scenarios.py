"""The formats section: every wire format, upstream in a few large bursts, re-timed at 50 tok/s
with jitter 0. Issue 3's "done when": token-sized events at the profile's rate (within 3 %) and
exactly the upstream's text per channel, measured at the client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness import Client, FakeLLM, progress, retimer_proxy

TPS = 50.0
TTFT = "300ms"
SSE, NDJSON, JSON = "text/event-stream", "application/x-ndjson", "application/json"

# (format, fixture, host, path, content type): the largest capture of each format
CASES: tuple[tuple[str, str, str, str, str], ...] = (
    ("openai-chat", "openrouter/openrouter-reasoning-long.sse", "openrouter.ai",
     "/api/v1/chat/completions", SSE),
    ("anthropic-messages", "anthropic/pydantic-ai-thinking-stream.sse", "api.anthropic.com",
     "/v1/messages", SSE),
    ("openai-responses", "openai-responses/reasoning-summary-text-delta-long.sse", "api.openai.com",
     "/v1/responses", SSE),
    ("gemini-sse", "gemini/sse-gemini-2.5-pro-thoughts.sse", "generativelanguage.googleapis.com",
     "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", SSE),
    ("gemini-json", "gemini/llm-gemini-flash-json-schema-output.json-stream",
     "generativelanguage.googleapis.com", "/v1beta/models/gemini-flash:streamGenerateContent", JSON),
    ("ollama", "ollama/sk-phi3-api-chat-tail-excerpt.ndjson", "localhost", "/api/chat", NDJSON),
    ("bedrock-eventstream", "bedrock/converse-stream-nova-micro-text.bin",
     "bedrock-runtime.us-east-1.amazonaws.com", "/model/m/converse-stream",
     "application/vnd.amazon.eventstream"),
    ("chatgpt-web", "chatgpt-web/f-conversation-v1-free-gpt-5-2-list.sse", "chatgpt.com",
     "/backend-api/f/conversation", SSE),
    ("claude-web", "claude-web/claudeai-completion-tail-excerpt-citations-ping-comment.sse",
     "claude.ai", "/api/organizations/o/chat_conversations/c/completion", SSE),
    ("gemini-web", "gemini-web/streamgenerate-rt-c-head-excerpt.txt", "gemini.google.com",
     "/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?rt=c", "text/plain"),
    ("deepseek-web", "deepseek/chat-deepseek-com-web-api-v0-completion.sse", "chat.deepseek.com",
     "/api/v0/chat/completion", SSE),
    ("zai-web", "misc/chat-z-ai-web-api-v2-completions.sse", "chat.z.ai",
     "/api/v2/chat/completions", SSE),
    ("tgi-generate-stream", "misc/hf-tgi-generate-stream-tokens.sse", "tgi.local",
     "/generate_stream", SSE),
    ("generic", "misc/doubao-web-2024-11-protobuf-base64-sse.sse", "chatgpt.com",
     "/backend-api/other-stream", SSE),
)


def _expected(fixture: str, shape: dict[str, str]) -> dict[str, str]:
    from bench.client import adapter_events  # the same counting the client process does
    from tests.support.stream_bodies import load_fixture

    _, texts, _ = adapter_events([(0.0, load_fixture(fixture))], shape)
    return texts


def _tokens(texts: dict[str, str]) -> int:
    from retimer.wire.tokenizer import split_tokens

    return sum(len(split_tokens(t)) for t in texts.values())


def formats(client: Client, fake: FakeLLM, tmp: Path, plan: Any, seed: int) -> list[dict[str, Any]]:
    """One proxy, every format: client-side rate error, event sizes and text equality."""
    fake.bursts, fake.burst_gap, fake.per_event_gap = 3, 0.05, None
    streams = getattr(plan, "format_streams", 2)
    rows = []
    args = ("--profile", "human-reading", "--tps", f"{TPS:g}", "--ttft", TTFT, "--jitter", "0",
            "--seed", str(seed))
    with retimer_proxy(tmp, "formats", *args) as proxy:
        for fmt, fixture, host, path, ctype in CASES:
            progress(f"formats: {fmt} ({fixture}), {streams} streams")
            shape = {"method": "POST", "host": host, "path": path, "ctype": ctype}
            expected = _expected(fixture, shape)
            n_streams = max(streams, min(10, -(-200 // max(1, _tokens(expected)))))
            specs = [{"url": fake.url + path, "body": json.dumps({"stream": True}),
                      "headers": {"x-fake-fixture": fixture, "host": host,
                                  "content-type": "application/json"},
                      "warmup": fake.url + "/warmup", "shape": shape} for _ in range(n_streams)]
            results = client.streams(proxy.url, specs, concurrent=False)
            errs, most, exact = [], 0, True
            tokens, gaps, span = 0, 0, 0.0
            for r in results:
                events = r["events"]
                tokens = sum(k for _, k in events)
                t0, t1 = events[0][0], events[-1][0]
                # the first event's tokens share its time: the rest took (tokens - those) gaps
                rate = (tokens - events[0][1]) / (t1 - t0) if t1 > t0 else float("nan")
                errs.append((rate / TPS - 1) * 100)
                gaps += tokens - events[0][1]
                span += t1 - t0
                most = max(most, r["max_event_tokens"])
                exact = exact and r["texts"] == expected
            rows.append({"format": fmt, "fixture": fixture, "streams": len(results),
                         "tokens": tokens, "rate_err_pct": errs,
                         "pooled_rate_err_pct": (gaps / span / TPS - 1) * 100 if span else None,
                         "max_event_tokens": most, "text_exact": exact})
        fake.clear()
        progress(f"formats: websocket, {streams} turns")
        rows.append(websocket_row(proxy, seed, streams))
    return rows


def websocket_row(proxy: Any, seed: int, streams: int) -> dict[str, Any]:
    """OpenAI Realtime-like turns over a WebSocket: the server sends each whole answer at once
    (deltas of 1-4 words); the client in this process timestamps every message it receives."""
    import random

    from bench.harness import prose
    from retimer.wire.tokenizer import split_tokens
    from tests.support.wsfake import FakeWSLLM, ProxiedWSClient, WSReply

    rnd = random.Random(seed)
    words = prose(300, seed).split(" ")
    deltas, i = [], 0
    while i < len(words):
        k = rnd.randint(1, 4)
        deltas.append((" " if i else "") + " ".join(words[i:i + k]))
        i += k
    messages: list[tuple[bytes | str, bool]] = [(json.dumps({"type": "response.created"}), True)]
    messages += [(json.dumps({"type": "response.output_text.delta", "delta": d}), True)
                 for d in deltas]
    messages.append((json.dumps({"type": "response.done"}), True))
    expected = "".join(deltas)
    errs, gaps_total, span_total, most, exact = [], 0, 0.0, 0, True
    tokens = 0
    with FakeWSLLM([WSReply(messages)]) as server:
        client = ProxiedWSClient(proxy.port, "127.0.0.1", server.port, "/v1/realtime")
        try:
            for _ in range(streams):
                client.send(json.dumps({"type": "response.create"}))
                got = client.receive_until('"response.done"')
                events = []
                text = ""
                for r in got:
                    obj = json.loads(r.data) if isinstance(r.data, str) else {}
                    if obj.get("type") == "response.output_text.delta":
                        n = len(split_tokens(obj["delta"]))
                        events.append((r.at, n))
                        text += obj["delta"]
                        most = max(most, n)
                exact = exact and text == expected
                tokens = sum(n for _, n in events)
                t0, t1 = events[0][0], events[-1][0]
                errs.append(((tokens - events[0][1]) / (t1 - t0) / TPS - 1) * 100)
                gaps_total += tokens - events[0][1]
                span_total += t1 - t0
        finally:
            client.close()
    return {"format": "websocket", "fixture": "synthetic Realtime turn (300 tokens)",
            "streams": streams, "tokens": tokens, "rate_err_pct": errs,
            "pooled_rate_err_pct": (gaps_total / span_total / TPS - 1) * 100,
            "max_event_tokens": most, "text_exact": exact}


def formats_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| format | capture | streams x tokens | rate err % pooled (per stream min / max) "
             "| most tokens in one event | text per channel exact |", "|" + "---|" * 6]
    for r in rows:
        e = r["rate_err_pct"]
        pooled = r.get("pooled_rate_err_pct")
        capture = r["fixture"] if r["format"] == "websocket" else f"`{r['fixture']}`"
        lines.append(f"| {r['format']} | {capture} | {r['streams']} x {r['tokens']} "
                     f"| {pooled:+.2f} ({min(e):+.2f} / {max(e):+.2f}) "
                     f"| {r['max_event_tokens']} | {'yes' if r['text_exact'] else 'NO'} |")
    return "\n".join(lines)
