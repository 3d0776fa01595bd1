"""`retimer report`: one self-contained HTML page from a record log, checked in real Chromium.

The records come from the real proxy re-timing recorded fixtures; a study's fields
(condition, participant, rating) and hostile strings are then added to some, as a study log
or a malicious upstream URL would carry them.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from retimer.report.page import build, render_html
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.records import streams
from tests.support.upstream import FakeLLM

CHROMIUM = "/usr/bin/chromium"
FIXTURES = {
    "openai-chat/gpt4o-text-include-usage.sse": "/v1/chat/completions",
    "groq/groq-tool-call-x-groq-usage.sse": "/v1/chat/completions",
    "mistral/sk-mistral-after-function-call.sse": "/v1/chat/completions",
    "anthropic/llm-anthropic-sonnet45-thinking-signature.sse": "/v1/messages",
    "anthropic/pydantic-ai-redacted-thinking-stream.sse": "/v1/messages",
}
EVIL = '"><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


@pytest.fixture(scope="module")
def fixture_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The fixture streams re-timed by one real proxy: their records."""
    tmp = tmp_path_factory.mktemp("report-proxy")
    with FakeLLM(per_event_gap=0.004, first_delay=0.02) as fake, \
            RetimerProxy(tmp, "--profile", "groq", "--ttft", "80ms", "--tps", "500") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as client:
            for fixture, path in FIXTURES.items():
                r = client.post(fake.url + path, json={"stream": True},
                                headers={"x-fake-fixture": fixture})
                assert r.status_code == 200
        recs = proxy.records(len(FIXTURES))
    assert len(recs) == len(FIXTURES) and all(r["trace"]["emitted"]["n"] for r in recs)
    return recs


def _study_log(records: list[dict], path: Path) -> list[dict]:
    """The records with a study's fields, a hostile URL and profile name, one passthrough,
    and rating lines as retimer.study.ratings writes them (stream 1 rated twice: the later counts)."""
    out, ratings = [], []
    for i, r in enumerate(records):
        r = json.loads(json.dumps(r))
        r.update(study="s", condition="fast" if i % 2 else "slow <b>x</b>", participant=f"p{i % 2}")
        out.append(r)
        ratings.append({"type": "rating", "stream": r["id"], "speed": 2 + 2 * (i % 2),
                        "quality": None})
    ratings.append({"type": "rating", "stream": out[1]["id"], "speed": 6, "quality": 7})
    out[0]["url"] = "https://evil.test/v1/chat/completions?q=" + EVIL
    out[1]["profile"] = EVIL
    out[2]["target"] = {"ttft_ms": None, "tps": None}  # a passthrough stream: no schedule
    lines = [*out, *ratings, {"type": "study-start"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + "not json\n")
    return out


class _Elements(HTMLParser):
    """The tags and attribute names a browser would see."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs |= {name for name, _ in attrs}


def _not_blank(png: bytes, min_std: float = 10.0) -> Image.Image:
    img = Image.open(io.BytesIO(png)).convert("RGB")
    px = np.asarray(img, dtype=float)
    assert px.std() > min_std, f"the image looks blank (std {px.std():.1f})"
    assert (px.min(axis=2) < 200).mean() > 0.01, "almost no ink on the image"
    return img


def _blue_pixels(img: Image.Image) -> int:
    """Pixels close to the client line's colour (#2a6fdb)."""
    px = np.asarray(img, dtype=int)
    return int((np.abs(px - np.array([0x2A, 0x6F, 0xDB])).sum(axis=2) < 60).sum())


@pytest.fixture(scope="module")
def report(fixture_records: list[dict], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    tmp = tmp_path_factory.mktemp("report")
    log = tmp / "study.jsonl"
    recs = _study_log(fixture_records, log)
    html, png_dir = tmp / "report.html", tmp / "png"
    done = run_cli("report", str(log), "-o", str(html), "--png", str(png_dir))
    assert done.returncode == 0, done.stderr
    yield recs, html, png_dir


def test_report_renders_in_chromium(report: tuple) -> None:
    from playwright.sync_api import sync_playwright

    recs, html, _ = report
    url = html.resolve().as_uri()
    console, errors, requests = [], [], []
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url)
            page.wait_for_load_state("load")
            counts = page.evaluate("""() => ({
                charts: document.querySelectorAll('svg.stream').length,
                client: document.querySelectorAll('svg.stream path.s-client').length,
                upstream: document.querySelectorAll('svg.stream path.s-upstream').length,
                target: document.querySelectorAll('svg.stream path.s-target').length,
                rows: document.querySelectorAll('table.streams tr.stream').length,
                groups: Object.fromEntries(
                    [...document.querySelectorAll('table.groups tr.group')].map(tr =>
                        [tr.cells[0].textContent, tr.cells[tr.cells.length - 1].textContent])),
                dists: document.querySelectorAll('svg.dist').length,
                scripts: document.scripts.length, pwned: window.__pwned ?? null,
                urls: [...document.querySelectorAll('td.url')].map(td => td.textContent),
            })""")
            shot = page.screenshot(full_page=True)
            chart_shot = page.locator("svg.stream").first.screenshot()
        finally:
            browser.close()
    n = len(recs)
    assert errors == [] and [m for m in console if m.startswith("error")] == []
    assert requests == [url], "the report fetched something: it must be self-contained"
    assert counts["charts"] == n and counts["rows"] == n
    assert counts["client"] == n and counts["upstream"] == n
    assert counts["target"] == n - 1  # the passthrough stream has no schedule
    # shown as text, not markup; with the mean of each stream's latest rating
    assert counts["groups"] == {"fast": "quality 7.00 (n=1), speed 5.00 (n=2)",
                                "slow <b>x</b>": "speed 2.00 (n=3)"}
    assert counts["dists"] == 3
    assert counts["scripts"] == 0 and counts["pwned"] is None
    assert counts["urls"][0].endswith(EVIL)  # the hostile URL is shown, escaped, inert
    _not_blank(shot)
    assert _blue_pixels(_not_blank(chart_shot)) > 30  # the client's staircase is drawn


def test_report_html_is_self_contained_and_escaped(report: tuple) -> None:
    recs, html, _ = report
    text = html.read_text()
    parsed = _Elements()
    parsed.feed(text)
    assert parsed.tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p",
                           "ul", "li", "b", "table", "thead", "tbody", "tr", "th", "td", "div",
                           "span", "i", "svg", "g", "text", "rect", "line", "path"}
    bad = {a for a in parsed.attrs if a in ("src", "href") or a.startswith("on")}
    assert not bad  # nothing to fetch, nothing to run
    assert "url(" not in text and "@import" not in text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
    assert "1 unreadable lines skipped" in text
    assert text.count('<svg class="stream"') == len(recs)


