"""Real headless Chromium and Firefox through the real `retimer`, launched as `retimer browser`.

A fake LLM site (HTTPS, its own CA, host `llm.test` mapped to loopback inside mitmproxy by
tests/support/hostmap.py) serves a chat page whose script streams /v1/chat/completions with fetch()
and records performance.now() per read. The browsers get retimer's throwaway profile from
retimer/cli/launch/browser.py (Chromium driven by Playwright on the system binary, Firefox by its own
WebDriver BiDi). The page must see the profile's TTFT and rate and exactly the upstream text.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import statistics
from pathlib import Path
from typing import Any

import pytest

from retimer.cli.launch.browser import Launch, find_browser, prepare_launch
from tests.support.bidi import Firefox
from tests.support.browser_run import (
    INTERCEPT,
    PAGE,
    TEXT,
    run_retimer_browser,
    site,
    token_curve,
)
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.upstream import FakeLLM

TTFT_MS, TPS = 600.0, 40.0
PROFILE = ("--ttft", f"{TTFT_MS:g}ms", "--tps", f"{TPS:g}", "--jitter", "0")
STREAMS = 3  # measured streams per browser; the TTFT check takes their median
pytestmark = [  # the fake LLM site (its requests forgotten before each test) and a proxy, per module
    pytest.mark.fake_llm(openai=TEXT, tls=True, pages={"/": PAGE}, scope="module", clear=True),
    pytest.mark.retimer_proxy(*PROFILE, *INTERCEPT, trust_fake=True, scope="module"),
]


def new_records(proxy: RetimerProxy, before: int, n: int) -> list[dict[str, Any]]:
    """The `n` records logged after the first `before` (the proxy is shared by the module)."""
    records = proxy.records(before + n)[before:]
    assert len(records) == n
    return records


def check_page_results(results: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
    assert [r["protocol"] for r in records] == ["openai-chat"] * len(results)
    ttfts = []
    for result, record in zip(results, records, strict=True):
        assert result["status"] == 200
        assert result["text"] == TEXT and result["rest"] == ""
        assert sum(r["tokens"] for r in result["reads"]) == record["emitted"]["tokens"] > 20
        ttft, rate = token_curve(result)
        assert ttft >= TTFT_MS - 1  # never before the target (1 ms: the page clock's grain)
        assert rate == pytest.approx(TPS, rel=0.05), result["reads"]
        ttfts.append(ttft)
    assert statistics.median(ttfts) == pytest.approx(TTFT_MS, abs=20), ttfts


def playwright_launch(launch: Launch) -> tuple[str, str, list[str]]:
    """retimer's own Chromium command line, split the way Playwright takes it (it adds the
    profile and --headless flags itself and refuses them in `args`)."""
    exe, *args = launch.argv
    profile = next(a.split("=", 1)[1] for a in args if a.startswith("--user-data-dir="))
    rest = [a for a in args if not a.startswith("--user-data-dir=") and a != "--headless"]
    return exe, profile, rest


@pytest.mark.serial  # the page's TTFT and rate within a few % of the profile: a quiet machine
def test_chromium_page_sees_profile_timing(fake: FakeLLM, proxy: RetimerProxy):
    from playwright.sync_api import sync_playwright

    before = len(proxy.records(0, timeout=0))
    launch = prepare_launch("chromium", find_browser("chromium"), proxy.url, proxy.ca_path, None,
                            headless=True)
    exe, profile, args = playwright_launch(launch)
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=exe, args=args, headless=True)
            try:
                page = context.pages[0] if context.pages else context.new_page()
                page.goto(site(fake))  # raises on a certificate error: the SPKI trust works
                page.evaluate("warmUp()")
                results = [page.evaluate("streamOnce()") for _ in range(STREAMS)]
            finally:
                context.close()
    finally:
        shutil.rmtree(launch.workdir, ignore_errors=True)
    check_page_results(results, new_records(proxy, before, STREAMS))
    (page_request,) = [r for r in fake.requests if r.route == "page"]
    assert page_request.headers["host"] == f"llm.test:{fake.port}"


@pytest.mark.serial  # the page's TTFT and rate within a few % of the profile: a quiet machine
def test_firefox_page_sees_profile_timing(fake: FakeLLM, proxy: RetimerProxy):
    before = len(proxy.records(0, timeout=0))
    launch = prepare_launch("firefox", find_browser("firefox"), proxy.url, proxy.ca_path, None,
                            headless=True)
    try:
        with Firefox([*launch.argv, "--remote-debugging-port", "0", "about:blank"]) as firefox:
            firefox.navigate(site(fake))
            # an untrusted certificate would leave Firefox on its error page, without these
            firefox.evaluate_json("warmUp()")
            results = [firefox.evaluate_json("streamOnce()") for _ in range(STREAMS)]
    finally:
        shutil.rmtree(launch.workdir, ignore_errors=True)
    check_page_results(results, new_records(proxy, before, STREAMS))


# --- the real `retimer browser` command line ------------------------------------------------


def test_retimer_browser_command_starts_proxy_and_cleans_up(tmp_path: Path, fake: FakeLLM):
    log = tmp_path / "records.jsonl"
    done, report = run_retimer_browser(
        tmp_path, fake, "chromium", "--listen-port", "0",
        "--set", f"confdir={tmp_path / 'confdir'}", "--log", str(log),
        "--ttft", "200ms", "--tps", "200", "--jitter", "0", *INTERCEPT,
        "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}", stop=signal.SIGINT)
    assert done.returncode == 0, done.stderr
    assert report["text"] == TEXT
    (record,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert record["emitted"]["tokens"] == sum(r["tokens"] for r in report["reads"])
    assert token_curve(report)[0] >= 200 - 1
    opened = re.search(r"opening Chromium through http://127\.0\.0\.1:(\d+) ", done.stdout)
    assert opened and int(opened.group(1)) > 0, done.stdout  # the port --listen-port 0 got


def test_retimer_browser_uses_a_proxy_already_listening(tmp_path: Path, fake: FakeLLM,
                                                        proxy: RetimerProxy):
    before = len(proxy.records(0, timeout=0))
    done, report = run_retimer_browser(
        tmp_path, fake, "chromium", "--listen-port", str(proxy.port),
        "--set", f"confdir={proxy.confdir}", stop=signal.SIGTERM)
    assert done.returncode == 0, done.stderr
    assert f"using the retimer already on {proxy.url}" in done.stderr
    assert report["text"] == TEXT
    (record,) = new_records(proxy, before, 1)  # re-timed by the running proxy, its profile
    assert record["target"] == {"ttft_ms": TTFT_MS, "tps": TPS}
    assert token_curve(report)[0] >= TTFT_MS - 1


def test_retimer_browser_refuses_a_running_retimer_with_another_ca(tmp_path: Path,
                                                                   proxy: RetimerProxy):
    """The browser would trust the wrong CA: say so instead of opening it."""
    from mitmproxy.certs import CertStore

    CertStore.from_store(tmp_path, "mitmproxy", 2048)  # another CA
    done = run_cli("browser", "chromium", "--headless", "--listen-port", str(proxy.port),
                   "--set", f"confdir={tmp_path}")
    assert done.returncode == 2
    assert done.stderr == (f"retimer: error: the retimer on 127.0.0.1:{proxy.port} uses another "
                           f"CA than {tmp_path}; pass its --set confdir=DIR\n")
