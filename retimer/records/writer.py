"""Log records: one JSON line per re-timed stream, with no secret ever written.

Each record is one `os.write` of the whole line on a file opened with O_APPEND, so several
processes (`retimer --workers N`) append to one log without torn or interleaved lines.

Only the URL (redacted by `retimer.records.redact.redact_url`), the protocol and timing figures
go into a record: never request headers, cookies, bodies or authorization values.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from retimer.records.schema import Record

logger = logging.getLogger("retimer")


def record_line(record: Record) -> str:
    """The record's line, as the log holds it (without its newline)."""
    return json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":"))


class RecordLog:
    """Appends records to a JSONL file; safe to call from the proxy's event loop.

    A write that fails (a full disk, a file removed under us) never reaches the streams: it
    costs that record and one warning per kind of error, and later records are tried again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self.lost = 0  # records that could not be written
        self._warned: set[int | None] = set()

    def write(self, record: Record) -> bool:
        """Append the record; False when it could not be written (warned once per kind)."""
        data = (record_line(record) + "\n").encode("utf-8")
        with self._lock:
            try:
                if self._fd is None:
                    raise OSError(9, "the log is closed")
                written = os.write(self._fd, data)  # one write: other processes' lines never cut in
                while written < len(data):  # only short on a full disk or a signal: finish the line
                    written += os.write(self._fd, data[written:])
            except OSError as e:
                self.lost += 1
                self._warn(e)
                return False
        return True

    def close(self) -> None:
        with self._lock:
            try:
                if self._fd is not None:
                    os.close(self._fd)
            except OSError as e:
                self._warn(e)
            self._fd = None
            if self.lost:
                logger.warning(f"retimer: {self.lost} record(s) could not be written to {self.path}")

    def _warn(self, error: OSError) -> None:
        if error.errno not in self._warned:
            self._warned.add(error.errno)
            logger.warning(f"retimer: cannot write the record log {self.path}: "
                           f"{error.strerror or error}; the streams go on")


RecordSource = Callable[[], "RecordLog | None"]
"""Where records go now: the records log `--log` names, or None without one (the log is
opened and reopened as the options change, so who writes asks each time)."""
