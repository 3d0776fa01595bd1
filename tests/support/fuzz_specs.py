"""The adapters the fuzz tests cover, one `Spec` each: how to make it, its seed streams (the
recorded fixtures of its format), how its units are framed (so a mutated payload can be
re-framed with a valid length or CRC), and one huge token event in its format.

Every adapter of `retimer.wire.protocols.ADAPTERS` gets a spec; one without an entry in
`_DEDICATED` is fuzzed with a broad sample of every fixture until it gets its own seeds.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from retimer.wire.eventstream import Header, HeaderType, encode_frame
from retimer.wire.protocols import ADAPTERS, GenericStreamAdapter
from retimer.wire.protocols.base import Adapter
from retimer.wire.protocols.websocket import WebSocketMessageAdapter, encode_message
from retimer.wire.sse import SSEParser
from tests.support.fixture_streams import STREAMS_DIR, load

__all__ = ["SPECS", "SPEC_BY_NAME", "Spec", "gemini_web_frame"]


def _glob(*patterns: str) -> tuple[str, ...]:
    return tuple(sorted(p.relative_to(STREAMS_DIR).as_posix()
                        for pattern in patterns for p in STREAMS_DIR.glob(pattern)))


@dataclass(frozen=True)
class Spec:
    """One adapter configuration: how to make it, what it is fed, how its units are framed."""

    name: str
    make: Callable[[], Adapter]
    fixtures: tuple[str, ...] = ()
    built: Callable[[], list[bytes]] | None = None  # seeds that are not fixture files
    # a unit's payload and how to re-frame a changed payload (length prefixes, CRCs)
    unwrap: Callable[[bytes], tuple[bytes, Callable[[bytes], bytes]]] | None = None
    internal_framing: bool = False  # the input is retimer's own record stream (WebSocket)
    big: Callable[[str], bytes] = field(default=lambda text: b"")  # one huge token event
    dedicated: bool = True  # seeds and `big` are in this adapter's format

    def seeds(self) -> list[bytes]:
        return [load(f) for f in self.fixtures] + (self.built() if self.built else [])


def _frame_unwrap(unit: bytes) -> tuple[bytes, Callable[[bytes], bytes]]:
    """Bedrock: a frame's payload, re-encoded with its header bytes and fresh CRCs."""
    if len(unit) < 16:
        return unit, lambda body: body
    (headers_len,) = struct.unpack_from(">I", unit, 4)
    header_bytes = unit[12 : 12 + headers_len]
    return unit[12 + headers_len : -4], lambda body: encode_frame(header_bytes, body)


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def gemini_web_frame(body: bytes) -> bytes:
    """A length-prefixed frame; the length counts UTF-16 units like JavaScript."""
    return str(_utf16_units(body.decode("utf-8", "surrogatepass"))).encode() + body


def _gemini_web_unwrap(unit: bytes) -> tuple[bytes, Callable[[bytes], bytes]]:
    stripped = unit.lstrip(b" \t\r\n")
    lead = unit[: len(unit) - len(stripped)]
    digits = len(stripped) - len(stripped.lstrip(b"0123456789"))
    if not digits:
        return unit, lambda body: body

    def wrap(body: bytes) -> bytes:
        try:
            return lead + gemini_web_frame(body)
        except UnicodeDecodeError:  # a mutation made the body invalid UTF-8: keep the old count
            return lead + stripped[:digits] + body

    return stripped[digits:], wrap


def _ws_unwrap(unit: bytes) -> tuple[bytes, Callable[[bytes], bytes]]:
    if len(unit) < 5:
        return unit, lambda body: body
    return unit[5:], lambda body: encode_message(body, is_text=unit[:1] == b"t")


def _ws_seeds() -> list[bytes]:
    """WebSocket turns: Responses events as text messages, Gemini Live turns, audio frames."""
    def records(fixture: str) -> bytes:
        parser = SSEParser()
        out = [encode_message(e.data.encode(), is_text=True)
               for e in parser.feed(load(fixture)) + parser.end() if e.data and e.data != "[DONE]"]
        out.insert(1, encode_message(b"\x00\x01audio\xff", is_text=False))
        return b"".join(out)

    live = [{"setupComplete": {}},
            *({"serverContent": {"modelTurn": {"parts": [{"text": t}]}}}
              for t in ("Bonjour, ", "je suis là ", "pour 🤖 aider.")),
            {"serverContent": {"modelTurn": {"parts": [{"text": "pensée", "thought": True}]}}},
            {"serverContent": {"turnComplete": True}}]
    gemini = b"".join(encode_message(json.dumps(m, ensure_ascii=False).encode(), is_text=True)
                      for m in live)
    return [records("openai-responses/gpt4o-output-text-delta-early.sse"),
            records("openai-responses/function-call-args-sequence-number-obfuscation.sse"),
            gemini]


