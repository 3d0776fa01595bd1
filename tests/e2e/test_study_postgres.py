"""Study state on a real PostgreSQL server: the same positions and page state as the sqlite3
file, atomic across connections; a database that goes away mid-study costs the participants
no stream and no acknowledged rating; and the hosted study as researchers run it: 40 simulated
participants in headless Chromium through two retimer instances behind HAProxy sharing one
PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml

from retimer.proxy.study.files import load_study
from retimer.proxy.study.page_state import PageState
from retimer.proxy.study.state import SharedState
from tests.support.balancer import HAProxy
from tests.support.postgres import Postgres
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.upstream import FakeLLM

REPLY = "Sure: **boil** the pasta, then toss it with pesto and serve it warm."
pytestmark = pytest.mark.fake_llm(openai=REPLY, anthropic=REPLY, bursts=1)  # at once: never the pace
KEY = "sk-researcher-pg-key-0001"


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with Postgres() as server:
        yield server


@pytest.fixture
def fresh(pg: Postgres) -> str:
    """An empty database on the module's server, for one test."""
    name = f"t{time.monotonic_ns()}"
    with psycopg.connect(pg.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


def test_positions_and_page_state_on_postgres(fresh: str) -> None:
    state = SharedState(fresh, "pg-study")
    assert [state.next_request("A"), state.next_request("B"), state.next_request("A")] == [0, 0, 1]
    assert [state.conversation("A", "k"), state.conversation("B", "j"),
            state.conversation("B", "k"), state.conversation("A", "k")] == [0, 0, 1, 0]
    state.link("A", "resp_1", "k")
    assert (state.alias_of("A", "resp_1"), state.alias_of("B", "resp_1")) == ("k", "resp_1")
    state.add_rateable("A", "s1", {"id": "s1"})
    assert state.latest("A") == {"id": "s1"} and state.rateable_stream("B", "s1") is None
    # a staircase's levels and first answers (choose: one level up per "not slow")
    choose = lambda answered: 4 + sum(1 if not slow else -1 for _, slow in answered)  # noqa: E731
    assert [state.unit_level("A", 0, choose), state.unit_level("A", 0, choose)] == [4, 4]
    assert state.answer("A", 0, False) and not state.answer("A", 0, True)
    assert state.unit_level("A", 1, choose) == 5 and state.unit_level("B", 0, choose) == 4
    assert state.stairs("A") == [(0, 4, False), (1, 5, None)]
    page = PageState(fresh, "pg-study")
    assert page.consent("A", 1.0) and not page.consent("A", 2.0)
    assert page.start_turn("A", "t1", "hi", 10.0, 2, None, None, None) == 0
    page.finish_turn("t1", "hello", True, 7, "fast", 0)
    assert page.rate("A", "t1").condition == "fast"
    assert page.next_task("A", 1, 2, 11.0) is False
    progress = page.progress("A")
    assert (progress.task, progress.tokens, [t.rated for t in progress.turns]) == (1, 7, [True])
    with pytest.raises(Exception, match="holds the state of study 'pg-study'"):
        SharedState(fresh, "another-study")
    state.close()
    page.close()


def test_positions_are_handed_out_once_across_connections(fresh: str) -> None:
    SharedState(fresh, "s").close()
    got: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        state = SharedState(fresh, "s")
        for _ in range(40):
            index = state.next_request("P1")
            with lock:
                got.append(index)
        state.close()

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(120))  # none twice, none skipped


# ------------------------------------------------------------------ real proxies


# first tokens late enough that a loaded machine's upstream (the fake, through HAProxy and the
# state database) is rarely slower: a unit the upstream paced is left out of the analysis
CONDITIONS = [{"name": "brisk", "profile": "gpt-5", "ttft": "400ms", "tps": 1500, "jitter": 0},
              {"name": "leisurely", "profile": "gpt-5", "ttft": "800ms", "tps": 500, "jitter": 0}]


def write_study(tmp: Path) -> Path:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "hosted-pg", "seed": 29, "unit": "conversation", "counterbalancing": "latin-square",
        "participant_ids": "numbered", "conditions": CONDITIONS,
        "page": {"model": "study-model", "max_tokens": 200, "tasks": ["Plan a dinner.", "Name a fruit."],
                 "consent": "A short study.", "completion": {"code": "PGDONE"}}}))
    return path


