"""A study proxy and its study file, for the tests of hosted studies, workers and the balancer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.proxy import RetimerProxy
from tests.support.upstream import FakeLLM

TEXT = "Studies keep the words and change only the time between them, blinded. " * 2


class StudyProxy(RetimerProxy):
    """`retimer study STUDY --participant ID` with RetimerProxy's port, confdir and log."""

    def __init__(self, tmp: Path, study: Path, participant: str, *args: str) -> None:
        super().__init__(tmp, *args)
        self.args = ["study", str(study), "--participant", participant, *self.args]


FAST = {"profile": "gpt-5", "jitter": 0}


CONDITIONS = [{"name": "zebra", **FAST, "ttft": "40ms", "tps": 900},
              {"name": "quokka", **FAST, "ttft": "90ms", "tps": 1200},
              {"name": "okapi", **FAST, "ttft": "140ms", "tps": 1500}]


def write_study(tmp: Path, **kw: Any) -> Path:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "blind-test", "seed": 2026, "unit": "request",
                                    "counterbalancing": "latin-square",
                                    "conditions": CONDITIONS, **kw}))
    return path


def chat(proxy_url: str, fake: FakeLLM, text: str = "hi") -> httpx.Response:
    with httpx.Client(proxy=proxy_url, timeout=30) as client:
        r = client.post(fake.url + "/v1/chat/completions", json={
            "model": "m", "stream": True, "messages": [{"role": "user", "content": text}]})
        r.read()
        return r


class ManyProxy(RetimerProxy):
    """`retimer study STUDY --upstream URL` with no --participant: every request names its own."""

    def __init__(self, tmp: Path, study: Path, *args: str) -> None:
        super().__init__(tmp, *args)
        self.args = ["study", str(study), *self.args]
