"""OpenAI legacy Completions streams (`POST .../completions`, not `/chat/completions`).

The legacy endpoint is still served by OpenAI (gpt-3.5-turbo-instruct), Azure, vLLM, TGI,
llama.cpp, Ollama's `/v1/completions`, OpenRouter and Fireworks. Its chunks are
`{"object": "text_completion", "choices": [{"text", "index", "logprobs", "finish_reason"}]}`:
the token string is `choices[*].text` itself, there is no `delta`. Framing, `[DONE]`,
`usage` on the last chunk and `error` objects are as in Chat Completions.

Why a subclass of the Chat adapter rather than more cases inside it: a `/completions` path
is its own API with its own request shape, and records name the protocol that was paced;
yet the rules for where fields go in a split are the same, and some `/completions`
endpoints (Mistral and DeepSeek FIM) answer with chat-shaped `delta` chunks, which the
parent reads as they are. So the subclass adds only the `text` case.

A split keeps what a client needs once where it expects it: every piece carries the
chunk's top-level fields (id, model, created), the choice's `index` and one slice of
`text`; `finish_reason`, `logprobs` (one entry per token) and the choice's other fields are
on the last piece only (null before it), as is `usage`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.jsontarget import JSONTarget
from retimer.wire.protocols.openai_chat import NULL_UNTIL_LAST, OpenAIChatAdapter, item_index
from retimer.wire.protocols.sse_json import posts_event_stream, request_path
from retimer.wire.sse import SSEEvent

__all__ = ["OpenAICompletionsAdapter"]


class OpenAICompletionsAdapter(OpenAIChatAdapter):
    """Adapter for `POST .../completions` with `stream: true` (legacy text completions)."""

    name: ClassVar[str] = "openai-completions"

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        """POST to a path ending in /completions but not /chat/completions, as SSE."""
        return posts_event_stream(request, content_type, "/completions") and not request_path(
            request.path
        ).endswith("/chat/completions")

    def classify(self, sse: SSEEvent, obj: dict[str, Any]) -> Event:
        """`choices[*].text` chunks here; chat-shaped chunks (FIM endpoints) to the parent."""
        choices = obj.get("choices")
        texts: list[tuple[Channel, str]] = []
        target: JSONTarget[SSEEvent] | None = None
        mixed = repeated = False
        for ci, choice in enumerate(choices if isinstance(choices, list) else ()):
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            if isinstance(text, str) and text:
                text, again = self._seen.new((item_index(choice, ci), "text"), text)
                repeated = repeated or again
                if text:
                    texts.append((Channel.TEXT, text))
                target = JSONTarget(sse, obj, ("choices", ci, "text"))
            mixed = mixed or isinstance(choice.get("delta"), dict)
        if not texts:
            return Event(raw=sse.raw) if repeated else super().classify(sse, obj)
        if mixed:  # both shapes in one chunk: count every string, never rewrite it
            texts.extend(super().classify(sse, obj).texts)
            return Event(raw=sse.raw, texts=tuple(texts), atomic=True)
        atomic = obj.get("error") is not None or repeated
        return Event(raw=sse.raw, texts=tuple(texts), payload=target, atomic=atomic)

    def piece(self, target: JSONTarget[SSEEvent], piece: str, *, first: bool, last: bool) -> dict[str, Any]:
        """A `text` chunk's piece; a chat-shaped chunk's piece is the parent's."""
        if target.path[2:] != ("text",):
            return super().piece(target, piece, first=first, last=last)
        target_choice = target.path[1]
        out: dict[str, Any] = {}
        for key, value in target.obj.items():
            if key == "choices":
                out[key] = [
                    _choice(choice, piece, last=last) if ci == target_choice else choice
                    for ci, choice in enumerate(value)
                    if ci == target_choice or last
                ]
            elif key == "usage" and not last:
                out[key] = None
            else:
                out[key] = value
        return out


def _choice(choice: dict[str, Any], piece: str, *, last: bool) -> dict[str, Any]:
    """One choice of a piece: its end-of-choice fields only on the last piece."""
    out: dict[str, Any] = {}
    for key, value in choice.items():
        if key == "text":
            out[key] = piece
        elif key == "index" or last:
            out[key] = value
        elif key in NULL_UNTIL_LAST or value is None:
            out[key] = None
        # other fields (token_ids, prompt_logprobs, ...) wait for the last piece
    return out
