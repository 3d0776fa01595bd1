"""The soak's load generator: a separate process that keeps N streams in flight through the proxy
for a fixed time and checks every one against its fixture.

Run by `bench/soak.py` as `python -m bench.soak_client` from the checkout; it reads one JSON config line on stdin,
writes a `progress` JSON line every 2 s and a `summary` line at the end. Every stream is one
of the recorded fixtures of a format, sent by the upstream in random bursts (sometimes gzip,
sometimes close-delimited); a share of them get a fault: the client leaves mid-stream, the
upstream resets or closes the connection mid-body, sends an API error event mid-stream, or
answers 404. WebSocket sessions (OpenAI Realtime-like) run against `tests/wsfake.FakeWSLLM`.

A stream checks out when the text per channel the client read (parsed by the adapter retimer
picks for it) equals the fixture's, or, for streams no adapter re-times (the generic fallback,
whole responses), when the bytes are equal. A faulted stream must show a prefix of the text.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Message, Request, TextMessage

from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import Channel, RequestShape
from tests.support.fixture_streams import (
    ANTHROPIC_FIXTURES,
    GEMINI_JSON_FIXTURES,
    GEMINI_SSE_FIXTURES,
    OPENAI_CHAT_FIXTURES,
    RESPONSES_FIXTURES,
    STREAMS_DIR,
    load,
)

CTYPES = {".sse": "text/event-stream", ".ndjson": "application/x-ndjson", ".txt": "text/plain",
          ".json-stream": "application/json", ".json": "application/json",
          ".bin": "application/vnd.amazon.eventstream"}
WS_WORDS = ("Soak tests keep many streams in flight for a long time and watch the proxy for "
            "memory, descriptor and task growth while every answer is checked word for word.")


def _glob(pattern: str) -> tuple[str, ...]:
    return tuple(sorted(p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.glob(pattern)))


@dataclass(frozen=True)
class Kind:
    """One stream format: where it is sent, with which Host, and which fixtures it replays."""

    name: str
    path: str
    fixtures: tuple[str, ...]
    host: str | None = None
    weight: float = 1.0
    sse_errors: bool = False  # the upstream's mid-stream error event is this format's


FAULTS = ("disconnect", "reset", "error_event", "status_404")
GEMINI = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
KINDS: tuple[Kind, ...] = (
    Kind("openai-chat", "/v1/chat/completions", OPENAI_CHAT_FIXTURES, weight=4, sse_errors=True),
    Kind("anthropic", "/v1/messages", ANTHROPIC_FIXTURES, weight=3, sse_errors=True),
    Kind("openai-responses", "/v1/responses", RESPONSES_FIXTURES, weight=2),
    Kind("gemini-sse", GEMINI + "?alt=sse", GEMINI_SSE_FIXTURES),
    Kind("gemini-json", GEMINI, GEMINI_JSON_FIXTURES),
    Kind("ollama-chat", "/api/chat", _glob("ollama/*chat*.ndjson"), weight=0.5),
    Kind("ollama-generate", "/api/generate", _glob("ollama/*generate*.ndjson"), weight=0.5),
    Kind("bedrock-converse", "/model/anthropic.claude-v2/converse-stream",
         _glob("bedrock/converse-stream-*.bin") + _glob("bedrock/sk-*.bin"), weight=0.7),
    Kind("bedrock-invoke", "/model/amazon.titan-text/invoke-with-response-stream",
         _glob("bedrock/invoke-*.bin"), weight=0.3),
    Kind("chatgpt-web", "/backend-api/f/conversation", _glob("chatgpt-web/*.sse"), "chatgpt.com"),
    Kind("claude-web", "/api/organizations/o-1/chat_conversations/c-1/completion",
         _glob("claude-web/*.sse"), "claude.ai"),
    Kind("gemini-web", "/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate"
         "?bl=soak&rt=c", _glob("gemini-web/*.txt"), "gemini.google.com"),
    Kind("deepseek-web", "/api/v0/chat/completion",
         ("deepseek/chat-deepseek-com-web-api-v0-completion.sse",), "chat.deepseek.com", 0.5),
    Kind("zai-web", "/api/v2/chat/completions", ("misc/chat-z-ai-web-api-v2-completions.sse",),
         "chat.z.ai", 0.5),
    Kind("tgi", "/generate_stream", ("misc/hf-tgi-generate-stream-tokens.sse",), weight=0.5),
    Kind("generic", "/backend-api/other-stream",
         _glob("vercel-ai-payloads/*.ndjson")[:6] + _glob("mistral/*.sse"), "chatgpt.com"),
    Kind("non-streaming", "/v1/chat/completions", ("nonstream/openai-chat-completion.json",),
         weight=1),
)


SLOW_S = 20.0  # no stream of the soak's fixtures takes this long at 800 tok/s
HUNG_S = 90.0  # a stream still open after this is cancelled and counted as hung


def ws_reply_messages() -> list[tuple[bytes | str, bool]]:
    """What the fake Realtime server sends per turn: created, deltas, an audio frame, done."""
    words = WS_WORDS.split(" ")
    out: list[tuple[bytes | str, bool]] = [(json.dumps({"type": "response.created"}), True)]
    out += [(json.dumps({"type": "response.output_text.delta", "event_id": f"e{i}",
                         "delta": (" " if i else "") + w}), True) for i, w in enumerate(words)]
    out += [(b"\x00\x01audio", False), (json.dumps({"type": "response.done"}), True)]
    return out


def _channels(kind: Kind, fixture: str, data: bytes) -> dict[Channel, str] | None:
    """Text per channel as retimer's adapter for this request reads it; None: no adapter."""
    ctype = CTYPES[Path(fixture).suffix]
    adapter_cls = find_adapter(RequestShape("POST", kind.host or "127.0.0.1", kind.path, {}, b"{}"),
                               ctype)
    if adapter_cls is None:
        return None
    adapter = adapter_cls()
    out: dict[Channel, str] = {}
    for event in [*adapter.feed(data), *adapter.end()]:
        for channel, text in event.texts:
            out[channel] = out.get(channel, "") + text
    return out


