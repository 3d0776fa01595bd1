"""One `retimer study` for many participants: each request names its participant (a header, or
its API key in the study's roster), units and Latin-square rows are per participant exactly as
`--plan` prints them, the id never goes upstream, and a request naming nobody is refused or
passed untimed as the study file says."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from retimer.proxy.study.files import load_study
from retimer.proxy.study.state import MemoryState, SharedState, StateError
from retimer.study.design import StudyError
from retimer.study.participants import (
    Identified,
    Invalid,
    ParticipantError,
    Unidentified,
    api_key,
    identify,
    parse_participants,
    parse_roster,
)
from retimer.study.study_file import parse_study
from tests.support.proxy import RetimerProxy, free_port, run_cli
from tests.support.study import CONDITIONS, TEXT, ManyProxy
from tests.support.upstream import FakeLLM

SECRET = b"s" * 32
pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=2)


# ------------------------------------------------------------------ pure: the rules


@pytest.mark.parametrize("raw, needle", [
    ("yes", "participants: expected a mapping"),
    ({"hedaer": "X"}, "participants.hedaer: unknown key"),
    ({"header": "X Participant"}, "participants.header: expected a header name"),
    ({"unidentified": "allow"}, "participants.unidentified: expected one of refuse, pass"),
    ({"roster": 7}, "participants.roster: expected a file's path"),
    ({"beside_page": "yes"}, "participants.beside_page: expected true or false"),
])
def test_participants_section_errors_name_the_key(raw: object, needle: str) -> None:
    with pytest.raises(ParticipantError, match=needle):
        parse_participants(raw)
    data = {"name": "s", "seed": 1, "unit": "request", "conditions": ["cerebras", "gpt-5"],
            "participants": raw}
    with pytest.raises(StudyError, match=f"^study.yaml: {needle}"):
        parse_study(data, "study.yaml")


def test_beside_page_needs_a_page() -> None:
    data = {"name": "s", "seed": 1, "unit": "request", "conditions": ["cerebras", "gpt-5"],
            "participants": {"beside_page": True}}
    with pytest.raises(StudyError, match="^study.yaml: participants.beside_page: applies to a "
                                         "hosted study"):
        parse_study(data, "study.yaml")
    assert parse_participants(None).beside_page is False  # off unless the study file says so


def test_participants_section_defaults_and_paths() -> None:
    policy = parse_participants({"roster": "people.csv", "unidentified": "pass"}, "/srv/study")
    assert (policy.header, policy.roster_path, policy.unidentified) == (
        "X-Retimer-Participant", "/srv/study/people.csv", "pass")
    assert parse_participants(None).unidentified == "refuse"


@pytest.mark.parametrize("text, needle", [
    ("id,key\nP1,sk-aaaaaaaa\n", "expected a first row `participant,key`"),
    ("participant,key\n", "no participants"),
    ("participant,key\nP1,sk-aaaaaaaa,x\n", "row 2: expected two cells"),
    ("participant,key\nP 1,sk-aaaaaaaa\n", "row 2: a participant id is letters"),
    ("participant,key\nP1,short\n", "row 2: expected an API key of at least 8"),
    ("participant,key\nP1,sk-aaaaaaaa\nP1,sk-bbbbbbbb\n", "row 3: participant P1 is listed twice"),
    ("participant,key\nP1,sk-aaaaaaaa\nP2,sk-aaaaaaaa\n", "row 3: that key is also P1's"),
])
def test_roster_errors_name_the_row(text: str, needle: str) -> None:
    with pytest.raises(ParticipantError, match=needle):
        parse_roster(text, None, SECRET)


def test_roster_keeps_keys_only_as_keyed_digests() -> None:
    keys = {"P1": "sk-first-participant-key", "P2": "sk-second-participant-key"}
    csv_roster = parse_roster("participant,key\n" + "".join(f"{p},{k}\n" for p, k in keys.items()),
                              None, SECRET)
    yaml_roster = parse_roster("", keys, SECRET)
    for roster in (csv_roster, yaml_roster):
        assert len(roster) == 2
        assert [roster.participant(k) for k in keys.values()] == ["P1", "P2"]
        assert roster.participant("sk-someone-else") is None
        held = repr(roster) + repr(roster.__dict__)
        assert not [k for k in keys.values() if k in held]
    other = parse_roster("", keys, b"t" * 32)  # another study's secret: other digests
    assert set(other.digests).isdisjoint(yaml_roster.digests)


@pytest.mark.parametrize("headers, query, key", [
    ({"authorization": "Bearer sk-abc"}, {}, "sk-abc"),
    ({"x-api-key": "sk-ant-abc"}, {}, "sk-ant-abc"),
    ({"x-goog-api-key": "AIza1"}, {}, "AIza1"),
    ({"api-key": "azure1"}, {}, "azure1"),
    ({}, {"key": "AIza2"}, "AIza2"),
    ({"authorization": "Basic dXNlcg=="}, {}, None),
    ({}, {}, None),
])
def test_api_key_wherever_the_api_puts_it(headers: dict[str, str], query: dict[str, str],
                                          key: str | None) -> None:
    assert api_key(headers, query) == key


def test_identify_header_first_then_roster() -> None:
    policy = parse_participants({"header": "X-Panel-Id"})
    roster = parse_roster("", {"P9": "sk-roster-key-9"}, SECRET)
    auth = {"authorization": "Bearer sk-roster-key-9"}
    assert identify(policy, roster, {"x-panel-id": "P2", **auth}, {}) == Identified("P2", "header")
    assert identify(policy, roster, auth, {}) == Identified("P9", "roster")
    unknown = identify(policy, roster, {"authorization": "Bearer sk-not-listed"}, {})
    assert isinstance(unknown, Unidentified) and "not in the study's roster" in unknown.reason
    assert "sk-not-listed" not in unknown.reason
    assert isinstance(identify(policy, None, {}, {}), Unidentified)
    odd = identify(policy, None, {"x-panel-id": "P1<script>"}, {})
    assert isinstance(odd, Invalid) and odd.reason.startswith("X-Panel-Id: a participant id is")


@pytest.mark.parametrize("make", [MemoryState, "shared"])
def test_state_keeps_each_participant_apart(make: Any, tmp_path: Path) -> None:
    state = MemoryState() if make is MemoryState else SharedState(tmp_path / "s.sqlite")
    assert [state.next_request("A"), state.next_request("B"), state.next_request("A")] == [0, 0, 1]
    assert [state.conversation("A", "k"), state.conversation("B", "j"),
            state.conversation("B", "k"), state.conversation("A", "k")] == [0, 0, 1, 0]
    state.link("A", "resp_1", "k")
    assert (state.alias_of("A", "resp_1"), state.alias_of("B", "resp_1")) == ("k", "resp_1")
    state.add_rateable("A", "s1", {"id": "s1"})
    state.add_rateable("B", "s2", {"id": "s2"})
    assert state.latest("A") == {"id": "s1"} and state.latest("B") == {"id": "s2"}
    assert state.rateable_stream("B", "s1") is None  # a rating for another's response: unknown
    assert state.rateable_stream("A", "s1") == {"id": "s1"}
    state.close()


def test_an_older_state_file_is_one_line(tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    db.commit()
    db.close()
    with pytest.raises(StateError, match="made by an older retimer"):
        SharedState(old)
    study = write_study(tmp_path)
    result = run_cli("study", str(study), "--study-state", str(old))
    assert result.returncode == 2 and "--study-state:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ the real proxy


def write_study(tmp: Path, **kw: Any) -> Path:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "hosted-test", "seed": 2026, "unit": "request",
                                    "counterbalancing": "latin-square",
                                    "conditions": CONDITIONS, **kw}))
    return path




def post(client: httpx.Client, url: str, headers: dict[str, str], text: str = "hi") -> httpx.Response:
    r = client.post(url + "/v1/chat/completions", headers=headers, json={
        "model": "m", "stream": True, "messages": [{"role": "user", "content": text}]})
    r.read()
    return r


def content(r: httpx.Response) -> str:
    """The text of an OpenAI Chat stream."""
    events = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {")]
    return "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])


def plan(study: Path, units: int) -> dict[str, list[str]]:
    """`retimer study --plan` as the experimenter reads it: participant -> conditions."""
    result = run_cli("study", str(study), "--plan", str(units))
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def test_six_participants_by_header_get_their_latin_square_rows(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path)
    units = 4
    expected = plan(study, units)
    assert sorted(expected) == [f"P{i}" for i in range(1, 7)]  # three conditions: six rows
    _, profiles = load_study(str(study))
    turns = [p for p in expected for _ in range(units)]
    random.Random(5).shuffle(turns)  # interleaved: each participant's own order is what counts
    with ManyProxy(tmp_path / "p", study, "--upstream", fake.url) as proxy, \
            httpx.Client(timeout=30, verify=False) as client:
        for i, p in enumerate(turns):
            assert post(client, proxy.url, {"X-Retimer-Participant": p}, f"q{i}").status_code == 200
        records = proxy.records(len(turns))
        seen = fake.requests
    assert len(records) == len(turns)
    assert [r["participant"] for r in records] == turns
    for p, conditions in expected.items():
        mine = [r for r in records if r["participant"] == p]
        assert [r["unit"] for r in mine] == list(range(units))
        assert [r["condition"] for r in mine] == conditions
        for r in mine:  # paced to its condition
            assert r["target"]["ttft_ms"] == pytest.approx(profiles[r["condition"]].ttft.p50 * 1000)
    assert not [s for s in seen if "x-retimer-participant" in s.headers]  # never upstream
    shown = proxy.stdout()
    assert "X-Retimer-Participant header" in shown and "refused" in shown
    assert not [c["name"] for c in CONDITIONS if c["name"] in shown + proxy.stderr()]


def test_panel_ids_take_the_squares_rows_in_arrival_order(tmp_path: Path, fake: FakeLLM) -> None:
    """`participant_ids: arrival`: ids a panel makes up (Prolific's 24-hex) are balanced as they
    come, not by their hash: the k-th participant to arrive takes row k of the square, kept by
    the study's state and named in the records; --status holds the units to it."""
    study = write_study(tmp_path, participant_ids="arrival")
    design, _ = load_study(str(study))
    rows = design.square()
    ids = [f"{i:02x}" * 12 for i in (0x5e, 0xa1, 0x07, 0xc3, 0x5e)]  # the first one comes back
    state = str(tmp_path / "state.sqlite")
    with ManyProxy(tmp_path / "p", study, "--upstream", fake.url, "--study-state", state) as proxy, \
            httpx.Client(timeout=30) as client:
        for i, pid in enumerate(ids):
            assert post(client, proxy.url, {"X-Retimer-Participant": pid}, f"q{i}").status_code == 200
        records = proxy.records(len(ids))
    assert [r["arrival"] for r in records] == [0, 1, 2, 3, 0]
    assert [r["condition"] for r in records[:4]] == [design.names[rows[k % len(rows)][0]]
                                                     for k in range(4)]
    assert records[4]["condition"] == design.names[rows[0][1]]  # its second unit, its own row
    status = run_cli("study", str(study), "--status", str(proxy.log_path)).stdout
    assert "balance: every unit has the condition the design gives it" in status
    plan = run_cli("study", str(study), "--plan", "2").stdout.splitlines()
    for record in records[:4]:  # the plan's row "arrival k" is the records' arrival k
        (row,) = [line.split() for line in plan if line.startswith(f"arrival {record['arrival']} ")]
        assert row[2] == record["condition"], (row, record)


def test_each_start_on_a_shared_state_draws_its_own_timing(tmp_path: Path, fake: FakeLLM) -> None:
    """Two starts of the study (instances, or a restart) on one --study-state: each draws its
    own timing, from a seed its records name; without a shared state the study's seed."""
    study = write_study(tmp_path)
    state = str(tmp_path / "state.sqlite")
    seeds = []
    for run in ("first", "again"):
        with ManyProxy(tmp_path / run, study, "--upstream", fake.url, "--study-state", state) as proxy, \
                httpx.Client(timeout=30) as client:
            assert post(client, proxy.url, {"X-Retimer-Participant": "P1"}).status_code == 200
            (record,) = proxy.records(1)
            seeds.append(record["seed"])
    with ManyProxy(tmp_path / "memory", study, "--upstream", fake.url) as proxy, \
            httpx.Client(timeout=30) as client:
        post(client, proxy.url, {"X-Retimer-Participant": "P1"})
        (plain,) = proxy.records(1)
    design, _ = load_study(str(study))
    assert plain["seed"] == design.timing_seed("")
    assert len(set(seeds)) == 2 and plain["seed"] not in seeds


def test_requests_naming_nobody_refused_or_passed_untimed(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path)
    with ManyProxy(tmp_path / "r", study, "--upstream", fake.url) as proxy, \
            httpx.Client(timeout=30) as client:
        nobody = post(client, proxy.url, {})
        odd = post(client, proxy.url, {"X-Retimer-Participant": "P1; DROP"})
        assert post(client, proxy.url, {"X-Retimer-Participant": "P1"}).status_code == 200
        records = proxy.records(1)
        err = proxy.stderr()
    assert nobody.status_code == 403 and odd.status_code == 400
    assert nobody.json()["error"]["message"] == ("retimer study: no X-Retimer-Participant header: "
                                                 "this study serves its participants only")
    assert "X-Retimer-Participant: a participant id is letters" in odd.json()["error"]["message"]
    assert len(fake.requests) == 1 and len(records) == 1  # refused requests never went upstream
    assert "a request named no participant (no X-Retimer-Participant header)" in err

    study = write_study(tmp_path, participants={"unidentified": "pass", "header": "X-Panel"})
    with ManyProxy(tmp_path / "s", study, "--upstream", fake.url) as proxy, \
            httpx.Client(timeout=30) as client:
        passed = post(client, proxy.url, {})
        named = post(client, proxy.url, {"X-Panel": "P2"})
        records = proxy.records(2)
    assert passed.status_code == named.status_code == 200
    assert content(passed) == content(named) == TEXT  # the same text, untimed or paced
    untimed, paced = records
    assert (untimed["participant"], untimed["condition"], untimed["unit"]) == (None, None, None)
    assert untimed["study"] == "hosted-test" and untimed["profile"] == "passthrough"
    assert (paced["participant"], paced["unit"]) == ("P2", 0)


def test_roster_names_participants_by_their_api_keys(tmp_path: Path, fake: FakeLLM) -> None:
    keys = {f"P{i}": f"sk-study-key-{i:02d}-{'x' * 20}" for i in range(1, 4)}
    (tmp_path / "roster.csv").write_text(
        "participant,key\n" + "".join(f"{p},{k}\n" for p, k in keys.items()))
    study = write_study(tmp_path, participants={"roster": "roster.csv"})
    expected = plan(study, 2)
    order = ["P2", "P1", "P3", "P2", "P1", "P3"]
    with ManyProxy(tmp_path / "k", study, "--upstream", fake.url) as proxy, \
            httpx.Client(timeout=30) as client:
        for p in order:
            assert post(client, proxy.url, {"authorization": f"Bearer {keys[p]}"}).status_code == 200
        stranger = post(client, proxy.url, {"authorization": "Bearer sk-not-on-the-roster"})
        records = proxy.records(len(order))
        seen = fake.requests
        shown = proxy.stdout() + proxy.stderr()
    assert stranger.status_code == 403
    assert "not in the study's roster" in stranger.json()["error"]["message"]
    for p in keys:
        assert [r["condition"] for r in records if r["participant"] == p] == expected[p]
    assert [s.headers["authorization"] for s in seen] == [f"Bearer {keys[p]}" for p in order]
    written = (tmp_path / "k" / "records.jsonl").read_text() + shown
    assert not [k for k in keys.values() if k in written] and "sk-not-on-the-roster" not in written
    assert "a roster of 3 API keys" in shown


def test_study_file_and_roster_mistakes_are_one_line(tmp_path: Path) -> None:
    cases = [({"roster": "missing.csv"}, "participants.roster: "),
             ({"roster": "bad.csv"}, "bad.csv: row 2: expected an API key of at least 8"),
             ({"header": "X_Bad"}, "participants.header: expected a header name")]
    (tmp_path / "bad.csv").write_text("participant,key\nP1,short\n")
    for section, needle in cases:
        result = run_cli("study", str(write_study(tmp_path, participants=section)))
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_rating_page_per_participant(tmp_path: Path, fake: FakeLLM) -> None:
    study = write_study(tmp_path, ratings=True)
    with ManyProxy(tmp_path / "g", study) as proxy, \
            httpx.Client(proxy=proxy.url, timeout=30) as client:
        for p in ("P1", "P2", "P1"):
            assert post(client, fake.url, {"X-Retimer-Participant": p}).status_code == 200
        records = proxy.records(3)
        rate = f"{proxy.url}/rate"
        latest = {p: httpx.get(f"{rate}?participant={p}&latest=1").json()["stream"]
                  for p in ("P1", "P2", "P3")}
        nameless = httpx.get(rate)
        page = httpx.get(f"{rate}?participant=P2").text
        theirs = httpx.post(f"{rate}?participant=P2", json={"stream": records[0]["id"], "speed": 3},
                            headers={"accept": "application/json"})
        mine = httpx.post(f"{rate}?participant=P2", json={"stream": records[1]["id"], "speed": 6},
                          headers={"accept": "application/json"})
        ratings = [json.loads(x) for x in proxy.log_path.read_text().splitlines()
                   if '"rating"' in x]
    assert latest == {"P1": records[2]["id"], "P2": records[1]["id"], "P3": None}
    assert nameless.status_code == 400 and "/rate?participant=ID" in nameless.text
    assert 'action="/rate?participant=P2"' in page
    assert theirs.status_code == 409 and mine.status_code == 200
    assert [(r["participant"], r["stream"], r["speed"]) for r in ratings] == [
        ("P2", records[1]["id"], 6)]


def test_a_study_replays_a_cassette_to_every_participant_at_their_condition(
        tmp_path: Path, fake: FakeLLM) -> None:
    """Content-controlled tasks: a task's conversation recorded once, then a study with
    `--replay` and nothing upstream: every participant's call is answered with the recorded
    reply (each participant replays the whole cassette), each at its own condition's pace,
    including a condition faster than any live upstream."""
    cassette = tmp_path / "cassette"
    tasks = ["Summarise the release notes", "Now list the three biggest changes"]
    with RetimerProxy(tmp_path / "rec", "--quiet", "--upstream", fake.url,
                      "--record", str(cassette)) as proxy, \
            httpx.Client(timeout=30, verify=False) as client:
        recorded = [content(post(client, proxy.url, {}, t)) for t in tasks]
        proxy.records(2)
    asked = len(fake.requests)
    conditions = [*CONDITIONS[:2], {"name": "taalas", "profile": "fastest", "jitter": 0}]
    study = write_study(tmp_path, conditions=conditions)
    expected = plan(study, len(tasks))
    gone = f"https://127.0.0.1:{free_port()}"
    with ManyProxy(tmp_path / "p", study, "--upstream", gone, "--replay", str(cassette)) as proxy, \
            httpx.Client(timeout=30, verify=False) as client:
        replies = {p: [content(post(client, proxy.url, {"X-Retimer-Participant": p}, t))
                       for t in tasks] for p in expected}
        records = proxy.records(len(tasks) * len(expected))
    assert len(fake.requests) == asked  # nothing went upstream
    assert all(got == recorded for got in replies.values()), replies
    assert all(r["cassette"]["match"] == "replayed" for r in records)
    assert [[r["condition"] for r in records if r["participant"] == p] for p in expected] == list(
        expected.values())
    fastest = [r for r in records if r["condition"] == "taalas"]
    assert fastest and all(r["target"]["tps"] == 17000.0 for r in fastest)
    # feasible from the cassette: the recorded reply arrives whole, so a stream is upstream-bound
    # only when the local replay's first byte came after the TTFT (a loaded machine: a CI run
    # had the replay proxy's first call answered in 389 ms, the others in 8-16 ms)
    assert all(r["upstream_bound"] == (r["upstream"]["ttft_ms"] > r["target"]["ttft_ms"])
               for r in fastest), [(r["upstream"]["ttft_ms"], r["upstream_bound"]) for r in fastest]
    assert any(not r["upstream_bound"] for r in fastest)
