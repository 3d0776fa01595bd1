"""`retimer report` reads at a glance: legends in the charts, the summary's numbers, 1400 px.

The records come from the real proxy: three profiles re-timing recorded fixtures through a
FakeLLM upstream, one stream cut by the upstream. The summary's numbers are computed here
from those records, independently of retimer.report.summary.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from retimer.report.page import build, render_html, stream_chart
from retimer.report.svgplot import ROLE_COLORS
from tests.support.proxy import RetimerProxy
from tests.support.records import streams as typed_streams
from tests.support.upstream import FakeLLM

CHROMIUM = "/usr/bin/chromium"
SVG = "{http://www.w3.org/2000/svg}"
WIDTH = 1400
RUNS = (("groq", "--tps", "500"), ("openai-gpt-5", "--ttft", "150ms", "--tps", "300"),
        ("cerebras",))
FIXTURES = (("openai-chat/gpt4o-text-include-usage.sse", "/v1/chat/completions", {}),
            ("anthropic/llm-anthropic-sonnet45-text-padded.sse", "/v1/messages", {}),
            ("groq/groq-tool-call-x-groq-usage.sse", "/v1/chat/completions",
             {"x-fake-abort-after": "3"}),
            ("mistral/sk-mistral-after-function-call.sse", "/v1/chat/completions", {}))


@pytest.fixture(scope="module")
def profile_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("layout-proxy")
    out: list[dict[str, Any]] = []
    with FakeLLM(per_event_gap=0.004, first_delay=0.02) as fake:
        for i, (profile, *extra) in enumerate(RUNS):
            with RetimerProxy(tmp / str(i), "--profile", profile, "-q", *extra) as proxy, \
                    httpx.Client(proxy=proxy.url, timeout=30) as client:
                for fixture, path, headers in FIXTURES:
                    try:
                        client.post(fake.url + path, json={"stream": True},
                                    headers={"x-fake-fixture": fixture, **headers})
                    except httpx.HTTPError:
                        pass  # the cut stream: its record says how it ended
                out += proxy.records(len(FIXTURES))
    assert len(out) == len(RUNS) * len(FIXTURES)
    return out


def _profile(rec: dict[str, Any]) -> str:
    """What ran: the effective profile (base plus overrides) when the record names one."""
    return str(rec.get("effective_profile") or rec["profile"])


def _svgs(page: str, css_class: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(
        rf'<svg class="(?:{css_class})".*?</svg>', page, flags=re.S)]


def _keys(svg: ET.Element) -> dict[str, tuple[str, str]]:
    """Legend entries: full label (tooltip) -> (visible text, colour of its line sample)."""
    out = {}
    for g in svg.iter(f"{SVG}g"):
        if "key" in (g.get("class") or "").split():
            line = g.find(f"{SVG}line")
            assert line is not None
            out[g.findtext(f"{SVG}title") or ""] = (g.findtext(f"{SVG}text") or "",
                                                    line.get("stroke") or "")
    return out


def _series(svg: ET.Element) -> dict[str, str]:
    """Drawn lines: label (tooltip) -> stroke colour."""
    return {p.findtext(f"{SVG}title") or "": p.get("stroke") or "" for p in svg.iter(f"{SVG}path")
            if "series" in (p.get("class") or "").split()}


def test_every_multi_line_chart_has_a_legend_naming_each_profile(
        profile_records: list[dict[str, Any]]) -> None:
    page = render_html(build(typed_streams(profile_records), "three profiles"))
    profiles = {_profile(r) for r in profile_records}
    assert len(profiles) == len(RUNS)
    lines = [svg for svg in _svgs(page, "dist") if _series(svg)]
    assert len(lines) == 2  # TTFT and rate; the bar chart names its bars on its axis
    for svg in lines:
        series, keys = _series(svg), _keys(svg)
        assert keys.keys() == series.keys()  # one entry per line, no more
        for label, (text, colour) in keys.items():
            assert colour == series[label]  # the key's sample is its line's colour
            assert text and label.startswith(text.rstrip("\u2026"))
        for name in profiles:  # each profile named in full, visibly, by its own entry
            assert [t for t, _ in keys.values() if t.startswith(name + " (client")], name
    streams = _svgs(page, "stream")
    assert len(streams) == len(profile_records)
    for svg in streams:
        series, keys = _series(svg), _keys(svg)
        if len(series) > 1:
            assert {label: colour for label, (_, colour) in keys.items()} == series
            assert {t for t, _ in keys.values()} <= {"target", "upstream", "client"}
        else:
            assert keys == {}


def _summary_lines(page: str) -> dict[str, str]:
    class Summary(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.depth, self.items = 0, []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "ul" and ("class", "summary") in attrs:
                self.depth = 1
            elif self.depth and tag == "li":
                self.items.append("")

        def handle_endtag(self, tag: str) -> None:
            if tag == "ul":
                self.depth = 0

        def handle_data(self, data: str) -> None:
            if self.depth and self.items:
                self.items[-1] += data

    parser = Summary()
    parser.feed(page)
    assert len(parser.items) == 5
    return {item.split()[0]: item for item in parser.items}


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def test_summary_lines_carry_the_records_numbers(profile_records: list[dict[str, Any]]) -> None:
    recs = [dict(r) for r in profile_records]
    # a passthrough stream (no target) and one too short for a rate: left out of the medians
    recs[0] = {**recs[0], "target": {"ttft_ms": None, "tps": None}}
    recs[1] = {**recs[1], "emitted": {**recs[1]["emitted"], "tps": None}}
    lines = _summary_lines(render_html(build(typed_streams(recs), "summary")))

    outcomes = Counter(r["outcome"] for r in recs)
    assert len(outcomes) > 1  # the cut streams did not end as complete
    assert _numbers(lines["Streams"])[0] == len(recs)
    for outcome, n in outcomes.items():
        assert f"{outcome} ({n})" in lines["Streams"]

    profiles = Counter(_profile(r) for r in recs)
    assert _numbers(lines["Profiles"].split(":")[0]) == [len(profiles)]
    for name, n in profiles.items():
        assert f"{name} ({n})" in lines["Profiles"]

    for label, key, tolerance in (("TTFT,", "ttft_ms", 0.5), ("Rate,", "tps", 0.05)):
        pairs = [(r["emitted"][key], r["target"][key]) for r in recs
                 if r["emitted"].get(key) is not None and r["target"].get(key) is not None]
        got, want, n = _numbers(lines[label].split("median", 1)[1])
        assert n == len(pairs) < len(recs)
        assert got == pytest.approx(np.median([p[0] for p in pairs]), abs=tolerance)
        assert want == pytest.approx(np.median([p[1] for p in pairs]), abs=tolerance)

    bound = [r for r in recs if r["upstream_bound"] is True]
    shown = _numbers(lines["Upstream-bound"])
    assert shown == [len(bound), len(recs), round(100 * len(bound) / len(recs))]


def test_png_figures_carry_a_colour_key(profile_records: list[dict[str, Any]]) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from retimer.report.png import distribution_figure, streams_figure

    report = build(typed_streams(profile_records), "png")
    fig = streams_figure(report.streams)
    try:
        assert len(fig.legends) == 1
        key = fig.legends[0]
        texts = [t.get_text() for t in key.get_texts()]
        assert texts == ["target schedule", "upstream arrivals", "client received"]
        colours = [h.get_color() for h in key.legend_handles]
        assert colours == [ROLE_COLORS["target"], ROLE_COLORS["upstream"], ROLE_COLORS["client"]]
        # the key names what the panels draw: every label a panel uses is in it
        drawn = {s.label for v in report.streams for s in stream_chart(v).series}
        assert drawn and drawn <= set(texts)
    finally:
        plt.close(fig)
    for chart in report.distributions[:2]:
        fig = distribution_figure(chart)
        try:
            legend = fig.axes[0].get_legend()
            assert legend is not None
            texts = [t.get_text() for t in legend.get_texts()]
            assert texts == [s.label for s in chart.series if s.x]
            for name in {_profile(r) for r in profile_records}:
                assert any(t.startswith(name + " (client") for t in texts), name
        finally:
            plt.close(fig)


def _wide(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A study log with long fields: more columns, long names, a long URL."""
    return [{**r, "condition": f"condition {i % 2} with a rather long descriptive name",
             "participant": f"participant-{i:04d}-{'x' * 30}",
             "url": r["url"] + "?q=" + "long" * 60} for i, r in enumerate(records)]


