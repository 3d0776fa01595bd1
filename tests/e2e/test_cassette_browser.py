"""docs/cli.md's Playwright example, run: a streaming chat UI in headless Chromium, its API
calls through retimer in reverse mode. Its session is recorded once against an upstream, then
replayed with the upstream gone, as a front-end developer's CI would, at a slow profile (the
answer grows on screen token by token, no sooner than the profile allows) and at the fastest
one; the text on the page is the recorded answer both times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.paths import SUPPORT
from tests.support.proxy import RetimerProxy, free_port
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

ANSWER = ("The release adds session cassettes: record an agent's task once, then replay it "
          "offline at any speed, with every call answered from the cassette and each delta "
          "paced by the profile you choose, so a streaming interface can be tried slow and fast.")
PAGE = (SUPPORT / "pages" / "chat.html").read_text()
SLOW = ("--profile", "gpt-5", "--ttft", "400ms", "--tps", "40", "--jitter", "0")
FASTEST = ("--profile", "fastest", "--tps", "15000", "--ttft", "50ms", "--jitter", "0")


def chat(browser: Any, proxy: RetimerProxy, shot: Path | None = None) -> tuple[str, list[list[float]]]:
    """Open the page on retimer's origin, send, wait for the whole answer: (text, updates)."""
    page = browser.new_page()
    try:
        origin = f"http://127.0.0.1:{proxy.port}"
        page.route(f"{origin}/chat", lambda route: route.fulfill(body=PAGE, content_type="text/html"))
        page.goto(f"{origin}/chat")
        page.click("#send")
        if shot is not None:  # mid-stream, as a person watching it would see it
            page.wait_for_function("window.updates.length >= 3", timeout=30_000)
            page.screenshot(path=str(shot))
        page.wait_for_function("document.getElementById('state').textContent === 'done'",
                               timeout=60_000)
        return page.inner_text("#answer"), page.evaluate("window.updates")
    finally:
        page.close()


def test_a_streaming_ui_replays_its_recorded_answer_slow_and_fast(chromium: Any, tmp_path: Path) -> None:
    cassette = tmp_path / "cassette"
    with FakeLLM(make_openai_stream(ANSWER, words_per_chunk=1)) as fake:
        with RetimerProxy(tmp_path / "rec", "--quiet", *FASTEST, "--upstream", fake.url,
                          "--record", str(cassette)) as proxy:
            recorded, _ = chat(chromium, proxy)
            proxy.records(1)
        asked = len(fake.requests)
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens: the replay has no upstream
    with RetimerProxy(tmp_path / "slow", "--quiet", *SLOW, "--upstream", gone,
                      "--replay", str(cassette)) as proxy:
        slow, updates = chat(chromium, proxy, shot=tmp_path / "mid-stream.png")
        (record,) = proxy.records(1)
    with RetimerProxy(tmp_path / "fast", "--quiet", *FASTEST, "--upstream", gone,
                      "--replay", str(cassette)) as proxy:
        fast, _ = chat(chromium, proxy)
    assert asked == 1 and recorded == slow == fast == ANSWER
    assert record["cassette"]["match"] == "replayed"
    # slow: the answer grew on screen over many updates, none before the profile's first token,
    # and the whole of it no sooner than TTFT + (tokens - 1) / rate (a loaded machine is later)
    tokens = record["emitted"]["tokens"]
    assert len(updates) >= 10 and updates[-1][1] == len(ANSWER)
    assert updates[0][0] >= 400 - 5
    assert updates[-1][0] >= 400 + (tokens - 1) / 40 * 1000 - 25
    assert (tmp_path / "mid-stream.png").stat().st_size > 1000
