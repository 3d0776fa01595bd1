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

Scripting: a Script is any callable `(ApiRequest) -> Reply`. A Reply is text, or a tool call
(name + JSON arguments) in that API's tool-call shape, or text then a tool call; on the Responses
API, `Reply.custom_input` makes it a custom (freeform) tool call with that raw input instead. The default,
`AgentScript(tool=..., arguments=...)`, calls the named tool when the request offers it and the
conversation holds no tool result yet, and answers with text otherwise.

Every request (HTTP or WebSocket client message) is logged as an `ApiRequest` in `.requests`
(method, path, query, headers minus auth/cookies, parsed JSON body, api, and the Reply sent).

In-process:   with FakeAPI(script=AgentScript(tool="get_weather", arguments={"city": "Paris"})) as api: ...
Own process:  python -m tests.clients.fakeapi --port N --certdir D [--http-port M] [--log FILE]
              [--text T] [--tool NAME --arguments JSON] [--script FILE.py:CALLABLE]
              prints one JSON line {"port", "http_port", "ca"} when ready; --log appends one JSON
              line per request.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import hashlib
import importlib.util
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import wsproto
import wsproto.events as wse

from tests.loop_server import Handler, LoopServer
from tests.server_certs import make_certs

HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com",
         "localhost", "127.0.0.1", "llm.test")
