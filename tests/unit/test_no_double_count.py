"""No text is counted twice: the counted text of every fixture equals the answer a client builds.

The bug class: an event that REPEATS text already streamed (a `.done` event, a final snapshot
with the whole text, a `generated_text`, a stream-end `response.text`) counted as new tokens,
which paces the stream several times too slowly. For every paced fixture the text the adapter
counts, per channel, must equal a reference built independently of the adapters: the answer
as a client assembles it, by a small assembler per wire format written from the API docs
(own SSE / event-stream / patch parsing; nothing from retimer.wire.protocols, retimer.wire.sse or
retimer.wire.eventstream), cross-checked with the vendor SDKs where they parse the stream
(anthropic's `accumulate_event`, openai's chat stream state). Where a format ends with a
snapshot of the whole answer (Responses `response.completed`, the web apps' cumulative frames,
ChatGPT's and DeepSeek's patched documents), the snapshot IS the reference: deltas and
snapshot must agree, and the snapshot must not add to the count (TGI's `generated_text` is
checked to repeat the tokens; this capture decodes one token differently). The one generic
row (Doubao) is checked against the `{"text"}` JSON its protobuf frames embed.

The second half: synthetic streams for the repeat events the APIs document but no capture
has (every `.done` event, stream-end snapshots, mirrored fields, cumulative chunks, whole
values sent again), and whole JSON bodies as the non-streaming hold counts them.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from retimer.wire.protocols.base import Channel
from tests.support.adapter_checks import channel_texts
from tests.support.fixture_table import PACED, TABLE, factory, read, wire

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
Texts = dict[Channel, str]


# -- independent parsers ------------------------------------------------------------------
def sse(data: bytes) -> Iterator[tuple[str, str]]:
    """(event name, data) of every SSE event dispatched by a blank line (WHATWG rules)."""
    name, lines = "", []
    for line in re.split(r"\r\n|\r|\n", data.decode("utf-8"))[:-1]:  # the unterminated tail is no line
        if line == "":
            if lines:
                yield name, "\n".join(lines)
            name, lines = "", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                lines.append(value)
            elif field == "event":
                name = value


def sse_json(data: bytes) -> Iterator[tuple[str, Any]]:
    for name, payload in sse(data):
        try:
            obj = json.loads(payload)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield name, obj


def eventstream(data: bytes) -> Iterator[tuple[dict[str, str], bytes]]:
    """AWS event stream frames: (string headers, payload)."""
    at = 0
    while at + 12 <= len(data):
        total, hlen = struct.unpack_from(">II", data, at)
        headers, h = {}, at + 12
        while h < at + 12 + hlen:
            n = data[h]
            key = data[h + 1:h + 1 + n].decode()
            h += 1 + n
            assert data[h] == 7, "only string headers in these captures"
            (vlen,) = struct.unpack_from(">H", data, h + 1)
            headers[key] = data[h + 3:h + 3 + vlen].decode()
            h += 3 + vlen
        yield headers, data[at + 12 + hlen:at + total - 4]
        at += total


class Acc:
    """Text per channel, in stream order."""

    def __init__(self) -> None:
        self.out: Texts = {}

    def add(self, channel: Channel, text: Any) -> None:
        if isinstance(text, str) and text:
            self.out[channel] = self.out.get(channel, "") + text


# -- references, one per wire format ---------------------------------------------------------
def anthropic_ref(data: bytes, *, web: bool = False) -> Texts:
    """content_block_delta strings by delta type; claude.ai's tool_result blocks are tool output."""
    acc, kinds = Acc(), {}
    for _, obj in sse_json(data):
        if obj.get("type") == "content_block_start":
            kinds[obj["index"]] = obj["content_block"]["type"]
        if obj.get("type") != "content_block_delta":
            continue
        d = obj["delta"]
        if web and kinds.get(obj.get("index")) == "tool_result":
            continue
        acc.add(TEXT, d.get("text") if d["type"] == "text_delta" else None)
        acc.add(REASONING, d.get("thinking") if d["type"] == "thinking_delta" else None)
        acc.add(TOOL_ARGS, d.get("partial_json") if d["type"] == "input_json_delta" else None)
    return acc.out


def anthropic_sdk_check(data: bytes, ref: Texts) -> None:
    """The SDK's accumulated message has the same text and thinking."""
    from anthropic._models import construct_type
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent

    def parse(obj: dict[str, Any]) -> Any:  # as the SDK's stream does: lenient construction
        return construct_type(type_=RawMessageStreamEvent, value=obj)

    snapshot, bufs = None, {}
    for _, obj in sse_json(data):
        if obj.get("type") in ("error", "ping"):
            continue
        if snapshot is None and obj.get("type") != "message_start":
            return  # an excerpt without its start
        snapshot = accumulate_event(event=parse(obj), current_snapshot=snapshot, json_bufs=bufs)
    if snapshot is None:
        return
    blocks = snapshot.content
    assert "".join(b.text for b in blocks if b.type == "text") == ref.get(TEXT, "")
    assert "".join(b.thinking for b in blocks if b.type == "thinking") == ref.get(REASONING, "")


def chat_ref(data: bytes) -> Texts:
    """choices[*].delta: content/refusal, reasoning_content (else reasoning, else OpenRouter's
    reasoning_details), Mistral typed chunks, tool call arguments."""
    acc = Acc()

    def typed(items: list[Any], channel: Channel) -> None:
        for item in items:
            if item.get("type") == "text":
                acc.add(channel, item.get("text"))
            elif item.get("type") == "thinking":
                inner = item.get("thinking")
                acc.add(REASONING, inner) if isinstance(inner, str) else typed(inner, REASONING)

    for _, obj in sse_json(data):
        for choice in obj.get("choices") or ():
            d = choice.get("delta") or {}
            for key in ("content", "refusal"):
                typed(d[key], TEXT) if isinstance(d.get(key), list) else acc.add(TEXT, d.get(key))
            reasoning = d.get("reasoning_content") or d.get("reasoning")
            if reasoning:
                acc.add(REASONING, reasoning)
            else:
                for detail in d.get("reasoning_details") or ():
                    acc.add(REASONING, detail.get("text") or detail.get("summary"))
            for call in d.get("tool_calls") or ():
                acc.add(TOOL_ARGS, (call.get("function") or {}).get("arguments"))
    return acc.out


