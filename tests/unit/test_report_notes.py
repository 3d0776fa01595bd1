"""What `retimer report` says of a study it cannot analyse: one note per study, named once."""

from __future__ import annotations

from pathlib import Path

from retimer.cli.study.analyze import report_sections
from retimer.records.reader import read_logs

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "v1.jsonl"


def test_a_study_that_cannot_be_analysed_is_named_once() -> None:
    sections, note = report_sections(read_logs([LOG]).records)
    notes = note.split("; study ")
    assert len(sections) == len(notes) == 2, note
    assert note.startswith("study blind-test: no rated responses to analyse"), note
    assert "; study page-study: only swift has ratings left" in note, note
    assert "study blind-test: study" not in note and "study page-study: study" not in note, note
