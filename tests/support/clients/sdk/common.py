"""Shared by the SDK client scripts: the agent-loop tool, the base URL, and the JSON result line.

A script prints one JSON line: {"calls": [{"text": str, "tool": {"name", "arguments"} | null,
"wall": seconds from the request to the end of its answer}], "wall": the calls' walls summed}
(imports, setup and the client's own work between calls excluded).
Forward mode (run under `retimer run`): SDK_BASE is unset and the SDK uses its real default host.
Reverse mode: SDK_BASE is retimer's plain-HTTP address (http://127.0.0.1:PORT).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

BASE = os.environ.get("SDK_BASE") or None
PROMPT = "What is the weather in Paris?"
# The first call of a script says WARMUP, untimed: an SDK's first call costs it up to a second of
# CPU (the openai SDK builds its Responses event types), which a paced TTFT would hide and a
# passthrough run would not. The fake API answers it briefly.
WARMUP = "warm up"
TOOL = "get_weather"
TOOL_DESCRIPTION = "Current weather for a city"
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL_RESULT = "18 degrees and sunny"


class Calls:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.start, self.warmup = time.monotonic(), False

    def begin(self, warmup: bool = False) -> None:
        """Call just before sending a request (`warmup`: the untimed first call)."""
        self.start, self.warmup = time.monotonic(), warmup

    def add(self, text: str, tool: str | None = None, arguments: Any = None) -> None:
        """Call when the answer has been read to its end."""
        wall = time.monotonic() - self.start
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments else {}
        self.calls.append({"text": text, "tool": {"name": tool, "arguments": arguments} if tool else None,
                           "wall": wall, "warmup": self.warmup})
        self.warmup = False

    def done(self, **extra: Any) -> None:
        wall = sum(c["wall"] for c in self.calls if not c["warmup"])
        sys.stdout.write(json.dumps({"calls": self.calls, "wall": wall, **extra}) + "\n")
        sys.stdout.flush()