def chat_sdk_check(data: bytes, ref: Texts) -> None:
    """openai's ChatCompletionStreamState agrees on content and tool arguments (one choice)."""
    from openai._models import construct_type
    from openai.lib.streaming.chat._completions import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    chunks = [obj for _, obj in sse_json(data) if obj.get("object") == "chat.completion.chunk"]
    if not chunks or any(ch.get("index") != 0 or c.get("error") for c in chunks for ch in c.get("choices") or ()):
        return
    if any(isinstance((ch.get("delta") or {}).get("content"), list) for c in chunks for ch in c["choices"]):
        return  # Mistral typed chunks: the SDK does not read them
    state = ChatCompletionStreamState()
    try:
        for c in chunks:
            state.handle_chunk(construct_type(type_=ChatCompletionChunk, value=c))
    except (KeyError, RuntimeError, TypeError):
        return  # the SDK rejects this provider's stream (tool call without index, annotations)
    snap = state.current_completion_snapshot
    if not snap.choices:
        return
    msg = snap.choices[0].message
    assert (msg.content or "") + (msg.refusal or "") == ref.get(TEXT, "")
    args = "".join(t.function.arguments or "" for t in msg.tool_calls or ())
    assert args == ref.get(TOOL_ARGS, "")


def completions_ref(data: bytes) -> Texts:
    acc = Acc()
    for _, obj in sse_json(data):
        for choice in obj.get("choices") or ():
            acc.add(TEXT, choice.get("text"))
    return acc.out


_RESPONSES_ITEMS: dict[str, tuple[tuple[Channel, str], ...]] = {
    "function_call": ((TOOL_ARGS, "arguments"),),
    "custom_tool_call": ((TOOL_ARGS, "input"),),
    "code_interpreter_call": ((TOOL_ARGS, "code"),),
    "mcp_call": ((TOOL_ARGS, "arguments"),),
}


def responses_ref(data: bytes) -> Texts:
    """The final response object's output (response.completed/incomplete/failed); without one
    (a stream cut short), the finished items (`response.output_item.done`), then the deltas
    of the items never finished."""
    events = [obj for _, obj in sse_json(data)]
    final = next((e["response"] for e in reversed(events) if e.get("type") in (
        "response.completed", "response.incomplete", "response.failed") and e["response"].get("output")), None)
    items = final["output"] if final else [e["item"] for e in events if e.get("type") == "response.output_item.done"]
    acc = Acc()
    for item in items:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                acc.add(TEXT, part.get("text") if part["type"] == "output_text" else part.get("refusal"))
        elif kind == "reasoning":
            for part in [*(item.get("summary") or ()), *(item.get("content") or ())]:
                acc.add(REASONING, part.get("text"))
        for channel, key in _RESPONSES_ITEMS.get(kind, ()):
            acc.add(channel, item.get(key))
    if final is None:  # deltas of items that never finished
        done = {e["item"]["id"] for e in events if e.get("type") == "response.output_item.done"}
        for e in events:
            kind = e.get("type", "")
            if kind.endswith(".delta") and e.get("item_id") not in done and isinstance(e.get("delta"), str):
                acc.add(REASONING if "reasoning" in kind else TOOL_ARGS if (
                    "arguments" in kind or "code" in kind or "input" in kind) else TEXT, e["delta"])
    return acc.out


def cohere_ref(data: bytes) -> Texts:
    acc = Acc()
    for _, obj in sse_json(data):
        msg = (obj.get("delta") or {}).get("message") or {}
        kind = obj.get("type")
        if kind in ("content-start", "content-delta"):
            acc.add(TEXT, (msg.get("content") or {}).get("text"))
            acc.add(REASONING, (msg.get("content") or {}).get("thinking"))
        elif kind == "tool-plan-delta":
            acc.add(REASONING, msg.get("tool_plan"))
        elif kind in ("tool-call-start", "tool-call-delta"):
            acc.add(TOOL_ARGS, ((msg.get("tool_calls") or {}).get("function") or {}).get("arguments"))
    return acc.out


def interactions_ref(data: bytes) -> Texts:
    acc = Acc()
    for _, obj in sse_json(data):
        d = obj.get("delta") if obj.get("event_type") in ("step.delta", "content.delta") else None
        if isinstance(d, dict):
            acc.add(TEXT, d.get("text") if d.get("type") == "text" else None)
            acc.add(REASONING, (d.get("content") or {}).get("text") if d.get("type") == "thought_summary" else None)
            acc.add(TOOL_ARGS, d.get("arguments") if d.get("type") == "arguments_delta" else None)
    return acc.out


def gemini_chunks_ref(chunks: list[dict[str, Any]]) -> Texts:
    """Text parts of every candidate, chunk after chunk; thought parts are reasoning; a
    function call (whole, never streamed) is its arguments as compact JSON."""
    acc = Acc()
    for obj in chunks:
        for cand in obj.get("candidates") or ():
            for part in (cand.get("content") or {}).get("parts") or ():
                acc.add(REASONING if part.get("thought") else TEXT, part.get("text"))
                if isinstance(call := part.get("functionCall"), dict):
                    acc.add(TOOL_ARGS, json.dumps(call.get("args") or {}, ensure_ascii=False,
                                                  separators=(",", ":")))
    return acc.out


def gemini_sse_ref(data: bytes) -> Texts:
    return gemini_chunks_ref([obj for _, obj in sse_json(data)])


def gemini_json_ref(data: bytes) -> Texts:
    return gemini_chunks_ref(json.loads(data))