class Instance(RetimerProxy):
    def __init__(self, tmp: Path, study: Path, upstream: str, state: str, confdir: Path) -> None:
        super().__init__(tmp, "--upstream", upstream, "--study-state", state, "--quiet",
                         confdir=confdir, env={**os.environ, "OPENAI_API_KEY": KEY})
        self.args = ["study", str(study), *self.args]




def records(*instances: RetimerProxy) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for proxy in instances:
        if proxy.log_path.exists():
            out += [json.loads(x) for x in proxy.log_path.read_text().splitlines() if x.strip()]
    return out


SLOW = [{"name": "brisk", "profile": "gpt-5", "ttft": "100ms", "tps": 12, "jitter": 0},
        {"name": "leisurely", "profile": "gpt-5", "ttft": "200ms", "tps": 8, "jitter": 0}]


def slow_study(tmp: Path, tps: tuple[float, float] = (12, 8)) -> Path:
    """The hosted study with replies that take seconds (REPLY at 8-12 tok/s, or `tps`): a fault
    can come while one is playing."""
    path = write_study(tmp)
    study = yaml.safe_load(path.read_text())
    conditions = [{**c, "tps": rate} for c, rate in zip(SLOW, tps, strict=True)]
    path.write_text(yaml.safe_dump({**study, "conditions": conditions,  # API clients beside the page
                                    "participants": {"beside_page": True}}))
    return path


def body(text: str) -> dict[str, Any]:
    """An API client's streaming call (a conversation of its own per text)."""
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}


def planned(design_path: Path, participant: str, units: int) -> list[str]:
    design, _ = load_study(design_path)
    return [design.condition(participant, i).name for i in range(units)]


def test_a_database_gone_away_loses_no_unit_no_turn_and_no_rating(tmp_path: Path, fake: FakeLLM) -> None:
    """PostgreSQL stopped abruptly while a page reply plays: the reply plays on at its pace; its
    turn completes when the database is back (it stayed `pending` for good); requests that
    need the state wait, then get a 503 "try again" and go nowhere (no unit passes untimed,
    none is used up); after the restart the first calls reconnect at once (no 503, no wait)."""
    with Postgres() as server:
        study = slow_study(tmp_path)
        proxy = Instance(tmp_path / "a", study, fake.url, server.url, tmp_path / "conf")
        headed = {"X-Retimer-Participant": "P2"}
        with proxy, httpx.Client(base_url=proxy.url, timeout=30) as c:
            c.get("/study/?participant=P1")
            assert c.post("/study/api/consent", json={}).status_code == 200
            assert c.post("/v1/chat/completions", json=body("q0"), headers=headed).status_code == 200
            with c.stream("POST", "/study/api/chat", json={"text": "hello"}) as reply:
                turn = reply.headers["x-study-turn"]
                chunks = reply.iter_bytes()
                first = next(chunks)
                server.stop("immediate")  # the database goes away while the reply plays
                stopped = time.monotonic()
                text = first + b"".join(chunks)
            played = time.monotonic() - stopped
            t0 = time.monotonic()
            during_state = c.get("/study/api/state")
            waited = time.monotonic() - t0
            rated = c.post("/study/api/rate", json={"turn": turn, "scores": {"speed": 5, "quality": 5}})
            during = c.post("/v1/chat/completions", json=body("q1"), headers=headed)
            server.start()
            t0 = time.monotonic()
            back = c.get("/study/api/state")  # reconnects at once: no 503 after a restart
            back_s = time.monotonic() - t0
            deadline = time.monotonic() + 15  # the kept end of the turn reaches the database
            while back.json()["turns"][-1]["status"] == "pending":
                assert time.monotonic() < deadline, "the turn stayed pending"
                time.sleep(0.1)
                back = c.get("/study/api/state")
            again = c.post("/study/api/rate", json={"turn": turn, "scores": {"speed": 5, "quality": 5}})
            after = c.post("/v1/chat/completions", json=body("q2"), headers=headed)
            time.sleep(0.3)
            lines = records(proxy)
            err = proxy.stderr()
    assert b"boil" in text and played > 0.5  # it played on, at its pace, with the database gone
    turn_state = back.json()["turns"][-1]
    assert turn_state["status"] == "done" and "boil" in turn_state["reply"]
    for r in (during_state, rated, during):
        assert r.status_code == 503 and r.headers["retry-after"] == "2", (r.status_code, r.text)
    assert 3.5 < waited < 8.0  # the request waited for the state (WAIT_S), then was told
    assert "briefly unavailable" in rated.json()["error"]
    assert "briefly unavailable" in during.json()["error"]["message"]  # the API's error shape
    assert back.status_code == 200 and back_s < 3.0
    assert again.status_code == 200 and after.status_code == 200
    streams = [x for x in lines if "type" not in x and x["participant"] == "P2"]
    assert [s["unit"] for s in streams] == [0, 1]  # the refused call used no unit
    assert [s["condition"] for s in streams] == planned(study, "P2", 2)
    assert all("study_error" not in x for x in lines if "type" not in x)
    ratings = [x for x in lines if x.get("type") == "rating"]
    assert len(ratings) == 1 and ratings[0]["stream"] == turn  # acknowledged once, stored once
    assert ratings[0]["condition"] == planned(study, "P1", 1)[0]
    assert "stopped answering" in err and "answers again" in err and "Traceback" not in err


