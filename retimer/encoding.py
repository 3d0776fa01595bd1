"""Content-Encoding, decoded incrementally as the body arrives (sans-io).

A compressed stream cannot be split into timed events, so the body is decoded before it is
parsed and the re-timed response goes to the client without Content-Encoding.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import brotli

try:  # Python >= 3.14
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # mitmproxy depends on the backport below 3.14
    from backports import zstd  # type: ignore[no-redef]

Step = Callable[[bytes], bytes]


def _step(coding: str) -> Step | None:
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if coding == "deflate":
        return zlib.decompressobj().decompress
    if coding == "br":
        return brotli.Decompressor().process
    if coding == "zstd":
        return zstd.ZstdDecompressor().decompress
    return None


class Decoder:
    """Undoes a Content-Encoding chain chunk by chunk; raises ValueError on corrupt input."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = steps

    def decode(self, data: bytes) -> bytes:
        try:
            for step in self._steps:
                data = step(data)
        except Exception as e:  # zlib.error, brotli.error, ZstdError: all mean corrupt input
            raise ValueError(f"cannot decode the response body: {e}") from e
        return data


def decoder_for(content_encoding: str) -> Decoder | None:
    """A decoder for the header's codings, a no-op one for identity, None when unknown."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    steps: list[Step] = []
    for coding in reversed([c for c in codings if c != "identity"]):  # last applied first
        step = _step(coding)
        if step is None:
            return None
        steps.append(step)
    return Decoder(steps)
