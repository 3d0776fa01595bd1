"""Records written as dicts in a test, read as a log line would be (retimer.records.parse)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from retimer.records.parse import parse_record
from retimer.records.schema import Record, StreamRecord


def typed(objs: Iterable[Mapping[str, object]]) -> list[Record]:
    """Each object as the reader would read its line."""
    out = []
    for obj in objs:
        record = parse_record(dict(obj))
        assert record is not None, f"not a record type: {obj}"
        out.append(record)
    return out


def streams(objs: Iterable[Mapping[str, object]]) -> list[StreamRecord]:
    """Stream records from dicts."""
    out = []
    for obj in objs:
        record = parse_record(dict(obj))
        assert isinstance(record, StreamRecord), f"not a stream record: {obj}"
        out.append(record)
    return out


def jsonl(records: Iterable[Record]) -> str:
    """The records as a log's lines, as retimer.records.writer writes them."""
    return "".join(json.dumps(r.to_json()) + "\n" for r in records)
