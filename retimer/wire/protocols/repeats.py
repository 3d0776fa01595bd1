"""Text sent again whole: what a delta adds when it repeats everything counted before it.

Delta formats send each piece of text once, but some servers of those formats send a piece
that holds the whole text so far (Gemini-compatible and OpenAI-compatible gateways streaming
cumulative chunks, or ending with a chunk whose delta is the whole answer). Counting such a
piece again paces the stream as if the answer were written twice. `SoFar` keeps the text
counted at each place of a stream (a choice's content, a candidate's thoughts, a tool call's
arguments): a piece that starts with all of it, once there are `REPEAT_MIN` characters,
counts only what follows. An incremental piece never does that in practice: it would have to
restate the whole answer so far, word for word.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["REPEAT_MIN", "SoFar"]

REPEAT_MIN = 16  # text counted at a place before a piece may be taken to repeat it


class SoFar:
    """Per stream: the text counted at each place."""

    def __init__(self) -> None:
        self._pieces: dict[Hashable, list[str]] = {}
        self._length: dict[Hashable, int] = {}

    def new(self, place: Hashable, text: str) -> tuple[str, bool]:
        """What `text` adds at `place`, and whether it repeated the text counted there."""
        length = self._length.get(place, 0)
        if length >= REPEAT_MIN and len(text) >= length:  # only then can it hold all of it
            pieces = self._pieces[place]
            prev = pieces[0] if len(pieces) == 1 else "".join(pieces)
            self._pieces[place] = [prev]
            if text.startswith(prev):
                self._pieces[place] = [text]
                self._length[place] = len(text)
                return text[length:], True
        self._pieces.setdefault(place, []).append(text)
        self._length[place] = length + len(text)
        return text, False
