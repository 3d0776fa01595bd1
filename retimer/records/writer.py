"""Log records: one JSON line per re-timed stream, with no secret ever written.

Only the URL (redacted by `retimer.records.redact.redact_url`), the protocol and timing figures
go into a record: never request headers, cookies, bodies or authorization values.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger("retimer")


class RecordLog:
    """Appends records to a JSONL file; safe to call from the proxy's event loop.

    A write that fails (a full disk, a file removed under us) never reaches the streams: it
    costs that record and one warning per kind of error, and later records are tried again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: TextIO = self.path.open("a", encoding="utf-8")
        self.lost = 0  # records that could not be written
        self._warned: set[int | None] = set()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as e:
                self.lost += 1
                self._warn(e)

    def close(self) -> None:
        with self._lock:
            try:
                self._file.close()
            except OSError as e:
                self._warn(e)
            if self.lost:
                logger.warning(f"retimer: {self.lost} record(s) could not be written to {self.path}")

    def _warn(self, error: OSError) -> None:
        if error.errno not in self._warned:
            self._warned.add(error.errno)
            logger.warning(f"retimer: cannot write the record log {self.path}: "
                           f"{error.strerror or error}; the streams go on")
