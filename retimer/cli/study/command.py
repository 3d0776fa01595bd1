"""`retimer study STUDY.yaml [--participant ID] [proxy options]`: the proxy running a study.

With --participant the proxy is that participant's; without it, each request names its
participant (the study's header or roster: retimer.study.participants), so one proxy serves a
whole hosted study.

The conditions set the timing, so --profile, --ttft, --tps, --jitter, --speed and --thinking
are refused.
Without --seed the timing model's seed comes from the study seed and the participant (a re-run
draws the same timings); without --log records go to ./retimer-study-<participant>.jsonl.
The banner and live view show neither the study's name nor its conditions (blinding).
`--plan N` prints which condition each participant's first N units get, and exits: for the
experimenter, never on the participant's screen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from dataclasses import replace

from retimer.cli.cmdline import OneLineParser, fail
from retimer.cli.proxy.options import ProxyConfig, proxy_parser
from retimer.cli.proxy.runner import run_proxy
from retimer.study.design import StudyDesign, StudyError, williams_square
from retimer.study.staircase import StaircaseSettings, position_after

TIMING_OPTIONS = ("profile", "ttft", "tps", "jitter", "speed", "thinking")


def parser() -> OneLineParser:
    p = proxy_parser()
    p.prog = "retimer study"
    p.description = (
        "Run the proxy of a blinded study, for one participant (--participant) or for every "
        "participant a request names (a header, or a roster of API keys): each unit "
        "(participant, conversation or request) gets its condition's timing; records carry "
        "study, participant, condition and unit. See docs/studies.md."
    )
    p.add_argument("study", metavar="STUDY.yaml", help="the study file")
    p.add_argument("--participant", default="", metavar="ID",
                   help="this proxy's one participant (letters, digits, . _ -); without it "
                   "each request names its own, by the study's header or roster")
    p.add_argument("--study-state", default="", metavar="PATH",
                   help="keep the participants' unit positions (and the study page's state) in "
                   "this sqlite3 file or PostgreSQL database (postgresql://...), shared by every "
                   "instance of the study's proxy (behind a load balancer); kept after exit, so "
                   "a restarted instance goes on where the others are")
    p.add_argument("--plan", type=int, default=0, metavar="N",
                   help="print the conditions of the first N units per participant and exit "
                   "(for the experimenter)")
    p.add_argument("--pilot", type=int, default=0, metavar="N",
                   help="send N of the study page's calls to --upstream (real calls, with the "
                   "researcher's key), print per condition how many replies would be "
                   "upstream-bound, and exit (1: a condition is infeasible)")
    p.add_argument("--status", nargs="*", metavar="LOG", default=None,
                   help="print where the study stands (participants, units per condition against "
                   "the design, ratings, upstream-bound streams) from its records logs (default: "
                   "with --study-state every instance's records kept there, else --log's, or "
                   "./retimer-study.jsonl) and exit (for the experimenter)")
    p.set_defaults(**dict.fromkeys(TIMING_OPTIONS))
    return p



def main(argv: list[str]) -> None:
    if argv[:1] == ["analyze"]:  # `retimer study analyze LOG ...` (retimer.cli.study.analyze)
        from retimer.cli.study.analyze import main as analyze

        analyze(argv[1:])
        return
    args = parser().parse_intermixed_args(argv)
    for option in TIMING_OPTIONS:
        if getattr(args, option) is not None:
            fail(f"--{option}: in a study the conditions set the timing; "
                 f"put it in a condition of {args.study}")
    args.profile, args.ttft, args.tps, args.jitter, args.speed = "cerebras", "", "", "", ""
    args.thinking = ""
    from retimer.proxy.study.files import load_roster, load_study

    try:
        design, profiles = load_study(args.study)
        if args.pilot:
            from retimer.cli.study.pilot import run_pilot

            sys.exit(run_pilot(design, profiles, args.upstream, args.pilot, args.cache))
        if args.plan:
            if args.plan < 0:
                raise StudyError(f"--plan: expected a number of units >= 1, got {args.plan}")
            if args.participant:
                design.check_participant(args.participant)
            print_plan(design, args.participant, args.plan)
            return
        if args.status is not None:
            if not args.status and args.study_state:  # every instance's records, in the state
                print_status(design, [], shared_state(args.study_state, design.name))
                return
            logs = args.status or [args.log or (f"retimer-study-{args.participant}.jsonl"
                                                if args.participant else "retimer-study.jsonl")]
            print_status(design, logs)
            return
        if args.participant:
            design.check_participant(args.participant)
            roster = None
        else:
            roster = load_roster(design, args.study)
        if design.page is not None:
            check_page(design, args)
    except StudyError as e:
        fail(str(e))
    config = ProxyConfig.from_args(args)
    proxy = f"http://{config.listen_host}:{config.listen_port}"
    if args.participant:
        banner = [f"  study    participant {args.participant} (the study's name and conditions "
                  "are not shown)"]
        rate = f"{proxy}/rate"
    else:
        policy = design.participants
        named = f"the {policy.header} header" + (f" or a roster of {len(roster)} API keys"
                                                 if roster is not None else "")
        if design.page is not None and not policy.beside_page:
            banner = ["  study    participants from their page links; other requests refused"]
        else:
            if design.page is not None:
                named = f"their page link, or {named}"
            banner = [f"  study    each request's participant from {named}; requests naming none "
                      f"are {'refused' if policy.unidentified == 'refuse' else 'passed untimed'}"]
        rate = f"{proxy}/rate?participant=ID"
    if design.ratings and not config.upstream:
        banner.append(f"  ratings  {rate}  (the participant rates the latest response there)")
    if design.page is not None:
        param = design.page.participant_params[0]
        banner.append(f"  page     {proxy}/study/?{param}=ID  (each participant's link; put it "
                      "behind an HTTPS front end to share it)")
        banner.append(f"  admin    {proxy}/study/admin?token=TOKEN  (TOKEN: $RETIMER_STUDY_ADMIN_TOKEN "
                      f"or the file {config.confdir / 'study-admin-token'})")
    config = replace(
        config,
        seed=design.timing_seed(args.participant) if config.seed is None else config.seed,
        log=config.log or (f"retimer-study-{args.participant}.jsonl" if args.participant
                           else "retimer-study.jsonl"),  # no study name: it may hint
        study=args.study, participant=args.participant, study_banner=tuple(banner),
        study_state=shared_state(args.study_state, design.name),
    )
    if config.workers > 1:  # the workers share the unit positions (retimer.proxy.study.state)
        from retimer.cli.proxy.workers import run_workers

        raise SystemExit(asyncio.run(run_workers(config)))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_proxy(config))


def check_page(design: StudyDesign, args: argparse.Namespace) -> None:
    """The hosted page's needs, before the proxy starts (each one line)."""
    import os

    assert design.page is not None
    if args.participant:
        raise StudyError("--participant: a study with a page takes each participant from their "
                         "link; start it without --participant")
    if not args.upstream:
        raise StudyError("page: the study page sends the study's requests to the model API: "
                         "give --upstream URL")
    if not os.environ.get(design.page.key_env):
        raise StudyError(f"page.key_env: {design.page.key_env} is not set: the page sends the "
                         "researcher's API key upstream (set it to any text for a server that "
                         "needs none)")


