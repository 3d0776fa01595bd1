"""`retimer` and `mitmdump -s addons/retimer.py` load the same retimer addons, in the same order."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tests.inproc_proxy import InProcessProxy

SCRIPT = Path(__file__).resolve().parent.parent / "addons" / "retimer.py"


def script_addons() -> list[Any]:
    """The `addons` list of addons/retimer.py, loaded as mitmproxy loads a script."""
    spec = importlib.util.spec_from_file_location("__mitmproxy_script__.retimer", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.addons)


def test_the_retimer_command_and_the_mitmdump_script_load_the_same_addons(tmp_path: Path) -> None:
    with InProcessProxy(tmp_path) as proxy:
        chain = proxy.call(lambda: list(proxy.master.addons.chain))
    command = [type(a) for a in chain if type(a).__module__.startswith("retimer.")]
    script = [type(a) for a in script_addons()]
    assert command == script
    assert [c.__name__ for c in script] == ["HealthCheck", "Retimer", "Safety", "Study", "ResponseCache", "PacServer"]


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
