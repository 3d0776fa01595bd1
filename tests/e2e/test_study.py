"""Studies: validation, assignment (balance, Latin squares, determinism), conversation identity,
and the real `retimer study` proxy: two proxies agree, blinding, the rating page, export."""

from __future__ import annotations

import collections
import csv
import io
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from retimer.proxy.study.files import load_study
from retimer.records.export import COLUMNS
from retimer.study.conversation import conversation_key, is_unit_request, response_links
from retimer.study.design import StudyDesign, StudyError, williams_square
from retimer.study.ratings import RatingError, parse_rating
from retimer.study.study_file import parse_study
from retimer.wire.protocols.base import RequestShape
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.stream_bodies import make_anthropic_stream, make_openai_stream
from tests.support.study import CONDITIONS, FAST, TEXT, StudyProxy, chat, write_study
from tests.support.upstream import FakeLLM

pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=2)  # for the real proxy's tests


def design(**kw: Any) -> StudyDesign:
    data = {"name": "s", "seed": 1, "unit": "request",
            "conditions": [{"name": "a", "profile": "cerebras"},
                           {"name": "b", "profile": "gpt-5"}], **kw}
    return parse_study(data, "study.yaml")


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize("change, key", [
    ({"name": None}, "name:"),
    ({"name": "has space"}, "name:"),
    ({"seed": None}, "seed:"),
    ({"seed": -3}, "seed:"),
    ({"seed": 1.5}, "seed:"),
    ({"unit": None}, "unit:"),
    ({"unit": "session"}, "unit:"),
    ({"counterbalancing": "abba"}, "counterbalancing:"),
    ({"unit": "participant", "counterbalancing": "latin-square"}, "counterbalancing:"),
    ({"block_size": 0}, "block_size:"),
    ({"block_size": True}, "block_size:"),
    ({"unit": "participant", "block_size": 2}, "block_size:"),
    ({"participant_ids": "letters"}, "participant_ids:"),
    ({"ratings": "yes"}, "ratings:"),
    ({"colour": "red"}, "colour: unknown key"),
    ({"conditions": [{"name": "a", "profile": "cerebras"}]}, "conditions:"),
    ({"conditions": "a"}, "conditions:"),
    ({"conditions": [{"name": "a", "profile": "x"}, {"name": "a", "profile": "y"}]},
     "conditions[1].name:"),
    ({"conditions": [{"profile": "x"}, "y"]}, "conditions[0].name: required"),
    ({"conditions": ["x", {"name": "b", "tps": 20}]}, "conditions[1].profile:"),
    ({"conditions": ["x", {"name": "b", "profile": "y", "ttfb": "1s"}]},
     "conditions[1].ttfb: unknown key"),
    ({"conditions": ["x", {"name": "b", "profile": "y", "tps": [1]}]}, "conditions[1].tps:"),
    ({"conditions": ["x", 7]}, "conditions[1]:"),
])
def test_validation_errors_name_the_key(change: dict[str, Any], key: str) -> None:
    data: dict[str, Any] = {"name": "s", "seed": 1, "unit": "request",
                            "conditions": ["cerebras", "gpt-5"]}
    for k, v in change.items():
        if v is None:
            data.pop(k)
        else:
            data[k] = v
    with pytest.raises(StudyError) as e:
        parse_study(data, "study.yaml")
    message = str(e.value)
    assert message.startswith("study.yaml: ") and key in message, message
    assert "\n" not in message


@pytest.mark.parametrize("condition, key", [
    ({"name": "b", "profile": "no-such-profile"}, "conditions[1].profile: unknown profile"),
    ({"name": "b", "profile": "gpt-5", "ttft": "soon"}, "conditions[1].ttft:"),
    ({"name": "b", "profile": "gpt-5", "tps": 0}, "conditions[1].tps:"),
    ({"name": "b", "profile": "gpt-5", "speed": "-2x"}, "conditions[1].speed:"),
    ({"name": "b", "profile": "passthrough", "jitter": 0}, "conditions[1].jitter:"),
    ({"name": "b", "profile": "missing.yaml"}, "conditions[1].profile:"),
])
def test_profile_errors_name_the_condition(tmp_path: Path, condition: dict, key: str) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "seed": 1, "unit": "request",
                                    "conditions": ["cerebras", condition]}))
    with pytest.raises(StudyError) as e:
        load_study(str(path))
    assert key in str(e.value) and "\n" not in str(e.value)


