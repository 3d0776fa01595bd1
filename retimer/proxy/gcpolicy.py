"""When Python's cycle collector may make a full pass: at start-up and while no stream plays.

Why: a full (generation 2) collection walks every tracked object in the process and, measured in
bench/ (BENCHMARKS.md), took 13-18 ms of CPU once per ~150 streams, stalling every stream that
was playing. So after start-up everything loaded is frozen (out of every later pass), automatic
full passes are switched off (young passes stay: they are short and free most garbage), and the
full pass runs when the proxy is idle: no stream in flight and no request for a short quiet
spell. A proxy that is never idle still gets one every BUSY_FULL_PASS_S, so the reference
cycles finished flows leave behind cannot pile up for ever.
"""

from __future__ import annotations

import gc
import time

__all__ = ["BUSY_FULL_PASS_S", "IDLE_AFTER_S", "NO_AUTOMATIC_FULL_PASS", "FullPasses"]

IDLE_AFTER_S = 0.2  # quiet this long (no request, no stream) before the idle full pass
BUSY_FULL_PASS_S = 300.0  # a proxy busy this long without an idle moment gets one anyway
NO_AUTOMATIC_FULL_PASS = 2**30  # gen-2 threshold: young passes never escalate to a full one


class FullPasses:
    """The process's full collections: frozen start-up, none automatic, the rest on our word."""

    def __init__(self) -> None:
        self.last = time.monotonic()  # when the last full pass ran
        self.passes = 0  # full passes run by this policy (tests, the soak)

    def start(self) -> None:
        """Start-up is done: collect, freeze what is left, and stop automatic full passes."""
        gc.collect()
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_PASS)
        self.last = time.monotonic()

    def collect(self) -> None:
        """A full pass now (call only where a pause costs nothing: nothing is playing)."""
        gc.collect()
        self.passes += 1
        self.last = time.monotonic()

    def overdue(self, now: float) -> bool:
        """No full pass for BUSY_FULL_PASS_S: one is due even though streams play."""
        return now - self.last >= BUSY_FULL_PASS_S
