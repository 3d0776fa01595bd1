"""The wake/send policy of paced streams (retimer.timing.emission), on made-up times."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retimer.timing import emission
from retimer.timing.emission import EARLY_S, LONG_SLEEP_EARLY_S, MAX_SLEEP_S, WINDOW_S


class FakePacer:
    """Records which of the pacer's two ways out the policy took."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def flush(self, now: float) -> list[Any]:
        self.calls.append(("flush", now))
        return []

    def pop_due(self, until: float) -> list[Any]:
        self.calls.append(("pop_due", until))
        return []


def test_a_wake_sends_what_is_due_within_the_window_or_everything_while_draining() -> None:
    pacer: Any = FakePacer()
    emission.to_send(pacer, 10.0, draining=False)
    emission.to_send(pacer, 10.0, draining=True)
    assert pacer.calls == [("pop_due", 10.0 + WINDOW_S), ("flush", 10.0)]


def test_keepalive_is_due_when_the_idle_time_ends_within_the_window() -> None:
    assert emission.keepalive_due(now=14.0, last_send=10.0, keepalive_s=4.0)
    assert emission.keepalive_due(now=14.0 - WINDOW_S, last_send=10.0, keepalive_s=4.0)
    assert not emission.keepalive_due(now=13.99, last_send=10.0, keepalive_s=4.0)
    assert not emission.keepalive_due(now=100.0, last_send=10.0, keepalive_s=0.0)  # off


@pytest.mark.parametrize(("next_due", "holding", "awaiting", "last_send", "keepalive", "wake"), [
    (10.2, False, False, 9.0, 4.0, 10.2),  # nothing held: the next due time
    (None, False, False, 9.0, 4.0, None),  # the end is in: nothing to wake for
    (None, False, True, 9.0, 4.0, 10.0 + MAX_SLEEP_S),  # waiting on the upstream: look again
    (15.0, True, True, 9.0, 0.0, 10.0 + MAX_SLEEP_S),  # holding: never longer than MAX_SLEEP_S
    (15.0, True, True, 9.5, 1.0, 10.5),  # holding: by the keep-alive time
    (15.0, True, True, 8.0, 1.0, 10.0 + MAX_SLEEP_S),  # a keep-alive time already past is no cap
    (10.3, True, True, 9.5, 1.0, 10.3),  # due before both caps
    (None, True, False, 9.5, 1.0, 10.5),  # holding a partial event: the keep-alive time
])
def test_next_wake(next_due: float | None, holding: bool, awaiting: bool, last_send: float,
                   keepalive: float, wake: float | None) -> None:
    assert emission.next_wake(10.0, next_due, holding=holding, awaiting_upstream=awaiting,
                              last_send=last_send, keepalive_s=keepalive) == wake


def test_a_timer_on_its_way_no_later_than_the_wake_is_enough() -> None:
    assert emission.needs_timer(10.0, None)
    assert emission.needs_timer(10.0, 10.5)
    assert not emission.needs_timer(10.0, 10.0)
    assert not emission.needs_timer(10.0, 9.5)


def test_timers_are_set_early_and_earlier_still_for_long_sleeps() -> None:
    assert emission.timer_delay(10.002, 10.0) == pytest.approx(0.002 - EARLY_S)
    assert emission.timer_delay(10.4, 10.0) == pytest.approx(0.4 - EARLY_S - LONG_SLEEP_EARLY_S)
    assert emission.timer_delay(10.0, 10.0) == 0.0
    assert emission.timer_delay(9.0, 10.0) == 0.0  # overdue: at once


@given(st.floats(0.0, 30.0), st.floats(0.0, 0.0011))
def test_a_timer_that_fires_when_asked_or_up_to_a_millisecond_late_finds_its_wake_due(
    ahead: float, late: float
) -> None:
    """The window covers the head start a timer is given: a wake never comes too early to
    send, so it never re-arms for the fraction of a millisecond epoll cannot sleep."""
    now = 100.0
    wake = now + ahead
    fired = now + emission.timer_delay(wake, now) + late
    assert fired + WINDOW_S >= wake


def test_a_wake_before_the_window_sleeps_until_it_is_in_it() -> None:
    assert emission.until_sendable(10.01, 10.0) == pytest.approx(0.01 - WINDOW_S)
    assert emission.until_sendable(10.0 + WINDOW_S, 10.0) == 0.0
    assert emission.until_sendable(9.0, 10.0) == 0.0


@given(st.floats(0.0, 1e6), st.floats(0.0, 0.0011))
def test_a_shared_timer_fires_on_its_grid_point_within_the_head_start_and_finds_its_wake_due(
    wake: float, late: float
) -> None:
    """Every stream due within one grid step shares one timer; it fires between EARLY_S and
    WINDOW_S before the wake (an extra tenth of a millisecond of float rounding aside), so
    firing when asked or up to a millisecond late it is never too early to send."""
    at = emission.shared_timer_at(wake)
    assert wake - WINDOW_S <= at <= wake - EARLY_S + 1e-9
    assert emission.too_early(wake, at + late, draining=False) is None
    step = WINDOW_S - EARLY_S
    assert emission.shared_timer_at(at + EARLY_S + step / 2) in (at, at + step)


def test_wakes_within_one_grid_step_share_a_timer_and_the_next_step_has_its_own() -> None:
    step = WINDOW_S - EARLY_S
    at = emission.shared_timer_at(10.0)
    assert emission.shared_timer_at(at + WINDOW_S) == at
    assert emission.shared_timer_at(at + EARLY_S + 1e-7) == at
    assert emission.shared_timer_at(at + WINDOW_S + 1e-6) == pytest.approx(at + step)


def test_a_turns_parse_batch_is_shared_by_its_streams_and_none_when_the_loop_is_behind() -> None:
    steps = emission.PARSE_BATCH_STEPS
    assert emission.batch_steps(0.0, 1) == steps
    assert emission.batch_steps(0.0005, 4) == steps // 4
    assert emission.batch_steps(0.0, 10 * steps) == 0  # a crowded turn: what falls due soon only
    assert emission.batch_steps(emission.PARSE_BATCH_LATE_S, 1) == steps
    assert emission.batch_steps(emission.PARSE_BATCH_LATE_S + 0.0001, 1) == 0