def test_study_file_profiles_and_yaml_errors(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        "name: mine\nsource: test\nttft: {p50: 300ms, p90: 400ms, p99: 500ms}\ndecode: {tps: 33}\n")
    path = tmp_path / "study.yaml"
    path.write_text("name: s\nseed: w\nunit: request\nconditions:\n"
                    "  - {name: own, profile: mine.yaml}\n"
                    "  - {name: slow, ttft: 2s, tps: 20, jitter: 0}\n")
    d, profiles = load_study(str(path))
    assert profiles["own"].tps == 33  # a relative path is relative to the study file
    assert profiles["slow"].tps == 20 and profiles["slow"].ttft.p50 == 2.0
    assert profiles["slow"].jitter == 0
    path.write_text("name: s\nname: t\n")
    with pytest.raises(StudyError, match="duplicate key 'name'"):
        load_study(str(path))
    with pytest.raises(StudyError, match="no such study file"):
        load_study(str(tmp_path / "absent.yaml"))


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("name: s\nseed: 1\nunit: request\nconditions: [cerebras]\n")
    result = run_cli("study", str(path), "--participant", "P1")
    assert result.returncode == 2 and "conditions:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    path.write_text("name: s\nseed: 1\nunit: request\nparticipant_ids: numbered\n"
                    "conditions: [cerebras, gpt-5]\n")
    for args, needle in [(("--participant", "alice"), "ending in a number"),
                         (("--participant", "P1", "--tps", "9"), "--tps: in a study")]:
        result = run_cli("study", str(path), *args)
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ assignment


def test_between_participants_balance_large_n() -> None:
    d = design(unit="participant", conditions=["cerebras", "gpt-5", "o3"])
    counts = collections.Counter(d.assign(f"user-{i}") for i in range(6000))
    assert set(counts) == {0, 1, 2}
    assert all(abs(c - 2000) < 150 for c in counts.values()), counts  # about 4 sd
    numbered = design(unit="participant", participant_ids="numbered",
                      conditions=["cerebras", "gpt-5", "o3"])
    exact = collections.Counter(numbered.assign(f"P{i}") for i in range(1, 3001))
    assert sorted(exact.values()) == [1000, 1000, 1000]


def test_within_participant_balance_without_counterbalancing() -> None:
    d = design(unit="request")
    counts = collections.Counter(d.assign(f"p{p}", i) for p in range(200) for i in range(50))
    assert abs(counts[0] - 5000) < 300, counts
    per_person = {tuple(d.assign(f"p{p}", i) for i in range(50)) for p in range(20)}
    assert len(per_person) == 20  # each participant a different random sequence


def square_design(n: int, seed: int = 1) -> StudyDesign:
    conds = [{"name": f"c{i}", "profile": "cerebras"} for i in range(n)]
    return design(counterbalancing="latin-square", conditions=conds, seed=seed)


