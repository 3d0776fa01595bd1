"""Where a study proxy keeps its unit positions, per participant: the request counter, each
conversation's position, the ids that link a later turn to its conversation, the latest unit's
fields, the streams the rating page may offer, and a staircase study's levels and answers.

One process keeps them in memory (`MemoryState`, the default). With `retimer study --workers N`
or several instances every process must agree whichever of them took a connection, so they
share one database (`SharedState`, option `retimer_study_state`): a sqlite3 file, or PostgreSQL
for instances on several machines (retimer.proxy.study.statedb). Every step that reads and then writes
is one transaction under the database's write lock, so two processes never hand out the same
position.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NotRequired, TypedDict

from retimer.proxy.study.statedb import StateDB, StateError, StateUnavailable

__all__ = ["MemoryState", "SharedState", "StateError", "StateUnavailable", "UnitFields"]

RATEABLE = 100  # recent streams per participant a page loaded earlier may still rate

SCHEMA = """
CREATE TABLE IF NOT EXISTS study_counters (participant TEXT NOT NULL, name TEXT NOT NULL,
    value BIGINT NOT NULL, PRIMARY KEY (participant, name));
CREATE TABLE IF NOT EXISTS study_conversations (participant TEXT NOT NULL, key TEXT NOT NULL,
    idx BIGINT NOT NULL, PRIMARY KEY (participant, key));
CREATE TABLE IF NOT EXISTS study_aliases (participant TEXT NOT NULL, link TEXT NOT NULL,
    key TEXT NOT NULL, PRIMARY KEY (participant, link));
