"""Where a study proxy keeps its unit positions, per participant: the request counter, each
conversation's position, the ids that link a later turn to its conversation, the latest unit's
fields, and the streams the rating page may offer.

One process keeps them in memory (`MemoryState`, the default). With `retimer study --workers N`
every worker must agree whichever of them took a connection, so they share one small sqlite3
database made for the run (`SharedState`, option `retimer_study_state`): every step that reads
and then writes is one transaction (BEGIN IMMEDIATE), so two processes never hand out the same
position. The calls are short and run on the proxy's loop.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import NotRequired, TypedDict

RATEABLE = 100  # recent streams per participant a page loaded earlier may still rate
VERSION = 2  # PRAGMA user_version of a SharedState file: 2 keys everything by participant

SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (participant TEXT NOT NULL, name TEXT NOT NULL,
                                     value INTEGER NOT NULL, PRIMARY KEY (participant, name));
CREATE TABLE IF NOT EXISTS conversations (participant TEXT NOT NULL, key TEXT NOT NULL,
                                          idx INTEGER NOT NULL, PRIMARY KEY (participant, key));
CREATE TABLE IF NOT EXISTS aliases (participant TEXT NOT NULL, link TEXT NOT NULL,
                                    key TEXT NOT NULL, PRIMARY KEY (participant, link));
CREATE TABLE IF NOT EXISTS current (participant TEXT PRIMARY KEY, fields TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rateable (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
                                     participant TEXT NOT NULL, entry TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS rateable_by_participant ON rateable (participant, seq);
"""


class StateError(Exception):
    """A --study-state file that cannot be used; str() is one line."""


class UnitFields(TypedDict):
    """A study's fields in the records of a unit's requests (retimer.proxy.study_addon)."""

    study: str
    participant: str | None  # None: a request that named no participant, passed through
    condition: str | None
    unit: int | None  # the unit's position; None on a request that is not a unit
    conversation: NotRequired[str]  # unit conversation: the conversation key's keyed hash


class _Positions:
    """One participant's positions in memory."""

    def __init__(self) -> None:
        self.requests = 0
        self.conversations: dict[str, int] = {}
        self.aliases: dict[str, str] = {}
        self.latest_unit: UnitFields | None = None
        self.rateable: OrderedDict[str, dict[str, object]] = OrderedDict()


class MemoryState:
    """The positions of one process's study (a single `retimer study`)."""

    def __init__(self) -> None:
        self.people: dict[str, _Positions] = {}
        self.streams: dict[str, str] = {}  # rateable stream id -> its participant

    def _of(self, participant: str) -> _Positions:
        if (p := self.people.get(participant)) is None:
            p = self.people[participant] = _Positions()
        return p

    def next_request(self, participant: str) -> int:
        """The position of the participant's new request unit (0, 1, 2, ...)."""
        p = self._of(participant)
        index = p.requests
        p.requests += 1
        return index

    def conversation(self, participant: str, key: str) -> int:
        """The position of the participant's conversation `key`, in first-seen order."""
        convs = self._of(participant).conversations
        return convs.setdefault(key, len(convs))

    def alias_of(self, participant: str, ident: str) -> str:
        """The conversation an id names (a linked id), else the id itself."""
        return self._of(participant).aliases.get(ident, ident)

    def link(self, participant: str, linked: str, key: str) -> None:
        self._of(participant).aliases[linked] = key

    def current(self, participant: str) -> UnitFields | None:
        """The participant's latest unit's record fields (their other requests follow it)."""
        return self._of(participant).latest_unit

    def set_current(self, participant: str, fields: UnitFields) -> None:
        self._of(participant).latest_unit = fields

    def add_rateable(self, participant: str, stream_id: str, entry: dict[str, object]) -> None:
        rateable = self._of(participant).rateable
        rateable[stream_id] = entry
        rateable.move_to_end(stream_id)
        self.streams[stream_id] = participant
        while len(rateable) > RATEABLE:
            old, _ = rateable.popitem(last=False)
            self.streams.pop(old, None)

    def latest(self, participant: str) -> dict[str, object] | None:
        rateable = self._of(participant).rateable
        return next(reversed(rateable.values())) if rateable else None

    def rateable_stream(self, participant: str, stream_id: str) -> dict[str, object] | None:
        """The participant's stream `stream_id`, if it may still be rated (never another's)."""
        return self._of(participant).rateable.get(stream_id)

    def close(self) -> None:
        pass


class SharedState:
    """The same positions in a sqlite3 file every worker of the run opens."""

    def __init__(self, path: str | Path) -> None:
        self.db = sqlite3.connect(str(Path(path).expanduser()), timeout=30, isolation_level=None)
        with self._transaction() as db:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            (tables,) = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()
            if version == VERSION or not tables:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {VERSION}")
        if version != VERSION and tables:
            self.db.close()
            raise StateError(f"{path}: made by an older retimer (state version {version}); "
                             f"give a new --study-state file")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")  # the write lock first: read-then-write is atomic
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def next_request(self, participant: str) -> int:
        with self._transaction() as db:
            row = db.execute("SELECT value FROM counters WHERE participant = ? AND name = "
                             "'requests'", (participant,)).fetchone()
            index = row[0] if row else 0
            db.execute("INSERT OR REPLACE INTO counters VALUES (?, 'requests', ?)",
                       (participant, index + 1))
        return int(index)

    def conversation(self, participant: str, key: str) -> int:
        with self._transaction() as db:
            row = db.execute("SELECT idx FROM conversations WHERE participant = ? AND key = ?",
                             (participant, key)).fetchone()
            if row:
                return int(row[0])
            (index,) = db.execute("SELECT COUNT(*) FROM conversations WHERE participant = ?",
                                  (participant,)).fetchone()
            db.execute("INSERT INTO conversations VALUES (?, ?, ?)", (participant, key, index))
        return int(index)

    def alias_of(self, participant: str, ident: str) -> str:
        row = self.db.execute("SELECT key FROM aliases WHERE participant = ? AND link = ?",
                              (participant, ident)).fetchone()
        return str(row[0]) if row else ident

    def link(self, participant: str, linked: str, key: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO aliases VALUES (?, ?, ?)", (participant, linked, key))

    def current(self, participant: str) -> UnitFields | None:
        row = self.db.execute("SELECT fields FROM current WHERE participant = ?",
                              (participant,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_current(self, participant: str, fields: UnitFields) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO current VALUES (?, ?)", (participant, json.dumps(fields)))

    def add_rateable(self, participant: str, stream_id: str, entry: dict[str, object]) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM rateable WHERE id = ?", (stream_id,))  # to the end
            db.execute("INSERT INTO rateable (id, participant, entry) VALUES (?, ?, ?)",
                       (stream_id, participant, json.dumps(entry)))
            db.execute("DELETE FROM rateable WHERE participant = ? AND seq NOT IN (SELECT seq "
                       "FROM rateable WHERE participant = ? ORDER BY seq DESC LIMIT ?)",
                       (participant, participant, RATEABLE))

    def latest(self, participant: str) -> dict[str, object] | None:
        row = self.db.execute("SELECT entry FROM rateable WHERE participant = ? ORDER BY seq DESC "
                              "LIMIT 1", (participant,)).fetchone()
        return json.loads(row[0]) if row else None

    def rateable_stream(self, participant: str, stream_id: str) -> dict[str, object] | None:
        row = self.db.execute("SELECT entry FROM rateable WHERE participant = ? AND id = ?",
                              (participant, stream_id)).fetchone()
        return json.loads(row[0]) if row else None

    def close(self) -> None:
        self.db.close()