def check_williams(square: list[list[int]], n: int) -> None:
    rows = len(square)
    assert rows == (n if n % 2 == 0 else 2 * n)
    for row in square:
        assert sorted(row) == list(range(n))  # each condition once per row
    for col in zip(*square, strict=True):
        assert collections.Counter(col) == {c: rows // n for c in range(n)}  # per position
    pairs = collections.Counter(p for row in square for p in itertools.pairwise(row))
    expected = 1 if n % 2 == 0 else 2  # carry-over: each ordered pair equally often
    assert pairs == {(a, b): expected for a in range(n) for b in range(n) if a != b}


@pytest.mark.parametrize("n", range(2, 9))
def test_williams_square_properties(n: int) -> None:
    check_williams(williams_square(n), n)
    check_williams(square_design(n).square(), n)  # the seeded relabelling keeps them
    if n >= 3:  # and the seed matters
        assert len({tuple(map(tuple, square_design(n, s).square())) for s in range(5)}) > 1


def test_latin_square_orders_per_participant() -> None:
    conds = [{"name": f"c{i}", "profile": "cerebras"} for i in range(4)]
    d = design(counterbalancing="latin-square", participant_ids="numbered", conditions=conds)
    orders = [tuple(d.assign(f"P{p}", i) for i in range(4)) for p in range(1, 5)]
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)  # each condition once per cycle
    assert sorted(orders) == sorted(map(tuple, d.square()))  # participants 1-4: each row once
    # the order repeats after n units
    assert [d.assign("P3", i) for i in range(4, 8)] == list(orders[2])
    blocked = design(counterbalancing="latin-square", participant_ids="numbered",
                     conditions=conds, block_size=3)
    seq = [blocked.assign("P1", i) for i in range(12)]
    assert seq == [c for c in orders[0] for _ in range(3)]


def test_assignment_is_deterministic_and_seeded() -> None:
    a, b = design(seed=42), design(seed=42)
    seq = [(p, i) for p in ("P1", "x", "someone") for i in range(40)]
    assert [a.assign(p, i) for p, i in seq] == [b.assign(p, i) for p, i in seq]
    other = design(seed=43)
    assert [a.assign(p, i) for p, i in seq] != [other.assign(p, i) for p, i in seq]
    conv = design(unit="conversation")
    assert conv.assign("P1", 5, "claude:abc") == conv.assign("P1", 0, "claude:abc")
    assert a.timing_seed("P1") == b.timing_seed("P1") != a.timing_seed("P2")


# ------------------------------------------------------------------ conversations


def shape(
    path: str, body: object, host: str = "api.openai.com", method: str = "POST"
) -> RequestShape:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return RequestShape(method, host, path, {}, raw)


def test_conversation_keys() -> None:
    claude = "/api/organizations/o/chat_conversations/9a8b/completion"
    assert conversation_key(shape(claude, {"prompt": "x"}, "claude.ai")).key == "claude:9a8b"
    gpt = "/backend-api/f/conversation"
    known = conversation_key(shape(gpt, {"conversation_id": "c1"}, "chatgpt.com"))
    assert known.key == "chatgpt:c1" and known.links is None
    first = conversation_key(shape(gpt, {"messages": [{"id": "m"}]}, "chatgpt.com"))
    assert first.key.startswith("chatgpt-new:") and first.links == "chatgpt"
    assert response_links("chatgpt", b'data: {"v": {"conversation_id": "c9"}}') == ["chatgpt:c9"]
    # the history grows, the conversation stays; another opening is another conversation
    turn1 = {"model": "m", "messages": [{"role": "system", "content": "S"},
                                        {"role": "user", "content": "hello"}]}
    turn2 = {"model": "m", "messages": [*turn1["messages"], {"role": "assistant", "content": "hi"},
                                        {"role": "user", "content": "more"}]}
    k1 = conversation_key(shape("/v1/chat/completions", turn1)).key
    assert k1 == conversation_key(shape("/v1/chat/completions", turn2)).key
    other = {"model": "m", "messages": [{"role": "user", "content": "bye"}]}
    assert conversation_key(shape("/v1/chat/completions", other)).key != k1
    anth = {"system": "S", "messages": [{"role": "user", "content": "hello"}]}
    assert conversation_key(shape("/v1/messages", anth)).key.startswith("first-user:")
    body = {"input": "hi", "previous_response_id": "resp_1"}
    resp = conversation_key(shape("/v1/responses", body))
    assert resp.key == "openai-response:resp_1" and resp.links == "openai-responses"
    assert response_links("openai-responses", b'{"response":{"id":"resp_2"}}') == \
        ["openai-response:resp_2"]
    assert conversation_key(shape("/x", b"\xff\xfe")).key.startswith("body:")