def ollama_ref(data: bytes) -> Texts:
    """message.content/thinking (chat) or response/thinking (generate); a tool call counts as
    its name and arguments, as the adapter documents."""
    acc = Acc()
    for line in data.decode().splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        src = obj.get("message") if isinstance(obj.get("message"), dict) else obj
        acc.add(REASONING, src.get("thinking"))
        acc.add(TEXT, src.get("content") if src is not obj else obj.get("response"))
        for call in src.get("tool_calls") or () if src is not obj else ():
            fn = call["function"]
            acc.add(TOOL_ARGS, fn["name"] + (fn["arguments"] if isinstance(fn["arguments"], str)
                                             else json.dumps(fn["arguments"], separators=(",", ":"))))
    return acc.out


def tgi_ref(data: bytes) -> Texts:
    """The non-special token texts, which is what huggingface_hub's streaming client yields.
    The last event's `generated_text` repeats the whole answer (this capture: the prompt too,
    and one token decoded differently), so it is checked to be a repeat, never added."""
    events = [obj for _, obj in sse_json(data)]
    tokens = "".join(e["token"]["text"] for e in events if "token" in e and not e["token"]["special"])
    final = next((e["generated_text"] for e in events if e.get("generated_text")), None)
    if final is not None:
        assert abs(len(final[-len(tokens):]) - len(tokens)) <= 2 and final[-40:] == tokens[-40:]
    return {TEXT: tokens} if tokens else {}


def bedrock_ref(data: bytes) -> Texts:
    acc = Acc()
    for headers, payload in eventstream(data):
        if headers.get(":message-type") != "event":
            continue
        obj = json.loads(payload)
        if headers.get(":event-type") == "contentBlockDelta":
            d = obj["delta"]
            acc.add(TEXT, d.get("text"))
            acc.add(REASONING, (d.get("reasoningContent") or {}).get("text"))
            acc.add(TOOL_ARGS, (d.get("toolUse") or {}).get("input"))
        elif headers.get(":event-type") == "chunk":
            inner = json.loads(base64.b64decode(obj["bytes"]))
            acc.add(TEXT, inner.get("outputText"))  # Titan; its last chunk's metrics are no text
    return acc.out


def gemini_web_ref(data: bytes) -> Texts:
    """The last cumulative frame's text (candidate 0), and its thoughts."""
    out: Texts = {}
    for line in data.decode().splitlines():
        if not line.startswith('[["wrb.fr"'):
            continue
        for frame in json.loads(line):
            inner = json.loads(frame[2]) if frame[0] == "wrb.fr" and frame[2] else None
            cand = inner[4][0] if inner and len(inner) > 4 and inner[4] else None
            if not cand:
                continue
            out[TEXT] = cand[1][0]
            thoughts = cand[37][0][0] if len(cand) > 37 and cand[37] else None
            if thoughts:
                out[REASONING] = thoughts
    return {k: v for k, v in out.items() if v}


def zai_web_ref(data: bytes) -> Texts:
    acc = Acc()
    for _, obj in sse_json(data):
        d = obj.get("data") or {}
        acc.add({"thinking": REASONING, "answer": TEXT}.get(d.get("phase")), d.get("delta_content")) \
            if d.get("phase") in ("thinking", "answer") else None
    return acc.out


def chatgpt_ref(data: bytes) -> Texts:
    """The messages as the web app builds them: legacy events replace the message object;
    v1 events patch it (sticky `p`/`o`, `patch` batches, `add` of a new message). Text per
    assistant message: parts/text (tool arguments when addressed to a tool, reasoning on the
    analysis channel) and thoughts (reasoning)."""
    messages: dict[str, dict[str, Any]] = {}  # key -> message, in creation order
    current: dict[str, Any] = {"v": {"message": {"author": {"role": "assistant"}, "content": {"parts": [""]}}}}
    state = {"p": "", "o": ""}
    key = "excerpt"
    messages[key] = current["v"]["message"]

    def apply(doc: dict[str, Any], path: str, op: str, value: Any) -> None:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return
        node: Any = doc
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        last: Any = int(parts[-1]) if isinstance(node, list) else parts[-1]
        if op == "append":
            if isinstance(node, list) and last == len(node):
                node.append(value)
            elif isinstance(node[last], list):
                node[last].extend(value)
            elif isinstance(node[last], dict):
                node[last].update(value)
            else:
                node[last] = node[last] + value
        elif op in ("replace", "add"):
            if isinstance(node, list) and last == len(node):
                node.append(value)
            else:
                node[last] = value
        elif op == "truncate":
            node[last] = node[last][:value]

    for _, payload in sse(data):
        if payload in ('"v1"', "[DONE]", ""):
            continue
        obj = json.loads(payload)
        if not isinstance(obj, dict) or "type" in obj:
            continue
        if "message" in obj and "v" not in obj:  # legacy: the whole message so far
            msg = obj["message"]
            messages.pop("excerpt", None)
            messages[msg["id"]] = msg
            continue
        if "p" in obj:
            state["p"] = obj["p"]
        if "o" in obj:
            state["o"] = obj["o"]
        value, path, op = obj["v"], state["p"], state["o"] or "append"
        if path == "" and isinstance(value, dict) and "message" in value:
            if not (messages.get("excerpt") or {}).get("content", {}).get("parts", [""])[0]:
                messages.pop("excerpt", None)
            key = f"{obj.get('c')}:{value['message']['id']}"
            messages[key] = json.loads(json.dumps(value["message"]))
            state["p"], state["o"] = "", ""
            continue
        if "o" not in obj and "p" not in obj:
            op = state["o"] or ("patch" if isinstance(value, list) else "append")
        doc = {"message": messages[key]}
        if op == "patch":
            for item in value:
                apply(doc, path + item["p"], item["o"], item["v"])
        else:
            apply(doc, path, op, value)

    acc = Acc()
    for msg in messages.values():
        if (msg.get("author") or {}).get("role") != "assistant":
            continue
        content = msg.get("content") or {}
        if msg.get("recipient") not in ("all", None):
            channel = TOOL_ARGS
        elif content.get("content_type") == "thoughts" or msg.get("channel") == "analysis":
            channel = REASONING
        else:
            channel = TEXT
        for part in content.get("parts") or ():
            acc.add(channel, part if isinstance(part, str) else None)
        acc.add(channel, content.get("text"))
        for thought in content.get("thoughts") or ():
            acc.add(REASONING, thought.get("summary"))
            acc.add(REASONING, thought.get("content"))
    return acc.out


