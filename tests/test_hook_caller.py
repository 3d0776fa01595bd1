"""retimer's hooks reach the same addons, in the same order, with the same error handling, as
mitmproxy's own `AddonManager.trigger` would give them (retimer.proxy.hooks.HookCaller)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from retimer.proxy.hooks import HookCaller, RecordHook


class Listener:
    def __init__(self, name: str, calls: list[str], fail: BaseException | None = None) -> None:
        self.name = name
        self.calls = calls
        self.fail = fail

    def retimer_record(self, record: dict[str, Any]) -> None:
        self.calls.append(f"{self.name}:{record['n']}")
        if self.fail is not None:
            raise self.fail


class Silent:
    def __init__(self, name: str) -> None:
        self.name = name


class Parent:
    """An addon with children, as a loaded script is."""

    def __init__(self, name: str, children: list[Any]) -> None:
        self.name = name
        self.addons = children


def both_ways(addons: list[Any], calls: list[str], n: int = 1) -> tuple[list[str], list[str]]:
    """What mitmproxy's trigger calls, then what HookCaller calls, on the same chain."""
    with taddons.context() as tctx:
        tctx.master.addons.add(*addons)
        tctx.master.addons.trigger(RecordHook({"n": n}))
        theirs = list(calls)
        calls.clear()
        HookCaller().trigger(tctx.master.addons, RecordHook({"n": n}))
        return theirs, list(calls)


def test_the_same_addons_in_the_same_order_children_included() -> None:
    calls: list[str] = []
    chain = [Listener("a", calls), Silent("s"), Parent("p", [Listener("c1", calls), Silent("c2")]),
             Listener("b", calls)]
    theirs, ours = both_ways(chain, calls)
    assert ours == theirs == ["a:1", "c1:1", "b:1"]


def test_an_addon_error_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    chain = [Listener("a", calls, fail=RuntimeError("boom")), Listener("b", calls)]
    with caplog.at_level(logging.ERROR):
        theirs, ours = both_ways(chain, calls)
    assert ours == theirs == ["a:1", "b:1"]
    assert sum("Addon error: boom" in r.getMessage() for r in caplog.records) == 2  # once each way


def test_addon_halt_stops_the_rest() -> None:
    calls: list[str] = []
    chain = [Listener("a", calls, fail=exceptions.AddonHalt()), Listener("b", calls)]
    theirs, ours = both_ways(chain, calls)
    assert ours == theirs == ["a:1"]


def test_an_addon_added_or_removed_later_is_seen() -> None:
    calls: list[str] = []
    caller = HookCaller()
    with taddons.context() as tctx:
        manager = tctx.master.addons
        manager.add(Listener("a", calls))
        caller.trigger(manager, RecordHook({"n": 1}))
        late = Listener("late", calls)
        manager.add(late)
        caller.trigger(manager, RecordHook({"n": 2}))
        manager.remove(late)
        caller.trigger(manager, RecordHook({"n": 3}))
    assert calls == ["a:1", "a:2", "late:2", "a:3"]