DEFAULT_TEXT = "The fake model answers: retimer keeps every word and changes only the time between them."
AUTH_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie",
                "proxy-authorization", "openai-api-key"}
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# --------------------------------------------------------------------------------------------
# scripting
# --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Reply:
    """What the fake model answers: `text`, then (if `tool`) one tool call with `arguments`."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""  # filled in by the server when empty
    # OpenAI Responses only: a custom (freeform) tool call, `custom_tool_call`, whose input is this
    # raw text (Codex's apply_patch); `arguments` is then unused
    custom_input: str | None = None

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class ApiRequest:
    """One logged request (an HTTP request, or one client message on a WebSocket)."""

    api: str  # openai-chat | openai-responses | openai-responses-ws | openai-realtime |
    #           anthropic-messages | gemini | ollama-chat | ollama-generate | models | other | unknown
    method: str  # HTTP method, or "WS" for a WebSocket client message
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased, auth headers removed
    body: Any  # parsed JSON (or text, or None)
    host: str = ""
    stream: bool = False
    model: str = ""
    tools: list[str] = field(default_factory=list)  # names of the tools offered
    has_tool_result: bool = False  # the conversation already holds a tool result
    reply: Reply | None = None
    time: float = 0.0  # wall time it arrived
    tls: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Script = Callable[[ApiRequest], Reply]


class AgentScript:
    """Default script: call `tool` (if offered, and no tool result yet), else answer `text`.

    `tool` may be a name, a list of names (the first one offered is used), or None (always text).
    `text_before_tool` is said before the tool call.
    """

    def __init__(self, text: str = DEFAULT_TEXT, tool: str | list[str] | None = None,
                 arguments: dict[str, Any] | None = None, text_before_tool: str = "") -> None:
        self.text, self.tool, self.arguments = text, tool, arguments or {}
        self.text_before_tool = text_before_tool

    def __call__(self, req: ApiRequest) -> Reply:
        names = [self.tool] if isinstance(self.tool, str) else list(self.tool or [])
        offered = [n for n in names if n in req.tools]
        if offered and not req.has_tool_result:
            return Reply(self.text_before_tool, offered[0], dict(self.arguments))
        return Reply(self.text)


def _tool_names(api: str, body: dict) -> list[str]:
    names: list[str] = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if api == "gemini":
            for d in t.get("functionDeclarations") or t.get("function_declarations") or []:
                names.append(d.get("name", ""))
        elif isinstance(t.get("function"), dict):  # OpenAI Chat, Ollama
            names.append(t["function"].get("name", ""))
        elif t.get("name"):  # Anthropic, Responses function/custom tools
            names.append(t["name"])
        elif t.get("type"):  # Responses built-ins (local_shell, web_search, ...)
            names.append(t["type"])
    return [n for n in names if n]


def _has_tool_result(api: str, body: dict) -> bool:
    if api in ("openai-chat", "ollama-chat"):
        return any(isinstance(m, dict) and m.get("role") in ("tool", "function")
                   for m in body.get("messages") or [])
    if api.startswith("openai-responses") or api == "openai-realtime":
        items = body.get("input")
        return isinstance(items, list) and any(
            isinstance(i, dict) and str(i.get("type", "")).endswith("_output") for i in items)
    if api == "anthropic-messages":
        return any(isinstance(b, dict) and b.get("type") == "tool_result"
                   for m in body.get("messages") or [] if isinstance(m, dict)
                   for b in (m.get("content") if isinstance(m.get("content"), list) else []))
    if api == "gemini":
        return any(isinstance(p, dict) and ("functionResponse" in p or "function_response" in p)
                   for c in body.get("contents") or [] if isinstance(c, dict)
                   for p in c.get("parts") or [])
    return False


def load_script(spec: str) -> Script:
    """`path/to/file.py:NAME` -> the callable NAME in that file (called with no args if a class)."""
    path, _, name = spec.rpartition(":")
    mod_spec = importlib.util.spec_from_file_location(f"fakeapi_script_{uuid.uuid4().hex}", path)
    assert mod_spec and mod_spec.loader, spec
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    obj = getattr(mod, name)
    return obj() if isinstance(obj, type) else obj


# --------------------------------------------------------------------------------------------
# response bodies, per API (each returns a list of events; the server groups them into bursts)
# --------------------------------------------------------------------------------------------
def _j(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def pieces(text: str, per: int = 3) -> list[str]:
    """`per` words per piece (leading spaces attached); the pieces concatenate back to text."""
    toks = re.findall(r"\s*\S+", text)
    tail = text[len("".join(toks)):]
    if tail:
        toks = [*toks[:-1], toks[-1] + tail] if toks else [tail]
    return ["".join(toks[i:i + per]) for i in range(0, len(toks), per)]


def _arg_pieces(s: str, n: int = 3) -> list[str]:
    k = max(1, -(-len(s) // n))
    return [s[i:i + k] for i in range(0, len(s), k)] or [""]


def _words(text: str) -> int:
    return len(text.split())


def _sse(events: list[dict], named: bool = False, sep: str = "\n\n") -> list[bytes]:
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if named else ""
        out.append(f"{head}data: {_j(e)}{sep}".encode())
    return out


def openai_chat(reply: Reply, model: str, *, stream: bool, usage: bool) -> list[bytes] | dict:
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    n_out = _words(reply.text) + _words(reply.arguments_json)
    use = {"prompt_tokens": 21, "completion_tokens": n_out, "total_tokens": 21 + n_out,
           "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                         "accepted_prediction_tokens": 0,
                                         "rejected_prediction_tokens": 0}}
    finish = "tool_calls" if reply.tool else "stop"
    call = {"id": reply.call_id, "type": "function",
            "function": {"name": reply.tool, "arguments": reply.arguments_json}}
    if not stream:
        msg = {"role": "assistant", "content": reply.text or None, "refusal": None,
               "annotations": []}
        if reply.tool:
            msg["tool_calls"] = [call]
        return {"id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
                "usage": use, "service_tier": "default", "system_fingerprint": "fp_fake"}
    head = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "service_tier": "default", "system_fingerprint": "fp_fake"}

    def chunk(delta: dict, fin: str | None = None) -> dict:
        c = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": fin}]}
        if usage:
            c["usage"] = None
        return c

    ev = [chunk({"role": "assistant", "content": "", "refusal": None})]
    ev += [chunk({"content": p}) for p in pieces(reply.text)]
    if reply.tool:
        ev.append(chunk({"tool_calls": [{"index": 0, "id": reply.call_id, "type": "function",
                                         "function": {"name": reply.tool, "arguments": ""}}]}))
        ev += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]})
               for a in _arg_pieces(reply.arguments_json)]
    ev.append(chunk({}, finish))
    if usage:
        ev.append({**head, "choices": [], "usage": use})
    return [*_sse(ev), b"data: [DONE]\n\n"]


def responses_events(reply: Reply, model: str, req_body: dict, *, generate: bool = True,
                     realtime: bool = False) -> tuple[list[dict], dict]:
    """Responses API events (SSE data / WebSocket messages) and the final response object.

    realtime=True: the Realtime API's flavour (response.done, no sequence numbers)."""
    rid, created = f"resp_{uuid.uuid4().hex}", int(time.time())
    n_out = _words(reply.text) + _words(reply.arguments_json)
    usage = {"input_tokens": 21, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": n_out, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 21 + n_out}
    base = {"id": rid, "object": "realtime.response" if realtime else "response",
            "created_at": created, "status": "in_progress", "background": False, "error": None,
            "incomplete_details": None, "instructions": req_body.get("instructions"),
            "max_output_tokens": req_body.get("max_output_tokens"), "model": model, "output": [],
            "parallel_tool_calls": True, "previous_response_id": req_body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None}, "store": req_body.get("store", True),
            "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": req_body.get("tool_choice", "auto"), "tools": req_body.get("tools") or [],
            "top_p": 1.0, "truncation": "disabled", "usage": None, "user": None, "metadata": {}}
    events: list[dict] = [{"type": "response.created", "response": base}]
    output: list[dict] = []
    if generate and not realtime:
        events.append({"type": "response.in_progress", "response": base})
    if generate and (reply.text or not reply.tool):
        idx, mid = len(output), f"msg_{uuid.uuid4().hex}"
        item = {"id": mid, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        if realtime:
            item["object"] = "realtime.item"
        where = {"item_id": mid, "output_index": idx, "content_index": 0}
        events += [{"type": "response.output_item.added", "output_index": idx, "item": item},
                   {"type": "response.content_part.added", **where, "part": part}]
        events += [{"type": "response.output_text.delta", **where, "delta": p, "logprobs": []}
                   for p in pieces(reply.text)]
        full = {**part, "text": reply.text}
        done_item = {**item, "status": "completed", "content": [full]}
        events += [{"type": "response.output_text.done", **where, "text": reply.text, "logprobs": []},
                   {"type": "response.content_part.done", **where, "part": full},
                   {"type": "response.output_item.done", "output_index": idx, "item": done_item}]
        output.append(done_item)
    if generate and reply.tool and reply.custom_input is not None and not realtime:
        idx, cid = len(output), f"ctc_{uuid.uuid4().hex}"
        item = {"id": cid, "type": "custom_tool_call", "status": "in_progress", "input": "",
                "call_id": reply.call_id, "name": reply.tool}
        events.append({"type": "response.output_item.added", "output_index": idx, "item": item})
        events += [{"type": "response.custom_tool_call_input.delta", "item_id": cid,
                    "output_index": idx, "delta": a} for a in _arg_pieces(reply.custom_input)]
        done_item = {**item, "status": "completed", "input": reply.custom_input}
        events += [{"type": "response.custom_tool_call_input.done", "item_id": cid,
                    "output_index": idx, "input": reply.custom_input},
                   {"type": "response.output_item.done", "output_index": idx, "item": done_item}]
        output.append(done_item)
    elif generate and reply.tool:
        idx, fid = len(output), f"fc_{uuid.uuid4().hex}"
        item = {"id": fid, "type": "function_call", "status": "in_progress", "arguments": "",
                "call_id": reply.call_id, "name": reply.tool}
        if realtime:
            item["object"] = "realtime.item"
        events.append({"type": "response.output_item.added", "output_index": idx, "item": item})
        ckey = {"call_id": reply.call_id} if realtime else {}
        events += [{"type": "response.function_call_arguments.delta", "item_id": fid,
                    "output_index": idx, **ckey, "delta": a} for a in _arg_pieces(reply.arguments_json)]
        done_item = {**item, "status": "completed", "arguments": reply.arguments_json}
        events += [{"type": "response.function_call_arguments.done", "item_id": fid,
                    "output_index": idx, **ckey, "name": reply.tool, "arguments": reply.arguments_json},
                   {"type": "response.output_item.done", "output_index": idx, "item": done_item}]
        output.append(done_item)
    final = {**base, "status": "completed", "output": output, "usage": usage if generate else None}
    events.append({"type": "response.done" if realtime else "response.completed", "response": final})
    if realtime:
        for e in events:
            e["event_id"] = _eid()
            if e["type"] not in ("response.created", "response.done"):
                e["response_id"] = rid
    else:
        for i, e in enumerate(events):
            e["sequence_number"] = i
    return events, final


def anthropic_messages(reply: Reply, model: str, *, stream: bool) -> list[bytes] | dict:
    mid = f"msg_{uuid.uuid4().hex[:24]}"
    n_out = _words(reply.text) + _words(reply.arguments_json)
    usage = {"input_tokens": 21, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
             "output_tokens": n_out, "service_tier": "standard"}
    stop = "tool_use" if reply.tool else "end_turn"
    content: list[dict] = []
    if reply.text or not reply.tool:
        content.append({"type": "text", "text": reply.text})
    if reply.tool:
        content.append({"type": "tool_use", "id": reply.call_id, "name": reply.tool,
                        "input": reply.arguments})
    msg = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
           "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not stream:
        return msg
    ev: list[dict] = [{"type": "message_start", "message": {**msg, "content": [], "stop_reason": None,
                                                            "usage": {**usage, "output_tokens": 1}}}]
    for i, block in enumerate(content):
        if block["type"] == "text":
            ev.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            if i == 0:
                ev.append({"type": "ping"})
            ev += [{"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": p}}
                   for p in pieces(reply.text)]
        else:
            ev.append({"type": "content_block_start", "index": i,
                       "content_block": {**block, "input": {}}})
            ev += [{"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": a}}
                   for a in ["", *_arg_pieces(reply.arguments_json)]]
        ev.append({"type": "content_block_stop", "index": i})
    ev += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": n_out}},
           {"type": "message_stop"}]
    return _sse(ev, named=True)