@pytest.mark.parametrize("fault", ["stopped", "hung"])
def test_instances_idle_through_an_outage_answer_their_first_calls_after_it(
        tmp_path: Path, fake: FakeLLM, fault: str) -> None:
    """Two instances on one database, both idle while it is stopped and started again, or hung
    (every server process SIGSTOPped) and resumed: after a restart their connections died
    unseen, yet the first call to each after it is answered at once (reconnected, no 503), and
    the participants' units go on where they were, each with its planned condition (after a
    restart an idle instance's first study message once passed untimed)."""
    with Postgres() as server:
        study = slow_study(tmp_path)
        a = Instance(tmp_path / "a", study, fake.url, server.url, tmp_path / "conf")
        b = Instance(tmp_path / "b", study, fake.url, server.url, tmp_path / "conf")
        with a, b, httpx.Client(timeout=30) as c:
            for proxy, who in ((a, "P1"), (b, "P2")):
                r = c.post(f"{proxy.url}/v1/chat/completions", json=body(f"{who} q0"),
                           headers={"X-Retimer-Participant": who})
                assert r.status_code == 200
            if fault == "stopped":
                server.stop("immediate")
                time.sleep(3)  # nobody calls meanwhile
                server.start()
            else:
                pids = server.hang()
                time.sleep(3)
                server.resume(pids)
            answers = []
            for i, (proxy, who) in enumerate(((a, "P1"), (b, "P2"), (b, "P1"), (a, "P2"))):
                t0 = time.monotonic()  # (a conversation is a unit: each call starts its own)
                r = c.post(f"{proxy.url}/v1/chat/completions", json=body(f"{who} q{i + 1}"),
                           headers={"X-Retimer-Participant": who})
                answers.append((r.status_code, time.monotonic() - t0))
            time.sleep(0.3)
            lines = records(a, b)
            err = a.stderr() + b.stderr()
    assert [code for code, _ in answers] == [200] * 4, answers
    # answered at once: no wait for a dead connection (a connect timeout is 3 s, the state's
    # wait 4 s) beyond what a call after it takes, whose reply plays as long (a slow
    # condition's 1.5-2.5 s, more on a loaded machine)
    assert max(s for _, s in answers[:2]) < max(s for _, s in answers[2:]) + 2.0, answers
    for who in ("P1", "P2"):
        streams = sorted((x for x in lines if "type" not in x and x["participant"] == who),
                         key=lambda x: x["unit"])
        assert [x["unit"] for x in streams] == [0, 1, 2]
        assert [x["condition"] for x in streams] == planned(study, who, 3)
    assert "Traceback" not in err


