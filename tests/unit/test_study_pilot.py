"""The pilot's verdicts (retimer.study.pilot): a condition is infeasible when the upstream's
tokens come later than its schedule would send them, and the figures are the upstream's own."""

from __future__ import annotations

from retimer.profile.loader import load_profile
from retimer.profile.model import Profile
from retimer.study.pilot import PilotReply, judge, median, upstream_bound


def condition(ttft: str, tps: float) -> Profile:
    return load_profile("gpt-5").with_overrides(ttft=ttft, tps=tps, jitter=0.0)


def test_a_token_later_than_the_schedule_makes_the_reply_upstream_bound() -> None:
    reply = PilotReply(tuple(0.5 + k * 0.02 for k in range(20)))  # 500 ms, then 50 tok/s
    assert reply.ttft_s == 0.5 and round(reply.tps or 0) == 50
    assert upstream_bound(reply, ttft_s=0.2, tps=10)  # its first token came after 200 ms
    assert upstream_bound(reply, ttft_s=0.5, tps=200)  # on time at first, then too slow
    assert not upstream_bound(reply, ttft_s=1.0, tps=20)  # 1 s, then 20 tok/s: always ahead
    assert not upstream_bound(reply, ttft_s=0.48, tps=50)  # 20 ms late: within the slack


def test_judge_counts_per_condition_over_the_whole_replies() -> None:
    fast, slow = condition("150ms", 500), condition("2s", 8)
    replies = [PilotReply(tuple(0.6 + k * 0.05 for k in range(30))) for _ in range(4)]
    replies.append(PilotReply((), error="HTTP 529"))
    verdicts = judge([("fast", fast), ("slow", slow), ("plain", load_profile("passthrough"))], replies)
    assert [(v.name, v.bound, v.replies, v.feasible) for v in verdicts] == [
        ("fast", 4, 4, False), ("slow", 0, 4, True), ("plain", 0, 4, True)]
    assert verdicts[0].ttft_s == fast.ttft.p50 and verdicts[2].tps is None  # type: ignore[union-attr]
    assert median([3.0, 1.0, 2.0, 10.0]) == 2.5 and median([]) is None


def test_a_running_study_calls_a_condition_upstream_bound_once_from_its_third_unit() -> None:
    from retimer.study.pilot import FEASIBLE_AFTER, RunningFeasibility

    watch = RunningFeasibility()
    assert FEASIBLE_AFTER == 3
    assert [watch.add("fast", True), watch.add("fast", True)] == [None, None]  # too few yet
    assert watch.add("slow", False) is None
    assert watch.add("fast", False) == (2, 3)  # 2 of its first 3 units: mostly bound
    assert watch.add("fast", True) is None  # said once
    assert [watch.add("slow", b) for b in (True, False, False)] == [None, None, None]  # 1 of 4