def test_page_fits_1400_px_and_legends_are_visible_in_chromium(
        profile_records: list[dict[str, Any]], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    pages, keyed = {}, 0
    for name, recs in (("profiles", profile_records), ("wide", _wide(profile_records))):
        pages[name] = tmp_path / f"{name}.html"
        html = render_html(build(typed_streams(recs), name))
        pages[name].write_text(html, encoding="utf-8")
        keyed = sum(len(_series(svg)) > 1 for svg in _svgs(html, "dist|stream"))
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            for name, path in pages.items():
                page.goto(path.resolve().as_uri())
                page.wait_for_load_state("load")
                width = page.evaluate("() => document.documentElement.scrollWidth")
                assert width <= WIDTH, f"{name}: the page scrolls sideways ({width} px)"
                summary = page.locator("ul.summary").bounding_box()
                assert summary and summary["y"] + summary["height"] <= 900  # the first screen
                legends = page.locator("svg.dist g.legend, svg.stream g.legend")
                assert legends.count() == keyed > 3
                for i in (0, 1, 2, legends.count() - 1):  # both distributions, two streams
                    legend = legends.nth(i)
                    legend.scroll_into_view_if_needed()
                    box = legend.bounding_box()
                    svg = legend.locator("xpath=..").bounding_box()
                    assert box and svg and box["width"] > 0 and box["height"] > 0
                    assert 0 <= box["x"] and box["x"] + box["width"] <= WIDTH
                    assert 0 <= box["y"] and box["y"] + box["height"] <= 900, (name, i)
                    # every entry's text is drawn inside its chart, none clipped at the edge
                    assert box["x"] >= svg["x"] and box["x"] + box["width"] <= svg["x"] + svg[
                        "width"] and box["y"] + box["height"] <= svg["y"] + svg["height"]
                    assert legend.is_visible()
        finally:
            browser.close()