def test_a_hung_database_stalls_no_stream(tmp_path: Path, fake: FakeLLM) -> None:
    """PostgreSQL hung (every process stopped) while one participant's reply plays and another's
    request needs the state: the reply plays on without a gap (the state's calls are off the
    event loop), the waiting request goes on when the database answers, its record says how
    long it waited, and its unit is the planned one."""
    with Postgres() as server:
        # replies of 2.1-2.6 s: the hang (a subprocess to list the server's processes, then
        # SIGSTOP) comes while most of the reply is still to play, even on a busy machine (a CI
        # run's hang came when a 1.1 s reply had 0.2 s left)
        study = slow_study(tmp_path, tps=(6, 5))
        proxy = Instance(tmp_path / "a", study, fake.url, server.url, tmp_path / "conf")
        with proxy, httpx.Client(base_url=proxy.url, timeout=30) as c:
            arrivals: list[float] = []
            with c.stream("POST", "/v1/chat/completions", json=body("p1"),
                          headers={"X-Retimer-Participant": "P1"}) as reply:
                chunks = reply.iter_bytes()
                text = next(chunks)
                pids = server.hang()
                hung = time.monotonic()
                results: list[httpx.Response] = []
                waiter = threading.Thread(target=lambda: results.append(c.post(
                    "/v1/chat/completions", json=body("p2"), headers={"X-Retimer-Participant": "P2"})))
                waiter.start()
                try:
                    for chunk in chunks:
                        arrivals.append(time.monotonic())
                        text += chunk
                    time.sleep(max(0.0, hung + 2.5 - time.monotonic()))  # hung 2.5 s in all
                finally:
                    server.resume(pids)
            waiter.join(30)
            time.sleep(0.3)
            lines = records(proxy)
    assert b"boil" in text and arrivals[-1] - hung > 1.0  # the reply kept playing while hung
    gaps = [b - a for a, b in zip([hung, *arrivals], arrivals, strict=False)]
    assert max(gaps) < 1.0, gaps  # 1/5 s apart at the slowest; a held loop shows the 2.5 s hang
    assert results and results[0].status_code == 200 and "boil" in results[0].text
    p2 = [x for x in lines if "type" not in x and x["participant"] == "P2"]
    assert [(x["unit"], x["condition"]) for x in p2] == [(0, planned(study, "P2", 1)[0])]
    assert p2[0]["state_wait_ms"] > 1000  # it waited for the hung database, and says so
    # --status counts the units that waited, as the records say: P2's, and P1's too when a
    # loaded machine made its state call take over 50 ms (the flake hunt: "2 units waited")
    status = run_cli("study", str(study), "--status", str(proxy.log_path)).stdout
    waited = [x for x in lines if "type" not in x and x.get("state_wait_ms") is not None]
    late = sum(bool(x["upstream_bound"]) for x in waited)
    longest = max(x["state_wait_ms"] for x in waited)
    assert p2[0] in waited and longest == p2[0]["state_wait_ms"]
    assert (f"{len(waited)} unit{'' if len(waited) == 1 else 's'} waited for the study's state "
            f"database (the longest {longest / 1000:.1f} s); {late} of them late") in status


PARTICIPANTS = 40
AT_ONCE = 8  # browser contexts at once: participants overlap as they would online


def rated(number: int, task: int) -> tuple[int, int]:
    """Participant `number`'s (speed, quality) for a task: spread over the scale, blind to the
    condition (a participant cannot see it)."""
    return 1 + (number * 3 + task * 5) % 7, 2 + (number + task) % 5


async def participant(browser: Any, url: str, pid: str, pause: float = 0.0,
                      patience: float = 30.0) -> dict[str, Any]:
    """One participant's session on the page, as a person would go through it (`pause`
    seconds of reading before each message and each rating; `patience`: how long they wait for
    the page, which retries by itself while the study is briefly unavailable)."""
    context = await browser.new_context(ignore_https_errors=True)  # a test front end's certificate
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    wait = patience * 1000
    await page.goto(f"{url}/study/?PROLIFIC_PID={pid}")
    await page.click("#agree")
    for task, message in enumerate(["What should I cook?", "Name a fruit, please."]):
        await page.wait_for_selector(f"text=Task {task + 1} of 2", timeout=wait)
        await page.wait_for_selector("#text:not([disabled])", timeout=wait)
        await asyncio.sleep(pause)
        await page.fill("#text", message)
        await page.keyboard.press("Enter")
        await page.wait_for_selector("#rate", timeout=wait)
        await asyncio.sleep(pause)
        number = int(pid[1:])
        speed, quality = rated(number, task)
        await page.locator(f'#rate input[name="speed"][value="{speed}"]').check(force=True)
        await page.locator(f'#rate input[name="quality"][value="{quality}"]').check(force=True)
        await page.click("#save")
        await page.wait_for_selector("#rate", state="detached", timeout=wait)
        await page.click("#next")
    await page.wait_for_selector("#code", timeout=wait)
    code = await page.locator("#code").inner_text()
    await context.close()
    return {"participant": pid, "code": code, "errors": errors}


