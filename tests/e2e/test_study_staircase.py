"""The staircase (threshold) design: the walk's rules, the study file's errors, the state that
keeps each unit's level and first answer, the psychometric fit, and simulated participants of
known thresholds through the real proxy, each unit's TTFT set by their answers on the rating
page and each threshold recovered within 20 %."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from retimer.proxy.study.state import MemoryState, SharedState
from retimer.records.schema import Rating, Record, StreamRecord
from retimer.study.design import StudyError
from retimer.study.simulate import feels_slow, simulate_staircase
from retimer.study.staircase import (
    Answer,
    StaircaseSettings,
    converges_on,
    parse_description,
    parse_staircase,
    position_after,
)
from retimer.study.study_file import parse_study
from retimer.study.threshold import collect_trials, fit_thresholds, thresholds
from retimer.study.threshold_view import threshold_json, threshold_summary
from tests.support.paths import ROOT
from tests.support.proxy import run_cli
from tests.support.records import jsonl, typed
from tests.support.stream_bodies import make_openai_stream
from tests.support.study import TEXT, ManyProxy
from tests.support.upstream import FakeLLM


def stairs(**kw: Any) -> StaircaseSettings:
    raw = {"vary": "ttft", "levels": ["100ms", "200ms", "400ms", "800ms", "1.6s"], **kw}
    return parse_staircase(raw, ["speed", "quality"], {})


# ------------------------------------------------------------------ the walk


def test_one_down_one_up_steps_on_every_answer() -> None:
    s = stairs()  # start: the middle level, 400 ms
    assert s.levels == (100.0, 200.0, 400.0, 800.0, 1600.0) and s.start == 2
    assert position_after(s, []).level == 2
    assert position_after(s, [(2, False)]).level == 3  # not slow: a longer wait next
    assert position_after(s, [(2, False), (3, True)]).level == 2  # slow: shorter
    state = position_after(s, [(2, False), (3, True), (2, False), (3, True)])
    assert state.reversals == (3, 2, 3) and state.trials == 4 and not state.done


def test_two_down_one_up_needs_two_slow_answers_at_a_level() -> None:
    s = stairs(rule="2-down/1-up")
    assert position_after(s, [(2, True)]).level == 2
    assert position_after(s, [(2, True), (2, True)]).level == 1
    assert position_after(s, [(2, True), (2, False)]).level == 3  # the run of "slow" broke
    assert s.target == pytest.approx(0.7071, abs=1e-4) and s.rule == "2-down/1-up"
    assert stairs(rule="1-down/2-up").target == pytest.approx(0.2929, abs=1e-4)


def test_ends_clamp_initial_steps_and_stop_rules() -> None:
    s = stairs(initial_step=2, start="100ms", stop={"reversals": 2})
    assert position_after(s, [(0, True)]).level == 0  # nothing faster than the fastest level
    assert position_after(s, [(0, False)]).level == 2  # two levels per step until the first reversal
    after = position_after(s, [(0, False), (2, True)])
    assert after.level == 1 and after.reversals == (2,)  # then one level
    done = position_after(s, [(0, False), (2, True), (1, False), (2, True), (1, False)])
    assert done.done and done.trials == 3 and done.level == 2  # stopped: the level stays
    capped = position_after(stairs(stop={"units": 2}), [(2, False), (3, False), (4, False)])
    assert capped.trials == 2 and capped.done and capped.level == 4


def test_a_late_answer_steps_from_the_level_its_unit_had() -> None:
    s = stairs()
    # unit 1 was given level 2 before unit 0's answer arrived; both answers count where made
    assert position_after(s, [(2, False), (2, False)]).level == 3
    assert position_after(s, [(2, True), (3, True)]).level == 2


def test_tps_levels_run_from_fast_to_slow() -> None:
    s = parse_staircase({"vary": "tps", "levels": {"from": 5, "to": 80, "count": 5}}, ["speed"], {})
    assert s.levels == (80.0, 40.0, 20.0, 10.0, 5.0)
    assert s.names()[0] == "tps-80" and s.override(4) == ("tps", "5")


def test_descriptions_and_answers_round_trip() -> None:
    s = stairs(rule="3-down/1-up", answer="speed <= 3")
    assert s.describe() == "3-down/1-up; speed <= 3"
    assert parse_description(s.describe()) == (pytest.approx(converges_on(3, 1)), Answer("speed", 3))
    assert parse_description("1-down/1-up; slow") == (0.5, Answer())
    assert parse_description("sideways") is None
    assert Answer("speed", 3).of(Rating("s", scores={"speed": 2})) is True
    assert Answer("speed", 3).of(Rating("s", scores={"speed": 4})) is False
    assert Answer().of(Rating("s", slow=False)) is False
    assert Answer().of(Rating("s", scores={"speed": 1})) is None
    assert Answer("speed", 3).of(Rating("s", scores={"speed": None})) is None  # left unanswered


@pytest.mark.parametrize("staircase, needle", [
    ("fast", "staircase: expected a mapping"),
    ({"vary": "speed", "levels": [1, 2, 3]}, "staircase.vary: expected one of ttft, tps"),
    ({"vary": "ttft"}, "staircase.levels: required"),
    ({"vary": "ttft", "levels": ["1s", "2s"]}, "staircase.levels: expected 3 to 64 levels"),
    ({"vary": "ttft", "levels": ["1s", "2s", "1000ms"]}, "staircase.levels: a level is given twice"),
    ({"vary": "ttft", "levels": ["1s", "2s", "soon"]}, "staircase.levels[2]: invalid duration"),
    ({"vary": "ttft", "levels": {"from": "1s", "to": "2s"}}, "staircase.levels: expected a list, or"),
    ({"vary": "tps", "levels": [10, 20, -3]}, "staircase.levels[2]: invalid rate"),
    ({"vary": "ttft", "levels": [1, 2, 3], "rule": "2-down/2-up"}, "staircase.rule: expected N-down/1-up"),
    ({"vary": "ttft", "levels": [1, 2, 3], "answer": "speed < 3"}, "staircase.answer: expected slow"),
    ({"vary": "ttft", "levels": [1, 2, 3], "answer": "joy <= 3"}, "staircase.answer: no rating scale 'joy'"),
    ({"vary": "ttft", "levels": [1, 2, 3], "initial_step": 3}, "staircase.initial_step: expected"),
    ({"vary": "ttft", "levels": [1, 2, 3], "stop": {"reversal": 3}}, "staircase.stop: expected"),
    ({"vary": "ttft", "levels": [1, 2, 3], "ttft": "1s"}, "staircase.ttft: is what the staircase varies"),
    ({"vary": "ttft", "levels": [1, 2, 3], "tps": 0}, "staircase.tps: tps must be a positive"),
    ({"vary": "ttft", "levels": [1, 2, 3], "pace": 1}, "staircase.pace: unknown key"),
])
def test_study_file_errors_name_the_key(tmp_path: Path, staircase: object, needle: str) -> None:
    from retimer.proxy.study.files import load_study

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "seed": 1, "unit": "request", "ratings": True,
                                    "staircase": staircase}))
    with pytest.raises(StudyError, match=f"^{re.escape(str(path))}: {re.escape(needle)}"):
        load_study(str(path))  # the design's checks, then each level's profile


@pytest.mark.parametrize("extra, needle", [
    ({"conditions": ["cerebras", "gpt-5"]}, "conditions: a staircase study's conditions are its levels"),
    ({"unit": "participant"}, "staircase: each unit's level follows the last answer"),
    ({"counterbalancing": "latin-square"}, "staircase: each unit's level follows the last answer"),
    ({"ratings": False}, "staircase: the levels follow the participant's answers"),
    ({"ratings": False, "page": {"model": "m", "tasks": ["Ask."]}},
     "staircase.answer: slow is the page's yes/no question"),
])
def test_staircase_against_the_rest_of_the_study(extra: dict[str, object], needle: str) -> None:
    data = {"name": "s", "seed": 1, "unit": "request", "ratings": True,
            "staircase": {"vary": "ttft", "levels": [100, 200, 400]}, **extra}
    with pytest.raises(StudyError, match=f"^study.yaml: {re.escape(needle)}"):
        parse_study(data, "study.yaml")


def test_the_levels_are_the_conditions() -> None:
    data = {"name": "s", "seed": 1, "unit": "request", "ratings": True,
            "staircase": {"vary": "ttft", "levels": [100, 200, 400], "tps": 80, "jitter": 0}}
    design = parse_study(data, "study.yaml")
    assert design.names == ["ttft-100ms", "ttft-200ms", "ttft-400ms"]
    assert design.conditions[2].overrides == (("ttft", "400ms"), ("tps", "80"), ("jitter", "0"))
    assert design.assign("P1", 7) == 1  # without the state: the start


def test_the_example_study_loads() -> None:
    from retimer.proxy.study.files import load_study

    design, profiles = load_study(str(ROOT / "examples" / "staircase.yaml"))
    assert design.staircase is not None and len(profiles) == 16 and design.staircase.stop_units == 30


def test_plan_shows_the_rule_and_two_steady_walks(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "t", "seed": 1, "unit": "request", "ratings": True,
        "staircase": {"vary": "ttft", "levels": [100, 200, 400, 800, 1600], "rule": "2-down/1-up"}}))
    result = run_cli("study", str(path), "--plan", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "levels, fast to slow (ms): 100 200 400 800 1600"
    assert lines[2] == "rule 2-down/1-up: settles where a response is called slow 70.7% of the time"
    assert lines[3].startswith("starts at 400 ms, 1 level(s) a step")
    assert lines[-2].split()[-5:] == ["400", "800", "1600", "1600", "1600"]
    assert lines[-1].split()[-5:] == ["400", "400", "200", "200", "100"]


# ------------------------------------------------------------------ the state


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_state_keeps_each_units_level_and_first_answer(tmp_path: Path, kind: str) -> None:
    state = MemoryState() if kind == "memory" else SharedState(tmp_path / "s.db", "t")
    s = stairs()
    choose = lambda answered: position_after(s, answered).level  # noqa: E731
    assert state.unit_level("P1", 0, choose) == 2
    assert state.unit_level("P1", 0, choose) == 2  # a unit keeps its level
    assert state.answer("P1", 0, False) and not state.answer("P1", 0, True)  # the first counts
    assert not state.answer("P1", 9, True)  # no such unit
    assert state.unit_level("P1", 1, choose) == 3
    assert state.unit_level("P2", 0, choose) == 2  # participants apart
    assert state.stairs("P1") == [(0, 2, False), (1, 3, None)]
    state.close()


# ------------------------------------------------------------------ the fit


def test_thresholds_of_simulated_participants_within_20_percent() -> None:
    """50 seeded studies of six participants, 24 units each: every threshold within 20 %."""
    s = parse_staircase({"vary": "ttft", "levels": {"from": "100ms", "to": "3.2s", "count": 16},
                         "initial_step": 2}, ["speed"], {})
    truth = [250.0, 400.0, 600.0, 900.0, 1400.0, 2000.0]
    errors = []
    for seed in range(40):
        records = simulate_staircase(s, truth, 24, seed, spread=0.08, delivery_sd=0.02)
        vary, trials, excluded = collect_trials(records, "simulated-staircase")
        result = fit_thresholds("simulated-staircase", vary, trials, s.target, excluded)
        assert [p.method for p in result.people] == ["psychometric fit"] * 6
        errors += [p.threshold / t - 1 for p, t in zip(result.people, truth) if p.threshold]
    assert len(errors) == 240 and max(map(abs, errors)) < 0.2
    assert abs(sorted(errors)[120]) < 0.03  # no bias


def test_a_two_down_rule_reads_its_own_share() -> None:
    s = parse_staircase({"vary": "tps", "levels": {"from": 5, "to": 160, "count": 16},
                         "rule": "2-down/1-up", "initial_step": 2}, ["speed"], {})
    spread = 0.1
    truth = [12.0, 30.0, 70.0]
    errors = []
    for seed in range(30):
        records = simulate_staircase(s, truth, 40, seed, spread=spread)
        vary, trials, _ = collect_trials(records, "simulated-staircase")
        result = fit_thresholds("x", vary, trials, s.target)
        # where a participant says "slow" 70.7 % of the time: a lower rate than their 50 % point
        at_target = [t * math.exp(-spread * math.log(s.target / (1 - s.target))) for t in truth]
        errors += [p.threshold / t - 1 for p, t in zip(result.people, at_target) if p.threshold]
    assert len(errors) == 90 and sorted(map(abs, errors))[85] < 0.2


def test_trials_take_the_first_answer_and_leave_out_what_cannot_count() -> None:
    s = stairs()
    records = simulate_staircase(s, [400.0], 10, 1, study="t")
    first = next(r for r in records if isinstance(r, Rating))
    records.append(replace(first, time="9999", slow=not first.slow))  # a later change
    records[2] = replace(records[2], upstream_bound=True)  # unit 1
    records = [r for r in records if not (isinstance(r, Rating) and r.unit == 3)]
    records += typed([{"type": "rating", "stream": "elsewhere", "study": "t", "slow": True}])
    vary, trials, excluded = collect_trials(records, "t")
    assert vary == "ttft" and [t.unit for t in trials] == [0, 2, 4, 5, 6, 7, 8, 9]
    assert trials[0].slow == first.slow
    assert excluded == Counter({"units the upstream paced (upstream-bound)": 1,
                                "units with no answer": 1,
                                "ratings of responses not in the log(s)": 1})


def _described(record: Record, staircase: str) -> Record:
    """A simulated unit's record with its staircase's rule and answer, as the proxy writes it."""
    if not isinstance(record, StreamRecord) or record.study is None:
        return record
    return replace(record, study=replace(record.study, staircase=staircase))


def test_answers_that_never_change_give_no_threshold_and_say_why() -> None:
    s = stairs()
    records = simulate_staircase(s, [1e6, 400.0], 12, 3, study="t")  # P1 never feels slow
    result = thresholds(records, "t", s)
    assert result is not None
    p1, p2 = result.people
    assert p1.threshold is None and "beyond the slowest level" in p1.note
    assert p1.censored == "slower" and not p2.censored  # P1 counts, beyond the levels
    assert p2.threshold is not None and p2.ci is not None
    assert p2.ci[0] < p2.threshold < p2.ci[1]  # the estimate inside its own interval
    # one of two beyond the levels: the median is there too, and nobody is "missing"
    assert result.group is None and result.counted == 2
    assert any("half the participants or more are beyond the levels" in n for n in result.notes)
    assert not any("no threshold for" in n for n in result.notes)
    assert thresholds(typed([{"study": "t", "type": "stream", "id": "a"}]), "t") is None  # not a staircase


def test_participants_beyond_the_levels_count_in_the_headline_and_json() -> None:
    """Issue 39's case: 4 of 12 never call a level slow. They are counted at the top of the
    range in a median, not dropped (which pulled the geometric mean of the other 8 low); the
    headline and the JSON say how many; the simulator writes the rule, so the records alone
    name the staircase."""
    truth = [300.0, 350.0, 420.0, 500.0, 560.0, 640.0, 720.0, 800.0] + [1e6] * 4
    records = simulate_staircase(stairs(), truth, 24, 11, spread=0.08)
    result = thresholds(records, "simulated-staircase")  # no settings: the records' own rule
    assert result is not None and result.counted == 12 and len(result.estimated) == 8
    assert [p.censored for p in result.people].count("slower") == 4
    dropped = math.exp(statistics.fmean(math.log(p.threshold) for p in result.estimated
                                        if p.threshold))
    assert result.group is not None and result.group > dropped * 1.15
    assert result.group_ci is not None and result.group_ci[1] == math.inf  # reaches the top
    line = threshold_summary(result)
    assert "the median of 12 participants' thresholds; 4 called no level slow: counted at the " \
        "range's ends" in line and "beyond the slowest level" in line
    group = threshold_json(result)["group"]
    assert isinstance(group, dict)
    assert (group["participants"], group["estimated"], group["beyond_slowest"]) == (12, 8, 4)
    assert group["ci"][1] is None  # JSON has no infinity: beyond the levels is null


def test_a_shallow_observers_interval_covers_their_threshold() -> None:
    """The delta method covered 78-84 % for shallow psychometric functions, a parametric
    bootstrap from the fit 89 % of these 150 (seeded) shallow participants with a delivered
    TTFT that varies 3 %; the penalised profile likelihood's interval holds 96 %."""
    s = parse_staircase({"vary": "ttft", "levels": {"from": "50ms", "to": "6.4s", "count": 22}},
                        ["speed"], {})
    truth = [300.0, 450.0, 600.0, 800.0, 1000.0]
    covered = total = 0
    for seed in range(30):
        records = simulate_staircase(s, truth, 30, 700 + seed, spread=0.35, delivery_sd=0.03)
        result = thresholds(records, "simulated-staircase")
        assert result is not None
        for p, t in zip(result.people, truth):
            if p.ci is not None and p.method == "psychometric fit":
                total += 1
                covered += p.ci[0] <= t <= p.ci[1]
    assert total >= 120 and 0.92 <= covered / total <= 0.99, (covered, total)


