"""google-genai: generate_content_stream (alt=sse), an agent loop (functionCall, then the
functionResponse and a text answer), after an untimed warm-up call (see common.WARMUP)."""

from __future__ import annotations

from common import BASE, PROMPT, TOOL, TOOL_DESCRIPTION, TOOL_RESULT, TOOL_SCHEMA, WARMUP, Calls
from google import genai
from google.genai import types

client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=BASE) if BASE else None)
tools = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
        name=TOOL, description=TOOL_DESCRIPTION, parameters_json_schema=TOOL_SCHEMA)])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
calls = Calls()


def call(contents: list, config: types.GenerateContentConfig | None):  # noqa: ANN201
    text, fc = "", None
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=contents,
                                                       config=config):
        for part in chunk.candidates[0].content.parts or []:
            if part.text:
                text += part.text
            if part.function_call:
                fc = part.function_call
    calls.add(text, fc.name if fc else None, dict(fc.args or {}) if fc else None)
    return fc


calls.begin(warmup=True)
call([types.Content(role="user", parts=[types.Part(text=WARMUP)])], None)
contents: list = [types.Content(role="user", parts=[types.Part(text=PROMPT)])]
for _ in range(2):
    calls.begin()
    fc = call(contents, tools)
    if not fc:
        break
    contents += [types.Content(role="model", parts=[types.Part(function_call=fc)]),
                 types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
                     name=fc.name, response={"result": TOOL_RESULT}))])]
calls.done()
