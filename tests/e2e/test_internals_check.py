"""Putting retimer into mitmproxy is one explicit step (`retimer.proxy.addons.install()`) that
checks every private name the bridge and the patches use before it changes anything: a missing
one is one line naming it, and mitmproxy is left as it was. Each case runs in a fresh
interpreter, as installing is once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = """
import sys
from mitmproxy.addonmanager import AddonManager
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.server import ConnectionHandler
{remove}
originals = (AddonManager.trigger_event, http_layer.HttpStream._handle_event, ConnectionHandler.wakeup)
from retimer.proxy.addons import install
from retimer.proxy.patches import InternalsMissing
try:
    install()
except InternalsMissing as e:
    print("missing:", e)
else:
    print("installed")
now = (AddonManager.trigger_event, http_layer.HttpStream._handle_event, ConnectionHandler.wakeup)
print("patched:", [a is not b for a, b in zip(originals, now)])
"""


def probe(remove: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE.format(remove=remove))],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_with_every_name_present_the_patches_and_the_bridge_go_in() -> None:
    assert probe("") == ["installed", "patched: [True, True, True]"]


@pytest.mark.parametrize(("remove", "named"), [
    ("del http_layer.HttpStream.state_stream_response_body", "HttpStream.state_stream_response_body"),
    ("del AddonManager.invoke_addon", "AddonManager.invoke_addon"),
    ("del ConnectionHandler.server_event", "ConnectionHandler.server_event"),
])
def test_a_missing_name_is_one_line_and_nothing_is_patched(remove: str, named: str) -> None:
    out = probe(remove)
    assert len(out) == 2, out
    assert out[0].startswith("missing: mitmproxy ") and named in out[0]
    assert out[0].endswith("retimer needs mitmproxy >=12.2.3,<13")
    assert out[1] == "patched: [False, False, False]"