async def run_participants(url: str, ids: list[str], at_once: int = 0, **kw: Any,
                           ) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-component-update"])
        gate = asyncio.Semaphore(at_once or AT_ONCE)

        async def one(pid: str) -> dict[str, Any]:
            async with gate:
                return await participant(browser, url, pid, **kw)

        try:
            return await asyncio.gather(*(one(p) for p in ids))
        finally:
            await browser.close()


def test_forty_participants_through_two_instances_behind_haproxy(
        tmp_path: Path, fake: FakeLLM, fresh: str) -> None:
    study = write_study(tmp_path)
    design, profiles = load_study(str(study))
    conf = tmp_path / "conf"  # one confdir: one CA and one cookie key for both instances
    a = Instance(tmp_path / "a", study, fake.url, fresh, conf)
    b = Instance(tmp_path / "b", study, fake.url, fresh, conf)
    ids = [f"P{i}" for i in range(1, PARTICIPANTS + 1)]
    with a, b, HAProxy(tmp_path / "lb", {"a": a.port, "b": b.port}) as lb:
        sessions = asyncio.run(run_participants(lb.url, ids))
        time.sleep(0.5)
        lines_a, lines_b = records(a), records(b)
        token = (conf / "study-admin-token").read_text().strip()
        views = [httpx.get(f"{x.url}/study/admin.json", timeout=30,
                           headers={"authorization": f"Bearer {token}"}).json() for x in (a, b)]
    assert [s["errors"] for s in sessions] == [[]] * PARTICIPANTS
    assert [s["code"] for s in sessions] == ["PGDONE"] * PARTICIPANTS
    lines = lines_a + lines_b
    streams = [x for x in lines if "type" not in x]
    assert [x for x in lines_a if "type" not in x] and [x for x in lines_b if "type" not in x]
    assert len(streams) == 2 * PARTICIPANTS and {s["outcome"] for s in streams} == {"complete"}
    for pid in ids:  # each participant's row of the square, in order, whichever instance served
        mine = sorted((s for s in streams if s["participant"] == pid), key=lambda s: s["unit"])
        assert [s["unit"] for s in mine] == [0, 1]
        assert [s["condition"] for s in mine] == [design.condition(pid, u).name for u in (0, 1)]
        for s in mine:  # paced to its condition
            assert s["target"]["ttft_ms"] == pytest.approx(profiles[s["condition"]].ttft.p50 * 1000)
    ratings = [x for x in lines if x.get("type") == "rating"]
    assert Counter((r["participant"], r["task"]) for r in ratings) == Counter(
        {(p, t): 1 for p in ids for t in (0, 1)})  # every rating stored once
    by_id = {s["id"]: s for s in streams}
    for r in ratings:
        assert by_id[r["stream"]]["participant"] == r["participant"]
        number = int(r["participant"][1:])
        assert (r["condition"], r["speed"], r["quality"]) == (
            by_id[r["stream"]]["condition"], *rated(number, r["task"]))
    finished = [x["participant"] for x in lines if x.get("event") == "finished"]
    assert sorted(finished) == sorted(ids)
    with psycopg.connect(fresh) as conn:
        kept = conn.execute("SELECT COUNT(*) FROM page_turns WHERE rated = 1").fetchone()
    assert kept == (2 * PARTICIPANTS,)
    status = run_cli("study", str(study), "--status", str(a.log_path), str(b.log_path))
    assert status.stdout.splitlines()[0] == (
        f"study hosted-pg: {PARTICIPANTS} participants started, {PARTICIPANTS} finished; "
        f"{2 * PARTICIPANTS} units, {2 * PARTICIPANTS} ratings")
    assert "balance: every unit has the condition the design gives it" in status.stdout
    # one study, one view: each instance's admin view and --status on the shared state give the
    # whole study's figures (each instance's log holds only its own part)
    for view in views:
        assert (view["participants"], view["finished"], view["units"], view["ratings"]) == (
            PARTICIPANTS, PARTICIPANTS, 2 * PARTICIPANTS, 2 * PARTICIPANTS)
    assert views[0]["conditions"] == views[1]["conditions"]
    # each instance draws its own timing (the study's seed and the number the state gave it)
    seeds = [{s["seed"] for s in part if "type" not in s} for part in (lines_a, lines_b)]
    assert len(seeds[0]) == len(seeds[1]) == 1 and seeds[0] != seeds[1]
    shared = run_cli("study", str(study), "--status", "--study-state", fresh)
    assert shared.stdout == status.stdout, shared.stderr
    done = run_cli("study", "analyze", str(a.log_path), str(b.log_path), "--study", str(study),
                   "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)  # the real logs, analysed: a Latin square's model
    bound = sum(1 for s in streams if s["upstream_bound"])  # the upstream set the pace: left out
    assert figures["rated_responses"] == 2 * PARTICIPANTS - bound
    late = sum(1 for s in streams if s["upstream_bound"] and "state_wait_ms" in s)
    assert figures["excluded"].get("responses the upstream paced (upstream-bound)", 0) == bound - late
    assert figures["excluded"].get("responses late after waiting for the study's state database (upstream-bound)",
                                   0) == late
    assert figures["conditions"] == ["brisk", "leisurely"]
    assert [m["target_ttft_ms"] for m in figures["manipulation"]] == [
        pytest.approx(profiles[c].ttft.p50 * 1000) for c in ("brisk", "leisurely")]
    speed = next((c for c in figures["comparisons"] if c["scale"] == "speed"), None)
    assert speed is not None, (bound, figures["excluded"])
    assert speed["test"] == "mixed-model" and speed["ci"][0] < speed["estimate"] < speed["ci"][1]


@pytest.mark.serial  # ten Chromium pages and two faults timed against them: alone. (In the parallel
# part it failed twice, two participants stuck: a state call answered as its wait ran out was
# refused 503 with its chat turn committed; fixed in the state worker, see its race test.)
def test_ten_participants_ride_out_a_stopped_and_a_hung_database(tmp_path: Path, fake: FakeLLM) -> None:
    """The issue's run, end to end: 10 participants in Chromium through the documented HTTPS
    front end (HAProxy in HTTP mode) over two instances sharing PostgreSQL, which is stopped
    abruptly for 10 s and, later, hung (SIGSTOP) for 8 s while they work. Every participant
    finishes with the code; no unit is untimed and each has its planned condition in order;
    every rating is stored once; no stream stalls on the database; both instances' admin views
    give the same, whole study."""
    from tests.support.balancer import StudyFront

    ids = [f"P{i}" for i in range(1, 11)]
    with Postgres() as server:
        study = write_study(tmp_path)
        design, _ = load_study(str(study))
        conf = tmp_path / "conf"
        a = Instance(tmp_path / "a", study, fake.url, server.url, conf)
        b = Instance(tmp_path / "b", study, fake.url, server.url, conf)
        faults: list[tuple[str, float]] = []

        def outages() -> None:  # 24 s in all; the participants work for longer (4 s pauses)
            time.sleep(3)
            faults.append(("stopped", time.monotonic()))
            server.stop("immediate")
            time.sleep(10)
            server.start()
            faults.append(("back", time.monotonic()))
            time.sleep(3)
            pids = server.hang()
            faults.append(("hung", time.monotonic()))
            time.sleep(8)
            server.resume(pids)
            faults.append(("resumed", time.monotonic()))

        with a, b, StudyFront(tmp_path / "front", {"a": a.port, "b": b.port}) as front:
            chaos = threading.Thread(target=outages)
            chaos.start()
            started = time.monotonic()
            sessions = asyncio.run(run_participants(front.url, ids, at_once=10, pause=4.0,
                                                    patience=90))
            took = time.monotonic() - started
            chaos.join()
            time.sleep(1.0)  # the writes kept during the hang reach the database
            token = (conf / "study-admin-token").read_text().strip()
            views = [httpx.get(f"{x.url}/study/admin.json", timeout=30,
                               headers={"authorization": f"Bearer {token}"}).json() for x in (a, b)]
            lines = records(a, b)
            err = a.stderr() + b.stderr()
    assert [kind for kind, _ in faults] == ["stopped", "back", "hung", "resumed"]
    assert took > faults[-1][1] - started  # the participants were still at work through both
    assert [s["errors"] for s in sessions] == [[]] * len(ids)
    assert [s["code"] for s in sessions] == ["PGDONE"] * len(ids)
    streams = [x for x in lines if "type" not in x]
    assert all(s["condition"] is not None for s in streams)  # no unit passed untimed
    for pid in ids:  # each participant's row of the square, in order
        mine = sorted((s for s in streams if s["participant"] == pid and s["outcome"] == "complete"),
                      key=lambda s: s["unit"])
        assert [s["unit"] for s in mine] == [0, 1], (pid, mine)
        assert [s["condition"] for s in mine] == [design.condition(pid, u).name for u in (0, 1)]
    ratings = [x for x in lines if x.get("type") == "rating"]
    assert Counter((r["participant"], r["task"]) for r in ratings) == Counter(
        {(p, t): 1 for p in ids for t in (0, 1)})  # every rating stored once
    # no stream waited on the database while it played: a held loop shows the outage's seconds;
    # 13.5 ms at most measured on a quiet machine, the bound leaves room for a loaded one
    for s in streams:
        assert s["lateness_ms"]["max"] < 250, s["lateness_ms"]
    for view in views:  # the same, whole study from either instance
        assert (view["participants"], view["finished"], view["units"], view["ratings"]) == (
            10, 10, 20, 20), view
    assert views[0] == views[1]
    assert "stopped answering" in err and "answers again" in err and "Traceback" not in err


def test_a_message_sent_into_a_hung_database_is_answered_once_it_resumes(
        tmp_path: Path, fake: FakeLLM) -> None:
    """The ten-participant run's stuck participants, step by step: a participant consents, the
    database hangs, their message is refused (503: the state did not answer) while the page
    resends it as it does (1 s, then 2 s later); once the database resumes, the resend is
    answered, the turn ends done, and no turn is left waiting (a stale `pending` turn would
    keep the page's Send disabled for good)."""
    with Postgres() as server:
        study = write_study(tmp_path)
        proxy = Instance(tmp_path / "a", study, fake.url, server.url, tmp_path / "conf")
        with proxy, httpx.Client(base_url=proxy.url, timeout=60) as c:
            c.get("/study/?participant=P1")
            assert c.post("/study/api/consent", json={}).status_code == 200
            pids = server.hang()
            hung = time.monotonic()
            tries: list[tuple[float, int]] = []
            try:
                for pause in (0.0, 1.0, 2.0):  # the page's back-off between its sends
                    time.sleep(pause)
                    sent = c.post("/study/api/chat", json={"text": "What should I cook?"})
                    tries.append((time.monotonic() - hung, sent.status_code))
                    if sent.status_code == 200 or time.monotonic() - hung > 8:
                        break
            finally:
                time.sleep(max(0.0, hung + 8 - time.monotonic()))
                server.resume(pids)
            answer = None
            for _ in range(6):  # the page goes on resending after the hang, 4 s apart at most
                if tries[-1][1] == 200:
                    break
                answer = c.post("/study/api/chat", json={"text": "What should I cook?"})
                tries.append((time.monotonic() - hung, answer.status_code))
                if answer.status_code != 200:
                    time.sleep(4)
            state = c.get("/study/api/state").json()
    assert tries[0][1] == 503, tries  # refused while the database hung
    assert tries[-1][1] == 200, tries  # answered once it was back
    assert [t["status"] for t in state["turns"]][-1] == "done", state["turns"]
    assert "pending" not in [t["status"] for t in state["turns"]], state["turns"]
