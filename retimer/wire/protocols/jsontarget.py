"""Where the text of a JSON event lives, and how to write a slice of it back.

Every adapter of a JSON wire format finds the one splittable string of an event somewhere in
the decoded object (`delta.text`, `choices[0].delta.content`, `data.delta_content`, ...) and,
to split it, writes copies of the object with that string replaced by each piece. A
`JSONTarget` records that place once, as a path of keys and list indexes, with the framing
unit the event came in (its SSE event, NDJSON line or event stream frame), which the pieces
are written in. Where each piece puts the event's other fields (ids first, usage last) stays
the adapter's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["JSONPath", "JSONTarget", "replaced"]

JSONPath = tuple[str | int, ...]


# not frozen: one is made per event and a frozen dataclass __init__ costs ~4x; treat as read-only
@dataclass(slots=True)
class JSONTarget[F]:
    """A decoded event, the path of its splittable string, and the frame it arrived in.

    `mirrors` are other paths holding the same string (providers that send one text under two
    names): a piece replaces it there too, so a client reading either sees the same text.
    """

    frame: F
    obj: dict[str, Any]
    path: JSONPath
    mirrors: tuple[JSONPath, ...] = ()

    def with_text(self, text: str) -> dict[str, Any]:
        """A copy of the event with `text` at `path` and at every mirror."""
        out: dict[str, Any] = replaced(self.obj, self.path, text)
        for mirror in self.mirrors:
            out = replaced(out, mirror, text)
        return out


def value_at(obj: Any, path: Sequence[str | int]) -> Any:
    """The value at `path` (object keys and list indices), or None when a step is missing or
    does not fit the container."""
    for step in path:
        if isinstance(obj, dict) and isinstance(step, str):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and 0 <= step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj


def replaced(obj: Any, path: JSONPath, value: Any) -> Any:
    """A copy of `obj` with `value` at `path`; the containers on the way are copied (key order
    kept), everything else is shared."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, list):
        assert isinstance(head, int)
        copy = list(obj)
        copy[head] = replaced(obj[head], rest, value)
        return copy
    return {**obj, head: replaced(obj[head], rest, value)}
