"""ollama (python client) against a loopback Ollama-shaped server: /api/chat and /api/generate
streams (NDJSON), after an untimed warm-up call (see common.WARMUP). OLLAMA_HOST says where
(the fake's plain-HTTP port, or retimer in reverse mode)."""

from __future__ import annotations

import os

import ollama
from common import PROMPT, WARMUP, Calls

client = ollama.Client(host=os.environ["OLLAMA_HOST"])
calls = Calls()


def chat(prompt: str) -> None:
    calls.add("".join(c.message.content or "" for c in client.chat(
        model="llama3.2", messages=[{"role": "user", "content": prompt}], stream=True)))


calls.begin(warmup=True)
chat(WARMUP)
calls.begin()
chat(PROMPT)
calls.begin()
calls.add("".join(c.response or "" for c in client.generate(model="llama3.2", prompt=PROMPT, stream=True)))
calls.done()
