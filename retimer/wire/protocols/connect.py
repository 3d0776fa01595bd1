"""Connect-RPC server streams (`application/connect+proto`, `application/connect+json`): the
protocol of Cursor's chat and of services built with connect-go, connect-es and connect-python.

The body is a sequence of enveloped messages (retimer.wire.envelope); the last has flag 0x02
and holds the end of the stream as JSON (`{"error": ..., "metadata": ...}`): it passes whole
and byte-identical, after every message before it. How a message's text is found without its
schema, and split: retimer.wire.protocols.rpc_messages.
"""

from __future__ import annotations

from typing import ClassVar

from retimer.wire.protocols.rpc_messages import EnvelopedMessageAdapter

__all__ = ["ConnectStreamAdapter"]


class ConnectStreamAdapter(EnvelopedMessageAdapter):
    """Adapter for Connect's streaming responses, on any host and path (the type is Connect's own)."""

    name: ClassVar[str] = "connect"
    protocols: ClassVar[tuple[str, ...]] = ("connect",)