def gemini_chunks(reply: Reply, model: str) -> list[dict]:
    rid = uuid.uuid4().hex[:22]
    n_out = _words(reply.text) + _words(reply.arguments_json)
    um = {"promptTokenCount": 21, "totalTokenCount": 21,
          "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 21}]}
    head = {"modelVersion": model, "responseId": rid}
    out = [{"candidates": [{"content": {"parts": [{"text": p}], "role": "model"}, "index": 0}],
            "usageMetadata": um, **head} for p in pieces(reply.text)]
    if reply.tool:
        out.append({"candidates": [{"content": {"parts": [{"functionCall": {
            "name": reply.tool, "args": reply.arguments}}], "role": "model"}, "index": 0}],
            "usageMetadata": um, **head})
    if not out:
        out.append({"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "index": 0}],
                    "usageMetadata": um, **head})
    last = out[-1]["candidates"][0]
    last["finishReason"] = "STOP"
    out[-1]["usageMetadata"] = {**um, "candidatesTokenCount": n_out, "totalTokenCount": 21 + n_out,
                                "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": n_out}]}
    return out


def gemini_whole(reply: Reply, model: str) -> dict:
    parts: list[dict] = [{"text": reply.text}] if reply.text or not reply.tool else []
    if reply.tool:
        parts.append({"functionCall": {"name": reply.tool, "args": reply.arguments}})
    first = gemini_chunks(reply, model)
    return {"candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": first[-1]["usageMetadata"], "modelVersion": model,
            "responseId": first[0]["responseId"]}