def deepseek_ref(data: bytes) -> Texts:
    """Apply the patches to the response document (sticky p/o, BATCH, -1 = last at apply time);
    the answer is its fragments' content by type (THINK: reasoning, RESPONSE: answer)."""
    doc: dict[str, Any] = {}
    state: dict[str, Any] = {"p": None, "o": None}

    def resolve(path: str) -> tuple[Any, Any]:
        node: Any = doc
        parts = path.split("/")
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        last = parts[-1]
        return node, (int(last) if isinstance(node, list) else last)

    def apply(path: str | None, op: str | None, value: Any) -> None:
        if not path:
            doc.clear()
            doc.update(value)
            return
        node, last = resolve(path)
        if op == "BATCH":
            for sub in value:
                apply(f"{path}/{sub['p']}", sub.get("o", "SET"), sub["v"])
        elif op == "APPEND":
            current = node[last] if (isinstance(node, dict) and last in node) or isinstance(node, list) else None
            node[last] = value if current is None else current + value
        else:
            node[last] = value

    for name, obj in sse_json(data):
        if name or not {"v"} <= set(obj):
            continue
        if "p" in obj:
            state["p"] = obj["p"]
        if "o" in obj:
            state["o"] = obj["o"]
        op = state["o"] or ("APPEND" if isinstance(obj["v"], str) and "content" in (state["p"] or "") else "SET")
        apply(state["p"], op, obj["v"])
    acc = Acc()
    resp = doc.get("response") or {}
    acc.add(REASONING, resp.get("thinking_content"))
    acc.add(TEXT, resp.get("content") if isinstance(resp.get("content"), str) else None)
    for frag in resp.get("fragments") or ():
        acc.add({"THINK": REASONING, "RESPONSE": TEXT}.get(frag.get("type")), frag.get("content")) \
            if frag.get("type") in ("THINK", "RESPONSE") else None
    return acc.out


def doubao_ref(data: bytes) -> Texts:
    """Doubao's protobuf frames hold the answer piece as embedded `{"text": ...}` JSON."""
    acc = Acc()
    for _, payload in sse(data):
        raw = base64.b64decode(payload + "=" * (-len(payload) % 4))
        for m in re.finditer(rb'\{"text":"(?:[^"\\]|\\.)*"\}', raw):
            acc.add(TEXT, json.loads(m.group())["text"])
    return acc.out


def jetbrains_ref(data: bytes) -> Texts:
    """JetBrains AI: `Content` events carry the answer; `data: end` closes the stream."""
    acc = Acc()
    for _, payload in sse(data):
        if payload == "end":
            continue
        event = json.loads(payload)
        if event.get("type") == "Content":
            acc.add(TEXT, event["content"])
    return acc.out


REFERENCES: dict[str, Callable[[bytes], Texts]] = {
    "anthropic-messages": anthropic_ref,
    "claude-web": lambda d: anthropic_ref(d, web=True),
    "openai-chat": chat_ref,
    "openai-completions": completions_ref,
    "openai-responses": responses_ref,
    "cohere-chat": cohere_ref,
    "gemini-interactions": interactions_ref,
    "gemini-sse": gemini_sse_ref,
    "gemini-json": gemini_json_ref,
    "ollama": ollama_ref,
    "tgi-generate-stream": tgi_ref,
    "bedrock-eventstream": bedrock_ref,
    "gemini-web": gemini_web_ref,
    "zai-web": zai_web_ref,
    "chatgpt-web": chatgpt_ref,
    "deepseek-web": deepseek_ref,
}
# generic rows (no dedicated adapter) by their fixture's name
GENERIC_REFERENCES: dict[str, Callable[[bytes], Texts]] = {
    "misc/doubao": doubao_ref,
    "misc/jetbrains-ai": lambda d: jetbrains_ref(d),
}
SDK_CHECKS: dict[str, Callable[[bytes, Texts], None]] = {
    "anthropic-messages": anthropic_sdk_check,
    "openai-chat": chat_sdk_check,
}


def counted(name: str) -> Texts:
    return {k: v for k, v in channel_texts(read(factory(name), wire(name))).items() if v}


@pytest.mark.parametrize("name", PACED)
def test_counted_text_is_the_answer(name: str) -> None:
    """Per channel, the counted text equals the reference answer: nothing counted twice."""
    row = TABLE[name]
    data = wire(name)
    if row.expect == "generic":
        prefix = next((p for p in GENERIC_REFERENCES if name.startswith(p)), None)
        assert prefix is not None, "a new generic row needs a reference"
        ref = GENERIC_REFERENCES[prefix](data)
    else:
        ref = REFERENCES[row.expect](data)
    assert counted(name) == ref
    if row.expect in SDK_CHECKS:
        SDK_CHECKS[row.expect](data, ref)


