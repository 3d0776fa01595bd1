"""Where a study proxy keeps its unit positions: the request counter, each conversation's
position, the ids that link a later turn to its conversation, the latest unit's fields, and the
streams the rating page may offer.

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

RATEABLE = 100  # recent streams a page loaded earlier may still rate

SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (key TEXT PRIMARY KEY, idx INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS aliases (link TEXT PRIMARY KEY, key TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS current (one INTEGER PRIMARY KEY CHECK (one = 0), fields TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rateable (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
                                     entry TEXT NOT NULL);
"""


class UnitFields(TypedDict):
    """A study's fields in the records of a unit's requests (retimer.proxy.study_addon)."""

    study: str
    participant: str
    condition: str
    unit: int | None  # the unit's position; None on a request that is not a unit
    conversation: NotRequired[str]  # unit conversation: the conversation key's keyed hash


class MemoryState:
    """The positions of one process's study (a single `retimer study`)."""

    def __init__(self) -> None:
        self.requests = 0
        self.conversations: dict[str, int] = {}
        self.aliases: dict[str, str] = {}
        self.latest_unit: UnitFields | None = None
        self.rateable: OrderedDict[str, dict[str, object]] = OrderedDict()

    def next_request(self) -> int:
        """The position of a new request unit (0, 1, 2, ...)."""
        index = self.requests
        self.requests += 1
        return index

    def conversation(self, key: str) -> int:
        """The position of conversation `key`, in first-seen order."""
        return self.conversations.setdefault(key, len(self.conversations))

    def alias_of(self, ident: str) -> str:
        """The conversation an id names (a linked id), else the id itself."""
        return self.aliases.get(ident, ident)

    def link(self, linked: str, key: str) -> None:
        self.aliases[linked] = key

    def current(self) -> UnitFields | None:
        """The latest unit's record fields (non-unit requests follow its condition)."""
        return self.latest_unit

    def set_current(self, fields: UnitFields) -> None:
        self.latest_unit = fields

    def add_rateable(self, stream_id: str, entry: dict[str, object]) -> None:
        self.rateable[stream_id] = entry
        self.rateable.move_to_end(stream_id)
        while len(self.rateable) > RATEABLE:
            self.rateable.popitem(last=False)

    def latest(self) -> dict[str, object] | None:
        return next(reversed(self.rateable.values())) if self.rateable else None

    def rateable_stream(self, stream_id: str) -> dict[str, object] | None:
        return self.rateable.get(stream_id)


class SharedState:
    """The same positions in a sqlite3 file every worker of the run opens."""

    def __init__(self, path: str | Path) -> None:
        self.db = sqlite3.connect(str(Path(path).expanduser()), timeout=30, isolation_level=None)
        with self._transaction():
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    self.db.execute(statement)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")  # the write lock first: read-then-write is atomic
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def next_request(self) -> int:
        with self._transaction() as db:
            row = db.execute("SELECT value FROM counters WHERE name = 'requests'").fetchone()
            index = row[0] if row else 0
            db.execute("INSERT OR REPLACE INTO counters VALUES ('requests', ?)", (index + 1,))
        return int(index)

    def conversation(self, key: str) -> int:
        with self._transaction() as db:
            row = db.execute("SELECT idx FROM conversations WHERE key = ?", (key,)).fetchone()
            if row:
                return int(row[0])
            (index,) = db.execute("SELECT COUNT(*) FROM conversations").fetchone()
            db.execute("INSERT INTO conversations VALUES (?, ?)", (key, index))
        return int(index)

    def alias_of(self, ident: str) -> str:
        row = self.db.execute("SELECT key FROM aliases WHERE link = ?", (ident,)).fetchone()
        return str(row[0]) if row else ident

    def link(self, linked: str, key: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO aliases VALUES (?, ?)", (linked, key))

    def current(self) -> UnitFields | None:
        row = self.db.execute("SELECT fields FROM current WHERE one = 0").fetchone()
        return json.loads(row[0]) if row else None

    def set_current(self, fields: UnitFields) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO current VALUES (0, ?)", (json.dumps(fields),))

    def add_rateable(self, stream_id: str, entry: dict[str, object]) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM rateable WHERE id = ?", (stream_id,))  # to the end
            db.execute("INSERT INTO rateable (id, entry) VALUES (?, ?)", (stream_id, json.dumps(entry)))
            db.execute("DELETE FROM rateable WHERE seq NOT IN "
                       "(SELECT seq FROM rateable ORDER BY seq DESC LIMIT ?)", (RATEABLE,))

    def latest(self) -> dict[str, object] | None:
        row = self.db.execute("SELECT entry FROM rateable ORDER BY seq DESC LIMIT 1").fetchone()
        return json.loads(row[0]) if row else None

    def rateable_stream(self, stream_id: str) -> dict[str, object] | None:
        row = self.db.execute("SELECT entry FROM rateable WHERE id = ?", (stream_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def close(self) -> None:
        self.db.close()
