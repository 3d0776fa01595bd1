"""Reading an SSE reply as a client does: its text, or its bytes up to the error that ended it."""

from __future__ import annotations

import json

import httpx


def sse_text(raw: bytes) -> str:
    """The answer text of an OpenAI Chat SSE body (comments and a cut-off last line ignored)."""
    out = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        try:
            obj = json.loads(line[6:])
        except ValueError:
            continue
        for choice in obj.get("choices") or []:
            out.append((choice.get("delta") or {}).get("content") or "")
    return "".join(out)


def read_until_error(stream: httpx.Response) -> tuple[bytes, BaseException | None]:
    got = bytearray()
    try:
        for chunk in stream.iter_raw():
            got += chunk
    except httpx.HTTPError as e:
        return bytes(got), e
    return bytes(got), None
