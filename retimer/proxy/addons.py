"""retimer's mitmproxy addons, in order: the one list `retimer` and `mitmdump -s addons/retimer.py`
(or mitmweb) both load, so the two run the same addons."""

from __future__ import annotations

from typing import Any

from retimer.proxy import bridge, patches
from retimer.proxy.addon import Retimer
from retimer.proxy.bridge import PacingBridge
from retimer.proxy.bridge.pacing import check_internals
from retimer.proxy.cache_addon import ResponseCache
from retimer.proxy.cassette_addon import Cassettes
from retimer.proxy.health import HealthCheck
from retimer.proxy.pac import PacServer
from retimer.proxy.safety import Safety
from retimer.proxy.study.addon import Study
from retimer.proxy.study.page import StudyPage
from retimer.proxy.tunnels import LoopbackTunnels
from retimer.proxy.upstream_notice import UpstreamBoundNotice
from retimer.records.writer import RecordLog


def install() -> PacingBridge:
    """Put retimer into mitmproxy, once per process: check the private names it relies on
    (`patches.InternalsMissing`, one line, before anything changes), install the patches (hook
    dispatch) and the pacing bridge; return the bridge. Later calls return the same bridge."""
    check_internals()  # the bridge's names, before the patches change anything
    patches.install()
    return bridge.install()


def retimer_addons(retimer: Retimer | None = None) -> list[Any]:
    """HealthCheck (answers a balancer's `GET http://retimer/health` before anything else, 503
    while Retimer drains),
    Retimer (pacing, records), Safety (bounds, keep-alives, graceful shutdown), Study (before
    the cache: it answers the rating page itself), StudyPage (the hosted study page, after the
    Study whose design it serves), Cassettes (before the cache: a replayed call is the
    cassette's), ResponseCache, PacServer, LoopbackTunnels (a warning when
HTTPS to loopback passes untimed) and UpstreamBoundNotice, in the order
    mitmproxy calls them. Pass `retimer` to keep a handle on it (the live view reads it)."""
    if retimer is None:
        retimer = Retimer(install())
    def records() -> RecordLog | None:
        return retimer.log

    study = Study(records)
    return [HealthCheck(retimer.is_draining), retimer, Safety(retimer), study, StudyPage(study, records),
            Cassettes(), ResponseCache(), PacServer(), LoopbackTunnels(), UpstreamBoundNotice()]
