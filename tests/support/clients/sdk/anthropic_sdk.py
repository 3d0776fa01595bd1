"""anthropic SDK: Messages stream, an agent loop (tool_use, then the tool_result and a text
answer), after an untimed warm-up call (see common.WARMUP)."""

from __future__ import annotations

import anthropic
from common import BASE, PROMPT, TOOL, TOOL_DESCRIPTION, TOOL_RESULT, TOOL_SCHEMA, WARMUP, Calls

client = anthropic.Anthropic(base_url=BASE, max_retries=0)
tools = [{"name": TOOL, "description": TOOL_DESCRIPTION, "input_schema": TOOL_SCHEMA}]
calls = Calls()


def call(messages: list, tools: list):  # noqa: ANN201
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=512, messages=messages,
                                **({"tools": tools} if tools else {})) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    use = uses[0] if uses else None
    calls.add(text, use.name if use else None, use.input if use else None)
    return final, use


calls.begin(warmup=True)
call([{"role": "user", "content": WARMUP}], [])
messages: list = [{"role": "user", "content": PROMPT}]
for _ in range(2):
    calls.begin()
    final, use = call(messages, tools)
    if not use:
        break
    messages += [{"role": "assistant", "content": final.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": TOOL_RESULT}]}]
calls.done()