def test_a_staircase_log_without_answers_is_one_line(tmp_path: Path) -> None:
    records = [_described(r, "1-down/1-up; slow")
               for r in simulate_staircase(stairs(), [400.0], 6, 1, study="t")
               if not isinstance(r, Rating)]
    log = tmp_path / "log.jsonl"
    log.write_text(jsonl(records))
    done = run_cli("study", "analyze", str(log))
    assert done.returncode == 2
    assert done.stderr.strip() == ("retimer: error: study 't': no answered staircase units to fit "
                                   "(6 units with no answer)")


def test_feels_slow_is_half_at_the_threshold() -> None:
    assert feels_slow("ttft", 500.0, 500.0, 0.1) == 0.5
    assert feels_slow("ttft", 1000.0, 500.0, 0.1) > 0.99
    assert feels_slow("tps", 10.0, 20.0, 0.1) > 0.99


def test_analyze_a_staircase_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = stairs(rule="1-down/1-up")
    records = simulate_staircase(s, [300.0, 700.0], 24, 5, study="t", spread=0.1)
    records = [_described(r, s.describe()) for r in records]
    log = tmp_path / "log.jsonl"
    log.write_text(jsonl(records))
    text = run_cli("study", "analyze", str(log), "--html", str(tmp_path / "a.html"))
    assert text.returncode == 0, text.stderr
    assert "a staircase on ttft, 2 participants, 48 answered units" in text.stdout
    assert "threshold: a TTFT of" in text.stdout and "psychometric fit" in text.stdout
    from retimer.cli.study.analyze import main as analyze  # the same command, in this process

    capsys.readouterr()
    analyze([str(log), "--json"])
    figures = json.loads(capsys.readouterr().out)
    assert figures["design"] == "staircase" and figures["target"] == 0.5
    expected = thresholds(records, "t")
    assert expected is not None
    assert [p["threshold"] for p in figures["participants"]] == [p.threshold for p in expected.people]
    page = (tmp_path / "a.html").read_text()
    assert "<svg" in page and "thresholds (ms) with 95 % intervals" in page
    report = tmp_path / "report.html"
    assert run_cli("report", str(log), "-o", str(report)).returncode == 0
    import html

    shown = html.unescape(report.read_text())
    assert "Analysis: study t (staircase on ttft)" in shown and figures["summary"] in shown
    with pytest.raises(SystemExit) as refused:
        analyze([str(log), "--power", "1"])
    assert refused.value.code == 2
    assert "--power: a staircase study estimates thresholds" in capsys.readouterr().err


