"""mitmproxy's hooks, dispatched by retimer's table (retimer.proxy.patches.hooks), and retimer's own
hooks (retimer.proxy.hooks.HookCaller) reach the same addons in the same order with the same error
handling as mitmproxy's own `trigger_event` and `trigger`, and see addons come, go and change."""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy.addonmanager import AddonManager
from mitmproxy.hooks import Hook
from mitmproxy.test import taddons, tflow

from retimer.proxy.addons import install
from retimer.proxy.hooks import HookCaller, RecordHook
from retimer.proxy.patches import hooks as patched_hooks

install()  # as every retimer process does


class Listener:
    def __init__(self, name: str, calls: list[str], fail: BaseException | None = None) -> None:
        self.name = name
        self.calls = calls
        self.fail = fail

    def retimer_record(self, record: dict[str, Any]) -> None:
        self.calls.append(f"{self.name}:{record['n']}")
        if self.fail is not None:
            raise self.fail


class AsyncListener(Listener):
    async def retimer_record(self, record: dict[str, Any]) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.calls.append(f"{self.name}:{record['n']}")


class Silent:
    def __init__(self, name: str) -> None:
        self.name = name


class Odd:
    """A hook name that is not a callable: mitmproxy logs an error; a module: it is skipped."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.retimer_record = value


class Parent:
    """An addon with children, as the script loader is."""

    def __init__(self, name: str, children: list[Any]) -> None:
        self.name = name
        self.addons = children


class ScriptLike:
    """Children from a property that makes a new list on every read, as mitmproxy's Script."""

    def __init__(self, name: str, ns: Any) -> None:
        self.name = name
        self.ns = ns

    @property
    def addons(self) -> list[Any]:
        return [self.ns] if self.ns else []


def dispatch(manager: AddonManager, event: Hook, ours: bool) -> None:
    trigger = AddonManager.trigger_event if ours else patched_hooks.mitmproxy_trigger_event
    asyncio.run(trigger(manager, event))


def both_ways(addons: list[Any], calls: list[str], caplog: pytest.LogCaptureFixture) -> tuple[Any, Any]:
    """(calls, logged errors) by mitmproxy's dispatch, then by retimer's, on one chain."""
    out = []
    with taddons.context() as tctx:
        tctx.master.addons.add(*addons)
        for ours in (False, True):
            calls.clear()
            caplog.clear()
            with caplog.at_level(logging.ERROR):
                dispatch(tctx.master.addons, RecordHook({"n": 1}), ours)
            out.append((list(calls), [r.getMessage().splitlines()[0] for r in caplog.records]))
    return out[0], out[1]


def test_it_is_installed() -> None:
    assert AddonManager.trigger_event is not patched_hooks.mitmproxy_trigger_event


