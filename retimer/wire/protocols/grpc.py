"""gRPC and gRPC-Web server streams (`application/grpc`, `+proto`, `+json`; `application/grpc-web`,
`+proto`, `+json`): Vertex AI's and other streaming RPC APIs.

The body is a sequence of enveloped messages (retimer.wire.envelope). gRPC's status and
message travel in HTTP/2 trailers, which the proxy forwards after the paced body; gRPC-Web
carries them in the body instead, as a last message with flag 0x80, which passes whole and
byte-identical. The base64 `grpc-web-text` types are not read (they pass through). How a
message's text is found without its schema, and split: retimer.wire.protocols.rpc_messages.
"""

from __future__ import annotations

from typing import ClassVar

from retimer.wire.protocols.rpc_messages import EnvelopedMessageAdapter

__all__ = ["GrpcStreamAdapter"]


class GrpcStreamAdapter(EnvelopedMessageAdapter):
    """Adapter for gRPC and gRPC-Web streaming responses, on any host and path."""

    name: ClassVar[str] = "grpc"
    protocols: ClassVar[tuple[str, ...]] = ("grpc", "grpc-web")
