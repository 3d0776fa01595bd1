"""A cassette on disk: DIR/cassette.json (the index, retimer.cassette.format) and
DIR/calls/NNNN.body, owner-only (bodies are conversations).

A recording writes each call's body first, then the whole index again, each through a
temporary file renamed into place: a recording stopped at any moment (a crash, a full disk)
leaves the cassette of the calls recorded so far, never a half-written one. Reading checks
every body against the index and fails with one line naming the file.
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from retimer import __version__
from retimer.cassette.format import (
    CassetteCall,
    CorruptCassette,
    body_name,
    check_body,
    decode_index,
    encode_index,
)

__all__ = ["INDEX", "CassetteError", "CassetteWriter", "read_cassette"]

INDEX = "cassette.json"


class CassetteError(Exception):
    """A cassette that cannot be read or written: one line, naming the file."""


class CassetteWriter:
    """Appends calls to a new cassette in `directory` (refused if it holds one already)."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory).expanduser()
        if (self.dir / INDEX).exists():
            raise CassetteError(f"{self.dir / INDEX}: a cassette is already recorded here; "
                                "record into a new directory")
        try:
            (self.dir / "calls").mkdir(parents=True, exist_ok=True, mode=0o700)
            self.dir.chmod(0o700)
        except OSError as e:
            raise CassetteError(f"{self.dir}: cannot record a cassette here ({e.strerror})") from None
        self.calls: list[CassetteCall] = []
        self.created = datetime.now(UTC).isoformat(timespec="seconds")
        self._write(INDEX, encode_index([], created=self.created, version=__version__))

    def add(self, call: CassetteCall) -> int:
        """Record `call` (its number, from 1); CassetteError when the disk refuses it, and
        the cassette stays as it was."""
        number = len(self.calls) + 1
        self._write(body_name(number), call.entry.body)
        index = encode_index([*self.calls, call], created=self.created, version=__version__)
        self._write(INDEX, index)
        self.calls.append(call)
        return number

    def _write(self, name: str, data: bytes) -> None:
        path = self.dir / name
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as e:
            raise CassetteError(f"{path}: cannot write ({e.strerror})") from None
        try:
            with os.fdopen(fd, "wb") as f:  # mkstemp's file is owner-only
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            raise CassetteError(f"{path}: cannot write ({e.strerror})") from None


def read_cassette(directory: str | Path) -> tuple[dict[str, str], list[CassetteCall]]:
    """(what the index says of itself, the calls in order); CassetteError, one line."""
    folder = Path(directory).expanduser()
    index = folder / INDEX
    try:
        data = index.read_bytes()
    except FileNotFoundError:
        raise CassetteError(f"{index}: no cassette here (record one with --record DIR)") from None
    except OSError as e:
        raise CassetteError(f"{index}: cannot read ({e.strerror})") from None
    try:
        about, indexed = decode_index(data)
    except CorruptCassette as e:
        raise CassetteError(f"{index}: not a cassette this retimer can replay: {e}") from None
    calls = []
    for call in indexed:
        path = folder / call.body
        try:
            body = path.read_bytes()
        except OSError as e:
            raise CassetteError(f"{path}: cannot read ({e.strerror})") from None
        try:
            calls.append(check_body(call, body))
        except CorruptCassette as e:
            raise CassetteError(f"{path}: {e}") from None
    return about, calls
