"""The bodies the fake upstream (tests/support/upstream.py) sends: recorded stream fixtures, cut into
events or bursts, and small synthetic OpenAI, Anthropic and Ollama streams for a given text;
`BodyEncoder` compresses the pieces as streaming servers do (and as broken ones do).
"""

from __future__ import annotations

import itertools
import json
import re
import zlib

from tests.support.paths import STREAMS_DIR

FIXTURES = STREAMS_DIR
DEFAULT_OPENAI_FIXTURE = "openai-chat/gpt4o-text-include-usage.sse"
DEFAULT_ANTHROPIC_FIXTURE = "anthropic/llm-anthropic-sonnet45-text-padded.sse"
CONTENT_TYPES = {  # by fixture file suffix; SSE otherwise
    ".ndjson": "application/x-ndjson", ".json-stream": "application/json", ".json": "application/json",
    ".bin": "application/vnd.amazon.eventstream", ".txt": "text/plain"}
_EVENT_END = re.compile(r"(?:\r\n|\n|\r(?!\n)){2}")  # a blank line ends an SSE event


def load_fixture(rel: str) -> bytes:
    """Read a stream fixture by path relative to tests/fixtures/streams (no escaping it)."""
    path = (FIXTURES / rel).resolve()
    if not path.is_relative_to(FIXTURES.resolve()) or not path.is_file():
        raise FileNotFoundError(rel)
    return path.read_bytes()


def split_events(body: bytes) -> list[bytes]:
    """Split an SSE body after each blank line; separators stay with their event, tail kept."""
    ends = [0, *(m.end() for m in _EVENT_END.finditer(body.decode("latin-1"))), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(ends) if b > a]


def split_bursts(body: bytes, k: int) -> list[bytes]:
    """Split into k roughly equal pieces at arbitrary byte positions (fewer if body is tiny)."""
    k = max(1, min(k, len(body)))
    bounds = [round(i * len(body) / k) for i in range(k + 1)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _words(text: str, per_chunk: int) -> list[str]:
    """Chunks of `per_chunk` words (leading whitespace attached) that concatenate back to text."""
    toks = re.findall(r"\s*\S+", text)
    tail = text[len("".join(toks)):]
    if tail:
        toks = toks[:-1] + [toks[-1] + tail] if toks else [tail]
    return ["".join(toks[i:i + per_chunk]) for i in range(0, len(toks), per_chunk)]


def compact_json(obj: object) -> str:
    """JSON as the APIs send it: no spaces, UTF-8 as is."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def make_openai_stream(text: str, model: str = "gpt-test", words_per_chunk: int = 3) -> bytes:
    """A complete OpenAI Chat stream (role, content chunks, finish, usage, [DONE]) for `text`."""
    head = {"id": "chatcmpl-fake0000000000000000000000", "object": "chat.completion.chunk",
            "created": 1727346168, "model": model, "system_fingerprint": "fp_fake"}

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}]}

    parts = _words(text, words_per_chunk)
    n_tok = len(re.findall(r"\S+", text))
    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": p}) for p in parts]
    events.append(chunk({}, "stop"))
    events.append({**head, "choices": [], "usage": {
        "prompt_tokens": 14, "completion_tokens": n_tok, "total_tokens": 14 + n_tok,
        "completion_tokens_details": {"reasoning_tokens": 0}}})
    return ("".join(f"data: {compact_json(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def make_anthropic_stream(text: str, model: str = "claude-test", words_per_chunk: int = 3) -> bytes:
    """A complete Anthropic Messages stream (message_start ... message_stop) for `text`."""
    n_tok = len(re.findall(r"\S+", text))
    usage = {"input_tokens": 17, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    events: list[tuple[str, str]] = [
        ("message_start", compact_json({"type": "message_start", "message": {
            "model": model, "id": "msg_fake000000000000000000", "type": "message",
            "role": "assistant", "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1, "service_tier": "standard"}}})),
        ("content_block_start", compact_json({"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}})),
        ("ping", '{"type": "ping"}'),
    ]
    events += [("content_block_delta", compact_json({"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": p}}))
               for p in _words(text, words_per_chunk)]
    events += [
        ("content_block_stop", compact_json({"type": "content_block_stop", "index": 0})),
        ("message_delta", compact_json({"type": "message_delta",
                              "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                              "usage": {**usage, "output_tokens": n_tok}})),
        ("message_stop", compact_json({"type": "message_stop"})),
    ]
    return "".join(f"event: {n}\ndata: {d}\n\n" for n, d in events).encode()


def make_ollama_stream(text: str, model: str = "llama3.2", words_per_chunk: int = 3) -> bytes:
    """An Ollama `/api/chat` NDJSON stream: message chunks, then the `done` line with counts."""
    head = {"model": model, "created_at": "2026-12-01T12:00:00.000000Z"}
    lines = [{**head, "message": {"role": "assistant", "content": p}, "done": False}
             for p in _words(text, words_per_chunk)]
    lines.append({**head, "message": {"role": "assistant", "content": ""}, "done": True,
                  "done_reason": "stop", "total_duration": 912345678, "prompt_eval_count": 26,
                  "eval_count": len(re.findall(r"\S+", text)), "eval_duration": 812345678})
    return "".join(compact_json(line) + "\n" for line in lines).encode()


class BodyEncoder:
    """The body pieces compressed as `kind` says, piece by piece as a streaming server does:

    gzip, deflate (zlib-wrapped), deflate-raw (no zlib wrapper, sent as `deflate` by many
    servers), br: one stream flushed after each piece; gzip-members, zstd-frames: a member or
    frame per piece; gzip-corrupt: one stream with bytes flipped in the middle piece;
    gzip-truncated: one stream that never gets its end (no final block, no trailer).
    """

    def __init__(self, kind: str, pieces: int) -> None:
        import brotli

        self.kind, self.pieces = kind, pieces
        self.header = {"deflate-raw": "deflate", "gzip-members": "gzip", "zstd-frames": "zstd",
                       "gzip-corrupt": "gzip", "gzip-truncated": "gzip"}.get(kind, kind)
        wbits = {"gzip": 31, "gzip-corrupt": 31, "gzip-truncated": 31, "deflate": 15,
                 "deflate-raw": -15}.get(kind)
        self._z = zlib.compressobj(wbits=wbits) if wbits is not None else None
        self._br = brotli.Compressor() if kind == "br" else None
        if wbits is None and kind not in ("br", "gzip-members", "zstd-frames"):
            raise ValueError(f"unknown x-fake-encoding {kind!r}")

    def encode(self, piece: bytes, i: int) -> bytes:
        last = i == self.pieces - 1
        if self.kind == "gzip-members":
            import gzip

            return gzip.compress(piece)
        if self.kind == "zstd-frames":
            try:
                from compression import zstd  # type: ignore[import-not-found]
            except ImportError:
                from backports import zstd  # type: ignore[no-redef]
            return zstd.compress(piece)
        if self._br is not None:
            return self._br.process(piece) + (self._br.finish() if last else self._br.flush())
        assert self._z is not None
        end = last and self.kind != "gzip-truncated"
        data = self._z.compress(piece) + self._z.flush(zlib.Z_FINISH if end else zlib.Z_SYNC_FLUSH)
        if self.kind == "gzip-corrupt" and i == self.pieces // 2:
            mid = len(data) // 2
            data = data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 24]) + data[mid + 24:]
        return data
