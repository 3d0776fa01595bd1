"""What the hosted study page keeps per participant: consent, the task they are on, each turn
(their message, the reply, whether it was rated) and the output tokens spent.

Why in a database: the page must survive a reload, a dropped connection, a second tab and a
request served by another instance, so nothing lives in the browser or in one process. The
study's state database holds it (retimer.proxy.study.statedb): sqlite3 in memory for a single proxy,
or the `--study-state` file or PostgreSQL server every worker and instance shares, next to
retimer.proxy.study.state's positions. Every read-then-write is one transaction under the
database's write lock, so two tabs never start two turns and a rating is stored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from retimer.proxy.study.statedb import StateDB
from retimer.study.page_api import PageRefused

PENDING_S = 600.0  # a reply not finished after this long is taken for lost (its tab went away)

SCHEMA = """
CREATE TABLE IF NOT EXISTS page_people (participant TEXT PRIMARY KEY, consented DOUBLE PRECISION,
    task BIGINT NOT NULL DEFAULT 0, finished DOUBLE PRECISION, tokens BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS page_turns (seq {serial}, turn TEXT UNIQUE NOT NULL,
    participant TEXT NOT NULL, task BIGINT NOT NULL, started DOUBLE PRECISION NOT NULL,
    message TEXT NOT NULL, reply TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT 'pending',
    rated BIGINT NOT NULL DEFAULT 0, condition TEXT, unit BIGINT);
CREATE INDEX IF NOT EXISTS page_turns_by_participant ON page_turns (participant, task, seq);
CREATE INDEX IF NOT EXISTS page_turns_by_start ON page_turns (started);
CREATE TABLE IF NOT EXISTS page_spend (at DOUBLE PRECISION NOT NULL, tokens BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS page_spend_by_time ON page_spend (at)
"""
BUSY = ("This study has reached its limit for the moment. Please keep this page open and try "
        "again in a few minutes.")


@dataclass(frozen=True)
class Turn:
    turn: str  # the stream's record id
    task: int
    message: str
    reply: str
    status: str  # pending | done | broken
    rated: bool
    condition: str | None
    unit: int | None


@dataclass(frozen=True)
class Progress:
    consented: bool
    task: int
    finished: bool
    tokens: int
    turns: tuple[Turn, ...]  # every turn of every task, in order


@dataclass(frozen=True)
class Idle:
    """A participant who started and has not finished, with nothing new for a while."""

    participant: str
    task: int
    waiting: str  # what the page waits for: "a reply", "a rating", "a message"
    idle_s: float  # since their last message (or their consent)


def _turn(row: Sequence[object]) -> Turn:
    """A Turn from `SELECT turn, task, message, reply, status, rated, condition, unit`."""
    condition, unit = row[6], row[7]
    return Turn(turn=str(row[0]), task=_int(row[1]), message=str(row[2]), reply=str(row[3]),
                status=str(row[4]), rated=bool(row[5]),
                condition=None if condition is None else str(condition),
                unit=None if unit is None else _int(unit))


def _int(value: object) -> int:
    return int(str(value))


class PageState:
    """The page's per-participant state in the study's state database (":memory:": sqlite3 in
    this process only)."""

    def __init__(self, location: str | Path | StateDB = ":memory:", study: str = "") -> None:
        """`location` a database to open, or one already open (the study's positions', so a
        turn and its unit commit together)."""
        self._owned = not isinstance(location, StateDB)
        self.db = location if isinstance(location, StateDB) else StateDB(location, study)
        try:
            self.db.create(SCHEMA)
        except BaseException:
            if self._owned:
                self.db.close()
            raise

    def close(self) -> None:
        if self._owned:
            self.db.close()

    # -- reading ---------------------------------------------------------------------------
    def progress(self, participant: str) -> Progress:
        row = self.db.execute("SELECT consented, task, finished, tokens FROM page_people "
                              "WHERE participant = ?", (participant,)).fetchone()
        consented, task, finished, tokens = row if row else (None, 0, None, 0)
        turns = tuple(_turn(r) for r in self.db.execute(
            "SELECT turn, task, message, reply, status, rated, condition, unit FROM page_turns "
            "WHERE participant = ? ORDER BY seq", (participant,)))
        return Progress(consented is not None, int(task), finished is not None, int(tokens), turns)

    def history(self, participant: str, task: int) -> list[tuple[str, str]]:
        """The task's conversation so far, as the upstream is sent it: each message, and each
        finished reply (an interrupted one is left out; the participant may ask again)."""
        out: list[tuple[str, str]] = []
        for message, reply, status in self.db.execute(
                "SELECT message, reply, status FROM page_turns WHERE participant = ? AND task = ? "
                "AND status != 'pending' ORDER BY seq", (participant, task)):
            out.append(("user", message))
            if status == "done" and reply:
                out.append(("assistant", reply))
        return out

    def same_secret(self, fingerprint: str) -> bool:
        """Keep the page secret's fingerprint the first instance brought; False when this one's
        differs (its cookies would be refused by the others, and theirs by it)."""
        with self.db.transaction() as db:
            db.execute("INSERT INTO retimer_meta VALUES ('page_secret', ?) ON CONFLICT (name) DO "
                       "NOTHING", (fingerprint,))
            row = db.execute("SELECT value FROM retimer_meta WHERE name = 'page_secret'").fetchone()
        return row is not None and str(row[0]) == fingerprint

    def idle(self, now: float, after_s: float) -> list[Idle]:
        """Participants who consented, have not finished, and sent nothing for `after_s`
        seconds, longest idle first (for the admin view: who is stuck, and where)."""
        found: list[Idle] = []
        for participant, task, consented in self.db.execute(
                "SELECT participant, task, consented FROM page_people WHERE consented IS NOT "
                "NULL AND finished IS NULL"):
            last = self.db.execute(
                "SELECT started, status, rated FROM page_turns WHERE participant = ? ORDER BY "
                "seq DESC LIMIT 1", (participant,)).fetchone()
            since = float(str(consented)) if last is None else float(str(last[0]))
            if now - since < after_s:
                continue
            waiting = "a message" if last is None or last[1] == "broken" or last[2] else \
                "a reply" if last[1] == "pending" else "a rating"
            found.append(Idle(str(participant), _int(task), waiting, now - since))
        return sorted(found, key=lambda i: -i.idle_s)

    def fixed_message(self, participant: str, prompts: Sequence[str | None]) -> str | None:
        """The current task's fixed first message (`prompts`, per task), while the task has no
        finished reply yet; None when the participant writes their own."""
        task = self.current_task(participant)
        prompt = prompts[task] if 0 <= task < len(prompts) else None
        if prompt is None:
            return None
        done = self.db.execute("SELECT 1 FROM page_turns WHERE participant = ? AND task = ? AND "
                               "status = 'done'", (participant, task)).fetchone()
        return None if done else prompt

    def current_task(self, participant: str) -> int:
        row = self.db.execute("SELECT task FROM page_people WHERE participant = ?",
                              (participant,)).fetchone()
        return _int(row[0]) if row else 0

    def turn_owner(self, turn: str) -> str | None:
        row = self.db.execute("SELECT participant FROM page_turns WHERE turn = ?", (turn,)).fetchone()
        return str(row[0]) if row else None

    # -- changes ---------------------------------------------------------------------------
    def consent(self, participant: str, now: float, per_minute: int | None = None) -> bool:
        """Record the participant's consent; False when it was given before. Refused while
        `per_minute` others consented in the last minute (the study-wide cap on newcomers)."""
        with self.db.transaction() as db:
            row = db.execute("SELECT consented FROM page_people WHERE participant = ?",
                             (participant,)).fetchone()
            if row and row[0] is not None:
                return False
            if per_minute is not None:
                (recent,) = db.execute("SELECT COUNT(*) FROM page_people WHERE consented > ?",
                                       (now - 60,)).fetchone()
                if recent >= per_minute:
                    raise PageRefused(429, "Many people are starting this study right now. "
                                      "Please wait a minute, then press the button again.")
            db.execute("INSERT INTO page_people (participant, consented) VALUES (?, ?) "
                       "ON CONFLICT (participant) DO UPDATE SET consented = excluded.consented",
                       (participant, now))
        return True

    def start_turn(self, participant: str, turn: str, message: str, now: float, tasks: int,
                   max_turns: int | None, max_tokens: int | None, per_minute: int | None, *,
                   study_per_hour: int | None = None, study_tokens_per_hour: int | None = None,
                   ) -> int:
        """Begin a turn of the participant's current task (its number is returned), or refuse
        it: no consent yet, finished, a reply still coming (another tab), a limit reached (the
        participant's, or the whole study's upstream calls or output tokens in the last hour)."""
        with self.db.transaction() as db:
            if (again := db.execute("SELECT task FROM page_turns WHERE turn = ? AND participant = "
                                    "?", (turn, participant)).fetchone()) is not None:
                return _int(again[0])  # begun by an attempt whose answer was lost: the same turn
            row = db.execute("SELECT consented, task, finished, tokens FROM page_people "
                             "WHERE participant = ?", (participant,)).fetchone()
            if not row or row[0] is None:
                raise PageRefused(409, "Please read and accept the consent first.")
            _, task, finished, tokens = row
            if finished is not None or task >= tasks:
                raise PageRefused(409, "You have finished this study: thank you.")
            db.execute("UPDATE page_turns SET status = 'broken' WHERE participant = ? AND "
                       "status = 'pending' AND started < ?", (participant, now - PENDING_S))
            if db.execute("SELECT 1 FROM page_turns WHERE participant = ? AND status = 'pending'",
                          (participant,)).fetchone():
                raise PageRefused(409, "The previous response is still coming in (in another "
                                  "tab?): wait for it, then send again.")
            unrated = db.execute("SELECT 1 FROM page_turns WHERE participant = ? AND task = ? AND "
                                 "status = 'done' AND rated = 0", (participant, task)).fetchone()
            if unrated:
                raise PageRefused(409, "Please rate the last response first.")
            (count,) = db.execute("SELECT COUNT(*) FROM page_turns WHERE participant = ?",
                                  (participant,)).fetchone()
            if max_turns is not None and count >= max_turns:
                raise PageRefused(429, f"You have reached this study's limit of {max_turns} "
                                  "messages. Please finish the tasks you can.")
            if max_tokens is not None and tokens >= max_tokens:
                raise PageRefused(429, "You have reached this study's limit of response length. "
                                  "Please finish the tasks you can.")
            if per_minute is not None:
                (recent,) = db.execute("SELECT COUNT(*) FROM page_turns WHERE participant = ? AND "
                                       "started > ?", (participant, now - 60)).fetchone()
                if recent >= per_minute:
                    raise PageRefused(429, f"Please wait a moment: at most {per_minute} messages "
                                      "a minute.")
            if study_per_hour is not None:
                (calls,) = db.execute("SELECT COUNT(*) FROM page_turns WHERE started > ?",
                                      (now - 3600,)).fetchone()
                if calls >= study_per_hour:
                    raise PageRefused(429, BUSY)
            if study_tokens_per_hour is not None:
                (spent,) = db.execute("SELECT COALESCE(SUM(tokens), 0) FROM page_spend WHERE at > ?",
                                      (now - 3600,)).fetchone()
                if spent >= study_tokens_per_hour:
                    raise PageRefused(429, BUSY)
            db.execute("INSERT INTO page_turns (turn, participant, task, started, message) "
                       "VALUES (?, ?, ?, ?, ?)", (turn, participant, task, now, message))
        return int(task)

    def finish_turn(self, turn: str, reply: str, ok: bool, tokens: int,
                    condition: str | None = None, unit: int | None = None,
                    now: float | None = None) -> None:
        """The reply ended (`ok`: whole) at `now` (default: its start); its text joins the
        history, its tokens the participant's count and the study's spend."""
        with self.db.transaction() as db:
            row = db.execute("SELECT participant FROM page_turns WHERE turn = ? AND status = "
                             "'pending'", (turn,)).fetchone()
            if not row:
                return
            db.execute("UPDATE page_turns SET reply = ?, status = ?, condition = ?, unit = ? "
                       "WHERE turn = ?", (reply, "done" if ok else "broken", condition, unit, turn))
            db.execute("UPDATE page_people SET tokens = tokens + ? WHERE participant = ?",
                       (max(tokens, 0), row[0]))
            if tokens > 0:
                at = now if now is not None else float(db.execute(
                    "SELECT started FROM page_turns WHERE turn = ?", (turn,)).fetchone()[0])
                db.execute("INSERT INTO page_spend VALUES (?, ?)", (at, tokens))

    def rate(self, participant: str, turn: str) -> Turn:
        """Mark the participant's finished turn rated (once) and return it."""
        with self.db.transaction() as db:
            row = db.execute("SELECT turn, task, message, reply, status, rated, condition, unit "
                             "FROM page_turns WHERE turn = ? AND participant = ?",
                             (turn, participant)).fetchone()
            if not row:
                raise PageRefused(404, "That response is not one of yours.")
            found = _turn(row)
            if found.status != "done":
                raise PageRefused(409, "That response did not finish: it cannot be rated.")
            if found.rated:
                raise PageRefused(409, "That response is rated already.")
            db.execute("UPDATE page_turns SET rated = 1 WHERE turn = ?", (turn,))
        return found

    def unrate(self, participant: str, turn: str) -> None:
        """Take back a rating that could not be written down (the page is told to retry)."""
        with self.db.transaction() as db:
            db.execute("UPDATE page_turns SET rated = 0 WHERE turn = ? AND participant = ?",
                       (turn, participant))

    def next_task(self, participant: str, needed: int, tasks: int, now: float) -> bool:
        """Move on from the current task once `needed` of its replies are rated; True when this
        call finished the study (its last task), False otherwise (and once finished)."""
        with self.db.transaction() as db:
            row = db.execute("SELECT task, finished FROM page_people WHERE participant = ?",
                             (participant,)).fetchone()
            if not row:
                raise PageRefused(409, "Please read and accept the consent first.")
            task, finished = row
            if finished is not None:
                return False  # finished before: nothing more to note
            (rated,) = db.execute("SELECT COUNT(*) FROM page_turns WHERE participant = ? AND "
                                  "task = ? AND rated = 1", (participant, task)).fetchone()
            if rated < needed:
                left = needed - rated
                raise PageRefused(409, f"Please send a message and rate {left} more "
                                  f"response{'s' if left > 1 else ''} in this task first.")
            done = task + 1 >= tasks
            db.execute("UPDATE page_people SET task = ?, finished = ? WHERE participant = ?",
                       (min(task + 1, tasks), now if done else None, participant))
        return done
