"""What the official SDKs build from a stream: the client-side view that a split must not change.

Both SDKs are driven through their own SSE decoder and stream accumulator (private modules:
the accumulators are what `client.chat.completions.stream()` / `client.messages.stream()` use).
"""

from __future__ import annotations

import json
import warnings
from typing import Any


def openai_view(data: bytes) -> dict[str, Any]:
    """The completion the openai SDK accumulates from a stream, reduced to client-visible state.

    reasoning_details keep only type/text/signature/index: the SDK concatenates every other
    string it sees repeated (e.g. OpenRouter's `format`), which is noise, not content.
    """
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    errors = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns on Mistral's list-typed content
        for sse in SSEDecoder().iter_bytes(iter([data])):
            if sse.data.startswith("[DONE]"):
                break
            obj = json.loads(sse.data)
            if obj.get("error"):  # the SDK raises APIError here; record and go on
                errors.append(obj["error"])
                continue
            state.handle_chunk(construct_type(type_=ChatCompletionChunk, value=obj))
        snap = state.current_completion_snapshot
        choices = []
        for c in snap.choices:
            msg, extra = c.message, c.message.model_extra or {}
            details = extra.get("reasoning_details") or []
            choices.append({
                "index": c.index, "role": msg.role, "content": msg.content, "refusal": msg.refusal,
                "reasoning": extra.get("reasoning"), "reasoning_content": extra.get("reasoning_content"),
                "reasoning_details": [{k: d.get(k) for k in ("type", "text", "signature", "index")}
                                      for d in details],
                "tool_calls": [(t.index, t.id, t.type, t.function.name, t.function.arguments)
                               for t in msg.tool_calls or []],
                "finish_reason": c.finish_reason,
                "logprobs": c.logprobs.model_dump() if c.logprobs else None,
            })
        usage = snap.usage.model_dump() if snap.usage else None
    return {"choices": choices, "usage": usage, "errors": errors}


def anthropic_view(data: bytes) -> dict[str, Any]:
    """The message the anthropic SDK accumulates from a stream (up to an error event)."""
    from anthropic._streaming import SSEDecoder
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for sse in SSEDecoder().iter_bytes(iter([data])):
        obj = json.loads(sse.data)
        if obj.get("type") == "error":
            break
        snapshot = accumulate_event(event=obj, current_snapshot=snapshot, json_bufs=json_bufs)
    assert snapshot is not None
    return snapshot.model_dump()
