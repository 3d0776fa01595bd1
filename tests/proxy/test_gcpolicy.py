"""The GC policy: frozen start-up, no automatic full pass while streams play, full passes on
the proxy's word (idle, or overdue). Checked on the collector's own state and callbacks."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from mitmproxy.test import taddons

from retimer.proxy.addon import Retimer
from retimer.proxy.addons import install
from retimer.proxy.gcpolicy import BUSY_FULL_PASS_S, NO_AUTOMATIC_FULL_PASS, FullPasses


@pytest.fixture
def full_passes_seen() -> Iterator[list[int]]:
    """Counts the full (generation 2) passes that start; restores the collector afterwards."""
    threshold = gc.get_threshold()
    seen: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
        gc.unfreeze()


def make_long_lived_cycles(n: int) -> list[Any]:
    """Objects that survive young passes (the kind a full pass is triggered by) and cycles."""
    keep = []
    for i in range(n):
        a: list[Any] = [i]
        a.append(a)  # a reference cycle
        keep.append(a)
    return keep


def test_without_the_policy_the_same_work_triggers_full_passes(full_passes_seen: list[int]) -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    kept = make_long_lived_cycles(300_000)
    assert full_passes_seen, "control: this workload makes Python run a full pass"
    del kept


def test_after_start_up_no_full_pass_runs_by_itself(full_passes_seen: list[int]) -> None:
    gc.set_threshold(700, 10, 10)
    policy = FullPasses()
    policy.start()
    assert gc.get_freeze_count() > 0  # start-up's objects are out of every later pass
    assert gc.get_threshold()[2] == NO_AUTOMATIC_FULL_PASS
    full_passes_seen.clear()  # start() itself made one
    kept = make_long_lived_cycles(300_000)
    assert not full_passes_seen
    policy.collect()
    assert len(full_passes_seen) == 1 and policy.passes == 1
    del kept


def test_a_busy_proxy_gets_an_overdue_full_pass() -> None:
    policy = FullPasses()
    assert not policy.overdue(policy.last + BUSY_FULL_PASS_S / 2)
    assert policy.overdue(policy.last + BUSY_FULL_PASS_S)


def test_the_addon_applies_the_policy_when_the_proxy_runs(full_passes_seen: list[int]) -> None:
    gc.set_threshold(700, 10, 10)
    addon = Retimer(install())
    with taddons.context(addon):  # running() looks for mitmproxy's proxy server in ctx.master
        addon.running()
    assert gc.get_threshold()[2] == NO_AUTOMATIC_FULL_PASS
    assert gc.get_freeze_count() > 0
