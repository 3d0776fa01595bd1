"""The exceptions the wire raises for bytes it cannot read.

They live apart from the adapters so that framers below them (the AWS event stream, JSON
text) can raise them too without importing the adapter registry.
"""

from __future__ import annotations

__all__ = ["AdapterError", "MalformedJSON"]


class AdapterError(ValueError):
    """Input an adapter cannot read as its format: the stream passes through unchanged.

    Adapters raise this (or a subclass) for malformed or unexpected wire data. Anything else
    an adapter raises is a bug in retimer, which the shell logs with its traceback. A
    ValueError, so that callers written against the older bare ValueErrors keep working.
    """


class MalformedJSON(AdapterError):
    """Text that is not JSON an adapter can write back as the same JSON (see jsontext)."""
