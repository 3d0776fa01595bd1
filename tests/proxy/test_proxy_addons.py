"""`retimer` and `mitmdump -s addons/retimer.py` load the same retimer addons, in the same order."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.support.inproc_proxy import InProcessProxy
from tests.support.paths import ROOT

SCRIPT = ROOT / "addons" / "retimer.py"
PACKAGED = ROOT / "retimer" / "addon_script.py"  # `retimer addon`


def script_addons(script: Path = SCRIPT) -> list[Any]:
    """The `addons` list of an addon script, loaded as mitmproxy loads a script."""
    spec = importlib.util.spec_from_file_location(f"__mitmproxy_script__.{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.addons)


@pytest.mark.parametrize("script", [SCRIPT, PACKAGED], ids=["checkout", "package"])
def test_the_retimer_command_and_the_mitmdump_script_load_the_same_addons(tmp_path: Path, script: Path) -> None:
    with InProcessProxy(tmp_path) as proxy:
        chain = proxy.call(lambda: list(proxy.master.addons.chain))
    command = [type(a) for a in chain if type(a).__module__.startswith("retimer.")]
    loaded = [type(a) for a in script_addons(script)]
    assert command == loaded
    assert [c.__name__ for c in loaded] == ["HealthCheck", "Retimer", "Safety", "Study", "StudyPage", "Cassettes",
                                             "ResponseCache", "PacServer", "LoopbackTunnels",
                                             "UpstreamBoundNotice"]


def test_a_flows_request_body_is_parsed_once() -> None:
    """The study, the cache key, the adapter lookup and the prompt estimate share one parse of a
    flow's body; a body another addon changed is parsed anew."""
    from mitmproxy.test import tflow

    from retimer.proxy.flows import request_body
    from retimer.wire.protocols.base import RequestShape

    flow = tflow.tflow()
    flow.request.content = b'{"model": "m", "stream": true}'
    first = request_body(flow)
    assert request_body(flow) is first and first.model == "m" and first.stream
    shape = RequestShape.of_body("POST", "h", "/", {}, first)
    assert shape.parsed_body is first and shape.body == first.raw
    flow.request.content = b'{"model": "n"}'
    again = request_body(flow)
    assert again is not first and again.model == "n"


def test_the_packaged_script_builds_no_addons_when_imported() -> None:
    """mitmproxy-addon-launcher imports the entry point's module only to learn its path: that
    import must not build a second set of addons."""
    import retimer.addon_script

    assert not hasattr(retimer.addon_script, "addons")
    assert Path(retimer.addon_script.__file__) == PACKAGED