_EXPECTED: dict[tuple[str, str], dict[Channel, str] | None] = {}


def expected(kind: Kind, fixture: str) -> dict[Channel, str] | None:
    key = (kind.name, fixture)
    if key not in _EXPECTED:
        _EXPECTED[key] = _channels(kind, fixture, load(fixture))
    return _EXPECTED[key]


def verdict(kind: Kind, fixture: str, body: bytes, *, whole: bool) -> str:
    """"ok", or what is wrong: the text (or bytes) differs, or is not even a prefix."""
    want = expected(kind, fixture)
    if want is None:
        ref = load(fixture)
        return "ok" if (body == ref if whole else ref.startswith(body)) else "bytes-differ"
    got = _channels(kind, fixture, body) or {}
    if whole:
        return "ok" if got == want else "text-differs"
    ok = all(want.get(ch, "").startswith(text) for ch, text in got.items())
    return "ok" if ok else "text-not-a-prefix"


class Load:
    """Runs the workers and keeps the counts."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.rnd = random.Random(cfg["seed"])
        self.counts: Counter[str] = Counter()  # "kind outcome" -> n
        self.failures: list[str] = []
        self.done = 0
        self.active = 0
        self.t0 = time.monotonic()  # the load starts now; it stops at `deadline`
        self.deadline = self.t0 + cfg["seconds"]
        self.durations: list[float] = []
        self.weights = [k.weight for k in KINDS] + [cfg["ws_weight"]]

    def note(self, kind: str, outcome: str, detail: str = "") -> None:
        self.counts[f"{kind} {outcome}"] += 1
        if outcome.startswith("FAIL") and len(self.failures) < 30:
            self.failures.append(f"{kind}: {outcome} {detail}"[:400])

    async def worker(self, client: httpx.AsyncClient) -> None:
        while time.monotonic() < self.deadline:
            [kind] = self.rnd.choices([*KINDS, None], self.weights)
            self.active += 1
            t0 = time.monotonic()
            try:
                if kind is None:
                    await self.websocket()
                else:
                    await self.stream(client, kind)
            except Exception as e:  # noqa: BLE001 - counted, the soak goes on
                self.note(kind.name if kind else "websocket", "FAIL-exception", repr(e))
            finally:
                self.active -= 1
                self.done += 1
                self.durations.append(time.monotonic() - t0)

    async def stream(self, client: httpx.AsyncClient, kind: Kind) -> None:
        """One stream; one that takes more than SLOW_S is a failure, with what it was. When it
        passes SLOW_S a `slow` line tells bench/soak.py, which asks the proxy what it holds;
        at HUNG_S it is given up (keep-alives would otherwise keep it open for ever)."""
        info: dict[str, Any] = {}
        t0 = time.monotonic()
        task = asyncio.create_task(self._stream(client, kind, info))
        done, _ = await asyncio.wait({task}, timeout=SLOW_S)
        headers = {k: v for k, v in info.get("headers", {}).items() if k.startswith("x-")}
        if not done:
            print(json.dumps({"type": "slow", "kind": kind.name, "plan": headers}), flush=True)
            done, _ = await asyncio.wait({task}, timeout=HUNG_S - SLOW_S)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self.note(kind.name, "FAIL-hung", f"> {HUNG_S:.0f} s {headers}")
                return
        await task
        if (took := time.monotonic() - t0) > SLOW_S:
            self.note(kind.name, "FAIL-slow", f"{took:.0f} s {headers}")

    async def _stream(self, client: httpx.AsyncClient, kind: Kind, info: dict[str, Any]) -> None:
        rnd, cfg = self.rnd, self.cfg
        fixture = rnd.choice(kind.fixtures)
        bursts = rnd.randint(1, 8)
        headers = {"x-fake-fixture": fixture, "x-fake-bursts": str(bursts),
                   "x-fake-burst-gap": f"{rnd.uniform(0, 0.03):.3f}",
                   "content-type": "application/json"}
        if kind.host:
            headers["host"] = kind.host
        roll, fault = rnd.random(), None
        for name in FAULTS:  # each with its probability p_<name>
            roll -= cfg[f"p_{name}"]
            if roll < 0:
                fault = name
                break
        if fault == "reset" and bursts > 1:
            headers["x-fake-abort-after"] = str(rnd.randint(1, bursts - 1))
            headers["x-fake-abort"] = rnd.choice(["rst", "fin"])
        elif fault == "error_event" and kind.sse_errors and bursts > 1:
            headers["x-fake-error-after"] = str(rnd.randint(1, bursts - 1))
        elif fault == "status_404":
            headers["x-fake-fixture"] = "no/such/fixture.sse"
        elif fault != "disconnect":
            fault = None
        if fault is None:  # delivery variants (not with faults: a FIN ends a close-delimited body)
            if rnd.random() < 0.1:
                headers["x-fake-gzip"] = "1"
            if rnd.random() < 0.1:
                headers["x-fake-close"] = "1"
        url = cfg["upstream"] + kind.path
        info["headers"] = headers
        body = bytearray()
        async with client.stream("POST", url, content=b'{"stream": true}', headers=headers) as r:
            if fault == "status_404":
                await r.aread()
                good = r.status_code == 404 and b"error" in r.content
                self.note(kind.name, "fault-404-ok" if good else "FAIL-404", str(r.status_code))
                return
            if r.status_code != 200:
                await r.aread()
                # a whole (held) response whose upstream failed: the proxy answers 502
                ok = fault == "reset" and r.status_code == 502 and kind.name == "non-streaming"
                self.note(kind.name, "fault-reset-502" if ok else "FAIL-status", str(r.status_code))
                return
            try:
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if fault == "disconnect" and rnd.random() < 0.5:
                        self.note(kind.name, "fault-disconnect")
                        return  # leaving the block closes the connection mid-stream
            except (httpx.RemoteProtocolError, httpx.ReadError) as e:
                if fault != "reset":
                    self.note(kind.name, "FAIL-read-error", repr(e))
                    return
                outcome = verdict(kind, fixture, bytes(body), whole=False)
                self.note(kind.name, "fault-reset-error" if outcome == "ok" else f"FAIL-{outcome}")
                return
        if fault == "reset" and "x-fake-abort-after" in headers:
            outcome = verdict(kind, fixture, bytes(body), whole=False)
            # the upstream cut the body short: a clean end would hide that from the client
            self.note(kind.name, "FAIL-reset-clean-end" if outcome == "ok" else f"FAIL-{outcome}")
            return
        if fault == "error_event" and "x-fake-error-after" in headers:
            outcome = verdict(kind, fixture, bytes(body), whole=False)
            has_error = b"error" in bytes(body)[-400:]
            self.note(kind.name, "fault-error-event-ok" if outcome == "ok" and has_error
                      else f"FAIL-error-event-{outcome}")
            return
        outcome = verdict(kind, fixture, bytes(body), whole=True)
        self.note(kind.name, "ok" if outcome == "ok" else f"FAIL-{outcome}", fixture)

    async def websocket(self) -> None:
        """One Realtime-like session through the proxy: 1-3 turns, sometimes left early."""
        cfg, rnd = self.cfg, self.rnd
        reader, writer = await asyncio.open_connection("127.0.0.1", cfg["proxy_port"])
        ws = WSSession(reader, WSConnection(ConnectionType.CLIENT))
        target = f"127.0.0.1:{cfg['ws_port']}"
        try:
            writer.write(ws.conn.send(Request(host=target,
                                              target=f"http://{target}/v1/realtime?model=soak")))
            await ws.accepted()
            leave = rnd.random() < cfg["p_disconnect"]
            for _ in range(rnd.randint(1, 3)):
                writer.write(ws.conn.send(Message(data=json.dumps({"type": "response.create"}))))
                messages = await ws.until('"response.done"', at_most=3 if leave else None)
                if leave:
                    self.note("websocket", "fault-disconnect")
                    return
                texts = [json.loads(m) for m in messages if isinstance(m, str)]
                deltas = "".join(t.get("delta", "") for t in texts)
                audio = [m for m in messages if isinstance(m, bytes)]
                if deltas != WS_WORDS or audio != [b"\x00\x01audio"]:
                    self.note("websocket", "FAIL-text-differs", deltas[:80])
                    return
            writer.write(ws.conn.send(CloseConnection(code=1000)))
            self.note("websocket", "ok")
        finally:
            writer.close()


class WSSession:
    """Whole WebSocket messages from a wsproto client connection (frames may arrive in parts)."""

    def __init__(self, reader: asyncio.StreamReader, conn: WSConnection) -> None:
        self.reader = reader
        self.conn = conn
        self._parts: list[Any] = []
        self._events: list[Any] = []

    async def _next(self) -> Any:
        while not self._events:
            data = await asyncio.wait_for(self.reader.read(65536), 60)
            if not data:
                raise ConnectionError("the proxy closed the WebSocket")
            self.conn.receive_data(data)
            self._events.extend(self.conn.events())
        return self._events.pop(0)

    async def accepted(self) -> None:
        while not isinstance(await self._next(), AcceptConnection):
            pass

    async def until(self, marker: str, at_most: int | None = None) -> list[str | bytes]:
        """Messages up to the first text message containing `marker` (or `at_most` of them)."""
        out: list[str | bytes] = []
        while True:
            event = await self._next()
            if isinstance(event, CloseConnection):
                raise ConnectionError(f"the WebSocket closed: {event.code}")
            if not isinstance(event, (TextMessage, BytesMessage)):
                continue
            self._parts.append(event.data)
            if not event.message_finished:
                continue
            message = "".join(self._parts) if isinstance(event, TextMessage) else b"".join(self._parts)
            self._parts = []
            out.append(message)
            if (isinstance(message, str) and marker in message) or len(out) == at_most:
                return out


async def run(cfg: dict[str, Any]) -> dict[str, Any]:
    load_ = Load(cfg)
    limits = httpx.Limits(max_connections=cfg["concurrency"] + 8,
                          max_keepalive_connections=cfg["concurrency"])
    async with httpx.AsyncClient(proxy=cfg["proxy"], timeout=httpx.Timeout(60.0),
                                 limits=limits) as client:
        async def progress() -> None:
            while True:
                await asyncio.sleep(2.0)
                print(json.dumps({"type": "progress", "t": time.monotonic(), "done": load_.done,
                                  "active": load_.active, "t0": load_.t0}), flush=True)

        ticker = asyncio.create_task(progress())
        await asyncio.gather(*(load_.worker(client) for _ in range(cfg["concurrency"])))
        ticker.cancel()
    durations = sorted(load_.durations) or [0.0]
    return {"type": "summary", "t": time.monotonic(), "t0": load_.t0, "streams": load_.done,
            "counts": dict(load_.counts), "failures": load_.failures,
            "duration_p50_s": durations[len(durations) // 2],
            "duration_p99_s": durations[int(len(durations) * 0.99)]}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    summary = asyncio.run(run(cfg))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