def _dump(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _sse(*events: tuple[str | None, object], nl: str = "\n") -> bytes:
    out = []
    for name, obj in events:
        head = f"event: {name}{nl}" if name else ""
        out.append(f"{head}data: {obj if isinstance(obj, str) else _dump(obj)}{nl}{nl}")
    return "".join(out).encode()


def _big_openai(text: str) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return _sse((None, chunk), (None, "[DONE]"))


def _big_anthropic(text: str) -> bytes:
    return _sse(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": text}}),
                ("message_stop", {"type": "message_stop"}))


def _big_ndjson(text: str) -> bytes:
    lines = [{"model": "m", "message": {"role": "assistant", "content": text}, "done": False},
             {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True}]
    return "".join(_dump(x) + "\n" for x in lines).encode()


def _gemini_chunk(text: str) -> dict[str, object]:
    return {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}}]}


def _big_gemini_web(text: str) -> bytes:
    inner = [None, ["c_1", "r_1"], None, None, [["rc_1", [text]]]]
    line = _dump([["wrb.fr", None, _dump(inner)]])
    return b")]}'\n\n" + gemini_web_frame(f"\n{line}\n".encode())


def _big_bedrock(text: str) -> bytes:
    headers = [Header(":event-type", HeaderType.STRING, "contentBlockDelta"),
               Header(":content-type", HeaderType.STRING, "application/json"),
               Header(":message-type", HeaderType.STRING, "event")]
    payload = {"contentBlockIndex": 0, "delta": {"text": text}, "p": "abcdef"}
    return encode_frame(headers, _dump(payload).encode())


def _pb(number: int, value: bytes | str) -> bytes:
    """A length-delimited protobuf field (the tag and length as one-byte or longer varints)."""
    data = value.encode() if isinstance(value, str) else value

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)
    return varint(number << 3 | 2) + varint(len(data)) + data


def _chat_chunk(text: str, index: int = 0) -> bytes:
    """ChatChunk {delta: Delta {content: text}, model: "model-7b", index}."""
    return _pb(1, _pb(1, text)) + _pb(2, "model-7b") + bytes([0x18, index & 0x7F])


def _enveloped(flags: int, message: bytes) -> bytes:
    return struct.pack(">BI", flags, len(message)) + message


def _envelope_unwrap(unit: bytes) -> tuple[bytes, Callable[[bytes], bytes]]:
    """An envelope's message, re-framed with its flags and a fresh length."""
    if len(unit) < 5:
        return unit, lambda body: body
    return unit[5:], lambda body: _enveloped(unit[0], body)


def _rpc_seeds(end: bytes) -> Callable[[], list[bytes]]:
    import gzip

    words = ["The quick brown", " fox jumps over", " the lazy dog.", "\n\nThen", " it sleeps, 東京 🚀."]

    def seeds() -> list[bytes]:
        proto = b"".join(_enveloped(0, _chat_chunk(w, i)) for i, w in enumerate(words))
        zipped = b"".join(_enveloped(1, gzip.compress(_chat_chunk(w, i))) for i, w in enumerate(words))
        as_json = b"".join(_enveloped(0, _dump({"delta": {"content": w}, "index": i}).encode())
                           for i, w in enumerate(words))
        return [proto + end, zipped + end, as_json + end]
    return seeds


def _big_ws(text: str) -> bytes:
    msg = {"type": "response.output_text.delta", "event_id": "e1", "delta": text}
    return encode_message(_dump(msg).encode(), is_text=True)


def _payload_sse(fixture: str, event_key: str | None, done: bool) -> bytes:
    """A payload-only recording (one JSON per line) framed as its API sends it."""
    out = []
    for line in load(fixture).splitlines():
        name = json.loads(line).get(event_key) if event_key else None
        out.append((f"event: {name}\n" if name else "") + f"data: {line.decode()}\n\n")
    return ("".join(out) + ("data: [DONE]\n\n" if done else "")).encode()


def _payload_seeds(*cases: tuple[str, str | None, bool]) -> Callable[[], list[bytes]]:
    return lambda: [_payload_sse(f"vercel-ai-payloads/{f}", key, done) for f, key, done in cases]


