"""`fit` and `fit_report`: how a line wraps in a terminal narrower than it (the real terminal:
e2e/test_terminal_width.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from retimer.cli.cmdline import fit, fit_report
from retimer.cli.proxy.banner import VALUE_COLUMN

ROW = "  ratings  http://127.0.0.1:8080/rate?participant=ID  (the participant rates the latest response there)"


def test_a_row_wraps_between_words_under_its_value() -> None:
    assert fit(ROW, 80, VALUE_COLUMN).split("\n") == [
        "  ratings  http://127.0.0.1:8080/rate?participant=ID  (the participant rates the",
        "           latest response there)"]


def test_unwrapped_when_it_fits_or_not_in_a_terminal() -> None:
    assert fit(ROW, None, VALUE_COLUMN) == ROW
    assert fit(ROW, len(ROW), VALUE_COLUMN) == ROW


def test_a_word_that_fits_no_line_stays_with_its_label() -> None:
    path = "/home/someone/" + "x" * 80 + "/mitmproxy-ca-cert.pem"
    assert fit(f"  CA cert  {path}", 80, VALUE_COLUMN) == f"  CA cert  {path}"
    assert fit(f"  browser  trust {path} here", 80, VALUE_COLUMN) == f"  browser  trust {path}\n{' ' * 11}here"


def test_a_line_that_is_no_row_continues_four_columns_in() -> None:
    line = "  only LLM hosts are intercepted; everything else is tunnelled untouched."
    assert fit(line, 40, 4).split("\n") == [
        "  only LLM hosts are intercepted;", "    everything else is tunnelled", "    untouched."]


@given(st.lists(st.text("abc", min_size=1, max_size=12), min_size=1, max_size=30),
       st.integers(30, 100))
def test_wrapping_keeps_every_word_and_fits_what_can_fit(words: list[str], width: int) -> None:
    line = "  label    " + " ".join(words)
    out = fit(line, width, VALUE_COLUMN).split("\n")
    assert " ".join(x.strip() for x in out) == line.strip()
    assert all(len(x) <= width for x in out)  # every word here fits a line
    assert all(x.startswith(" " * VALUE_COLUMN) and x[VALUE_COLUMN] != " " for x in out[1:])


def test_a_report_wraps_prose_under_its_indent_and_leaves_table_rows_whole() -> None:
    prose = "  13 ratings of 5 participants; REML; t and F tests with Satterthwaite's degrees of freedom"
    assert fit_report(prose, 60).split("\n") == [
        "  13 ratings of 5 participants; REML; t and F tests with",
        "    Satterthwaite's degrees of freedom"]
    row = "  speed      slow                5       9  2.88  2.50  [-0.23, 5.99]   [-0.48, 5.98]"
    assert fit_report(row, 60) == row
    assert fit_report("fast was rated 1.3 points higher than slow", 20).split("\n") == [
        "fast was rated 1.3", "  points higher than", "  slow"]
