"""Run by `retimer run` in tests: one program that talks to three loopback servers.

argv: OLLAMA_URL (http://127.0.0.1:PORT) MCP_URL (an SSE endpoint that is not an LLM API)
WS_URL (a WebSocket echo server). Uses the real `ollama` SDK, httpx and websockets, each with
its proxy taken from the environment as `retimer run` sets it. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time

import httpx
import ollama
from websockets.sync.client import connect


def main() -> None:
    ollama_url, mcp_url, ws_url = sys.argv[1:4]
    start = time.monotonic()
    client = ollama.Client(host=ollama_url)
    pieces = [part["message"]["content"]
              for part in client.chat(model="llama3.2", stream=True,
                                      messages=[{"role": "user", "content": "Say hello."}])]
    ollama_s = time.monotonic() - start

    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", mcp_url, json=rpc,
                         headers={"accept": "text/event-stream",
                                  "x-fake-fixture": "openai-chat/gpt4o-text-include-usage.sse"}) as r:
            mcp = b"".join(r.iter_raw())

    echoes: list[str] = []
    rtts: list[float] = []
    with connect(ws_url) as ws:
        for i in range(5):
            sent = time.monotonic()
            ws.send(f"ping {i}: ordinary words that are not an LLM's")
            echoes.append(str(ws.recv(timeout=10)))
            rtts.append(time.monotonic() - sent)
    print(json.dumps({"pieces": pieces, "ollama_s": ollama_s, "mcp": mcp.decode(),
                      "echoes": echoes, "ws_rtt_max_s": max(rtts)}))


if __name__ == "__main__":
    main()
