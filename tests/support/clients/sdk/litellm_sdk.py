"""litellm: completion(stream=True) for an OpenAI model and an Anthropic model, each an untimed
warm-up call (see common.WARMUP) and an agent loop with a tool (litellm's OpenAI-shaped chunks,
whatever the provider)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the cost map
import litellm  # noqa: E402
from common import BASE, PROMPT, TOOL, TOOL_DESCRIPTION, TOOL_RESULT, TOOL_SCHEMA, WARMUP, Calls  # noqa: E402

tools = [{"type": "function", "function": {"name": TOOL, "description": TOOL_DESCRIPTION,
                                           "parameters": TOOL_SCHEMA}}]
calls = Calls()


def call(model: str, base: str | None, messages: list, tools: list | None) -> tuple:
    text, name, args, call_id = "", None, "", None
    for chunk in litellm.completion(model=model, messages=messages, tools=tools, stream=True,
                                    api_base=base, max_tokens=512, num_retries=0):
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            call_id = tc.id or call_id
            name = tc.function.name or name
            args += tc.function.arguments or ""
    calls.add(text, name, args)
    return text, name, args, call_id


for model, base in (("openai/gpt-4o-mini", f"{BASE}/v1" if BASE else None),
                    ("anthropic/claude-sonnet-4-5", BASE)):
    calls.begin(warmup=True)
    call(model, base, [{"role": "user", "content": WARMUP}], None)
    messages: list = [{"role": "user", "content": PROMPT}]
    for _ in range(2):
        calls.begin()
        text, name, args, call_id = call(model, base, messages, tools)
        if not name:
            break
        messages += [{"role": "assistant", "content": text or None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT}]
calls.done()
