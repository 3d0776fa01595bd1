"""mitmproxy script for tests (`--set scripts=tests/support/hostmap.py`): an /etc/hosts entry inside
the proxy process. The test host names resolve to loopback, so clients can use real-looking
names (which NO_PROXY's loopback entries do not catch) while retimer's view of the flow, its
host checks and records, keeps the name."""

from __future__ import annotations

import socket
from typing import Any

MAPPED = {"llm.test", "other.test", "api.openai.com", "api.anthropic.com",
          # IDE agents' own hosts (tests/e2e/test_pac_reverse.py)
          "api.cline.bot", "api.kilo.ai", "api.continue.dev", "portal.qwen.ai", "chat.qwen.ai",
          "api.jetbrains.ai"}
_getaddrinfo = socket.getaddrinfo


def _mapped_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(host, str) and host.lower() in MAPPED:
        host = "127.0.0.1"
    return _getaddrinfo(host, *args, **kwargs)


def load(loader: Any) -> None:
    socket.getaddrinfo = _mapped_getaddrinfo  # asyncio's connections resolve through it


def done() -> None:
    socket.getaddrinfo = _getaddrinfo