def _ollama_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ollama(reply: Reply, model: str, *, chat: bool, stream: bool) -> list[bytes] | dict:
    n_out = _words(reply.text) + _words(reply.arguments_json)
    stats = {"total_duration": 512_000_000, "load_duration": 12_000_000, "prompt_eval_count": 21,
             "prompt_eval_duration": 40_000_000, "eval_count": n_out, "eval_duration": 450_000_000}

    def msg(content: str, tools: bool = False) -> dict:
        if not chat:
            return {"response": content}
        m: dict[str, Any] = {"role": "assistant", "content": content}
        if tools:
            m["tool_calls"] = [{"function": {"name": reply.tool, "arguments": reply.arguments}}]
        return {"message": m}

    head = {"model": model}
    final_extra = {} if chat else {"context": [1, 2, 3]}
    if not stream:
        return {**head, "created_at": _ollama_time(), **msg(reply.text, bool(reply.tool and chat)),
                "done_reason": "stop", "done": True, **final_extra, **stats}
    ev = [{**head, "created_at": _ollama_time(), **msg(p), "done": False} for p in pieces(reply.text)]
    if reply.tool and chat:
        ev.append({**head, "created_at": _ollama_time(), **msg("", True), "done": False})
    ev.append({**head, "created_at": _ollama_time(), **msg(""), "done_reason": "stop", "done": True,
               **final_extra, **stats})
    return [(_j(e) + "\n").encode() for e in ev]


def token_deltas(api: str, reply: Reply) -> list[str]:
    """The token-bearing strings `reply` was sent as on `api`, one per delta event, as the
    builders above split them: text pieces, then tool-argument pieces where the API streams
    arguments (OpenAI Chat, Responses over SSE and WebSocket, Realtime, Anthropic). Gemini
    sends a tool call whole, in one part: its arguments are one piece (compact JSON). Ollama's
    whole tool call is not included (retimer counts its name and arguments as one piece)."""
    out = pieces(reply.text) if reply.text else []
    if reply.tool and api == "gemini":
        out.append(json.dumps(reply.arguments or {}, ensure_ascii=False, separators=(",", ":")))
    if reply.tool and reply.custom_input is not None and api in ("openai-responses",
                                                                 "openai-responses-ws"):
        out += _arg_pieces(reply.custom_input)
    elif reply.tool and api in ("openai-chat", "openai-responses", "openai-responses-ws",
                                "openai-realtime", "anthropic-messages"):
        out += _arg_pieces(reply.arguments_json)
    return out


MODELS = {"openai": ["gpt-4o-mini", "gpt-4.1", "gpt-5", "gpt-5-codex", "gpt-realtime"],
          "anthropic": ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"],
          "gemini": ["gemini-2.5-flash", "gemini-2.5-pro"],
          "ollama": ["llama3.2:latest", "qwen2.5-coder:7b"]}