def test_the_same_addons_in_the_same_order_with_children_and_async_hooks(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    chain = [Listener("a", calls), Silent("s"),
             Parent("p", [Listener("c1", calls), Silent("c2"), AsyncListener("c3", calls)]),
             ScriptLike("script", Listener("ns", calls)), Listener("b", calls)]
    theirs, ours = both_ways(chain, calls, caplog)
    assert ours == theirs == (["a:1", "c1:1", "c3:1", "ns:1", "b:1"], [])


def test_errors_are_logged_and_the_rest_run_as_in_mitmproxy(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    chain = [Listener("a", calls, fail=RuntimeError("boom")), Odd("odd", 5),
             Odd("mod", types.ModuleType("retimer_record")),
             Parent("p", [Listener("c1", calls, fail=RuntimeError("child")), Listener("c2", calls)]),
             Listener("b", calls)]
    theirs, ours = both_ways(chain, calls, caplog)
    assert ours == theirs
    assert ours[0] == ["a:1", "c1:1", "b:1"]  # an error ends its top-level addon's turn, not the rest
    assert [m.split(":")[0] for m in ours[1]] == ["Addon error"] * 3
    assert "not callable" in ours[1][1]


def test_addon_halt_stops_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    chain = [Listener("a", calls, fail=exceptions.AddonHalt()), Listener("b", calls)]
    theirs, ours = both_ways(chain, calls, caplog)
    assert ours == theirs == (["a:1"], [])


def test_addons_that_come_go_or_change_are_seen() -> None:
    calls: list[str] = []
    with taddons.context() as tctx:
        manager = tctx.master.addons
        loader = Parent("loader", [Listener("s1", calls), Listener("s2", calls)])
        script = ScriptLike("script", None)
        first = Listener("a", calls)
        manager.add(first, loader, script)

        def round_(n: int) -> list[str]:
            calls.clear()
            dispatch(manager, RecordHook({"n": n}), ours=True)
            return list(calls)

        assert round_(1) == ["a:1", "s1:1", "s2:1"]
        late = Listener("late", calls)
        manager.add(late)
        assert round_(2) == ["a:2", "s1:2", "s2:2", "late:2"]
        manager.remove(late)
        assert round_(3) == ["a:3", "s1:3", "s2:3"]
        loader.addons = loader.addons[::-1]  # a reordered `scripts` option
        assert round_(4) == ["a:4", "s2:4", "s1:4"]
        ns = Listener("ns", calls)
        manager.register(ns)  # a script loads, as Script.loadscript does it
        script.ns = ns
        assert round_(5) == ["a:5", "s2:5", "s1:5", "ns:5"]
        manager.remove(ns)  # and reloads
        ns2 = Listener("ns2", calls)
        manager.register(ns2)
        script.ns = ns2
        assert round_(6) == ["a:6", "s2:6", "s1:6", "ns2:6"]
        first.retimer_record = lambda record: calls.append(f"replaced:{record['n']}")  # type: ignore[method-assign]
        assert round_(7) == ["replaced:7", "s2:7", "s1:7", "ns2:7"]


def test_a_flow_hook_and_its_update_reach_mitmproxy_addons_as_before() -> None:
    """A real flow hook through `handle_lifecycle` (the proxy's way): a mitmproxy addon with
    the hook does its work (`AntiCache` strips the request's cache headers)."""
    from mitmproxy.addons.anticache import AntiCache
    from mitmproxy.proxy.layers.http import HttpRequestHook

    with taddons.context(AntiCache()) as tctx:
        tctx.configure(tctx.master.addons.get("anticache"), anticache=True)
        flow = tflow.tflow()
        flow.request.headers["if-modified-since"] = "x"
        asyncio.run(tctx.master.addons.handle_lifecycle(HttpRequestHook(flow)))
        assert "if-modified-since" not in flow.request.headers


# -- retimer's own hooks (HookCaller), against mitmproxy's synchronous trigger --------------------

def both_ways_sync(addons: list[Any], calls: list[str], n: int = 1) -> tuple[list[str], list[str]]:
    """What mitmproxy's synchronous `trigger` calls, then what `HookCaller` (retimer's own hooks)
    calls, on the same chain."""
    with taddons.context() as tctx:
        tctx.master.addons.add(*addons)
        tctx.master.addons.trigger(RecordHook({"n": n}))
        theirs = list(calls)
        calls.clear()
        HookCaller().trigger(tctx.master.addons, RecordHook({"n": n}))
        return theirs, list(calls)


def test_hook_caller_the_same_addons_in_the_same_order_children_included() -> None:
    calls: list[str] = []
    chain = [Listener("a", calls), Silent("s"), Parent("p", [Listener("c1", calls), Silent("c2")]),
             Listener("b", calls)]
    theirs, ours = both_ways_sync(chain, calls)
    assert ours == theirs == ["a:1", "c1:1", "b:1"]


def test_hook_caller_an_addon_error_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    chain = [Listener("a", calls, fail=RuntimeError("boom")), Listener("b", calls)]
    with caplog.at_level(logging.ERROR):
        theirs, ours = both_ways_sync(chain, calls)
    assert ours == theirs == ["a:1", "b:1"]
    assert sum("Addon error: boom" in r.getMessage() for r in caplog.records) == 2  # once each way


def test_hook_caller_addon_halt_stops_the_rest() -> None:
    calls: list[str] = []
    chain = [Listener("a", calls, fail=exceptions.AddonHalt()), Listener("b", calls)]
    theirs, ours = both_ways_sync(chain, calls)
    assert ours == theirs == ["a:1"]


def test_hook_caller_an_addon_added_or_removed_later_is_seen() -> None:
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
