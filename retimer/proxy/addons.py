"""retimer's mitmproxy addons, in order: the one list `retimer` and `mitmdump -s addons/retimer.py`
(or mitmweb) both load, so the two run the same addons."""

from __future__ import annotations

from typing import Any

from retimer.proxy.addon import Retimer
from retimer.proxy.cache_addon import ResponseCache
from retimer.proxy.health import HealthCheck
from retimer.proxy.pac import PacServer
from retimer.proxy.safety import Safety
from retimer.proxy.study_addon import Study


def retimer_addons(retimer: Retimer | None = None) -> list[Any]:
    """HealthCheck (answers a balancer's `GET http://retimer/health` before anything else, 503
    while Retimer drains),
    Retimer (pacing, records), Safety (bounds, keep-alives, graceful shutdown), Study (before
    the cache: it answers the rating page itself), ResponseCache and PacServer, in the order
    mitmproxy calls them. Pass `retimer` to keep a handle on it (the live view reads it)."""
    if retimer is None:
        retimer = Retimer()
    return [HealthCheck(retimer.is_draining), retimer, Safety(retimer), Study(retimer), ResponseCache(), PacServer()]