CREATE TABLE IF NOT EXISTS study_current (participant TEXT PRIMARY KEY, fields TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS study_rateable (seq {serial}, id TEXT UNIQUE NOT NULL,
    participant TEXT NOT NULL, entry TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS study_rateable_by_participant ON study_rateable (participant, seq);
CREATE TABLE IF NOT EXISTS study_stairs (participant TEXT NOT NULL, unit BIGINT NOT NULL,
    level BIGINT NOT NULL, answer BIGINT, PRIMARY KEY (participant, unit));
CREATE TABLE IF NOT EXISTS study_arrivals (participant TEXT PRIMARY KEY, place BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS study_requests (participant TEXT NOT NULL, request TEXT NOT NULL,
    idx BIGINT NOT NULL, PRIMARY KEY (participant, request));
CREATE TABLE IF NOT EXISTS study_records (seq {serial}, key TEXT UNIQUE NOT NULL,
    line TEXT NOT NULL)
"""

# a staircase's next level from the answered units so far: [(level given, slow?)] in unit order
ChooseLevel = Callable[[Sequence[tuple[int, bool]]], int]


class UnitFields(TypedDict):
    """A study's fields in the records of a unit's requests (retimer.proxy.study.addon)."""

    study: str
    participant: str | None  # None: a request that named no participant, passed through
    condition: str | None
    unit: int | None  # the unit's position; None on a request that is not a unit
    conversation: NotRequired[str]  # unit conversation: the conversation key's keyed hash
    level: NotRequired[float]  # a staircase's unit: its TTFT in ms or its rate in tok/s
    staircase: NotRequired[str]  # and the rule and answer it walks by ("2-down/1-up; slow")
    state_wait_ms: NotRequired[float]  # the request waited this long for the study's state
    arrival: NotRequired[int]  # participant_ids arrival: the participant's place in arrival order


class _Positions:
    """One participant's positions in memory."""

    def __init__(self) -> None:
        self.requests = 0
        self.conversations: dict[str, int] = {}
        self.aliases: dict[str, str] = {}
        self.latest_unit: UnitFields | None = None
        self.rateable: OrderedDict[str, dict[str, object]] = OrderedDict()
        self.stairs: dict[int, tuple[int, bool | None]] = {}  # unit -> (level, answer)
        self.arrival: int | None = None  # the participant's place in arrival order


class MemoryState:
    """The positions of one process's study (a single `retimer study`)."""

    db = None  # no database: its jobs run in line (retimer.proxy.study.stateworker)

    def __init__(self) -> None:
        self.people: dict[str, _Positions] = {}
        self.streams: dict[str, str] = {}  # rateable stream id -> its participant

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Steps that belong together (in memory they cannot fail half way)."""
        yield

    def _of(self, participant: str) -> _Positions:
        if (p := self.people.get(participant)) is None:
            p = self.people[participant] = _Positions()
        return p

    def next_request(self, participant: str, request: str | None = None) -> int:
        """The position of the participant's new request unit (0, 1, 2, ...). `request` names
        the request for a shared database, whose job may run twice (in memory it runs once)."""
        p = self._of(participant)
        index = p.requests
        p.requests += 1
        return index

    def arrival(self, participant: str) -> int:
        """The participant's place in the order participants came (0, 1, ...), given once."""
        p = self._of(participant)
        if p.arrival is None:
            p.arrival = sum(1 for q in self.people.values() if q.arrival is not None)
        return p.arrival

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

    def unit_level(self, participant: str, unit: int, choose: ChooseLevel) -> int:
        """A staircase unit's level: the one it was given, else `choose`'s from the answers."""
        stairs = self._of(participant).stairs
        if unit not in stairs:
            answered = [(lv, a) for _, (lv, a) in sorted(stairs.items()) if a is not None]
            stairs[unit] = (choose(answered), None)
        return stairs[unit][0]

    def answer(self, participant: str, unit: int, slow: bool) -> bool:
        """Keep a unit's answer; its first one counts (False: it had one, or is not known)."""
        stairs = self._of(participant).stairs
        if unit not in stairs or stairs[unit][1] is not None:
            return False
        stairs[unit] = (stairs[unit][0], slow)
        return True

    def stairs(self, participant: str) -> list[tuple[int, int, bool | None]]:
        """(unit, level, answer) of the participant's staircase units, in unit order."""
        return [(u, lv, a) for u, (lv, a) in sorted(self._of(participant).stairs.items())]

    def close(self) -> None:
        pass


class SharedState:
    """The same positions in a database every worker and instance opens (a sqlite3 file, or a
    PostgreSQL URL); `study` names the study, so another study's state is refused."""

    def __init__(self, location: str | Path, study: str = "") -> None:
        self.db = StateDB(location, study)
        try:
            self.db.create(SCHEMA)
        except BaseException:
            self.db.close()
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Steps that commit together or not at all (a unit's position and its fields)."""
        with self.db.transaction():
            yield

    def next_request(self, participant: str, request: str | None = None) -> int:
        """The next position; the same one again for a `request` that took one before: a job
        is attempted again after a lost connection, and a COMMIT the server took just before
        the connection died must not use up a second position (a unit skipped)."""
        with self.db.transaction() as db:
            if request is not None and (given := db.one(
                    "SELECT idx FROM study_requests WHERE participant = ? AND request = ?",
                    (participant, request))):
                return int(str(given[0]))
            row = db.one("SELECT value FROM study_counters WHERE participant = ? AND name = "
                         "'requests'", (participant,))
            index = int(str(row[0])) if row else 0
            db.execute("INSERT INTO study_counters VALUES (?, 'requests', ?) ON CONFLICT "
                       "(participant, name) DO UPDATE SET value = excluded.value",
                       (participant, index + 1))
            if request is not None:
                db.execute("INSERT INTO study_requests VALUES (?, ?, ?)", (participant, request, index))
        return index

    def arrival(self, participant: str) -> int:
        with self.db.transaction() as db:
            row = db.one("SELECT place FROM study_arrivals WHERE participant = ?", (participant,))
            if row:
                return int(str(row[0]))
            count = db.one("SELECT COUNT(*) FROM study_arrivals")
            place = int(str(count[0])) if count else 0
            db.execute("INSERT INTO study_arrivals VALUES (?, ?)", (participant, place))
        return place

    def next_instance(self) -> int:
        """A number no other start of any instance or worker of the study got (1, 2, ...)."""
        with self.db.transaction() as db:
            row = db.one("SELECT value FROM study_counters WHERE participant = '' AND name = "
                         "'instances'")
            number = (int(str(row[0])) if row else 0) + 1
            db.execute("INSERT INTO study_counters VALUES ('', 'instances', ?) ON CONFLICT "
                       "(participant, name) DO UPDATE SET value = excluded.value", (number,))
        return number

    def conversation(self, participant: str, key: str) -> int:
        with self.db.transaction() as db:
            row = db.one("SELECT idx FROM study_conversations WHERE participant = ? AND key = ?",
                         (participant, key))
            if row:
                return int(str(row[0]))
            count = db.one("SELECT COUNT(*) FROM study_conversations WHERE participant = ?",
                           (participant,))
            index = int(str(count[0])) if count else 0
            db.execute("INSERT INTO study_conversations VALUES (?, ?, ?)", (participant, key, index))
        return index

    def alias_of(self, participant: str, ident: str) -> str:
        row = self.db.one("SELECT key FROM study_aliases WHERE participant = ? AND link = ?",
                          (participant, ident))
        return str(row[0]) if row else ident

    def link(self, participant: str, linked: str, key: str) -> None:
        with self.db.transaction() as db:
            db.execute("INSERT INTO study_aliases VALUES (?, ?, ?) ON CONFLICT (participant, link) "
                       "DO UPDATE SET key = excluded.key", (participant, linked, key))

    def current(self, participant: str) -> UnitFields | None:
        row = self.db.one("SELECT fields FROM study_current WHERE participant = ?", (participant,))
        return json.loads(str(row[0])) if row else None

    def set_current(self, participant: str, fields: UnitFields) -> None:
        with self.db.transaction() as db:
            db.execute("INSERT INTO study_current VALUES (?, ?) ON CONFLICT (participant) DO "
                       "UPDATE SET fields = excluded.fields", (participant, json.dumps(fields)))

    def add_rateable(self, participant: str, stream_id: str, entry: dict[str, object]) -> None:
        with self.db.transaction() as db:
            db.execute("DELETE FROM study_rateable WHERE id = ?", (stream_id,))  # to the end
            db.execute("INSERT INTO study_rateable (id, participant, entry) VALUES (?, ?, ?)",
                       (stream_id, participant, json.dumps(entry)))
            db.execute("DELETE FROM study_rateable WHERE participant = ? AND seq NOT IN (SELECT "
                       "seq FROM study_rateable WHERE participant = ? ORDER BY seq DESC LIMIT ?)",
                       (participant, participant, RATEABLE))

    def latest(self, participant: str) -> dict[str, object] | None:
        row = self.db.one("SELECT entry FROM study_rateable WHERE participant = ? ORDER BY seq "
                          "DESC LIMIT 1", (participant,))
        return json.loads(str(row[0])) if row else None

    def rateable_stream(self, participant: str, stream_id: str) -> dict[str, object] | None:
        row = self.db.one("SELECT entry FROM study_rateable WHERE participant = ? AND id = ?",
                          (participant, stream_id))
        return json.loads(str(row[0])) if row else None

    def unit_level(self, participant: str, unit: int, choose: ChooseLevel) -> int:
        with self.db.transaction() as db:
            row = db.one("SELECT level FROM study_stairs WHERE participant = ? AND unit = ?",
                         (participant, unit))
            if row:
                return int(str(row[0]))
            answered = [(int(str(r[0])), bool(r[1])) for r in db.execute(
                "SELECT level, answer FROM study_stairs WHERE participant = ? AND answer IS NOT "
                "NULL ORDER BY unit", (participant,)).fetchall()]
            level = choose(answered)
            db.execute("INSERT INTO study_stairs VALUES (?, ?, ?, NULL)", (participant, unit, level))
        return level

    def answer(self, participant: str, unit: int, slow: bool) -> bool:
        with self.db.transaction() as db:
            row = db.one("SELECT answer FROM study_stairs WHERE participant = ? AND unit = ?",
                         (participant, unit))
            if not row or row[0] is not None:
                return False
            db.execute("UPDATE study_stairs SET answer = ? WHERE participant = ? AND unit = ?",
                       (int(slow), participant, unit))
        return True

    def add_record(self, key: str, line: str) -> None:
        """A study record (a unit's stream, a rating, a milestone) every instance's view reads;
        `key` makes a write retried after a lost answer count once."""
        self.db.execute("INSERT INTO study_records (key, line) VALUES (?, ?) ON CONFLICT (key) "
                        "DO NOTHING", (key, line))

    def record_lines(self) -> list[str]:
        """Every instance's study records, in the order they were stored."""
        return [str(r[0]) for r in self.db.execute("SELECT line FROM study_records ORDER BY seq")]

    def stairs(self, participant: str) -> list[tuple[int, int, bool | None]]:
        rows = self.db.execute("SELECT unit, level, answer FROM study_stairs WHERE participant = ? "
                               "ORDER BY unit", (participant,)).fetchall()
        return [(int(str(u)), int(str(lv)), None if a is None else bool(a)) for u, lv, a in rows]

    def close(self) -> None:
        self.db.close()