def shared_state(location: str, study: str) -> str:
    """--study-state's file or database, its tables made (one line if it cannot be used)."""
    if not location:
        return ""
    from pathlib import Path

    from retimer.proxy.study.state import SharedState, StateError
    from retimer.proxy.study.statedb import is_postgres

    full = location if is_postgres(location) else str(Path(location).expanduser().resolve())
    try:
        SharedState(full, study).close()
    except StateError as e:
        fail(f"--study-state: {e}")
    except ImportError:
        fail("--study-state: PostgreSQL needs psycopg: pip install 'retimer[postgres]'")
    return full


def print_status(design: StudyDesign, logs: list[str], state: str = "") -> None:
    """`--status`: the experimenter's view of the logs (a missing log is one line), or of the
    records every instance kept in the shared `state`."""
    import time

    from retimer.records.reader import LogError, read_lines, read_logs
    from retimer.study.status import IDLE_S, IdleParticipant, status_lines, summarize

    idle: list[IdleParticipant] = []
    if state:
        from retimer.proxy.study.page_state import PageState
        from retimer.proxy.study.state import SharedState, StateError

        try:
            shared = SharedState(state, design.name)
            try:
                lines = shared.record_lines()
                if design.page is not None:  # who on the study page has gone quiet, and where
                    idle = [IdleParticipant(i.participant, i.task, i.waiting, i.idle_s)
                            for i in PageState(shared.db, design.name).idle(time.time(), IDLE_S)]
            finally:
                shared.close()
        except StateError as e:
            raise StudyError(f"--study-state: {e}") from None
        records = read_lines(lines, "--study-state").records
    else:
        try:
            records = read_logs(logs).records
        except LogError as e:
            raise StudyError(f"--status: {e}") from None
    status = summarize(design, records)
    status.idle = idle
    for line in status_lines(design, status):
        print(line)