def test_units_are_llm_calls_only() -> None:
    assert is_unit_request(shape("/v1/chat/completions", {"messages": []}, "llm.test"))
    assert is_unit_request(shape("/v1/messages", {"messages": []}))
    assert not is_unit_request(shape("/v1/chat/completions", b"", method="GET"))
    assert not is_unit_request(shape("/backend-api/lat/r", {"x": 1}, "chatgpt.com"))
    assert is_unit_request(shape("/v1/realtime", b"", method="GET"), websocket=True)


def test_rating_form_parsing() -> None:
    assert parse_rating(b"stream=abc&speed=7", "application/x-www-form-urlencoded") == \
        ("abc", {"speed": 7, "quality": None})
    assert parse_rating(b'{"stream": "abc", "quality": 1}', "application/json") == \
        ("abc", {"speed": None, "quality": 1})
    for body in (b"stream=abc", b"stream=abc&speed=8", b"stream=abc&speed=x", b"speed=3"):
        with pytest.raises(RatingError):
            parse_rating(body, "application/x-www-form-urlencoded")


# ------------------------------------------------------------------ the real proxy




def test_two_proxies_agree_with_no_shared_state(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path)
    d, profiles = load_study(str(study))
    seqs = []
    for name in ("a", "b"):
        with StudyProxy(tmp_path / name, study, "P7") as proxy:
            for i in range(4):
                assert chat(proxy.url, fake, f"question {i}").status_code == 200
            records = proxy.records(4)
        seqs.append([(r["unit"], r["condition"], r["target"]["ttft_ms"], r["profile"])
                     for r in records])
        assert all(r["study"] == "blind-test" and r["participant"] == "P7" for r in records)
    assert seqs[0] == seqs[1]
    expected = [d.condition("P7", i).name for i in range(4)]
    assert [(u, c) for u, c, _, _ in seqs[0]] == list(enumerate(expected))
    assert len(set(expected[:3])) == 3  # latin square: every condition in the first cycle
    for _, condition, ttft, _ in seqs[0]:  # each stream ran its condition's timing
        assert ttft == pytest.approx(profiles[condition].ttft.p50 * 1000)


def test_conversation_units_follow_the_conversation(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path, unit="conversation")
    d, _ = load_study(str(study))
    history = {"A": [], "B": []}
    with StudyProxy(tmp_path / "p", study, "P1") as proxy, \
            httpx.Client(proxy=proxy.url, timeout=30) as client:
        for conv in ("A", "B", "A", "B", "A"):
            history[conv].append({"role": "user", "content": f"opening of {conv}"
                                  if not history[conv] else "and then?"})
            r = client.post(fake.url + "/v1/chat/completions",
                            json={"model": "m", "stream": True, "messages": history[conv]})
            assert r.status_code == 200
            history[conv].append({"role": "assistant", "content": TEXT})
        records = proxy.records(5)
    units = [r["unit"] for r in records]
    assert units == [0, 1, 0, 1, 0]
    assert [r["condition"] for r in records] == [d.condition("P1", u).name for u in units]
    assert records[0]["conversation"] == records[2]["conversation"] != records[1]["conversation"]


