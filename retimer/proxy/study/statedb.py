"""The database a study's shared state lives in: a sqlite3 file (or memory), or PostgreSQL.

Why two: a sqlite3 file needs no server and serves the workers and instances of one machine;
instances on several machines (a hosted study behind a load balancer) share a PostgreSQL server
(`--study-state postgresql://...`). The SQL is written once in the subset both speak (`?`
parameters, `ON CONFLICT ... DO UPDATE`); a transaction takes the database's one write lock
first (sqlite's BEGIN IMMEDIATE, a PostgreSQL advisory lock), so every read-then-write is
atomic across processes and machines.

A call that cannot reach the database raises `StateUnavailable` (a lost connection is forgotten:
the next call connects anew). The proxy makes its calls from one thread of their own
(retimer.proxy.study.stateworker), which retries, backs off and bounds how long anyone waits, so
a database that is down or hung never holds the proxy's event loop.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

__all__ = ["Abandoned", "StateDB", "StateError", "StateUnavailable", "is_postgres"]

VERSION = "3"  # the tables' layout: retimer_meta's version
LOCK_ID = 0x7265_7469_6D65  # the advisory lock every PostgreSQL write transaction takes
CONNECT_TIMEOUT_S = 3
STATEMENT_TIMEOUT_MS = 5000
META = "CREATE TABLE IF NOT EXISTS retimer_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"


class StateError(Exception):
    """A state database that cannot be used at all (made by an older retimer, another study's,
    not reachable at start); str() is one line."""


class StateUnavailable(StateError):
    """The database did not answer this call (it went away, or timed out)."""


class Abandoned(StateUnavailable):
    """The caller stopped waiting: the transaction was rolled back instead of committed."""


Row = Any  # a database row: its cells are what the database says, typed where they are read


class _Cursor(Protocol):
    def fetchone(self) -> Row: ...
    def fetchall(self) -> list[Row]: ...
    def __iter__(self) -> Iterator[Row]: ...


class _Connection(Protocol):
    """What both sqlite3's and psycopg's connections offer."""

    def execute(self, sql: str, params: Sequence[object] = ..., /) -> _Cursor: ...
    def close(self) -> None: ...


def is_postgres(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


class StateDB:
    """One connection to the state database at `location` (a path, ":memory:" or a URL)."""

    def __init__(self, location: str | Path, study: str = "") -> None:
        self.location = str(location)
        self.postgres = is_postgres(self.location)
        self.study = study
        self._conn: _Connection | None = None
        self._in_transaction = False
        # asked before each COMMIT (stateworker: has the caller stopped waiting?); False rolls back
        self.commit_allowed: Callable[[], bool] = lambda: True
        try:
            self._open()
        except StateUnavailable as e:
            raise StateError(f"cannot open {self.shown}: {e}") from None

    @property
    def shown(self) -> str:
        """The location without a password (for messages)."""
        if not self.postgres:
            return self.location
        from urllib.parse import urlsplit

        parts = urlsplit(self.location)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    # -- connecting -----------------------------------------------------------------------
    def _open(self) -> None:
        if self.postgres:
            import psycopg

            try:
                self._conn = cast(_Connection, psycopg.connect(
                    self.location, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                    options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"))
            except psycopg.Error as e:
                raise StateUnavailable(_reason(e)) from None
        else:
            target = self.location if self.location == ":memory:" else \
                str(Path(self.location).expanduser())
            try:
                self._conn = cast(_Connection, sqlite3.connect(
                    target, timeout=30, isolation_level=None, check_same_thread=False))
            except sqlite3.Error as e:
                raise StateUnavailable(_reason(e)) from None

    def _errors(self) -> tuple[type[BaseException], ...]:
        if self.postgres:
            import psycopg

            return (psycopg.Error, OSError)
        return (sqlite3.Error,)

    def _live(self) -> _Connection:
        if self._conn is not None:
            return self._conn
        self._open()
        assert self._conn is not None  # _open made it or raised
        return self._conn

    def _lost(self, error: BaseException) -> StateUnavailable:
        """Forget a connection that failed (the next call reconnects) and say why."""
        with contextlib.suppress(Exception):
            self.close()
        self._conn = None
        return StateUnavailable(f"{self.shown}: {_reason(error)}")

    # -- statements -----------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[object] = ()) -> _Cursor:
        conn = self._live()
        if self.postgres:
            sql = sql.replace("?", "%s")
        try:
            return conn.execute(sql, params)
        except self._errors() as e:
            if self._in_transaction:
                raise  # the transaction rolls back and says why
            if self.postgres:
                raise self._lost(e) from None
            raise StateUnavailable(f"{self.shown}: {_reason(e)}") from None

    def one(self, sql: str, params: Sequence[object] = ()) -> Row:
        return self.execute(sql, params).fetchone()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[StateDB]:
        """The write lock, then the statements, then COMMIT; any error rolls back. Inside a
        transaction, another is part of it (one job's steps commit together or not at all)."""
        if self._in_transaction:
            yield self
            return
        conn = self._live()
        self._in_transaction = True
        try:
            if self.postgres:
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
            else:
                conn.execute("BEGIN IMMEDIATE")
            yield self
            if not self.commit_allowed():
                raise Abandoned(f"{self.shown}: the caller stopped waiting")
            conn.execute("COMMIT")
        except self._errors() as e:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            if self.postgres:
                raise self._lost(e) from None
            raise StateUnavailable(f"{self.shown}: {_reason(e)}") from None
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False

    def create(self, schema: str) -> None:
        """Make the tables (`{serial}` is each dialect's auto-numbered key) and check that the
        database holds this layout of this study's state, or nothing yet."""
        serial = "BIGSERIAL PRIMARY KEY" if self.postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
        with self.transaction() as db:
            db.execute(META)
            found = {str(r[0]): str(r[1]) for r in db.execute(
                "SELECT name, value FROM retimer_meta").fetchall()}
            if not found and self._has_old_tables():
                raise StateError(f"{self.shown}: made by an older retimer; give a new "
                                 "--study-state")
            if found.get("version", VERSION) != VERSION:
                raise StateError(f"{self.shown}: made by another retimer (state version "
                                 f"{found['version']}); give a new --study-state")
            if self.study and found.get("study", self.study) != self.study:
                raise StateError(f"{self.shown}: holds the state of study '{found['study']}'; "
                                 "give each study its own --study-state")
            for statement in schema.format(serial=serial).split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO retimer_meta VALUES ('version', ?) ON CONFLICT (name) DO "
                       "NOTHING", (VERSION,))
            if self.study:
                db.execute("INSERT INTO retimer_meta VALUES ('study', ?) ON CONFLICT (name) DO "
                           "NOTHING", (self.study,))

    def _has_old_tables(self) -> bool:
        if self.postgres:
            return False  # PostgreSQL state began with the meta table
        row = self.one("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                       "('counters', 'conversations', 'aliases', 'current', 'rateable')")
        return bool(row and int(str(row[0])))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