def print_plan(design: StudyDesign, participant: str, units: int) -> None:
    """The assignment table: participants by units (the experimenter's view)."""
    if design.staircase is not None:
        for line in staircase_plan(design.name, design.staircase, units):
            print(line)
        return
    n = len(design.conditions)
    rows = len(williams_square(n)) if design.counterbalancing == "latin-square" else n
    arrival = design.participant_ids == "arrival"
    people = [participant] if participant and not arrival else \
        [f"arrival {i - 1}" if arrival else f"P{i}" for i in range(1, rows + 1)]  # as records
    out = sys.stdout
    print(f"study {design.name}: unit {design.unit}, counterbalancing {design.counterbalancing}, "
          f"block_size {design.block_size}, conditions {', '.join(design.names)}", file=out)
    if design.unit == "conversation" and design.counterbalancing == "none" \
            and design.block_size == 1:
        print("each conversation draws its condition from its key: no fixed order", file=out)
        return
    count = 1 if design.unit == "participant" else units
    width = max(len(p) for p in people)
    header = "participant" if design.unit == "participant" else f"{design.unit}s 0-{count - 1}"
    print(f"{'':<{width}}  {header}", file=out)
    for p in people:
        place = people.index(p) if arrival else None  # the k-th to come takes row k (mod rows)
        names = [design.condition(p, i, arrival=place).name for i in range(count)]
        print(f"{p:<{width}}  {' '.join(names)}", file=out)


def staircase_plan(name: str, stairs: StaircaseSettings, units: int) -> list[str]:
    """A staircase has no fixed plan: its settings, and where two steady answerers would go."""
    unit = stairs.unit_label
    levels = ", ".join(_fmt(v) for v in stairs.levels)
    stop = " and ".join(f"{n} {what}" for n, what in ((stairs.stop_reversals, "reversals"),
                                                         (stairs.stop_units, "answers")) if n)
    lines = [f"study {name}: a staircase on {stairs.vary}; each unit's level follows the "
             "participant's answers",
             f"levels, fast to slow ({unit}): {levels.replace(',', '')}",
             f"rule {stairs.rule}: settles where a response is called slow {stairs.target:.1%} of "
             "the time",
             f"starts at {_fmt(stairs.levels[stairs.start])} {unit}, {stairs.initial_step} "
             f"level(s) a step until the first reversal; answer: {stairs.answer}"
             + (f"; stops after {stop}" if stop else ""),
             f"the first {units} units of a participant who answers"]
    for label, slow in (("never slow ", False), ("always slow", True)):
        answered: list[tuple[int, bool]] = []
        for _ in range(units):
            answered.append((position_after(stairs, answered).level, slow))
        lines.append(f"  {label}  {' '.join(_fmt(stairs.levels[lv]) for lv, _ in answered)}")
    return lines


def _fmt(value: float) -> str:
    return f"{value:g}"
