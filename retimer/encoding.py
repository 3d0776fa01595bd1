"""Content-Encoding, decoded incrementally in front of an adapter (sans-io).

A compressed stream cannot be split into timed events, so the body is decoded as it arrives
and the re-timed response goes to the client without Content-Encoding.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence

import brotli

from .protocols.base import Adapter, Event, RequestShape

try:  # Python >= 3.14
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # mitmproxy depends on the backport below 3.14
    from backports import zstd  # type: ignore[no-redef]

logger = logging.getLogger(__name__)

Decompress = Callable[[bytes], bytes]


def _decoder(encoding: str) -> Decompress | None:
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if encoding == "deflate":
        return zlib.decompressobj().decompress
    if encoding == "br":
        return brotli.Decompressor().process
    if encoding == "zstd":
        return zstd.ZstdDecompressor().decompress
    return None


class DecodingAdapter(Adapter):
    """Decodes the body before handing it to the wrapped adapter."""

    name = "decoding"

    def __init__(self, inner: Adapter, decompress: Sequence[Decompress]) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self._decompress = decompress
        self._broken = False

    @classmethod
    def accepts(cls, request: RequestShape, content_type: str) -> bool:
        return False

    def feed(self, data: bytes) -> list[Event]:
        if self._broken:
            return [Event(raw=data)]
        try:
            for step in self._decompress:
                data = step(data)
        except Exception as e:  # corrupt input: say so once, then forward what comes
            logger.warning(f"retimer: cannot decode the response body ({e}); forwarding it raw")
            self._broken = True
            return [*self.inner.end(), Event(raw=data)]
        return self.inner.feed(data) if data else []

    def end(self) -> list[Event]:
        return self.inner.end()

    def split(self, event: Event, pieces: Sequence[str]) -> list[bytes]:
        return self.inner.split(event, pieces)


def decoding_adapter(adapter: Adapter, content_encoding: str) -> Adapter | None:
    """`adapter` behind decoders for `content_encoding`; None when an encoding is unknown."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return adapter
    steps: list[Decompress] = []
    for coding in reversed(codings):  # the last-applied coding is undone first
        step = _decoder(coding)
        if step is None:
            return None
        steps.append(step)
    return DecodingAdapter(adapter, steps)
