"""`retimer study analyze LOG.jsonl [LOG.jsonl ...]`: a study's records to an answer.

Reads the logs as one (several instances' logs join), picks the study, leaves out what cannot
count (each reason counted), and prints a plain-language line per comparison, the manipulation
check, the descriptives and the tests (retimer.study.analysis); `--json` for scripts, `--html
FILE` for a page with the plot, `--power EFFECT` for the participants a study of this design
needs. Needs the `retimer[analysis]` extra (scipy, statsmodels).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from retimer.cli.cmdline import OneLineParser, fail, fit_report, terminal_width

if TYPE_CHECKING:
    from retimer.records.schema import Record
    from retimer.study.analysis import Analysis
    from retimer.study.power import PowerAssumptions
    from retimer.study.threshold import Thresholds


class PowerFigures(TypedDict):
    effect: float
    scale: str
    needed: int | None
    table: list[tuple[int, float]]
    assumptions: PowerAssumptions

__all__ = ["main", "parser", "report_sections"]


def parser() -> OneLineParser:
    p = OneLineParser(
        prog="retimer study analyze",
        description="Analyse a study from its records: manipulation check, ratings per "
        "condition with 95 % intervals, the test the design calls for, what was left out.")
    p.add_argument("logs", nargs="+", metavar="LOG.jsonl", help="records logs (read as one)")
    p.add_argument("--study", metavar="STUDY.yaml", default="",
                   help="the study file: its conditions' order (the first is the reference)")
    p.add_argument("--study-name", metavar="NAME", default=None,
                   help="the study to analyse when the logs hold several")
    p.add_argument("--reference", metavar="CONDITION", default=None,
                   help="the condition the others are compared with (default: the first)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--html", metavar="FILE", default="",
                   help="also write the analysis as a self-contained HTML page with its plot")
    p.add_argument("--power", metavar="EFFECT", type=float, default=None,
                   help="also print the participants needed to find EFFECT rating points "
                   "(simulated on this design and spread)")
    return p



def _records(names: list[str]) -> tuple[list[Record], int]:
    """The logs' records, and how many of their lines were not records."""
    from retimer.records.reader import LogError, read_logs

    try:
        log = read_logs(names)
    except LogError as e:
        fail(str(e))
    return log.records, len(log.bad)


def main(argv: list[str]) -> None:
    # the analysis's matrices are 2 x 2 to 20 x 20: BLAS threads only synchronise (2.7 ms per
    # optimizer step on a busy 2-core machine); numpy is not imported yet here
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args = parser().parse_args(argv)
    from retimer.study.analysis import analyze, require_extras
    from retimer.study.analysis_data import AnalysisError, collect, study_of
    from retimer.study.analysis_view import analysis_html, analysis_json, analysis_lines, finite
    from retimer.study.threshold import thresholds

    order: list[str] = []
    design = None
    if args.study:
        from retimer.proxy.study.files import load_study
        from retimer.study.design import StudyError

        try:
            design, _ = load_study(args.study)
        except StudyError as e:
            fail(str(e))
        order = design.names
    records, malformed = _records(args.logs)
    try:
        require_extras()
        stairs = thresholds(records, study_of(records, args.study_name),
                            design.staircase if design is not None else None)
        if stairs is not None:
            _staircase(args, stairs)
            return
        data = collect(records, args.study_name, order, args.reference, malformed)
        analysis = analyze(data)
        power = _power(analysis, args.power) if args.power is not None else None
    except AnalysisError as e:
        fail(str(e))
    out = sys.stdout
    if args.json:
        figures = analysis_json(analysis)
        if power is not None:
            figures["power"] = finite({**power, "assumptions": asdict(power["assumptions"])})
        print(json.dumps(figures, indent=2, allow_nan=False), file=out)
    else:
        width = terminal_width(out)
        for line in analysis_lines(analysis):
            print(fit_report(line, width), file=out)
        if power is not None:
            for line in _power_lines(power):
                print(fit_report(line, width), file=out)
    if args.html:
        try:
            Path(args.html).expanduser().write_text(analysis_html(analysis), encoding="utf-8")
        except OSError as e:
            fail(f"--html: cannot write {args.html}: {e.strerror}")


def _staircase(args: argparse.Namespace, stairs: Thresholds) -> None:
    """A staircase study: its thresholds (retimer.study.threshold)."""
    from retimer.study.threshold_view import threshold_json, threshold_lines, threshold_section

    if args.power is not None or args.reference is not None:
        fail(f"--{'power' if args.power is not None else 'reference'}: a staircase study "
             "estimates thresholds; it has no conditions to compare")
    if args.json:
        print(json.dumps(threshold_json(stairs), indent=2))
    else:
        width = terminal_width(sys.stdout)
        for line in threshold_lines(stairs):
            print(fit_report(line, width))
    if args.html:
        from retimer.study.analysis_view import page

        try:
            Path(args.html).expanduser().write_text(page(f"Analysis: {stairs.study}",
                                                         threshold_section(stairs)), encoding="utf-8")
        except OSError as e:
            fail(f"--html: cannot write {args.html}: {e.strerror}")


def _power(analysis: Analysis, effect: float) -> PowerFigures:
    from retimer.study.power import power_table

    rows, needed, assumed = power_table(analysis, effect)
    return {"effect": effect, "scale": assumed.scale, "needed": needed,
            "table": [(r.participants, r.power) for r in rows], "assumptions": assumed}


def _power_lines(power: PowerFigures) -> list[str]:
    a = power["assumptions"]
    level = f"p < {a.alpha:.3g}" + (" (0.05 over the pairs: Holm's first step)"
                                    if a.alpha < 0.05 else "")
    return ["", f"participants needed for {power['effect']:+g} points, {a.condition} against "
            f"{a.reference} on {power['scale']} (80 % power, {level}): "
            f"{power['needed'] or 'more than 200'}",
            "  " + "  ".join(f"{n}: {share:.0%}" for n, share in power["table"]),
            f"  the test: {a.test}", f"  its SD {a.sd:.2f} (from {a.source})"]


def report_sections(records: list[Record]) -> tuple[list[str], str]:
    """`retimer report`'s analysis sections, one per study with ratings in the records, and a
    line for the terminal when there is something to say (a missing extra, a study that cannot
    be analysed)."""
    import html

    from retimer.records.schema import Rating
    from retimer.study.analysis import analyze, require_extras
    from retimer.study.analysis_data import AnalysisError, collect
    from retimer.study.analysis_view import analysis_section
    from retimer.study.threshold import thresholds
    from retimer.study.threshold_view import threshold_section

    studies = sorted({r.study for r in records if isinstance(r, Rating) and r.study is not None})
    if not studies:
        return [], ""
    try:
        require_extras()
    except AnalysisError as e:
        return [], f"no analysis section: {e}"
    sections: list[str] = []
    notes: list[str] = []
    for name in studies:
        try:
            stairs = thresholds(records, name)
            sections.append(threshold_section(stairs) if stairs is not None else
                            analysis_section(analyze(collect(records, name))))
        except AnalysisError as e:  # most name their study already
            notes.append(str(e) if str(e).startswith(f"study {name}") else f"study {name}: {e}")
            sections.append(f'<section class="analysis"><h2>Analysis: study {html.escape(name)}'
                            f"</h2><p>{html.escape(str(e))}</p></section>")
    return sections, "; ".join(notes)
