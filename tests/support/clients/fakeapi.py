"""A scriptable fake LLM API server that answers in the REAL shape of each provider's API.

Real clients (SDKs, agent CLIs) talk to it through retimer as if it were the provider. Every
stream is written in a few BURSTS (`bursts`, default 2, at event boundaries; `burst_gap` between
them, default 0), so any token cadence a client sees can only come from the proxy.

Listeners (both on 127.0.0.1, HTTP/1.1, h11; WebSocket via wsproto after an HTTP/1.1 upgrade):
  .port       HTTPS, own CA (.ca_path); the leaf names api.openai.com, api.anthropic.com,
              generativelanguage.googleapis.com, localhost, 127.0.0.1, llm.test (+ `extra_names`)
  .http_port  plain HTTP (an Ollama / vLLM-style loopback server)

Routes (query ignored for routing except `alt`; a `/openai` or `/v1` prefix is tolerated where noted):
  POST .../chat/completions                 OpenAI Chat: SSE when "stream": true (usage chunk when
                                            stream_options.include_usage), else a chat.completion JSON
  POST .../responses                        OpenAI Responses: SSE when "stream": true, else a response JSON
  GET  .../responses  (WebSocket upgrade)   Responses WebSocket mode: each client
                                            {"type": "response.create", ...} (fields top-level or under
                                            "response") gets the same JSON events as the SSE stream, one
                                            per message; "generate": false gets created + completed only
  GET  .../realtime   (WebSocket upgrade)   OpenAI Realtime (GA event names): session.created on connect;
                                            session.update -> session.updated; conversation.item.create ->
                                            conversation.item.created; response.create -> response.created,
                                            output_item.added, content_part.added, response.output_text.delta...,
                                            output_text.done, content_part.done, output_item.done, response.done
                                            (function calls: response.function_call_arguments.delta/.done)
  POST /v1/messages                         Anthropic Messages: SSE when "stream": true, else a message JSON
  POST /v1/messages/count_tokens            {"input_tokens": N}
  POST /v1beta/models/M:streamGenerateContent   Gemini: `alt=sse` -> SSE (CRLF-separated, as Google does),
                                            else a streamed JSON array
  POST /v1beta/models/M:generateContent     Gemini, one JSON answer (also /v1/models/...)
  POST /v1beta/models/M:countTokens         {"totalTokens": N}
  POST /api/chat, /api/generate             Ollama native NDJSON ("stream": false -> one JSON)
  GET  /api/tags, /api/ps; POST /api/show; GET /api/version; GET / ("Ollama is running")
  GET  /v1/models, /models                  model list: Anthropic's shape when the request carries
                                            anthropic-version or x-api-key, else OpenAI's
  GET  /v1/models/ID                        one model (same rule)
  GET  /v1beta/models[/M]                   Gemini model list / model
  anything else                             404 with an OpenAI-style error JSON (logged as api "unknown")

Scripting (tests/support/clients/agent_script.py; the bodies are built in api_bodies.py): a Script is
any callable `(ApiRequest) -> Reply`. A Reply is text, or a tool call
(name + JSON arguments) in that API's tool-call shape, or text then a tool call; on the Responses
API, `Reply.custom_input` makes it a custom (freeform) tool call with that raw input instead. The default,
`AgentScript(tool=..., arguments=...)`, calls the named tool when the request offers it and the
conversation holds no tool result yet, and answers with text otherwise.

Every request (HTTP or WebSocket client message) is logged as an `ApiRequest` in `.requests`
(method, path, query, headers minus auth/cookies, parsed JSON body, api, and the Reply sent).

In-process:   with FakeAPI(script=AgentScript(tool="get_weather", arguments={"city": "Paris"})) as api: ...
Own process:  python -m tests.support.clients.fakeapi --port N --certdir D [--http-port M] [--log FILE]
              [--text T] [--tool NAME --arguments JSON] [--script FILE.py:CALLABLE]
              prints one JSON line {"port", "http_port", "ca"} when ready; --log appends one JSON
              line per request.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import re
import ssl
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import wsproto
import wsproto.events as wse

from tests.support.clients.agent_script import (
    DEFAULT_TEXT,
    AgentScript,
    ApiRequest,
    Reply,
    Script,
    holds_tool_result,
    load_script,
    offered_tools,
)
from tests.support.clients.api_bodies import (
    MODELS,
    anthropic_messages,
    anthropic_model,
    compact_json,
    event_id,
    gemini_chunks,
    gemini_model,
    gemini_whole,
    ollama,
    ollama_model,
    openai_chat,
    openai_model,
    responses_events,
    sse_frames,
)
from tests.support.loop_server import Handler, LoopServer
from tests.support.server_certs import make_certs

HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
         "localhost", "127.0.0.1", "llm.test")
AUTH_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie",
                "proxy-authorization", "openai-api-key"}
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class FakeAPI(LoopServer):
    """The fake provider APIs on a TLS port and a plain-HTTP port (see the module docstring)."""

    def __init__(self, script: Script | None = None, *, bursts: int = 2, burst_gap: float = 0.0,
                 port: int = 0, http_port: int = 0, certdir: Path | None = None,
                 extra_names: tuple[str, ...] = (), log_file: Path | None = None) -> None:
        self.script: Script = script or AgentScript()
        self.bursts, self.burst_gap = bursts, burst_gap
        self.port, self.http_port = port, http_port
        self.names = HOSTS + tuple(extra_names)
        self.log_file = log_file
        self._certdir = certdir
        self.ca_path: Path | None = None
        self.cert_path: Path | None = None
        self.key_path: Path | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._requests: list[ApiRequest] = []
        self._calls = itertools.count(1)

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> FakeAPI:
        certdir = self._certdir
        if certdir is None:
            self._tmp = certdir = Path(tempfile.mkdtemp(prefix="fakeapi-"))
        self.ca_path, self.cert_path, self.key_path = make_certs(certdir, self.names, "retimer fakeapi CA")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        ctx.set_alpn_protocols(["http/1.1"])
        self._start_thread(ctx, "fakeapi", timeout=10)
        return self

    # -- the log -------------------------------------------------------------------------------
    @property
    def requests(self) -> list[ApiRequest]:
        with self._lock:
            return list(self._requests)

    def llm_requests(self) -> list[ApiRequest]:
        """The requests that got a model answer (a Reply), in arrival order."""
        return [r for r in self.requests if r.reply is not None]

    def wait_requests(self, n: int, timeout: float = 10.0) -> list[ApiRequest]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"only {len(self._requests)} of {n} requests arrived")
            return list(self._requests)

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def _log(self, rec: ApiRequest) -> None:
        with self._cond:
            self._requests.append(rec)
            self._cond.notify_all()
        if self.log_file is not None:
            with self.log_file.open("a") as f:
                f.write(json.dumps(rec.to_json(), ensure_ascii=False, default=str) + "\n")

    def _answer(self, rec: ApiRequest) -> Reply:
        reply = self.script(rec)
        if reply.tool and not reply.call_id:
            n = next(self._calls)
            reply.call_id = {"anthropic-messages": f"toolu_fake{n:018d}",
                             "gemini": f"gemini-call-{n}"}.get(rec.api, f"call_fake{n:020d}")
        rec.reply = reply
        return reply

    # -- asyncio -------------------------------------------------------------------------------
    async def _listen(self, ssl_ctx: ssl.SSLContext | None,
                      tracked: Callable[[Handler], Handler]) -> list[asyncio.Server]:
        def serve(tls: bool) -> Handler:
            return lambda r, w: self._serve_conn(r, w, tls)

        tls_srv = await asyncio.start_server(tracked(serve(True)), "127.0.0.1", self.port,
                                             ssl=ssl_ctx)
        http_srv = await asyncio.start_server(tracked(serve(False)), "127.0.0.1", self.http_port)
        self.port = tls_srv.sockets[0].getsockname()[1]
        self.http_port = http_srv.sockets[0].getsockname()[1]
        return [tls_srv, http_srv]

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          tls: bool) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                req, body = None, bytearray()
                while True:
                    ev = conn.next_event()
                    if ev is h11.NEED_DATA:
                        data = await reader.read(65536)
                        conn.receive_data(data)
                    elif isinstance(ev, h11.Request):
                        req = ev
                    elif isinstance(ev, h11.Data):
                        body += ev.data
                    elif isinstance(ev, h11.EndOfMessage) or ev is h11.PAUSED:
                        break
                    else:  # ConnectionClosed
                        return
                if req is None:
                    return
                headers: dict[str, str] = {}
                for k, v in req.headers:
                    name, val = k.decode("latin-1").lower(), v.decode("latin-1")
                    headers[name] = f"{headers[name]}, {val}" if name in headers else val
                if "websocket" in headers.get("upgrade", "").lower():
                    await self._websocket(conn, reader, writer, req, headers, tls)
                    return
                await self._http(conn, writer, req, headers, bytes(body), tls)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except (h11.ProtocolError, ConnectionError, ssl.SSLError):
            writer.transport.abort()
        finally:
            writer.close()

    # -- HTTP ------------------------------------------------------------------------------------
    def _record(self, api: str, method: str, target: str, headers: dict[str, str], body: Any,
                tls: bool) -> ApiRequest:
        split = urlsplit(target)
        b = body if isinstance(body, dict) else {}
        model = str(b.get("model") or "")
        if api == "gemini":
            m = re.search(r"/models/([^/:]+)", split.path)
            model = m.group(1) if m else model
        rec = ApiRequest(api=api, method=method, path=split.path, query=parse_qs(split.query),
                         headers={k: v for k, v in headers.items() if k not in AUTH_HEADERS},
                         body=body, host=headers.get("host", ""), stream=bool(b.get("stream")),
                         model=model, tools=offered_tools(api, b), has_tool_result=holds_tool_result(api, b),
                         time=time.time(), tls=tls)
        return rec

    async def _http(self, conn: h11.Connection, writer: asyncio.StreamWriter, req: h11.Request,
                    headers: dict[str, str], raw: bytes, tls: bool) -> None:
        method, target = req.method.decode(), req.target.decode("latin-1")
        split = urlsplit(target)
        path, query = split.path, parse_qs(split.query)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        b = body if isinstance(body, dict) else {}
        is_anthropic = "anthropic-version" in headers or "x-api-key" in headers

        async def send_json(obj: Any, status: int = 200, api: str = "models") -> None:
            rec = self._record(api, method, target, headers, body, tls)
            self._log(rec)
            await self._send_whole(conn, writer, compact_json(obj).encode(), "application/json", status)

        async def model_answer(api: str, build: Callable[[Reply, ApiRequest], Any], ctype: str) -> None:
            rec = self._record(api, method, target, headers, body, tls)
            if api == "gemini":
                rec.stream = ":streamGenerateContent" in path
            elif api.startswith("ollama"):
                rec.stream = b.get("stream", True) is not False  # Ollama streams unless told not to
            reply = self._answer(rec)
            self._log(rec)
            out = build(reply, rec)
            if isinstance(out, list):
                await self._send_stream(conn, writer, out, ctype)
            else:
                await self._send_whole(conn, writer, compact_json(out).encode(), "application/json")

        if method == "POST" and path.endswith("/chat/completions"):
            usage = bool((b.get("stream_options") or {}).get("include_usage"))
            await model_answer("openai-chat", lambda r, q: openai_chat(
                r, q.model or "gpt-4o-mini", stream=q.stream, usage=usage), "text/event-stream")
        elif method == "POST" and path.endswith("/responses"):
            def build(r: Reply, q: ApiRequest) -> Any:
                events, final = responses_events(r, q.model or "gpt-5", b)
                return sse_frames(events, named=True) if q.stream else final
            await model_answer("openai-responses", build, "text/event-stream; charset=utf-8")
        elif method == "POST" and path.endswith("/messages/count_tokens"):
            await send_json({"input_tokens": max(1, len(raw) // 4)}, api="anthropic-count")
        elif method == "POST" and path.endswith("/v1/messages"):
            await model_answer("anthropic-messages", lambda r, q: anthropic_messages(
                r, q.model or "claude-sonnet-4-5", stream=q.stream), "text/event-stream; charset=utf-8")
        elif method == "POST" and ":streamGenerateContent" in path:
            alt_sse = query.get("alt", [""])[0] == "sse"

            def build(r: Reply, q: ApiRequest) -> list[bytes]:
                chunks = gemini_chunks(r, q.model)
                if alt_sse:
                    return [f"data: {compact_json(c)}\r\n\r\n".encode() for c in chunks]
                return [("[" if i == 0 else ",\r\n").encode() + json.dumps(c, indent=2).encode()
                        for i, c in enumerate(chunks)] + [b"]"]
            await model_answer("gemini", build, "text/event-stream" if alt_sse else "application/json; charset=UTF-8")
        elif method == "POST" and ":generateContent" in path:
            await model_answer("gemini", lambda r, q: gemini_whole(r, q.model), "application/json")
        elif method == "POST" and ":countTokens" in path:
            await send_json({"totalTokens": max(1, len(raw) // 4)}, api="gemini-count")
        elif method == "POST" and path in ("/api/chat", "/api/generate"):
            chat = path == "/api/chat"

            def build(r: Reply, q: ApiRequest) -> Any:
                return ollama(r, q.model or "llama3.2:latest", chat=chat, stream=q.stream)
            await model_answer("ollama-chat" if chat else "ollama-generate", build, "application/x-ndjson")
        elif path == "/api/tags":
            await send_json({"models": [ollama_model(m) for m in MODELS["ollama"]]})
        elif path == "/api/ps":
            await send_json({"models": []})
        elif path == "/api/version":
            await send_json({"version": "0.12.6"})
        elif method == "POST" and path == "/api/show":
            name = b.get("model") or b.get("name") or MODELS["ollama"][0]
            await send_json({"modelfile": f"FROM {name}\n", "parameters": "", "template": "{{ .Prompt }}",
                             "details": ollama_model(name)["details"],
                             "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
                             "capabilities": ["completion", "tools"], "modified_at": "2025-10-01T10:00:00Z"})
        elif method in ("GET", "HEAD") and path == "/":
            rec = self._record("other", method, target, headers, body, tls)
            self._log(rec)
            await self._send_whole(conn, writer, b"Ollama is running", "text/plain; charset=utf-8")
        elif method == "GET" and re.fullmatch(r"/v1beta/models/?", path):
            await send_json({"models": [gemini_model(m) for m in MODELS["gemini"]]})
        elif method == "GET" and (m := re.fullmatch(r"/v1beta/models/([^/:]+)", path)):
            await send_json(gemini_model(m.group(1)))
        elif method == "GET" and re.fullmatch(r"(/openai)?(/v1)?/models/?", path):
            if is_anthropic:
                data = [anthropic_model(m) for m in MODELS["anthropic"]]
                await send_json({"data": data, "has_more": False, "first_id": data[0]["id"],
                                 "last_id": data[-1]["id"]})
            else:
                await send_json({"object": "list", "data": [
                    openai_model(m) for m in MODELS["openai"] + MODELS["ollama"]]})
        elif method == "GET" and (m := re.fullmatch(r"(?:/openai)?(?:/v1)?/models/(.+)", path)):
            mid = m.group(1)
            await send_json(anthropic_model(mid) if is_anthropic else openai_model(mid))
        else:
            await send_json({"error": {"message": f"fakeapi: no route for {method} {path}",
                                       "type": "invalid_request_error", "param": None,
                                       "code": "unknown_url"}}, 404, api="unknown")

    async def _send_whole(self, conn: h11.Connection, writer: asyncio.StreamWriter, data: bytes,
                          ctype: str, status: int = 200) -> None:
        writer.write(b"".join(conn.send(ev) or b"" for ev in (
            h11.Response(status_code=status, headers=[("content-type", ctype),
                                                      ("content-length", str(len(data)))]),
            h11.Data(data=data), h11.EndOfMessage())))
        await writer.drain()

    def _bursts(self, events: list[bytes]) -> list[bytes]:
        k = max(1, min(self.bursts, len(events)))
        bounds = [round(i * len(events) / k) for i in range(k + 1)]
        return [b"".join(events[a:b]) for a, b in itertools.pairwise(bounds) if b > a]

    async def _send_stream(self, conn: h11.Connection, writer: asyncio.StreamWriter,
                           events: list[bytes], ctype: str) -> None:
        writer.write(conn.send(h11.Response(status_code=200, headers=[
            ("content-type", ctype), ("cache-control", "no-cache"),
            ("x-request-id", f"req_{uuid.uuid4().hex}")])) or b"")
        await writer.drain()
        for i, burst in enumerate(self._bursts(events)):
            if i and self.burst_gap:
                await asyncio.sleep(self.burst_gap)
            writer.write(conn.send(h11.Data(data=burst)) or b"")
            await writer.drain()
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()

    # -- WebSocket -------------------------------------------------------------------------------
    async def _websocket(self, conn: h11.Connection, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter, req: h11.Request, headers: dict[str, str],
                         tls: bool) -> None:
        target = req.target.decode("latin-1")
        path = urlsplit(target).path
        kind = ("openai-realtime" if path.rstrip("/").endswith("/realtime")
                else "openai-responses-ws" if path.rstrip("/").endswith("/responses") else "")
        if not kind:
            await self._send_whole(conn, writer, b'{"error":"no websocket here"}', "application/json", 404)
            self._log(self._record("unknown", "GET", target, headers, None, tls))
            return
        accept = base64.b64encode(hashlib.sha1(
            (headers.get("sec-websocket-key", "") + _WS_GUID).encode()).digest()).decode()
        resp = [("upgrade", "websocket"), ("connection", "Upgrade"), ("sec-websocket-accept", accept)]
        if "sec-websocket-protocol" in headers:  # browsers' realtime subprotocols: accept the first
            resp.append(("sec-websocket-protocol", headers["sec-websocket-protocol"].split(",")[0].strip()))
        writer.write(conn.send(h11.InformationalResponse(status_code=101, headers=resp)) or b"")
        await writer.drain()
        leftover, _ = conn.trailing_data
        self._log(self._record(kind + "-connect", "GET", target, headers, None, tls))
        ws = wsproto.Connection(wsproto.ConnectionType.SERVER)
        if leftover:
            ws.receive_data(leftover)
        session = {"id": f"sess_{uuid.uuid4().hex[:20]}", "object": "realtime.session",
                   "type": "realtime", "model": parse_qs(urlsplit(target).query).get("model", ["gpt-realtime"])[0],
                   "output_modalities": ["text"], "instructions": "", "tools": []}
        conversation: list[dict] = []
        if kind == "openai-realtime":
            await self._ws_send(ws, writer, [[{"type": "session.created", "event_id": event_id(),
                                               "session": session}]])
        text_buf: list[str] = []
        while True:
            for ev in ws.events():
                if isinstance(ev, wse.CloseConnection):
                    writer.write(ws.send(ev.response()))
                    await writer.drain()
                    return
                if isinstance(ev, wse.Ping):
                    writer.write(ws.send(ev.response()))
                elif isinstance(ev, wse.TextMessage):
                    text_buf.append(ev.data)
                    if ev.message_finished:
                        msg, text_buf = "".join(text_buf), []
                        out = self._ws_message(kind, target, headers, tls, msg, session, conversation)
                        await self._ws_send(ws, writer, out)
            data = await reader.read(65536)
            if not data:
                return
            ws.receive_data(data)

    def _ws_message(self, kind: str, target: str, headers: dict[str, str], tls: bool, msg: str,
                    session: dict, conversation: list[dict]) -> list[list[dict]]:
        """The bursts of server events answering one client message."""
        try:
            body = json.loads(msg)
        except ValueError:
            body = {"type": "invalid"}
        typ = body.get("type") if isinstance(body, dict) else None
        if typ == "response.create":
            params = {**{k: v for k, v in body.items() if k != "response"}, **(body.get("response") or {})}
            if kind == "openai-realtime":
                params.setdefault("tools", session.get("tools") or [])
                params.setdefault("input", conversation)
            rec = self._record(kind, "WS", target, headers, body, tls)
            rec.stream, rec.model = True, str(params.get("model") or session["model"])
            rec.tools = offered_tools(kind, params)
            rec.has_tool_result = holds_tool_result(kind, params)
            generate = params.get("generate", True) is not False
            reply = self._answer(rec) if generate else Reply()
            self._log(rec)
            events, _ = responses_events(reply, rec.model, params, generate=generate,
                                         realtime=kind == "openai-realtime")
            k = max(1, min(self.bursts, len(events)))
            bounds = [round(i * len(events) / k) for i in range(k + 1)]
            return [events[a:b] for a, b in itertools.pairwise(bounds) if b > a]
        self._log(self._record(kind + "-event", "WS", target, headers, body, tls))
        if kind == "openai-realtime" and typ == "session.update":
            session.update(body.get("session") or {})
            return [[{"type": "session.updated", "event_id": event_id(), "session": session}]]
        if kind == "openai-realtime" and typ == "conversation.item.create":
            item = {"id": f"item_{uuid.uuid4().hex[:20]}", "object": "realtime.item",
                    "status": "completed", **(body.get("item") or {})}
            prev = conversation[-1]["id"] if conversation else None
            conversation.append(item)
            return [[{"type": "conversation.item.created", "event_id": event_id(),
                      "previous_item_id": prev, "item": item}]]
        if kind == "openai-realtime":
            return []
        return [[{"type": "error", "status": 400, "error": {
            "type": "invalid_request_error", "code": "unknown_event",
            "message": f"fakeapi: unsupported event type {typ!r}"}}]]

    async def _ws_send(self, ws: wsproto.Connection, writer: asyncio.StreamWriter,
                       bursts: list[list[dict]]) -> None:
        for i, burst in enumerate(bursts):
            if i and self.burst_gap:
                await asyncio.sleep(self.burst_gap)
            writer.write(b"".join(ws.send(wse.TextMessage(data=compact_json(e))) for e in burst))
            await writer.drain()


def iter_sse_data(body: str) -> Iterator[dict]:
    """The JSON data of each SSE event in `body` (for tests reading raw streams)."""
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            yield json.loads(line[5:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0, help="HTTPS port (0: any free one)")
    ap.add_argument("--http-port", type=int, default=0, help="plain HTTP port (0: any free one)")
    ap.add_argument("--certdir", type=Path, required=True, help="where ca.pem/cert.pem/key.pem live (made if absent)")
    ap.add_argument("--log", type=Path, help="append one JSON line per request")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--tool", action="append", help="tool to call when offered (repeatable: first offered wins)")
    ap.add_argument("--arguments", default="{}", help="the tool call's JSON arguments")
    ap.add_argument("--script", help="FILE.py:CALLABLE, a Script (overrides --text/--tool)")
    ap.add_argument("--bursts", type=int, default=2)
    ap.add_argument("--burst-gap", type=float, default=0.0)
    args = ap.parse_args(argv)
    script = load_script(args.script) if args.script else AgentScript(
        args.text, args.tool, json.loads(args.arguments))
    api = FakeAPI(script, bursts=args.bursts, burst_gap=args.burst_gap, port=args.port,
                  http_port=args.http_port, certdir=args.certdir, log_file=args.log)
    api.start()
    print(json.dumps({"port": api.port, "http_port": api.http_port, "ca": str(api.ca_path)}), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