# -- synthetic streams: documented repeat events no capture has --------------------------------
def _sse(*objs: Any, named: str | None = "type") -> bytes:
    out = b""
    for obj in objs:
        if isinstance(obj, str):
            out += f"data: {obj}\n\n".encode()
            continue
        name = obj.get(named) if named else None
        out += (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(obj).encode() + b"\n\n"
    return out


def _count(method: str, host: str, path: str, ctype: str, data: bytes) -> Texts:
    from retimer.wire.protocols import fallback_adapter, find_adapter
    from retimer.wire.protocols.base import RequestShape

    shape = RequestShape(method, host, path, {}, b'{"stream": true}')
    found = find_adapter(shape, ctype)
    adapter = found() if found is not None else fallback_adapter(ctype)
    assert adapter is not None
    events = [*adapter.feed(data), *adapter.end()]
    assert b"".join(e.raw for e in events) == data  # bytes pass as they came
    return {k: v for k, v in channel_texts(events).items() if v}


SSE_CT, NDJSON_CT = "text/event-stream", "application/x-ndjson"
ANSWER = "Paris is the capital of France."
HALVES = ("Paris is the capital", " of France.")
THOUGHT = "The user asks about France; the answer is Paris."

_RESPONSE_ITEMS = [
    {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": THOUGHT}]},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]},
    {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
]
RESPONSES_STREAM = _sse(
    {"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}},
    {"type": "response.output_item.added", "output_index": 0,
     "item": {"id": "rs_1", "type": "reasoning", "summary": []}},
    {"type": "response.reasoning_summary_part.added", "item_id": "rs_1",
     "part": {"type": "summary_text", "text": ""}},
    {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": THOUGHT},
    {"type": "response.reasoning_summary_text.done", "item_id": "rs_1", "text": THOUGHT},
    {"type": "response.reasoning_summary_part.done", "item_id": "rs_1",
     "part": {"type": "summary_text", "text": THOUGHT}},
    {"type": "response.output_item.done", "output_index": 0, "item": _RESPONSE_ITEMS[0]},
    {"type": "response.output_item.added", "output_index": 1, "item": {**_RESPONSE_ITEMS[1], "content": []}},
    {"type": "response.content_part.added", "item_id": "msg_1", "part": {"type": "output_text", "text": ""}},
    *({"type": "response.output_text.delta", "item_id": "msg_1", "delta": h} for h in HALVES),
    {"type": "response.output_text.done", "item_id": "msg_1", "text": ANSWER},
    {"type": "response.content_part.done", "item_id": "msg_1", "part": _RESPONSE_ITEMS[1]["content"][0]},
    {"type": "response.output_item.done", "output_index": 1, "item": _RESPONSE_ITEMS[1]},
    {"type": "response.output_item.added", "output_index": 2, "item": {**_RESPONSE_ITEMS[2], "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"a":1}'},
    {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": '{"a":1}'},
    {"type": "response.output_item.done", "output_index": 2, "item": _RESPONSE_ITEMS[2]},
    {"type": "response.completed", "response": {"id": "r", "status": "completed", "output": _RESPONSE_ITEMS}},
)
EXPECTED_RESPONSES = {REASONING: THOUGHT, TEXT: ANSWER, TOOL_ARGS: '{"a":1}'}

SYNTHETIC: dict[str, tuple[tuple[str, str, str, str], bytes, Texts]] = {
    # OpenAI Responses: every .done event, output_item.done and response.completed repeat text
    "responses-done-and-completed": (
        ("POST", "api.openai.com", "/v1/responses", SSE_CT), RESPONSES_STREAM, EXPECTED_RESPONSES),
    # Chat Completions: a chunk that also carries the whole `message` (some compatible servers),
    # vLLM's `reasoning` mirroring `reasoning_content`, OpenRouter's reasoning_details mirror
    "chat-message-and-mirrors": (("POST", "api.openai.com", "/v1/chat/completions", SSE_CT), _sse(
        {"choices": [{"index": 0, "delta": {"reasoning": THOUGHT, "reasoning_content": THOUGHT}}]},
        {"choices": [{"index": 0, "delta": {"reasoning": "!", "reasoning_details": [
            {"type": "reasoning.text", "text": "!", "index": 0}]}}]},
        *({"choices": [{"index": 0, "delta": {"content": h}}]} for h in HALVES),
        {"choices": [{"index": 0, "delta": {}, "message": {"role": "assistant", "content": ANSWER},
                      "finish_reason": "stop"}]},
        "[DONE]", named=None), {REASONING: THOUGHT + "!", TEXT: ANSWER}),
    # Anthropic: message_delta / message_stop / content_block_stop carry no text
    "anthropic-end-events": (("POST", "api.anthropic.com", "/v1/messages", SSE_CT), _sse(
        {"type": "message_start", "message": {"id": "m", "content": [], "role": "assistant"}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": h}} for h in HALVES),
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {
            "type": "char_location", "cited_text": ANSWER, "document_index": 0}}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 8}},
        {"type": "message_stop"}), {TEXT: ANSWER}),
    # Cohere v2: citation-start repeats a span of the answer; message-end has no text
    "cohere-v2-citation-and-end": (("POST", "api.cohere.com", "/v2/chat", SSE_CT), _sse(
        {"type": "message-start", "id": "x", "delta": {"message": {"role": "assistant", "content": []}}},
        {"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text", "text": ""}}}},
        *({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": h}}}} for h in HALVES),
        {"type": "citation-start", "index": 0, "delta": {"message": {"citations": {
            "start": 0, "end": 5, "text": "Paris", "sources": []}}}},
        {"type": "citation-end", "index": 0},
        {"type": "content-end", "index": 0},
        {"type": "message-end", "delta": {"finish_reason": "COMPLETE"}}), {TEXT: ANSWER}),
    # Gemini Interactions: the legacy interaction.complete carries the outputs
    "interactions-complete-with-outputs": (("POST", "generativelanguage.googleapis.com", "/v1beta/interactions",
                                            SSE_CT), _sse(
        {"event_type": "interaction.start", "interaction": {"id": "i", "status": "in_progress"}},
        {"event_type": "content.start", "index": 0, "content": {"type": "text"}},
        *({"event_type": "content.delta", "index": 0, "delta": {"type": "text", "text": h}} for h in HALVES),
        {"event_type": "content.stop", "index": 0},
        {"event_type": "interaction.complete", "interaction": {"id": "i", "status": "completed",
                                                                "outputs": [{"type": "text", "text": ANSWER}]}},
        named="event_type"), {TEXT: ANSWER}),
    # Gemini: the last chunk has finishReason and usage, no repeated text
    "gemini-last-chunk": (("POST", "generativelanguage.googleapis.com",
                           "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", SSE_CT), _sse(
        *({"candidates": [{"content": {"parts": [{"text": h}], "role": "model"}}]} for h in HALVES),
        {"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP"}],
         "usageMetadata": {"candidatesTokenCount": 8}}, named=None), {TEXT: ANSWER}),
    # Ollama: the done message is empty; its stats are no text
    "ollama-done": (("POST", "localhost:11434", "/api/chat", NDJSON_CT), b"".join(
        json.dumps(o).encode() + b"\n" for o in (
            {"model": "m", "message": {"role": "assistant", "content": "", "thinking": THOUGHT}, "done": False},
            *({"model": "m", "message": {"role": "assistant", "content": h}, "done": False} for h in HALVES),
            {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop",
             "eval_count": 8})), {REASONING: THOUGHT, TEXT: ANSWER}),
    # TGI: the last event repeats everything in generated_text; the EOS token is special
    "tgi-generated-text": (("POST", "localhost:8080", "/generate_stream", SSE_CT), _sse(
        *({"index": i, "token": {"id": i, "text": h, "logprob": -0.1, "special": False},
           "generated_text": None, "details": None} for i, h in enumerate(HALVES)),
        {"index": 2, "token": {"id": 2, "text": "</s>", "logprob": 0.0, "special": True},
         "generated_text": ANSWER, "details": {"finish_reason": "eos_token", "generated_tokens": 3}},
        named=None), {TEXT: ANSWER}),
    # Z.ai web: the done phase carries no new text
    "zai-done": (("POST", "chat.z.ai", "/api/v2/chat/completions", SSE_CT), _sse(
        *({"type": "chat:completion", "data": {"delta_content": h, "phase": "answer"}} for h in HALVES),
        {"type": "chat:completion", "data": {"phase": "done", "done": True, "usage": {"total_tokens": 9}}},
        named=None), {TEXT: ANSWER}),
}


def _frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One AWS event stream frame with string headers and valid CRCs."""
    import zlib

    headers = b"".join(bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v)) + v.encode()
                       for k, v in ((":event-type", event_type), (":content-type", "application/json"),
                                    (":message-type", "event")))
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude))
    return head + headers + body + struct.pack(">I", zlib.crc32(head + headers + body))


def _chunk(inner: dict[str, Any]) -> bytes:
    return _frame("chunk", {"bytes": base64.b64encode(json.dumps(inner).encode()).decode()})


_METRICS = {"amazon-bedrock-invocationMetrics": {"inputTokenCount": 5, "outputTokenCount": 8,
                                                 "invocationLatency": 900, "firstByteLatency": 300}}
# Cohere v1 chat (api.cohere.com/v1/chat with Accepts: text/event-stream, and Command R on
# Bedrock): stream-end repeats the answer in response.text and in chat_history's CHATBOT turn
COHERE_V1 = (
    {"is_finished": False, "event_type": "stream-start", "generation_id": "g"},
    *({"is_finished": False, "event_type": "text-generation", "text": h} for h in HALVES),
    {"is_finished": True, "event_type": "stream-end", "finish_reason": "COMPLETE", "response": {
        "response_id": "r", "text": ANSWER, "generation_id": "g", "finish_reason": "COMPLETE",
        "chat_history": [{"role": "USER", "message": "Capital of France?"},
                         {"role": "CHATBOT", "message": ANSWER}]}},
)
BEDROCK = "bedrock-runtime.us-east-1.amazonaws.com"
EVENTSTREAM_CT = "application/vnd.amazon.eventstream"

SYNTHETIC.update({
    "generic-cohere-v1-stream-end": (("POST", "api.cohere.com", "/v1/chat", SSE_CT),
                                     _sse(*COHERE_V1, named="event_type"), {TEXT: ANSWER}),
    # HuggingChat-style NDJSON: the final answer repeats every streamed token
    "generic-final-answer": (("POST", "api.together.xyz", "/conversation/x", NDJSON_CT), b"".join(
        json.dumps(o).encode() + b"\n" for o in (
            *({"type": "stream", "token": h} for h in HALVES),
            {"type": "finalAnswer", "text": ANSWER, "interrupted": False})), {TEXT: ANSWER}),
    # an unknown Responses-like stream (a proxy's own path): .done events repeat the deltas
    "generic-done-events": (("POST", "api.together.xyz", "/v1/agent/run", SSE_CT), _sse(
        *({"type": "output_text.delta", "delta": h} for h in HALVES),
        {"type": "output_text.done", "text": ANSWER},
        {"type": "message.completed", "message": {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}},
    ), {TEXT: ANSWER}),
    "bedrock-invoke-cohere-command-r": (("POST", BEDROCK, "/model/cohere.command-r-v1%3A0/invoke-with-response-stream",
                                         EVENTSTREAM_CT),
                                        b"".join(_chunk({**o, **(_METRICS if o["is_finished"] else {})})
                                                 for o in COHERE_V1), {TEXT: ANSWER}),
    "bedrock-invoke-mistral": (("POST", BEDROCK, "/model/mistral.mistral-large-2402-v1%3A0/invoke-with-response-stream",
                                EVENTSTREAM_CT), b"".join((
        *(_chunk({"outputs": [{"text": h, "stop_reason": None}]}) for h in HALVES),
        _chunk({"outputs": [{"text": "", "stop_reason": "stop"}], **_METRICS}))), {TEXT: ANSWER}),
    "bedrock-invoke-llama": (("POST", BEDROCK, "/model/meta.llama3-70b-instruct-v1%3A0/invoke-with-response-stream",
                              EVENTSTREAM_CT), b"".join((
        *(_chunk({"generation": h, "prompt_token_count": None, "generation_token_count": 4,
                  "stop_reason": None}) for h in HALVES),
        _chunk({"generation": "", "prompt_token_count": None, "generation_token_count": 8,
                "stop_reason": "stop", **_METRICS}))), {TEXT: ANSWER}),
    "bedrock-converse-end": (("POST", BEDROCK, "/model/amazon.nova-micro-v1%3A0/converse-stream", EVENTSTREAM_CT),
                             b"".join((
        _frame("messageStart", {"role": "assistant"}),
        *(_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": h}}) for h in HALVES),
        _frame("contentBlockStop", {"contentBlockIndex": 0}),
        _frame("messageStop", {"stopReason": "end_turn"}),
        _frame("metadata", {"usage": {"inputTokens": 5, "outputTokens": 8}, "metrics": {"latencyMs": 900}}))),
        {TEXT: ANSWER}),
})


def _held_text(body: dict[str, Any]) -> Texts:
    """What the non-streaming hold counts for a whole JSON body (addon.response)."""
    from retimer.wire.protocols.generic import GenericStreamAdapter
    from retimer.wire.whole import timing_line

    line = timing_line(json.dumps(body).encode())
    assert line is not None
    adapter = GenericStreamAdapter("ndjson")
    return {k: v for k, v in channel_texts([*adapter.feed(line), *adapter.end()]).items() if v}


NON_STREAMING: dict[str, tuple[dict[str, Any], str]] = {
    "openai-chat": ({"object": "chat.completion", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": ANSWER}, "finish_reason": "stop"}]}, ANSWER),
    "vllm-reasoning-mirror": ({"object": "chat.completion", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": ANSWER, "reasoning": THOUGHT, "reasoning_content": THOUGHT}}]},
        THOUGHT + ANSWER),
    "openrouter-reasoning-details": ({"choices": [{"index": 0, "message": {
        "role": "assistant", "content": ANSWER, "reasoning": THOUGHT,
        "reasoning_details": [{"type": "reasoning.text", "text": THOUGHT, "format": "unknown", "index": 0}]}}]},
        THOUGHT + ANSWER),
    "responses": ({"object": "response", "status": "completed", "output": _RESPONSE_ITEMS[:2],
                   "text": {"format": {"type": "text"}}, "reasoning": {"effort": "low", "summary": "auto"}},
                  THOUGHT + ANSWER),
    "anthropic": ({"type": "message", "role": "assistant", "content": [
        {"type": "thinking", "thinking": THOUGHT, "signature": "c2lnbmF0dXJl"},
        {"type": "text", "text": ANSWER}], "stop_reason": "end_turn"}, THOUGHT + ANSWER),
    "cohere-v1": ({"response_id": "r", "text": ANSWER, "generation_id": "g", "finish_reason": "COMPLETE",
                   "chat_history": [{"role": "USER", "message": "Capital of France?"},
                                    {"role": "CHATBOT", "message": ANSWER}]}, ANSWER),
    "cohere-v2": ({"id": "x", "message": {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
                   "finish_reason": "COMPLETE"}, ANSWER),
    "gemini": ({"candidates": [{"content": {"parts": [{"text": THOUGHT, "thought": True}, {"text": ANSWER}],
                                            "role": "model"}, "finishReason": "STOP"}]}, THOUGHT + ANSWER),
    "ollama-chat": ({"model": "m", "message": {"role": "assistant", "content": ANSWER, "thinking": THOUGHT},
                     "done": True, "eval_count": 8}, ANSWER + THOUGHT),
}


def test_non_streaming_fixture_is_counted_once() -> None:
    """The whole-body fixture (held, not streamed): its estimate is the message, parsed by the SDK."""
    from openai.types.chat import ChatCompletion

    from tests.support.fixture_streams import load

    data = load("nonstream/openai-chat-completion.json")
    message = ChatCompletion.model_validate_json(data).choices[0].message
    assert _held_text(json.loads(data)) == {TEXT: message.content}


@pytest.mark.parametrize("case", sorted(NON_STREAMING))
def test_non_streaming_body_counts_the_answer_once(case: str) -> None:
    body, expected = NON_STREAMING[case]
    got = _held_text(body)
    assert set(got) == {TEXT}
    assert sorted(got[TEXT]) == sorted(expected)  # key order decides the order, the count is what matters


# ChatGPT web v1: a message added again whole under its id, a thought replaced whole after its
# text streamed in, and the legacy-shaped full message frame some v1 streams end with
_CG_MSG = {"id": "m1", "author": {"role": "assistant"}, "content": {"content_type": "text", "parts": [""]},
           "status": "in_progress", "recipient": "all", "channel": "final"}
_CG_DONE = {**_CG_MSG, "content": {"content_type": "text", "parts": [ANSWER]}, "status": "finished_successfully"}
_CG_THINK = {"id": "t1", "author": {"role": "assistant"}, "content": {"content_type": "thoughts", "thoughts": []},
             "status": "in_progress", "recipient": "all", "channel": "analysis"}


def _cg(*ops: Any, tail: bytes = b"") -> bytes:
    out = b'event: delta_encoding\ndata: "v1"\n\n'
    for op in ops:
        out += b"event: delta\ndata: " + json.dumps(op).encode() + b"\n\n"
    return out + tail + b"data: [DONE]\n\n"


CHATGPT = ("POST", "chatgpt.com", "/backend-api/f/conversation", SSE_CT)
SYNTHETIC.update({
    "chatgpt-message-added-again": (CHATGPT, _cg(
        {"p": "", "o": "add", "v": {"message": _CG_MSG, "conversation_id": "c"}, "c": 0},
        {"p": "/message/content/parts/0", "o": "append", "v": HALVES[0]}, {"v": HALVES[1]},
        {"p": "", "o": "add", "v": {"message": _CG_DONE, "conversation_id": "c"}, "c": 0},
        tail=b"data: " + json.dumps({"message": _CG_DONE, "conversation_id": "c", "error": None}).encode() + b"\n\n",
    ), {TEXT: ANSWER}),
    "chatgpt-thought-replaced-whole": (CHATGPT, _cg(
        {"p": "", "o": "add", "v": {"message": _CG_THINK}, "c": 0},
        {"p": "/message/content/thoughts", "o": "append", "v": [{"summary": "Weighing it", "content": ""}]},
        {"p": "/message/content/thoughts/0/content", "o": "append", "v": HALVES[0]}, {"v": HALVES[1]},
        {"p": "/message/content/thoughts/0", "o": "replace", "v": {"summary": "Weighing it", "content": ANSWER,
                                                                   "finished": True}},
        {"p": "/message/content/thoughts", "o": "append", "v": [{"summary": "Done", "content": THOUGHT}]},
        {"p": "/message/content/thoughts", "o": "replace", "v": [
            {"summary": "Weighing it", "content": ANSWER}, {"summary": "Done", "content": THOUGHT}]},
    ), {REASONING: "Weighing it" + ANSWER + "Done" + THOUGHT}),
})


# Gemini: chunks carrying the candidate's whole text so far (Gemini-compatible servers), and a
# last chunk repeating the answer; both framings
GEMINI_SSE = ("POST", "generativelanguage.googleapis.com",
              "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", SSE_CT)
GEMINI_JSON = ("POST", "generativelanguage.googleapis.com",
               "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "application/json")


def _gem(text: str, thought: bool = False, **extra: Any) -> dict[str, Any]:
    part = {"text": text, **({"thought": True} if thought else {})}
    return {"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0, **extra}]}


_GEM_CUMULATIVE = (_gem(THOUGHT[:20], True), _gem(THOUGHT, True), _gem(HALVES[0]), _gem(ANSWER),
                   _gem(ANSWER, finishReason="STOP"))
_GEM_LAST_REPEATS = (*(_gem(h) for h in HALVES), _gem(ANSWER, finishReason="STOP"))
SYNTHETIC.update({
    "gemini-sse-cumulative": (GEMINI_SSE, _sse(*_GEM_CUMULATIVE, named=None), {REASONING: THOUGHT, TEXT: ANSWER}),
    "gemini-json-cumulative": (GEMINI_JSON, json.dumps(list(_GEM_CUMULATIVE), indent=1).encode(),
                               {REASONING: THOUGHT, TEXT: ANSWER}),
    "gemini-sse-last-chunk-repeats": (GEMINI_SSE, _sse(*_GEM_LAST_REPEATS, named=None), {TEXT: ANSWER}),
})


# DeepSeek web: the document or its fragments set again whole, with the text already streamed
_DS_RESP = {"message_id": 2, "status": "WIP", "fragments": [
    {"id": 1, "type": "THINK", "content": THOUGHT[:4]}]}
_DS_DONE = {**_DS_RESP, "status": "FINISHED", "fragments": [
    {"id": 1, "type": "THINK", "content": THOUGHT}, {"id": 2, "type": "RESPONSE", "content": ANSWER}]}
SYNTHETIC["deepseek-snapshot-again"] = (("POST", "chat.deepseek.com", "/api/v0/chat/completion", SSE_CT), _sse(
    {"v": {"response": _DS_RESP}},
    {"p": "response/fragments/-1/content", "o": "APPEND", "v": THOUGHT[4:]},
    {"p": "response/fragments", "o": "APPEND", "v": [{"id": 2, "type": "RESPONSE", "content": HALVES[0]}]},
    {"p": "response/fragments/-1/content", "v": HALVES[1]},
    {"p": "response/fragments", "o": "SET", "v": _DS_DONE["fragments"]},
    {"p": "", "o": "SET", "v": {"response": _DS_DONE}},
    named=None), {REASONING: THOUGHT, TEXT: ANSWER})


# OpenAI-compatible gateways: a last chunk whose delta is the whole answer again (the
# message copied into the delta), and cumulative deltas; legacy completions likewise
def _chat(**delta: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def _call(args: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": 0, "function": {"arguments": args}}]}


CHAT = ("POST", "api.together.xyz", "/v1/chat/completions", SSE_CT)
SYNTHETIC.update({
    "chat-last-delta-is-the-answer": (CHAT, _sse(
        _chat(reasoning_content=THOUGHT), *(_chat(content=h) for h in HALVES),
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": ANSWER},
                                                         "message": {"content": ANSWER}, "finish_reason": "stop"}]},
        "[DONE]", named=None), {REASONING: THOUGHT, TEXT: ANSWER}),
    "chat-cumulative-deltas": (CHAT, _sse(
        _chat(reasoning=THOUGHT[:20]), _chat(reasoning=THOUGHT), _chat(content=HALVES[0]), _chat(content=ANSWER),
        _chat(**_call('{"city": "Paris", ')), _chat(**_call('{"city": "Paris", "unit": "c"}')),
        "[DONE]", named=None), {REASONING: THOUGHT, TEXT: ANSWER, TOOL_ARGS: '{"city": "Paris", "unit": "c"}'}),
    "completions-last-chunk-is-the-answer": (("POST", "api.together.xyz", "/v1/completions", SSE_CT), _sse(
        *({"object": "text_completion", "choices": [{"index": 0, "text": h}]} for h in HALVES),
        {"object": "text_completion", "choices": [{"index": 0, "text": ANSWER, "finish_reason": "stop"}]},
        "[DONE]", named=None), {TEXT: ANSWER}),
})


@pytest.mark.parametrize("case", sorted(SYNTHETIC))
def test_synthetic_repeat_events_are_not_counted(case: str) -> None:
    (method, host, path, ctype), data, expected = SYNTHETIC[case]
    assert _count(method, host, path, ctype, data) == expected
