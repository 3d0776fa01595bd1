"""openai SDK: `chat` (stream, agent loop with a tool), `responses` (stream, agent loop),
`responses-ws` (Responses WebSocket mode: a generate=false prewarm, then a text response),
`realtime` (the SDK's Realtime client over WebSocket, text modality). Each first makes an
untimed warm-up call (see common.WARMUP)."""

from __future__ import annotations

import sys
import time

import openai
from common import BASE, PROMPT, TOOL, TOOL_DESCRIPTION, TOOL_RESULT, TOOL_SCHEMA, WARMUP, Calls

case = sys.argv[1]
client = openai.OpenAI(base_url=f"{BASE}/v1" if BASE else None, max_retries=0)
calls = Calls()


def chat(messages: list, tools: list) -> tuple[str, str | None, str, str | None]:
    text, name, args, call_id = "", None, "", None
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            call_id = tc.id or call_id
            name = (tc.function.name if tc.function else None) or name
            args += (tc.function.arguments if tc.function else "") or ""
    calls.add(text, name, args)
    return text, name, args, call_id


def responses(items: list, tools: list):  # noqa: ANN201
    text, fc = "", None
    for ev in client.responses.create(model="gpt-5", input=items, tools=tools, stream=True):
        if ev.type == "response.output_text.delta":
            text += ev.delta
        elif ev.type == "response.output_item.done" and ev.item.type == "function_call":
            fc = ev.item
    calls.add(text, fc.name if fc else None, fc.arguments if fc else None)
    return fc


def read_until(conn, end: str) -> str:  # noqa: ANN001
    text = ""
    for ev in conn:
        if ev.type == "response.output_text.delta":
            text += ev.delta
        if ev.type in (end, "error"):
            assert ev.type == end, ev
            return text
    raise AssertionError("the connection ended early")


if case == "chat":
    tools = [{"type": "function", "function": {"name": TOOL, "description": TOOL_DESCRIPTION,
                                               "parameters": TOOL_SCHEMA}}]
    calls.begin(warmup=True)
    chat([{"role": "user", "content": WARMUP}], [])
    messages: list = [{"role": "user", "content": PROMPT}]
    for _ in range(2):
        calls.begin()
        text, name, args, call_id = chat(messages, tools)
        if not name:
            break
        messages += [{"role": "assistant", "content": text or None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT}]
elif case == "responses":
    tools = [{"type": "function", "name": TOOL, "description": TOOL_DESCRIPTION, "parameters": TOOL_SCHEMA}]
    calls.begin(warmup=True)
    responses([{"role": "user", "content": WARMUP}], [])
    items: list = [{"role": "user", "content": PROMPT}]
    for _ in range(2):
        calls.begin()
        fc = responses(items, tools)
        if not fc:
            break
        items += [{"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
                  {"type": "function_call_output", "call_id": fc.call_id, "output": TOOL_RESULT}]
elif case == "responses-ws":
    with client.responses.connect() as conn:
        calls.begin(warmup=True)
        conn.send({"type": "response.create", "model": "gpt-5", "input": WARMUP})
        calls.add(read_until(conn, "response.completed"))
        start = time.monotonic()
        conn.send({"type": "response.create", "model": "gpt-5", "generate": False, "input": []})
        read_until(conn, "response.completed")
        prewarm_wall = time.monotonic() - start
        calls.begin()
        conn.send({"type": "response.create", "model": "gpt-5", "input": PROMPT})
        calls.add(read_until(conn, "response.completed"))
    calls.done(prewarm={"wall": prewarm_wall})
    sys.exit(0)
elif case == "realtime":
    with client.realtime.connect(model="gpt-realtime") as rt:
        rt.session.update(session={"type": "realtime", "output_modalities": ["text"]})
        calls.begin(warmup=True)
        rt.response.create(response={"instructions": WARMUP})
        calls.add(read_until(rt, "response.done"))
        calls.begin()  # the call: from the user's item to response.done
        rt.conversation.item.create(item={"type": "message", "role": "user",
                                          "content": [{"type": "input_text", "text": PROMPT}]})
        rt.response.create()
        calls.add(read_until(rt, "response.done"))
else:
    raise SystemExit(f"unknown case {case!r}")
calls.done()