def _openai_model(m: str) -> dict:
    return {"id": m, "object": "model", "created": 1727000000, "owned_by": "system"}


def _anthropic_model(m: str) -> dict:
    return {"type": "model", "id": m, "display_name": m, "created_at": "2025-09-29T00:00:00Z"}


def _gemini_model(m: str) -> dict:
    return {"name": f"models/{m}", "version": "001", "displayName": m, "inputTokenLimit": 1048576,
            "outputTokenLimit": 65536, "supportedGenerationMethods": [
                "generateContent", "countTokens", "streamGenerateContent"]}


def _ollama_model(m: str) -> dict:
    return {"name": m, "model": m, "modified_at": "2025-10-01T10:00:00.000000Z", "size": 2019393189,
            "digest": hashlib.sha256(m.encode()).hexdigest(),
            "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                        "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}}


# --------------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------------
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
                         model=model, tools=_tool_names(api, b), has_tool_result=_has_tool_result(api, b),
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
            await self._send_whole(conn, writer, _j(obj).encode(), "application/json", status)

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
                await self._send_whole(conn, writer, _j(out).encode(), "application/json")

        if method == "POST" and path.endswith("/chat/completions"):
            usage = bool((b.get("stream_options") or {}).get("include_usage"))
            await model_answer("openai-chat", lambda r, q: openai_chat(
                r, q.model or "gpt-4o-mini", stream=q.stream, usage=usage), "text/event-stream")
        elif method == "POST" and path.endswith("/responses"):
            def build(r: Reply, q: ApiRequest) -> Any:
                events, final = responses_events(r, q.model or "gpt-5", b)
                return _sse(events, named=True) if q.stream else final
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
                    return [f"data: {_j(c)}\r\n\r\n".encode() for c in chunks]
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
            await send_json({"models": [_ollama_model(m) for m in MODELS["ollama"]]})
        elif path == "/api/ps":
            await send_json({"models": []})
        elif path == "/api/version":
            await send_json({"version": "0.12.6"})
        elif method == "POST" and path == "/api/show":
            name = b.get("model") or b.get("name") or MODELS["ollama"][0]
            await send_json({"modelfile": f"FROM {name}\n", "parameters": "", "template": "{{ .Prompt }}",
                             "details": _ollama_model(name)["details"],
                             "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
                             "capabilities": ["completion", "tools"], "modified_at": "2025-10-01T10:00:00Z"})
        elif method in ("GET", "HEAD") and path == "/":
            rec = self._record("other", method, target, headers, body, tls)
            self._log(rec)
            await self._send_whole(conn, writer, b"Ollama is running", "text/plain; charset=utf-8")
        elif method == "GET" and re.fullmatch(r"/v1beta/models/?", path):
            await send_json({"models": [_gemini_model(m) for m in MODELS["gemini"]]})
        elif method == "GET" and (m := re.fullmatch(r"/v1beta/models/([^/:]+)", path)):
            await send_json(_gemini_model(m.group(1)))
        elif method == "GET" and re.fullmatch(r"(/openai)?(/v1)?/models/?", path):
            if is_anthropic:
                data = [_anthropic_model(m) for m in MODELS["anthropic"]]
                await send_json({"data": data, "has_more": False, "first_id": data[0]["id"],
                                 "last_id": data[-1]["id"]})
            else:
                await send_json({"object": "list", "data": [
                    _openai_model(m) for m in MODELS["openai"] + MODELS["ollama"]]})
        elif method == "GET" and (m := re.fullmatch(r"(?:/openai)?(?:/v1)?/models/(.+)", path)):
            mid = m.group(1)
            await send_json(_anthropic_model(mid) if is_anthropic else _openai_model(mid))
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
            await self._ws_send(ws, writer, [[{"type": "session.created", "event_id": _eid(),
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
            rec.tools = _tool_names(kind, params)
            rec.has_tool_result = _has_tool_result(kind, params)
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
            return [[{"type": "session.updated", "event_id": _eid(), "session": session}]]
        if kind == "openai-realtime" and typ == "conversation.item.create":
            item = {"id": f"item_{uuid.uuid4().hex[:20]}", "object": "realtime.item",
                    "status": "completed", **(body.get("item") or {})}
            prev = conversation[-1]["id"] if conversation else None
            conversation.append(item)
            return [[{"type": "conversation.item.created", "event_id": _eid(),
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
            writer.write(b"".join(ws.send(wse.TextMessage(data=_j(e))) for e in burst))
            await writer.drain()


def _eid() -> str:
    return f"event_{uuid.uuid4().hex[:20]}"


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