# ------------------------------------------------------------------ through the real proxy

THRESHOLDS = {"P1": 250.0, "P2": 500.0, "P3": 800.0, "P4": 1200.0}
SPREAD = 0.08
UNITS = 24


def _participant(proxy_url: str, fake_url: str, person: str, seed: int,
                 given: list[tuple[float, bool]], errors: list[str]) -> None:
    """A simulated participant: asks, times the first token as they see it, answers on the
    rating page whether it felt slow (drawn from their psychometric function)."""
    rng = random.Random(seed)
    rate = f"{proxy_url}/rate?participant={person}"
    previous = None
    try:
        with httpx.Client(proxy=proxy_url, timeout=60) as client:
            for _ in range(UNITS):
                sent = time.monotonic()
                first = None
                with client.stream("POST", fake_url + "/v1/chat/completions",
                                   headers={"X-Retimer-Participant": person},
                                   json={"model": "m", "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]}) as r:
                    for line in r.iter_lines():
                        if first is None and line.startswith("data: {") and any(
                                c["delta"].get("content") for c in json.loads(line[6:])["choices"]):
                            first = time.monotonic() - sent  # the first visible text
                assert first is not None
                seen = first * 1000.0
                slow = rng.random() < feels_slow("ttft", seen, THRESHOLDS[person], SPREAD)
                deadline = time.monotonic() + 10
                while (stream := httpx.get(rate + "&latest=1").json()["stream"]) == previous:
                    assert time.monotonic() < deadline, "the stream was never offered for rating"
                    time.sleep(0.02)
                previous = stream
                answer = httpx.post(rate, json={"stream": stream, "slow": "yes" if slow else "no"},
                                    headers={"accept": "application/json"})
                assert answer.status_code == 200, answer.text
                given.append((seen, slow))
    except Exception as e:  # noqa: BLE001  # reported by the test
        errors.append(f"{person}: {e!r}")


@pytest.mark.serial  # each level's TTFT within 60 ms: a quiet machine
def test_participants_of_known_thresholds_through_the_proxy(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "ttft-threshold", "seed": 9, "unit": "request", "ratings": True,
        "staircase": {"vary": "ttft", "levels": {"from": "100ms", "to": "3.2s", "count": 16},
                      "initial_step": 2, "tps": 2000, "jitter": 0, "profile": "gpt-5"}}))
    given: dict[str, list[tuple[float, bool]]] = {p: [] for p in THRESHOLDS}
    errors: list[str] = []
    with FakeLLM(make_openai_stream(TEXT), bursts=1) as fake, ManyProxy(tmp_path / "proxy", study) as proxy:
        threads = [threading.Thread(target=_participant, args=(proxy.url, fake.url, p, i, given[p], errors))
                   for i, p in enumerate(THRESHOLDS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        records = proxy.records(len(THRESHOLDS) * UNITS * 2)
    assert not errors, errors
    streams = [r for r in records if r.get("type", "stream") == "stream"]
    ratings = [r for r in records if r.get("type") == "rating"]
    assert len(streams) == len(ratings) == len(THRESHOLDS) * UNITS
    from retimer.proxy.study.files import load_study

    design, _ = load_study(str(study))
    assert design.staircase is not None
    for person in THRESHOLDS:
        mine = sorted((r for r in streams if r["participant"] == person), key=lambda r: r["unit"])
        assert [r["unit"] for r in mine] == list(range(UNITS))
        levels = [design.staircase.levels.index(r["level"]) for r in mine]
        # each unit's level is the walk of the answers the participant gave before it
        answers = [slow for _, slow in given[person]]
        expected = [position_after(design.staircase, list(zip(levels[:k], answers[:k]))).level
                    for k in range(UNITS)]
        assert levels == expected, person
        ladder = design.staircase.levels
        for r in mine:  # and each was delivered at its level: never sooner, and (later on a
            # loaded machine) still short of the next level up
            assert r["condition"] == f"ttft-{r['level']:g}ms"
            i = ladder.index(r["level"])
            above = ladder[i + 1] if i + 1 < len(ladder) else math.inf
            assert r["level"] - 5 <= r["emitted"]["ttft_ms"] < above, r
        assert len({lv for lv in levels}) >= 3  # it walked
    status = run_cli("study", str(study), "--status", str(proxy.log_path)).stdout.splitlines()
    assert status[0] == f"study ttft-threshold: 4 participants started, 0 finished; {4 * UNITS} units, {4 * UNITS} ratings"
    for person, line in zip(THRESHOLDS, status[3:7]):
        levels = [design.staircase.levels.index(r["level"]) for r in sorted(
            (r for r in streams if r["participant"] == person), key=lambda r: r["unit"])]
        after = position_after(design.staircase, list(zip(levels, [a for _, a in given[person]])))
        assert line.split()[:3] == [person, str(UNITS), str(UNITS)]
        assert line.split()[4] == f"{design.staircase.levels[after.level]:g}"
        assert line.split()[6] == str(len(after.reversals))
    result = json.loads(run_cli("study", "analyze", str(proxy.log_path), "--json").stdout)
    found = {p["participant"]: p for p in result["participants"]}
    for person, truth in THRESHOLDS.items():
        assert found[person]["answers"] == UNITS
        assert found[person]["threshold"] == pytest.approx(truth, rel=0.2), (person, found[person])
    assert result["group"]["participants"] == len(THRESHOLDS)


def test_the_rating_page_asks_the_yes_no_question_and_reads_it() -> None:
    from retimer.study.ratings import RatingError, parse_rating, rating_page, rating_record

    latest = {"id": "s1", "finished": "12:00:03", "host": "api.openai.com"}
    assert "Did this response feel slow?" in rating_page(latest, ask_slow=True)
    assert "Did this response feel slow?" not in rating_page(latest)
    assert parse_rating(b"stream=s1&slow=yes", "application/x-www-form-urlencoded") == (
        "s1", {"slow": True, "speed": None, "quality": None})
    stream, scores = parse_rating(b'{"stream": "s1", "slow": false, "speed": 6}', "application/json")
    assert rating_record({"id": stream, "unit": 3}, scores, "t").slow is False
    with pytest.raises(RatingError, match="slow: expected yes or no"):
        parse_rating(b"stream=s1&slow=maybe", "application/x-www-form-urlencoded")
    assert "slow" not in rating_record({"id": "s1"}, {"speed": 4, "quality": None}, "t").to_json()
