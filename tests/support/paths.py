"""Where things are, for tests and bench alike: named once so a test module can move between tiers."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent  # the checkout
FIXTURES = TESTS / "fixtures"
STREAMS_DIR = FIXTURES / "streams"
SUPPORT = TESTS / "support"
RUN_CLIENTS = SUPPORT / "run_clients"
