"""What `retimer demo` plays: a real response as blocks (reasoning, answer text, tool calls),
read from a markdown file, the response cache, or the capture shipped with retimer, and sent
back as an Anthropic Messages stream so every pane's flow is paced by the real proxy.

Reading a capture or a cache entry goes through retimer's own adapters (retimer.wire.protocols),
so the demo plays any stream the proxy can read, with the text exactly as the proxy counts it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from retimer.wire.protocols import ADAPTERS
from retimer.wire.protocols.base import Channel
from retimer.wire.tokenizer import split_tokens

ASSETS = Path(__file__).with_name("assets")
BUILTIN_CAPTURE = ASSETS / "capture.sse"
BUILTIN_PROTOCOL = "openai-responses"
BUILTIN_LABEL = "built-in capture: an OpenAI reasoning model (Responses API, reasoning summary)"
KINDS = {Channel.TEXT: "text", Channel.REASONING: "reasoning", Channel.TOOL_ARGS: "tool"}
# tokens per upstream delta, cycled: a real upstream sends a few tokens per event
DELTA_TOKENS = (1, 2, 1, 3, 1, 2)


class SourceError(ValueError):
    """A source the demo cannot play; the message is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class Block:
    """One content block of the response: its kind (text, reasoning, tool) and whole text."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Source:
    """The response every pane plays, and where it came from (shown on the page)."""

    label: str
    blocks: tuple[Block, ...]

    def as_json(self) -> list[dict[str, str]]:
        return [{"kind": b.kind, "text": b.text} for b in self.blocks]


def from_text_file(path: str) -> Source:
    """A markdown file as one answer block, byte for byte (UTF-8)."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError(f"--text: {path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"--text: {path} is a directory, not a file") from None
    except UnicodeDecodeError:
        raise SourceError(f"--text: {path} is not UTF-8 text") from None
    except OSError as e:
        raise SourceError(f"--text: cannot read {path}: {e.strerror}") from None
    if not text.strip():
        raise SourceError(f"--text: {path} is empty")
    return Source(f"file: {file.name}", (Block("text", text),))


def from_capture(protocol: str, body: bytes, label: str) -> Source:
    """The blocks of a recorded stream body, read by retimer's adapter for `protocol`."""
    adapter_cls = next((a for a in ADAPTERS if a.name == protocol), None)
    if adapter_cls is None:
        raise SourceError(f"{label}: retimer cannot read {protocol or 'an unknown'} streams")
    adapter = adapter_cls()
    blocks: list[Block] = []
    for event in [*adapter.feed(body), *adapter.end()]:
        for channel, text in event.texts:
            kind = KINDS.get(channel, "text")
            if blocks and blocks[-1].kind == kind:
                blocks[-1] = Block(kind, blocks[-1].text + text)
            else:
                blocks.append(Block(kind, text))
    if not blocks:
        raise SourceError(f"{label}: the stream holds no text")
    return Source(label, tuple(blocks))


def builtin() -> Source:
    """The real capture shipped with retimer: reasoning summary, then a markdown answer."""
    return from_capture(BUILTIN_PROTOCOL, BUILTIN_CAPTURE.read_bytes(), BUILTIN_LABEL)


def delta_texts(text: str) -> list[str]:
    """A block's text as upstream deltas of a few tokens each, cut at token boundaries, so
    the tokens the proxy counts per delta add up to the tokens of the whole text."""
    tokens = split_tokens(text)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        n = DELTA_TOKENS[len(out) % len(DELTA_TOKENS)]
        # a group that splits differently on its own ("stre"+"amGe" is one word) goes shorter
        while n > 1 and split_tokens("".join(tokens[i:i + n])) != tokens[i:i + n]:
            n -= 1
        out.append("".join(tokens[i:i + n]))
        i += n
    return out


def _sse(event: str, data: dict[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def anthropic_stream(source: Source, model: str = "retimer-demo") -> bytes:
    """The source as an Anthropic Messages SSE body: thinking, text and tool_use blocks."""
    out = [_sse("message_start", {"type": "message_start", "message": {
        "id": "msg_retimer_demo", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1}}})]
    delta_kind = {"text": ("text_delta", "text"), "reasoning": ("thinking_delta", "thinking"),
                  "tool": ("input_json_delta", "partial_json")}
    for index, block in enumerate(source.blocks):
        if block.kind == "reasoning":
            start: dict[str, object] = {"type": "thinking", "thinking": ""}
        elif block.kind == "tool":
            start = {"type": "tool_use", "id": f"toolu_demo_{index}", "name": "tool", "input": {}}
        else:
            start = {"type": "text", "text": ""}
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": start}))
        dtype, field = delta_kind[block.kind]
        for piece in delta_texts(block.text):
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": dtype, field: piece}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(_sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": 1}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def from_cache(directory: str, key: str = "") -> Source:
    """The newest streamed entry of a response cache (`retimer --cache DIR`) that retimer can
    read, or the entry whose key starts with `key`: an answer the user really got."""
    from retimer.cache.entry import CorruptEntry, decode_entry

    root = Path(directory).expanduser()
    if not root.is_dir():
        raise SourceError(f"--cache: {directory}: no such directory")
    metas = sorted(root.glob("??/*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    if key:
        metas = [p for p in metas if p.stem.startswith(key)]
        if not metas:
            raise SourceError(f"--entry: no cache entry in {directory} starts with {key!r}")
    entries = []
    for meta in metas:
        try:
            entry = decode_entry(meta.read_bytes(), meta.with_suffix(".body").read_bytes())
        except (OSError, CorruptEntry):
            continue
        entries.append((entry.created, meta.stem, entry))
    entries.sort(key=lambda e: e[0], reverse=True)  # ISO times sort as strings; stable on mtime
    for _, stem, entry in entries:
        try:
            return from_capture(entry.protocol or "", entry.body,
                                f"cache entry {stem[:12]} ({entry.url or entry.protocol})")
        except SourceError:
            if key:
                raise
    raise SourceError(f"--cache: {directory} holds no streamed response retimer can read")
