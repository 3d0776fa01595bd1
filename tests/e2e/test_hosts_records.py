"""Which hosts are intercepted, and what a record may contain."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from retimer.records.redact import redact_url
from retimer.records.schema import Rating, StreamRecord
from retimer.records.writer import RecordLog
from retimer.wire.hosts import allow_hosts, host_pattern, is_llm_host


@pytest.mark.parametrize(
    ("address", "intercepted"),
    [
        ("api.openai.com:443", True),
        ("chatgpt.com:443", True),
        ("myres.openai.azure.com:443", True),
        ("bedrock-runtime.us-east-1.amazonaws.com:443", True),
        ("bedrock-runtime-fips.us-west-2.amazonaws.com:443", True),
        ("bedrock.us-east-1.amazonaws.com:443", False),  # the control plane, not streams
        ("s3.us-east-1.amazonaws.com:443", False),
        ("europe-west4-aiplatform.googleapis.com:443", True),
        ("aiplatform.googleapis.com:443", True),
        ("evil-aiplatform.googleapis.com.evil.net:443", False),
        ("evilopenai.com:443", False),
        ("api.openai.com.evil.net:443", False),
        ("www.google.com:443", False),
        ("mybank.example:443", False),
    ],
)
def test_default_interception_list(address: str, intercepted: bool) -> None:
    patterns = allow_hosts([])
    assert any(re.search(p, address, re.IGNORECASE) for p in patterns) is intercepted


def test_user_patterns_extend_the_list() -> None:
    patterns = allow_hosts([r"^llm\.internal:"])
    assert any(re.search(p, "llm.internal:8443") for p in patterns)
    assert len(patterns) == len(allow_hosts([])) + 1


def test_is_llm_host() -> None:
    assert is_llm_host("API.Anthropic.com.")
    assert is_llm_host("eastus.openai.azure.com")
    assert not is_llm_host("anthropic.com.evil.net")
    assert is_llm_host("bedrock-runtime.eu-central-1.amazonaws.com")
    assert is_llm_host("us-central1-aiplatform.googleapis.com")
    assert not is_llm_host("bedrock-runtime.eu-central-1.amazonaws.com.evil.net")
    assert re.search(host_pattern("claude.ai"), "claude.ai:443")


def test_secret_query_values_are_redacted() -> None:
    url = "https://generativelanguage.googleapis.com/v1beta/models/x:streamGenerateContent?alt=sse&key=AIzaSECRET"
    out = redact_url(url)
    assert "AIzaSECRET" not in out and "alt=sse" in out and "key=REDACTED" in out
    assert redact_url("https://user:pw@api.x.ai/v1/chat/completions") == "https://api.x.ai/v1/chat/completions"
    assert redact_url("https://api.openai.com/v1/chat/completions") == "https://api.openai.com/v1/chat/completions"


def test_record_log_appends_json_lines(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "sub" / "r.jsonl")
    log.write(StreamRecord(id="1", url="https://é.test/"))
    log.write(Rating(stream="1", scores={"speed": 2}))
    log.close()
    text = (tmp_path / "sub" / "r.jsonl").read_text(encoding="utf-8")
    assert "https://é.test/" in text  # UTF-8, not escaped
    lines = [json.loads(x) for x in text.splitlines()]
    assert [x.get("id") or x.get("stream") for x in lines] == ["1", "1"]
    assert lines[1] == {"type": "rating", "time": "", "stream": "1", "speed": 2}


def test_a_record_log_on_a_full_disk_warns_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = RecordLog("/dev/full")  # Linux's always-full device (CI runs on Linux)
    for i in range(3):
        log.write(StreamRecord(id=str(i), url="x" * 10000))  # more than the file buffer: it fails
    log.close()
    assert log.lost == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("cannot write the record log /dev/full" in w for w in warnings) == 1
    assert any("3 record(s) could not be written" in w for w in warnings)


def test_the_proxy_streams_on_when_its_log_cannot_be_written(tmp_path: Path) -> None:
    import httpx

    from tests.support.proxy import RetimerProxy
    from tests.support.sse_client import sse_text
    from tests.support.stream_bodies import make_openai_stream
    from tests.support.upstream import FakeLLM

    text = "the stream is delivered even when its record cannot be"
    with FakeLLM(make_openai_stream(text), bursts=2) as fake:
        proxy = RetimerProxy(tmp_path, "--profile", "groq", "--jitter", "0", "--log", "/dev/full")
        with proxy, httpx.Client(proxy=proxy.url, timeout=20) as c:
            for _ in range(2):
                r = c.post(fake.url + "/v1/chat/completions", json={"stream": True})
                assert sse_text(r.content) == text
        err = proxy.stderr()
    assert err.count("cannot write the record log /dev/full") == 1, err
    assert "Traceback" not in err