_SSE_ALL = _glob("**/*.sse")
# name -> (fixtures, kwargs): dedicated seeds for each adapter of the registry and beyond
_DEDICATED: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "zai-web": (("misc/chat-z-ai-web-api-v2-completions.sse",), dict(
        big=lambda t: _sse((None, {"type": "chat:completion",
                                   "data": {"delta_content": t, "phase": "answer"}})))),
    "openai-chat": (_glob("openai-chat/*.sse", "azure-openai/*.sse", "groq/*.sse", "mistral/*.sse",
                          "openrouter/openrouter-[cmrw]*.sse", "deepseek/deepseek-reasoner*.sse"),
                    dict(big=_big_openai)),
    "openai-completions": ((), dict(
        built=_payload_seeds(("openai--openai-completion-text.payloads.ndjson", None, True)),
        big=lambda t: _sse((None, {"id": "c", "object": "text_completion", "choices": [
            {"text": t, "index": 0, "logprobs": None, "finish_reason": None}]}), (None, "[DONE]")))),
    "claude-web": (_glob("claude-web/*.sse"), dict(big=_big_anthropic)),
    "anthropic-messages": (_glob("anthropic/*.sse"), dict(big=_big_anthropic)),
    "openai-responses": (_glob("openai-responses/*.sse", "*/*responses-api*.sse"), dict(
        big=lambda t: _sse(("response.output_text.delta",
                            {"type": "response.output_text.delta", "sequence_number": 3,
                             "delta": t}),
                           ("response.completed", {"type": "response.completed",
                                                   "sequence_number": 4})))),
    "cohere-chat": ((), dict(
        built=_payload_seeds(*((f"cohere--cohere-{k}.payloads.ndjson", "type", True)
                               for k in ("text", "reasoning", "tool-call"))),
        big=lambda t: _sse(("content-delta", {"type": "content-delta", "index": 0, "delta": {
            "message": {"content": {"text": t}}}})))),
    "ollama": (_glob("ollama/*.ndjson"), dict(big=_big_ndjson)),
    "gemini-sse": (_glob("gemini/*.sse"), dict(
        big=lambda t: _sse((None, _gemini_chunk(t)), nl="\r\n"))),
    "gemini-interactions": ((), dict(
        built=_payload_seeds(("google--basic.payloads.ndjson", "event_type", False)),
        big=lambda t: _sse(("step.delta", {"event_type": "step.delta", "index": 0,
                                           "delta": {"type": "text", "text": t}})))),
    "gemini-json": (_glob("gemini/*.json-stream"), dict(
        big=lambda t: ("[" + _dump(_gemini_chunk(t)) + "\n,\r\n"
                       + _dump(_gemini_chunk("!")) + "\n]").encode())),
    "gemini-web": (_glob("gemini-web/*.txt"), dict(unwrap=_gemini_web_unwrap, big=_big_gemini_web)),
    "chatgpt-web": (_glob("chatgpt-web/*.sse"), dict(
        big=lambda t: _sse(("delta_encoding", '"v1"'),
                           ("delta", {"p": "/message/content/parts/0", "o": "append", "v": t})))),
    "deepseek-web": (("deepseek/chat-deepseek-com-web-api-v0-completion.sse",), dict(
        big=lambda t: _sse((None, {"v": {"response": {"fragments": [
            {"type": "RESPONSE", "content": ""}]}}}),
            (None, {"p": "response/fragments/-1/content", "o": "APPEND", "v": t})))),
    "bedrock-eventstream": (_glob("bedrock/*.bin"), dict(unwrap=_frame_unwrap, big=_big_bedrock)),
    "connect": ((), dict(built=_rpc_seeds(_enveloped(2, b'{"metadata":{"x-id":["1"]}}')),
                         unwrap=_envelope_unwrap, big=lambda t: _enveloped(0, _chat_chunk(t)))),
    "grpc": ((), dict(built=_rpc_seeds(_enveloped(0x80, b"grpc-status: 0\r\ngrpc-message: \r\n")),
                      unwrap=_envelope_unwrap, big=lambda t: _enveloped(0, _chat_chunk(t)))),
    "tgi-generate-stream": (("misc/hf-tgi-generate-stream-tokens.sse",), dict(
        big=lambda t: _sse((None, {"index": 1, "token": {"id": 5, "text": t, "logprob": -0.1,
                                                         "special": False}})))),
}


def _specs() -> tuple[Spec, ...]:
    """A spec per registered adapter (a registered adapter without dedicated seeds gets a
    broad sample of every fixture, and its enormous-event check cannot expect tokens), then
    the generic adapter in its three framings and the WebSocket adapter."""
    specs = []
    for cls in ADAPTERS:
        if cls.name in _DEDICATED:
            fixtures, kwargs = _DEDICATED[cls.name]
            specs.append(Spec(cls.name, cls, fixtures, **kwargs))
        else:
            specs.append(Spec(cls.name, cls, _SSE_ALL[::3] + _glob("*/*.ndjson")[::3],
                              big=_big_openai, dedicated=False))
    return (
        *specs,
        Spec("generic-sse", lambda: GenericStreamAdapter("sse"),
             _SSE_ALL[::4] + ("misc/doubao-web-2024-11-protobuf-base64-sse.sse",), big=_big_openai),
        Spec("generic-ndjson", lambda: GenericStreamAdapter("ndjson"),
             _glob("vercel-ai-payloads/*.ndjson", "ollama/*.ndjson"), big=_big_ndjson),
        Spec("generic-sniff", GenericStreamAdapter,
             _SSE_ALL[1::6] + _glob("vercel-ai-payloads/c*"), big=_big_ndjson),
        Spec("websocket", WebSocketMessageAdapter, built=_ws_seeds, unwrap=_ws_unwrap,
             internal_framing=True, big=_big_ws),
    )


SPECS = _specs()
SPEC_BY_NAME = {s.name: s for s in SPECS}