def test_pngs_are_written_and_not_blank(report: tuple) -> None:
    recs, _, png_dir = report
    names = sorted(p.name for p in png_dir.iterdir())
    assert names == ["rate.png", "streams-1.png", "ttft.png", "upstream-bound.png", "whatif.png"]
    for name in names:
        img = _not_blank((png_dir / name).read_bytes())
        assert img.width > 300 and img.height > 100
    assert _blue_pixels(Image.open(png_dir / "streams-1.png").convert("RGB")) > 100


def test_png_without_matplotlib_is_one_line(report: tuple, tmp_path: Path) -> None:
    recs, html, _ = report
    log = html.parent / "study.jsonl"
    out, pngs = tmp_path / "r.html", tmp_path / "png"
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from retimer.cli.main import main\n"
            f"main(['report', {str(log)!r}, '-o', {str(out)!r}, '--png', {str(pngs)!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retimer report: error: --png needs matplotlib")
    assert not out.exists() and not pngs.exists()


def test_records_without_a_trace_still_get_a_row_and_a_chart() -> None:
    old = {"id": "x", "time": "2026-01-01T00:00:00+00:00", "url": "https://a.test/<x>",
           "protocol": "openai-chat", "profile": "groq", "outcome": "complete",
           "target": {"ttft_ms": 100.0, "tps": 50.0},
           "upstream": {"ttft_ms": 10.0, "tps": 900.0, "tokens": 5},
           "emitted": {"ttft_ms": 101.0, "tps": 49.0, "tokens": 5}, "upstream_bound": False}
    page = render_html(build(streams([old, {**old, "id": "y", "upstream_bound": True}]), "old & new"))
    assert page.count('<svg class="stream"') == 2 and page.count('<tr class="stream">') == 2
    assert "no trace in this record" in page and "https://a.test/&lt;x&gt;" in page
    assert "old &amp; new" in page and "50% (1/2)" in page


def test_report_errors_are_one_line(tmp_path: Path) -> None:
    log = tmp_path / "l.jsonl"
    log.write_text(json.dumps({"protocol": "openai-chat", "url": "https://a.test/"}) + "\n")
    for args, message in (([str(tmp_path / "none.jsonl")], "no such file"),
                          ([str(log), "--host", "b.test"], f"{log}: no records matching url containing"),
                          ([str(log), str(log), "--host", "b.test"],
                           "2 logs: no records matching url containing 'b.test' (2 records in them")):
        done = run_cli("report", *args, "-o", str(tmp_path / "r.html"))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr
        assert not (tmp_path / "r.html").exists()
