"""The demo addon (`retimer demo`): each pane's request names its pane in a header, and this
addon hands the Retimer addon that pane's profile (`hooks.PROFILE_KEY`), so every pane is one
flow through the real proxy with its own profile. It keeps the demo's records (the timing each
stream drew and what the proxy emitted) for the page and the tests to read back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from mitmproxy import http

from retimer.profile.model import Profile
from retimer.proxy.hooks import PROFILE_KEY, RECORD_KEY
from retimer.records.schema import StreamRecord

PANE_HEADER = "x-retimer-demo-pane"  # the pane's index in the page
RUN_HEADER = "x-retimer-demo-run"  # one play of the page (all panes, or one pane's replay)
WARMUP_HEADER = "x-retimer-demo-warmup"  # the demo's own first stream, before the page opens
KEEP_RUNS = 50  # runs whose records the page may still ask for


class DemoAddon:
    """Picks each demo flow's profile by its pane header and keeps the demo's records."""

    name = "retimer_demo"

    def __init__(self, profiles: Sequence[Profile], warmup: Profile) -> None:
        self.profiles = list(profiles)
        self.warmup = warmup  # the stream the demo sends itself first, so no pane pays first-use costs
        self.runs: OrderedDict[str, dict[int, dict[str, object]]] = OrderedDict()

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.headers.get(WARMUP_HEADER) == "1":
            flow.metadata[PROFILE_KEY] = self.warmup
            flow.metadata[RECORD_KEY] = {"demo_warmup": True}
            return
        value = flow.request.headers.get(PANE_HEADER)
        if value is None:
            return
        if not value.isdigit() or int(value) >= len(self.profiles):
            flow.response = http.Response.make(400, b"no such pane\n", {"content-type": "text/plain"})
            return
        pane = int(value)
        run = flow.request.headers.get(RUN_HEADER, "")[:64]
        flow.metadata[PROFILE_KEY] = self.profiles[pane]
        flow.metadata[RECORD_KEY] = {"demo_pane": pane, "demo_run": run}

    def retimer_record(self, record: StreamRecord) -> None:
        demo = record.demo
        if demo is None or demo.pane is None:
            return
        run = demo.run or ""
        self.runs.setdefault(run, {})[demo.pane] = record.to_json()  # what the page reads
        self.runs.move_to_end(run)
        while len(self.runs) > KEEP_RUNS:
            self.runs.popitem(last=False)

    def records(self, run: str) -> list[dict[str, object]]:
        """The finished streams of one run, by pane."""
        return [r for _, r in sorted(self.runs.get(run, {}).items())]