def _raw_response(proxy_url: str, fake: FakeLLM) -> tuple[list[tuple[str, str]], bytes]:
    with httpx.Client(proxy=proxy_url, timeout=30) as client:
        r = client.post(fake.url + "/v1/chat/completions", json={
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        return [(k.lower(), v) for k, v in r.headers.multi_items()], r.content


def test_blinding_nothing_the_participant_sees_reveals_the_condition(
        tmp_path: Path, fake: FakeLLM) -> None:
    # one condition's timing, two names: the study run must look exactly like a plain run
    conds = [{"name": "zebra", **FAST, "ttft": "60ms", "tps": 900},
             {"name": "quokka", **FAST, "ttft": "60ms", "tps": 900}]
    study = write_study(tmp_path, conditions=conds, ratings=True)
    plain_args = ("--profile", "gpt-5", "--ttft", "60ms", "--tps", "900", "--jitter", "0")
    with RetimerProxy(tmp_path / "plain", *plain_args) as plain:
        plain_headers, plain_body = _raw_response(plain.url, fake)
    with StudyProxy(tmp_path / "study", study, "P1") as proxy:
        headers, body = _raw_response(proxy.url, fake)
        (record,) = proxy.records(1)
        page = httpx.get(f"{proxy.url}/rate", timeout=10).text
    assert record["condition"] in ("zebra", "quokka")  # the experimenter's records know it
    assert body == plain_body and TEXT in "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in body.decode().split("\n\n") if line.startswith("data: {")
        and json.loads(line[6:])["choices"])
    assert headers == plain_headers
    seen = (proxy.stdout() + proxy.stderr() + page + json.dumps(headers) + body.decode()).lower()
    # (a bare "900" may occur by chance in ids, timestamps or temporary paths: look for a rate)
    for marker in ("zebra", "quokka", "blind-test", "openai-gpt-5", "60 ms", "900 tok", "900.0"):
        assert marker not in seen, marker
    assert "condition" not in (page + json.dumps(headers) + body.decode()).lower()
    assert "tokens" in proxy.stdout()  # the live view did print the stream's line


@pytest.fixture(scope="module")
def rated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A study proxy with ratings: pages before and after two streams, ratings posted."""
    tmp = tmp_path_factory.mktemp("rated")
    study = write_study(tmp, ratings=True)
    out: dict[str, Any] = {}
    with FakeLLM(make_openai_stream(TEXT), make_anthropic_stream(TEXT)) as fake, \
            StudyProxy(tmp / "p", study, "P2") as proxy:
        rate = f"{proxy.url}/rate"
        out["empty_page"] = httpx.get(rate, timeout=10)
        chat(proxy.url, fake, "one")
        chat(proxy.url, fake, "two")
        out["records"] = proxy.records(2)
        out["page"] = httpx.get(rate, timeout=10)
        with httpx.Client(proxy=proxy.url, timeout=10) as via_proxy:  # absolute-form, as a browser
            out["latest"] = via_proxy.get(rate + "?latest=1").json()
        latest = out["records"][-1]["id"]
        out["form"] = httpx.post(rate, data={"stream": latest, "speed": "6"}, timeout=10)
        out["json"] = httpx.post(rate, data={"stream": latest, "quality": "3"},
                                 headers={"accept": "application/json"}, timeout=10)
        out["again"] = httpx.post(rate, data={"stream": latest, "speed": "5"}, timeout=10)
        out["bad"] = httpx.post(rate, data={"stream": latest, "speed": "9"}, timeout=10)
        out["unknown"] = httpx.post(rate, data={"stream": "nope", "speed": "2"}, timeout=10)
        out["foreign"] = httpx.post(rate, data={"stream": latest, "speed": "1"},
                                    headers={"origin": "http://evil.example"}, timeout=10)
        out["log"] = proxy.log_path
        out["lines"] = [json.loads(x) for x in proxy.log_path.read_text().splitlines()]
    yield out


def test_rating_page(rated: dict[str, Any]) -> None:
    records = rated["records"]
    latest = records[-1]["id"]
    empty, page = rated["empty_page"], rated["page"]
    assert empty.status_code == 200 and "No response has finished yet" in empty.text
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f'name="stream" value="{latest}"' in page.text
    assert page.text.count('type="radio"') == 14  # two 1-7 scales
    assert "http" not in page.text.split("<script>")[0].replace(
        'action="/rate"', "")  # no external assets
    for marker in ("zebra", "quokka", "okapi", "blind-test", "gpt-5", "condition"):
        assert marker not in page.text.lower()
    assert rated["latest"]["stream"] == latest
    assert rated["form"].status_code == 200 and "Saved" in rated["form"].text
    assert rated["json"].json() == {"ok": True}
    assert rated["bad"].status_code == 400
    assert rated["unknown"].status_code == 409
    assert rated["foreign"].status_code == 403
    ratings = [x for x in rated["lines"] if x.get("type") == "rating"]
    assert [(r["stream"], r["speed"], r["quality"]) for r in ratings] == [
        (latest, 6, None), (latest, None, 3), (latest, 5, None)]
    assert all(r["condition"] == records[-1]["condition"] and r["unit"] == 1 for r in ratings)


def test_export_csv_from_a_real_log(rated: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    result = run_cli("export", str(rated["log"]), "--csv", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    reader = csv.DictReader(io.StringIO(text))
    assert tuple(reader.fieldnames or ()) == COLUMNS
    rows = list(reader)
    records = rated["records"]
    assert [r["stream_id"] for r in rows] == [r["id"] for r in records]
    for row, rec in zip(rows, records, strict=True):
        em = rec["emitted"]
        assert row["condition"] == rec["condition"] and row["unit"] == str(rec["unit"])
        assert (row["study"], row["participant"], row["protocol"]) == \
            ("blind-test", "P2", "openai-chat")
        assert row["profile"] == rec["profile"] and row["time"] == rec["time"]
        # what ran: the condition's overrides are in the name, never filed under the base
        assert row["effective_profile"] == rec["effective_profile"] == \
            {c["name"]: f"openai-gpt-5 ttft={c['ttft']} tps={c['tps']} jitter=0"
             for c in CONDITIONS}[rec["condition"]]
        assert float(row["ttft_ms"]) == em["ttft_ms"] and float(row["tps"]) == em["tps"]
        assert float(row["ttfat_ms"]) == em["ttfat_ms"] and int(row["tokens"]) == em["tokens"]
        assert float(row["target_ttft_ms"]) == rec["target"]["ttft_ms"]
        assert row["upstream_bound"] == str(rec["upstream_bound"]).lower()
        assert float(row["upstream_wait_ms"]) == rec["upstream_wait_ms"]
        assert row["outcome"] == "complete"
    # the latest rating of each scale counts; an unrated stream has empty cells
    assert (rows[1]["rating_speed"], rows[1]["rating_quality"]) == ("5", "3")
    assert (rows[0]["rating_speed"], rows[0]["rating_quality"]) == ("", "")
    # corrupt lines are skipped with a count; a missing log is one line
    broken = tmp_path / "broken.jsonl"
    broken.write_text(rated["log"].read_text() + "not json\n[1, 2]\n{\"id\": 3}\n")
    result = run_cli("export", str(broken))
    assert result.returncode == 0 and "skipped 3 line(s)" in result.stderr
    assert result.stdout == text
    missing = run_cli("export", str(tmp_path / "absent.jsonl"), "--csv", str(out))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_blind_live_view_shows_no_profile_or_timing() -> None:
    from rich.console import Console

    from retimer.cli.proxy.liveview import LiveView

    record = {"id": "x", "outcome": "complete", "protocol": "openai-chat",
              "profile": "openai-gpt-5", "url": "https://api.openai.com/v1/chat/completions",
              "upstream_bound": True, "condition": "zebra",
              "target": {"ttft_ms": 812.0, "tps": 95.0},
              "emitted": {"ttft_ms": 813.0, "tps": 95.3, "tokens": 41},
              "upstream": {"ttft_ms": 18.0, "tps": 7000.0, "tokens": 41}}
    for blind in (False, True):
        out = io.StringIO()
        view = LiveView(out=out, interactive=False, blind=blind)
        view(record)
        console = Console(file=io.StringIO(), width=200)
        console.print(view.table())
        shown = out.getvalue() + console.file.getvalue()  # type: ignore[attr-defined]
        assert "41" in shown and "api.openai.com" in shown
        markers = ("openai-gpt-5", "812", "813", "95.3", "upstream-bound", "zebra")
        leaked = [m for m in markers if m in shown]
        assert leaked == ([] if blind else ["openai-gpt-5", "812", "813", "95.3", "upstream-bound"])
