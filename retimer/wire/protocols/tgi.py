"""Hugging Face Text Generation Inference native streams (`POST /generate_stream`).

Each event is one generated token: `data:{"index", "token": {"id", "text", "logprob",
"special"}, "generated_text", "details"}`; the last one also carries `generated_text` (the
whole text, the prompt too when `return_full_text`) and `details`. `token.text` is answer
text. Special tokens (e.g. `</s>`, `<|eot_id|>`) are control tokens: TGI leaves them out of
`generated_text` and many clients drop them, so they are not counted and pass unchanged, like
errors (`{"error", "error_type"}`) and everything else.

Every token event is atomic (counted, sent whole). An event is exactly one model token, so
there is nothing finer to pace, and a piece would have to repeat the token's `id`, `index`
and `logprob`: a client that decodes ids (details=True) would repeat text, and one summing
logprobs or counting by index would be wrong. Whole events are what every client expects.

`accepts` also takes the other URLs TGI's stream answers on (Inference Endpoints' root, the
serverless `/models/<id>`): a JSON body with a string `inputs` and `"stream": true`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.sse_json import SSEJSONAdapter, request_path
from retimer.wire.request import RequestBody
from retimer.wire.sse import SSEEvent, is_event_stream

__all__ = ["TGIGenerateStreamAdapter"]


class TGIGenerateStreamAdapter(SSEJSONAdapter):
    """Adapter for TGI's native token stream; reads tokens, never splits them."""

    name: ClassVar[str] = "tgi-generate-stream"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to .../generate_stream, or a TGI-shaped streaming body, answered with SSE."""
        if request.method.upper() != "POST" or not is_event_stream(content_type):
            return False
        return request_path(request.path).endswith("/generate_stream") or _tgi_body(request.parsed_body)

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        token = obj.get("token")
        if not isinstance(token, dict) or token.get("special") is True:
            return Event(raw=sse.raw)
        text = token.get("text")
        if not isinstance(text, str) or not text:
            return Event(raw=sse.raw)
        return Event(raw=sse.raw, texts=((Channel.TEXT, text),), atomic=True)

    def piece(self, target: Any, piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """Never reached: token events are atomic (see the module docstring)."""
        raise NotImplementedError("TGI token events are not split")


def _tgi_body(body: RequestBody) -> bool:
    """A text-generation request body: `{"inputs": "...", "stream": true, ...}` (as JSON the
    adapters can write back: no number beyond a double's range, see jsontext)."""
    if not body.raw.lstrip().startswith(b"{"):
        return False
    return body.double_range and isinstance(body.get("inputs"), str) and body.stream
