"""Response bodies of the fake LLM API (tests/support/clients/fakeapi.py), per API, in each provider's
real shape: each builder returns the events of a stream (the server groups them into bursts)
or the whole JSON answer; `token_deltas` says how a reply was split into delta events.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import time
import uuid
from typing import Any

from tests.support.clients.agent_script import Reply


def compact_json(obj: object) -> str:
    """JSON as the providers send it: no spaces, UTF-8 as is."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def pieces(text: str, per: int = 3) -> list[str]:
    """`per` words per piece (leading spaces attached); the pieces concatenate back to text."""
    toks = re.findall(r"\s*\S+", text)
    tail = text[len("".join(toks)):]
    if tail:
        toks = [*toks[:-1], toks[-1] + tail] if toks else [tail]
    return ["".join(toks[i:i + per]) for i in range(0, len(toks), per)]


def arg_pieces(s: str, n: int = 3) -> list[str]:
    """`s` (tool arguments) in `n` nearly equal pieces, as the APIs stream arguments."""
    k = max(1, -(-len(s) // n))
    return [s[i:i + k] for i in range(0, len(s), k)] or [""]


def _words(text: str) -> int:
    return len(text.split())


def sse_frames(events: list[dict], named: bool = False, sep: str = "\n\n") -> list[bytes]:
    """One SSE frame per event; `named` adds `event: TYPE` lines."""
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if named else ""
        out.append(f"{head}data: {compact_json(e)}{sep}".encode())
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
               for a in arg_pieces(reply.arguments_json)]
    ev.append(chunk({}, finish))
    if usage:
        ev.append({**head, "choices": [], "usage": use})
    return [*sse_frames(ev), b"data: [DONE]\n\n"]


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
                    "output_index": idx, "delta": a} for a in arg_pieces(reply.custom_input)]
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
                    "output_index": idx, **ckey, "delta": a} for a in arg_pieces(reply.arguments_json)]
        done_item = {**item, "status": "completed", "arguments": reply.arguments_json}
        events += [{"type": "response.function_call_arguments.done", "item_id": fid,
                    "output_index": idx, **ckey, "name": reply.tool, "arguments": reply.arguments_json},
                   {"type": "response.output_item.done", "output_index": idx, "item": done_item}]
        output.append(done_item)
    final = {**base, "status": "completed", "output": output, "usage": usage if generate else None}
    events.append({"type": "response.done" if realtime else "response.completed", "response": final})
    if realtime:
        for e in events:
            e["event_id"] = event_id()
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
                   for a in ["", *arg_pieces(reply.arguments_json)]]
        ev.append({"type": "content_block_stop", "index": i})
    ev += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": n_out}},
           {"type": "message_stop"}]
    return sse_frames(ev, named=True)


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
    return [(compact_json(e) + "\n").encode() for e in ev]


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
        out += arg_pieces(reply.custom_input)
    elif reply.tool and api in ("openai-chat", "openai-responses", "openai-responses-ws",
                                "openai-realtime", "anthropic-messages"):
        out += arg_pieces(reply.arguments_json)
    return out


MODELS = {"openai": ["gpt-4o-mini", "gpt-4.1", "gpt-5", "gpt-5-codex", "gpt-realtime"],
          "anthropic": ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"],
          "gemini": ["gemini-2.5-flash", "gemini-2.5-pro"],
          "ollama": ["llama3.2:latest", "qwen2.5-coder:7b"]}


def openai_model(m: str) -> dict:
    """Model `m` as OpenAI's model list shows it."""
    return {"id": m, "object": "model", "created": 1727000000, "owned_by": "system"}


def anthropic_model(m: str) -> dict:
    """Model `m` as Anthropic's model list shows it."""
    return {"type": "model", "id": m, "display_name": m, "created_at": "2025-09-29T00:00:00Z"}


def gemini_model(m: str) -> dict:
    """Model `m` as Gemini's model list shows it."""
    return {"name": f"models/{m}", "version": "001", "displayName": m, "inputTokenLimit": 1048576,
            "outputTokenLimit": 65536, "supportedGenerationMethods": [
                "generateContent", "countTokens", "streamGenerateContent"]}


def ollama_model(m: str) -> dict:
    """Model `m` as Ollama's model list shows it."""
    return {"name": m, "model": m, "modified_at": "2025-10-01T10:00:00.000000Z", "size": 2019393189,
            "digest": hashlib.sha256(m.encode()).hexdigest(),
            "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                        "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}}


def event_id() -> str:
    """A fresh event id in the Realtime API's shape."""
    return f"event_{uuid.uuid4().hex[:20]}"
