"""A notice when a run's live streams are mostly upstream-bound: retimer cannot make a stream
faster than its upstream sends it, and a session cassette (`--record`, then `--replay`) can.

An addon of its own (last in `retimer.proxy.addons`): it reads the records the Retimer addon
makes (`retimer_record`) and says it once per run.
"""

from __future__ import annotations

import logging

from retimer.records.notices import UPSTREAM_BOUND
from retimer.records.schema import StreamRecord

logger = logging.getLogger("retimer")

NOTICE_AFTER = 5  # streams seen before a run is called mostly upstream-bound


class UpstreamBoundNotice:
    """Says once, when most of a run's streams so far were upstream-bound (and at least
    NOTICE_AFTER were seen), that a live stream cannot be made faster than its upstream sends
    it, and how to feel that speed anyway. Study streams are left to the study's own warning
    (it names no condition), replayed ones cannot be upstream-bound."""

    def __init__(self) -> None:
        self.seen = 0
        self.bound = 0
        self.said = False

    def retimer_record(self, record: StreamRecord) -> None:
        if self.said or record.study is not None or record.upstream_bound is None:
            return
        self.seen += 1
        self.bound += record.upstream_bound
        if self.seen >= NOTICE_AFTER and self.bound * 2 > self.seen:
            self.said = True
            logger.warning(
                f"retimer: {self.bound} of the {self.seen} streams so far were upstream-bound: "
                f"the upstream is slower than the profile, and {UPSTREAM_BOUND}. "
                "To feel this speed, record the session once "
                "(--record DIR) and replay it (--replay DIR); see docs/cli.md.")
