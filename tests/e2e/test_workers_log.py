"""One records log shared by several processes (`retimer --workers N`): every record is one
whole line, none torn or interleaved, however long the lines and however many writers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WRITER = """
import sys
from retimer.records.schema import StreamRecord
from retimer.records.writer import RecordLog
log = RecordLog(sys.argv[1])
who, count, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(count):
    log.write(StreamRecord(id=f"{who}{i}", url=who * (size + i), extra={"writer": who, "i": i}))
log.close()
"""


def test_processes_writing_long_lines_at_once_leave_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    writers, count, size = 4, 150, 70_000  # lines far past the pipe/atomic-write size and a buffer
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), chr(ord("a") + w), str(count),
                          str(size)])
        for w in range(writers)
    ]
    assert [p.wait(120) for p in procs] == [0] * writers
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode("utf-8").split("\n")[:-1]
    assert len(lines) == writers * count
    seen: dict[str, list[int]] = {}
    for line in lines:
        record = json.loads(line)  # a torn or interleaved line would not parse
        assert record["url"] == record["writer"] * (size + record["i"])
        seen.setdefault(record["writer"], []).append(record["i"])
    assert {w: sorted(v) for w, v in seen.items()} == {
        chr(ord("a") + w): list(range(count)) for w in range(writers)}
    assert all(v == sorted(v) for v in seen.values())  # each writer's own order is kept
