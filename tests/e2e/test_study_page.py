"""The hosted study page (`page:` in the study file): a participant in headless Chromium
consents, chats with the (fake) model through retimer's pacing, rates each response and gets
the completion code; the server alone decides what goes upstream; a reload loses nothing; the
page is safe to put on the internet (signed cookie, same-origin actions, limits)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from retimer.proxy.study.files import load_study
from retimer.study.page import PageError, cookie_value, parse_page, verify_cookie
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.upstream import FakeLLM

REPLY = ("Here is a **quick** dinner:\n\n1. Boil the pasta.\n2. Toss it with pesto.\n\n"
         "```python\nprint('buon appetito')\n```\n")
pytestmark = pytest.mark.fake_llm(openai=REPLY, anthropic=REPLY, bursts=3)
KEY = "sk-researcher-secret-key-0001"
TASKS = ["Ask the assistant for a weekday dinner recipe.", "Ask it to explain what a CSV file is."]
CONDITIONS = [{"name": "swift", "profile": "gpt-5", "ttft": "60ms", "tps": 900, "jitter": 0},
              {"name": "sluggish", "profile": "gpt-5", "ttft": "1500ms", "tps": 300, "jitter": 0}]


def page_study(tmp: Path, **page: Any) -> Path:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "page-study", "seed": 11, "unit": "conversation",
        "counterbalancing": "latin-square", "conditions": CONDITIONS,
        "page": {"model": "study-model", "max_tokens": 300, "system": "Be brief.",
                 "title": "Chatting with an assistant",
                 "consent": "This is a **study** of chat assistants. Your answers are anonymous.",
                 "tasks": TASKS, "slow_question": True,
                 "completion": {"code": "C0MPL3TE"}, **page}}))
    return path


class PageProxy(RetimerProxy):
    def __init__(self, tmp: Path, study: Path, upstream: str, *args: str) -> None:
        import os

        super().__init__(tmp, "--upstream", upstream, *args,
                         env={**os.environ, "OPENAI_API_KEY": KEY})
        self.args = ["study", str(study), *self.args]




def log_lines(proxy: RetimerProxy) -> list[dict[str, Any]]:
    return [json.loads(x) for x in proxy.log_path.read_text().splitlines() if x.strip()]


# ------------------------------------------------------------------ the settings


@pytest.mark.parametrize("raw, needle", [
    ({"tasks": ["a"]}, "page.model: required"),
    ({"model": "m"}, "page.tasks: expected a list"),
    ({"model": "m", "tasks": ["a"], "api": "cohere"}, "page.api: expected one of openai, anthropic"),
    ({"model": "m", "tasks": ["a"], "max_tokens": 0}, "page.max_tokens: expected a whole number"),
    ({"model": "m", "tasks": ["a"], "scales": [{"name": "Speed"}]}, "page.scales[0].name"),
    ({"model": "m", "tasks": ["a"], "limits": {"tokens": 5}}, "page.limits.tokens: unknown key"),
    ({"model": "m", "tasks": ["a"], "completion": {"redirect": "http://x"}},
     "page.completion.redirect: expected an https://"),
    ({"model": "m", "tasks": ["a"], "key_env": "not a name"}, "page.key_env"),
    ({"model": "m", "tasks": ["a"], "colour": "red"}, "page.colour: unknown key"),
    ({"model": "m", "tasks": ["a"], "max_tokens_field": "max_output_tokens"},
     "page.max_tokens_field: expected max_completion_tokens or max_tokens for api openai"),
    ({"model": "m", "tasks": ["a"], "api": "anthropic", "max_tokens_field": "max_completion_tokens"},
     "page.max_tokens_field: expected max_tokens for api anthropic"),
    ({"model": "m", "tasks": ["a"], "extra_body": {"model": "gpt-4o"}},
     "page.extra_body.model: set by the page itself"),
    ({"model": "m", "tasks": ["a"], "extra_body": ["reasoning_effort"]},
     "page.extra_body: expected a mapping of request fields"),
    ({"model": "m", "tasks": ["a", "b", "c"], "turns": 2, "limits": {"turns": 5}},
     "page.limits.turns: 5 messages cannot finish the study: page.tasks .3. x page.turns .2. "
     "need at least 6"),
    ({"model": "m", "tasks": ["a"], "limits": {"study_requests_per_hour": 0}},
     "page.limits.study_requests_per_hour: expected a whole number from 1"),
])
def test_page_section_errors_name_the_key(raw: dict[str, Any], needle: str) -> None:
    with pytest.raises(PageError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        parse_page(raw)


def test_the_walkthroughs_study_file_is_a_valid_hosted_study(tmp_path: Path) -> None:
    """docs/studies.md's hosted study, step 1, as written: it loads, with the page, arrival ids
    and limits a participant can finish within; step 2's pilot, against an upstream as the doc
    describes it (about 640 ms to the first token, 140 tok/s), prints the doc's verdicts and
    sends what the page's calls send (the cap under OpenAI's name, the extra fields)."""
    import os

    from retimer.study.study_file import parse_study
    from tests.support.stream_bodies import make_openai_stream

    text = (Path(__file__).parents[2] / "docs" / "studies.md").read_text()
    step = text.split("**1. Write the study file.**", 1)[1]
    block = step.split("```yaml\n", 1)[1].split("```", 1)[0]
    design = parse_study(yaml.safe_load(block), "study.yaml")
    assert design.page is not None and design.participant_ids == "arrival"
    limits = design.page.limits
    assert limits.turns is not None and limits.turns >= len(design.page.tasks) * design.page.turns
    assert limits.study_requests_per_hour and limits.new_participants_per_minute
    shown = step.split("**Content-controlled tasks.**", 1)[0].rsplit("```\n", 2)[-2].splitlines()[1:]
    (tmp_path / "dinner-study.yaml").write_text(block)
    # 140 words a second in chunks of 14: a loaded machine's late sleeps (one per chunk) cannot
    # bring it near the slow condition's 95 tok/s, as a late sleep per word did (hunt 6)
    reply = make_openai_stream("A quick weeknight dinner: pasta with lemon and spinach. " * 6,
                               words_per_chunk=14)
    with FakeLLM(reply, per_event_gap=0.1, first_delay=0.62) as upstream:
        pilot = subprocess.run([sys.executable, "-m", "retimer", "study", "dinner-study.yaml",
                                "--pilot", "5", "--upstream", upstream.url], capture_output=True,
                               text=True, timeout=120, cwd=tmp_path,
                               env={**os.environ, "OPENAI_API_KEY": KEY})
        sent = json.loads(upstream.requests[0].body)
    assert pilot.returncode == 1, pilot.stderr  # the fast condition is infeasible, as shown
    assert pilot.stdout.splitlines()[1:] == shown
    assert (sent["model"], sent["max_completion_tokens"], sent["reasoning_effort"]) == (
        design.page.model, design.page.max_tokens, "minimal")


def _feasibility_study(tmp: Path) -> Path:
    """A fast condition no slow upstream can serve, and a slow one any can."""
    study = tmp / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "feasible", "seed": 5, "unit": "request", "participant_ids": "arrival",
        "participants": {"beside_page": True},
        "conditions": [{"name": "instant", "profile": "gpt-5", "ttft": "100ms", "tps": 2000,
                        "jitter": 0},
                       {"name": "leisurely", "profile": "gpt-5", "ttft": "3s", "tps": 5, "jitter": 0}],
        "page": {"model": "study-model", "tasks": TASKS, "completion": {"code": "F"}}}))
    return study


def test_the_pilot_names_the_condition_a_slow_upstream_cannot_serve(tmp_path: Path) -> None:
    """`--pilot N`: N of the page's own calls to the upstream (600 ms to its first token), and
    per condition how many replies would have been upstream-bound: the 100 ms condition is
    infeasible (exit 1), the 3 s one feasible; the upstream's own figures are printed."""
    import os

    from tests.support.stream_bodies import make_openai_stream

    study = _feasibility_study(tmp_path)
    with FakeLLM(make_openai_stream(REPLY), first_delay=0.6) as slow:
        result = subprocess.run([sys.executable, "-m", "retimer", "study", str(study), "--pilot",
                                 "3", "--upstream", slow.url], capture_output=True, text=True,
                                timeout=120, env={**os.environ, "OPENAI_API_KEY": KEY})
        served = slow.requests
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("upstream: 3 of 3 replies whole; median TTFT 6")  # 600-699 ms
    assert lines[1] == ("instant (TTFT 100 ms, 2000 tok/s): 3 of 3 replies upstream-bound: "
                        "INFEASIBLE: slower upstream than the condition")
    assert lines[2] == "leisurely (TTFT 3000 ms, 5 tok/s): 0 of 3 replies upstream-bound: feasible"
    assert [json.loads(s.body)["model"] for s in served] == ["study-model"] * 3
    assert [json.loads(s.body)["messages"][-1]["content"] for s in served] == [*TASKS, TASKS[0]]
    assert all(s.headers["authorization"] == f"Bearer {KEY}" for s in served)
    assert "Traceback" not in result.stderr
    no_page = tmp_path / "plain.yaml"
    no_page.write_text(yaml.safe_dump({"name": "p", "seed": 1, "unit": "request",
                                       "conditions": ["cerebras", "gpt-5"]}))
    refused = run_cli("study", str(no_page), "--pilot", "2", "--upstream", "http://127.0.0.1:9")
    assert refused.returncode == 2 and "--pilot: sends the study page's calls" in refused.stderr


def test_a_condition_the_upstream_paces_is_said_loudly_while_the_study_runs(tmp_path: Path) -> None:
    from tests.support.stream_bodies import make_openai_stream

    study = _feasibility_study(tmp_path)
    with FakeLLM(make_openai_stream(REPLY), first_delay=0.5) as slow, \
            PageProxy(tmp_path / "p", study, slow.url) as proxy, httpx.Client(timeout=30) as c:
        for i in range(6):  # arrivals 0..5 alternate the two conditions' rows
            c.post(f"{proxy.url}/v1/chat/completions", headers={"X-Retimer-Participant": f"p{i}"},
                   json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        time.sleep(0.3)
        err = proxy.stderr()
    assert "condition #1 of the study file is paced by the upstream" in err
    assert "Check it with --pilot" in err and "condition #2" not in err
    assert "instant" not in err and "leisurely" not in err  # blinded: participants may see it


def test_a_fixed_task_plays_one_recorded_reply_at_each_conditions_timing(tmp_path: Path,
                                                                         fake: FakeLLM) -> None:
    """Content-controlled: a task with a fixed first message; `--pilot` keeps its reply in the
    response cache; the study started with that cache plays the same reply to a fast and a
    slow participant, each at their condition's timing, with no call upstream (so a condition
    faster than the upstream is feasible), whatever text the page sent."""
    import os

    prompt = "What is a CSV file?"
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "fixed", "seed": 4, "unit": "conversation", "counterbalancing": "latin-square",
        "participant_ids": "numbered",
        "conditions": [{"name": "quick", "profile": "gpt-5", "ttft": "100ms", "tps": 400, "jitter": 0},
                       {"name": "slow", "profile": "gpt-5", "ttft": "1200ms", "tps": 40, "jitter": 0}],
        "page": {"model": "study-model", "completion": {"code": "FX"},
                 "tasks": [{"text": "Ask what a CSV file is.", "prompt": prompt}]}}))
    cache = tmp_path / "cache"
    pilot = subprocess.run([sys.executable, "-m", "retimer", "study", str(study), "--pilot", "1",
                            "--upstream", fake.url, "--cache", str(cache)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": KEY})
    assert "cache: the replies to 1 fixed first message(s) kept in" in pilot.stdout, pilot.stderr
    assert [json.loads(s.body)["messages"][-1]["content"] for s in fake.requests] == [prompt]
    design, _ = load_study(str(study))
    replies = {}
    with PageProxy(tmp_path / "p", study, fake.url, "--cache", str(cache)) as proxy:
        for pid in ("P1", "P2"):
            with httpx.Client(base_url=proxy.url, timeout=30) as c:
                c.get(f"/study/?participant={pid}")
                c.post("/study/api/consent", json={})
                shown = c.get("/study/api/state").json()
                assert c.post("/study/api/chat", json={"text": "something else"}).status_code == 200
                turn = c.get("/study/api/state").json()["turns"][-1]
                replies[pid] = turn["reply"]
        time.sleep(0.3)
        lines = log_lines(proxy)
    assert shown["prompts"] == [prompt]  # the page shows it in the box
    assert turn["message"] == prompt and turn["status"] == "done"
    assert len(fake.requests) == 1  # both replies from the recording
    assert replies == {"P1": REPLY, "P2": REPLY}  # the recorded reply, whole, to each
    streams = {s["participant"]: s for s in lines if "type" not in s}
    assert {p: s["condition"] for p, s in streams.items()} == {
        p: design.condition(p, 0).name for p in ("P1", "P2")}
    assert {s["condition"] for s in streams.values()} == {"quick", "slow"}
    for s in streams.values():
        assert s["cache"] == "hit"
        target = s["target"]["ttft_ms"]
        assert target - 5 <= s["emitted"]["ttft_ms"] < target + 1000  # its own condition's pace
        assert s["upstream_bound"] is False


def test_chromium_shows_a_fixed_first_message_and_sends_it(tmp_path: Path, fake: FakeLLM,
                                                           chromium: Any) -> None:
    prompt = "What is a CSV file?"
    study = page_study(tmp_path, tasks=[{"text": "Ask about CSV files.", "prompt": prompt}, "Free."])
    with PageProxy(tmp_path / "p", study, fake.url) as proxy:
        page = chromium.new_context().new_page()
        page.goto(f"{proxy.url}/study/?participant=P1")
        page.click("#agree")
        page.wait_for_selector("#text:not([disabled])", timeout=30000)
        box = (page.input_value("#text"), page.get_attribute("#text", "readonly"))
        page.click("#send")
        rate(page, 5, 5, False)
        after = (page.input_value("#text"), page.get_attribute("#text", "readonly"))
        sent = page.locator(".msg.user .b").first.inner_text()
        page.context.close()
    assert box == (prompt, "") and sent == prompt  # shown, read-only, sent as is
    assert after == ("", None)  # then the participant writes their own
    assert json.loads(fake.requests[-1].body)["messages"][-1]["content"] == prompt


def test_an_instance_with_another_cookie_secret_is_refused_at_start(tmp_path: Path,
                                                                     fake: FakeLLM) -> None:
    """Instances of one hosted study share their state: one whose cookie secret differs (its own
    confdir, no RETIMER_STUDY_SECRET) would refuse the others' participants; it does not start."""
    import os

    study = page_study(tmp_path)
    state = str(tmp_path / "state.sqlite")
    env = {k: v for k, v in os.environ.items() if k != "RETIMER_STUDY_SECRET"}
    with PageProxy(tmp_path / "a", study, fake.url, "--study-state", state):
        other = subprocess.run(
            [sys.executable, "-m", "retimer", "study", str(study), "--upstream", fake.url,
             "--study-state", state, "--listen-port", "0", "--set",
             f"confdir={tmp_path / 'b-conf'}"], capture_output=True, text=True, timeout=60,
            env={**env, "OPENAI_API_KEY": KEY})
    assert other.returncode == 2, other.stderr
    assert "sign their cookies with another secret" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1


def test_cookie_names_only_its_own_participant() -> None:
    secret = b"k" * 32
    value = cookie_value(secret, "P1")
    assert verify_cookie(secret, value) == "P1"
    assert verify_cookie(b"j" * 32, value) is None
    assert verify_cookie(secret, value.replace("P1.", "P2.")) is None
    assert verify_cookie(secret, "P2." + "0" * 32) is None and verify_cookie(secret, "") is None


def test_page_start_errors_are_one_line(tmp_path: Path) -> None:
    study = page_study(tmp_path)
    for args, needle in [((), "page: the study page sends the study's requests"),
                         (("--upstream", "http://127.0.0.1:9", "--participant", "P1"),
                          "--participant: a study with a page")]:
        result = run_cli("study", str(study), *args)
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run([sys.executable, "-m", "retimer", "study", str(study), "--upstream",
                             "http://127.0.0.1:9"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 2 and "page.key_env: OPENAI_API_KEY is not set" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ a participant in Chromium




def rate(page: Any, speed: int, quality: int, slow: bool) -> None:
    page.wait_for_selector("#rate", timeout=30000)
    page.locator(f'#rate input[name="speed"][value="{speed}"]').check(force=True)
    page.locator(f'#rate input[name="quality"][value="{quality}"]').check(force=True)
    page.locator(f'#rate input[name="slow"][value="{"yes" if slow else "no"}"]').check(force=True)
    page.click("#save")
    page.wait_for_selector("#rate", state="detached", timeout=10000)


def send(page: Any, text: str) -> None:
    page.wait_for_selector("#text:not([disabled])", timeout=30000)
    page.fill("#text", text)
    page.keyboard.press("Enter")


def test_a_participant_completes_the_study_in_chromium(tmp_path: Path, fake: FakeLLM,
                                                      chromium: Any) -> None:
    panel = "https://panel.example/done?cc=C0MPL3TE"
    study = page_study(tmp_path, completion={"code": "C0MPL3TE", "redirect": panel})
    design, profiles = load_study(str(study))
    shots = tmp_path / "shots"
    errors: list[str] = []
    with PageProxy(tmp_path / "p", study, fake.url) as proxy:
        context = chromium.new_context(viewport={"width": 900, "height": 900})
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.route("https://panel.example/**", lambda route: route.fulfill(
            body="back at the panel", content_type="text/plain"))  # the panel, offline
        page.goto(f"{proxy.url}/study/?PROLIFIC_PID=P1&STUDY_ID=s")
        assert page.url == f"{proxy.url}/study/"  # the id went into the cookie, out of the address
        page.wait_for_selector("#agree")
        assert page.locator(".consent strong").inner_text() == "study"
        page.click("#agree")
        send(page, "What can I cook tonight?")
        page.wait_for_selector("#rate", timeout=30000)
        page.screenshot(path=str(shots / "rate.png"), full_page=True)
        rate(page, 6, 5, False)
        assert page.locator(".assistant .b strong").first.inner_text() == "quick"
        assert "buon appetito" in page.locator(".assistant pre code").inner_text()
        page.screenshot(path=str(shots / "task1.png"), full_page=True)
        page.click("#next")
        page.wait_for_selector("text=Task 2 of 2")
        send(page, "What is a CSV file?")
        page.reload()  # mid-response: the server keeps the conversation
        page.wait_for_selector(".msg.user", timeout=10000)
        assert page.locator(".msg.user .b").last.inner_text() == "What is a CSV file?"
        interrupted = page.locator("text=This response was interrupted")
        deadline = time.monotonic() + 20
        while not page.locator("#rate").count() and not interrupted.count():
            assert time.monotonic() < deadline, "the reloaded page never showed the turn's end"
            time.sleep(0.2)
        cut = bool(interrupted.count())
        if cut:  # the reload closed the stream: ask again, same conversation
            send(page, "What is a CSV file?")
        rate(page, 2, 6, True)
        page.click("#next")
        page.wait_for_selector("#code", timeout=10000)
        code = page.locator("#code").inner_text()
        page.screenshot(path=str(shots / "done.png"))
        shown = page.content()
        page.wait_for_url(panel, timeout=15000)  # and back to the panel by itself
        context.close()
        time.sleep(0.3)
        lines = log_lines(proxy)
        served = fake.requests
        token = (proxy.confdir / "study-admin-token").read_text().strip()
        admin = httpx.get(f"{proxy.url}/study/admin.json", headers={"authorization": f"Bearer {token}"})
        admin_page = httpx.get(f"{proxy.url}/study/admin", params={"token": token}).text
        banner = proxy.stdout()
    status = run_cli("study", str(study), "--status", str(proxy.log_path))
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == ("study page-study: 1 participant started, 1 finished; "
                                             "2 units, 2 ratings")
    assert "balance: every unit has the condition the design gives it" in status.stdout
    assert admin.status_code == 200
    figures = admin.json()
    assert (figures["participants"], figures["finished"], figures["units"], figures["ratings"]) == (
        1, 1, 2, 2)
    assert {c["name"]: (c["units"], c["ratings"]) for c in figures["conditions"]} == {
        c: (1, 1) for c in ("swift", "sluggish")}
    assert status.stdout.splitlines()[0] in admin_page
    assert "/study/admin?token=TOKEN" in banner and token not in banner
    assert not errors, errors
    assert code == "C0MPL3TE"
    streams = [x for x in lines if "type" not in x]
    ratings = [x for x in lines if x.get("type") == "rating"]
    events = [(x["participant"], x["event"]) for x in lines if x.get("type") == "participant"]
    assert events == [("P1", "consented"), ("P1", "finished")]
    complete = [s for s in streams if s["outcome"] == "complete"]
    # a reload while the reply was coming cut it (likely at 1.5 s to the first token; a loaded
    # machine may reload after the end): the records say what the page showed. A reply cut
    # before its head came back was no stream yet, so it has no record (seen under a CPU hog)
    outcomes = [s["outcome"] for s in streams]
    if cut:
        assert outcomes in (["complete", "client-gone", "complete"], ["complete", "complete"])
    else:
        assert outcomes == ["complete", "complete"]
    assert [s["unit"] for s in complete][-1] == 1 and complete[0]["unit"] == 0
    for s in streams:  # each task a unit, paced to the participant's row of the square
        assert s["participant"] == "P1"
        assert s["condition"] == design.condition("P1", s["unit"]).name
        assert s["target"]["ttft_ms"] == pytest.approx(profiles[s["condition"]].ttft.p50 * 1000)
    assert [(r["task"], r["speed"], r["quality"], r["slow"]) for r in ratings] == [
        (0, 6, 5, False), (1, 2, 6, True)]
    assert [r["stream"] for r in ratings] == [complete[0]["id"], complete[-1]["id"]]
    assert [r["condition"] for r in ratings] == [complete[0]["condition"], complete[-1]["condition"]]
    for s in served:  # the server's call: the study's model, cap, system prompt and key
        body = json.loads(s.body)
        assert (body["model"], body["max_completion_tokens"], body["messages"][0]) == (
            "study-model", 300, {"role": "system", "content": "Be brief."})
        assert "max_tokens" not in body  # OpenAI's reasoning models refuse the older name
        assert s.headers["authorization"] == f"Bearer {KEY}" and "cookie" not in s.headers
    assert not [c["name"] for c in CONDITIONS if c["name"] in shown] and KEY not in shown


def test_the_page_rides_out_a_503_and_sends_the_message_once(tmp_path: Path, fake: FakeLLM,
                                                              chromium: Any) -> None:
    """The study's state away (the server answers 503 and takes nothing): the page says so in
    plain words, waits and asks again by itself, for its state and for a message; the message
    is sent upstream once and makes one unit."""
    study = page_study(tmp_path)
    refused: Counter[str] = Counter()
    seen: list[str] = []

    def away(route: Any) -> None:
        name = route.request.url.rsplit("/", 1)[-1]
        if refused[name] < 2:  # the first two of each: the state is away
            refused[name] += 1
            route.fulfill(status=503, headers={"retry-after": "2"}, content_type="application/json",
                          body=json.dumps({"error": "The study is briefly unavailable: please "
                                                    "try again in a moment."}))
            return
        route.continue_()

    with PageProxy(tmp_path / "p", study, fake.url) as proxy:
        context = chromium.new_context()
        page = context.new_page()
        page.goto(f"{proxy.url}/study/?PROLIFIC_PID=P4")
        page.click("#agree")
        page.wait_for_selector("#text:not([disabled])", timeout=30000)
        page.route("**/study/api/chat", away)
        page.route("**/study/api/state", away)
        send(page, "What can I cook tonight?")
        deadline = time.monotonic() + 10
        while "briefly unavailable" not in (said := page.locator("#status").inner_text()):
            assert time.monotonic() < deadline, "the page never said why it waits"
            time.sleep(0.05)
        seen.append(said)
        page.wait_for_selector("#rate", timeout=30000)  # sent at the third try, then shown
        seen.append(page.locator("#status").inner_text())
        rate(page, 5, 5, False)
        context.close()
        time.sleep(0.3)
        lines = log_lines(proxy)
    assert refused == {"chat": 2, "state": 2}
    assert seen[0] == ("The study is briefly unavailable. Trying again in 1 s: please keep this "
                       "page open.")
    assert "unavailable" not in seen[1]  # cleared once it went through
    assert len(fake.requests) == 1  # one message, sent once
    streams = [x for x in lines if "type" not in x]
    assert [(s["participant"], s["unit"]) for s in streams] == [("P4", 0)]


def _timed_reply(client: httpx.Client) -> tuple[float, list[float]]:
    """A chat message's reply: (its first byte, every read), seconds from the send."""
    sent = time.monotonic()
    reads: list[float] = []
    with client.stream("POST", "/study/api/chat", json={"text": "What can I cook?"}) as reply:
        assert reply.status_code == 200, reply.read()
        for _ in reply.iter_raw():
            reads.append(time.monotonic() - sent)
    return reads[0], reads


def _bursts(reads: list[float], gap: float = 0.04) -> int:
    """Reads that came after a pause: what a bunching front end would merge."""
    return 1 + sum(1 for a, b in zip(reads, reads[1:], strict=False) if b - a > gap)


def test_the_documented_front_end_adds_no_bunching(tmp_path: Path, fake: FakeLLM) -> None:
    """The front end docs/studies.md gives (HAProxy in HTTP mode with http-no-delay, TLS ended
    there, the study's paths only, X-Forwarded-Proto): a reply's first byte and its gaps
    through it are those of the same reply straight from retimer; its cookie is Secure; other
    paths and the participant header never reach retimer."""
    from tests.support.balancer import StudyFront

    same = {"profile": "gpt-5", "ttft": "300ms", "tps": 12, "jitter": 0}  # either condition
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "front", "seed": 3, "unit": "conversation",
        "conditions": [{"name": "a", **same}, {"name": "b", **same}],
        "page": {"model": "study-model", "tasks": TASKS, "completion": {"code": "FRONT"}}}))
    with PageProxy(tmp_path / "p", study, fake.url) as proxy, \
            StudyFront(tmp_path / "front", {"a": proxy.port}) as front, \
            httpx.Client(base_url=front.url, verify=ssl.create_default_context(cafile=front.ca),
                         timeout=30) as outside, \
            httpx.Client(base_url=proxy.url, timeout=30) as inside:
        link = outside.get("/study/?participant=P1")
        inside.get("/study/?participant=P2")
        for client in (outside, inside):
            assert client.post("/study/api/consent", json={}).status_code == 200
        through, direct = _timed_reply(outside), _timed_reply(inside)
        served = len(fake.requests)
        other = outside.post("/v1/chat/completions", json={"model": "m", "messages": []},
                             headers={"X-Retimer-Participant": "P1"})
        assert len(fake.requests) == served  # the front end never passed it on
    assert link.status_code == 303 and link.headers["set-cookie"].endswith("; Secure")
    assert other.status_code == 404
    (first_through, reads_through), (first_direct, reads_direct) = through, direct
    assert _bursts(reads_direct) >= 10  # the reply came in many paced pieces
    # a buffering front end merges most of the reply's pieces; a loaded machine can let a late
    # piece fall within 40 ms of the next (a CI run: 28 pauses through it, 32 straight)
    assert _bursts(reads_through) >= 0.8 * _bursts(reads_direct), (reads_through, reads_direct)
    assert abs(first_through - first_direct) < 0.2  # the TLS hop adds no wait worth a pause
    assert abs(reads_through[-1] - reads_direct[-1]) < 0.3


# ------------------------------------------------------------------ safe on the internet


def test_the_page_is_safe_to_put_on_the_internet(tmp_path: Path, fake: FakeLLM) -> None:
    study = page_study(tmp_path, limits={"turns": 2, "requests_per_minute": 10})
    with PageProxy(tmp_path / "s", study, fake.url) as proxy:
        anon = httpx.Client(base_url=proxy.url, timeout=30)
        assert anon.get("/study/").status_code == 400  # no link, no cookie
        assert anon.get("/study/admin").status_code == 401  # the admin view needs its token
        assert anon.get("/study/admin.json", params={"token": "x" * 40}).status_code == 401
        odd = anon.get("/study/?participant=P1%3Cscript%3E")
        assert odd.status_code == 400 and "not valid" in odd.text and "<script>" not in odd.text
        p1 = httpx.Client(base_url=proxy.url, timeout=30)
        p1.get("/study/?participant=P1")
        cookie = p1.cookies["retimer_study"]
        forged = httpx.Client(base_url=proxy.url, timeout=30,
                              cookies={"retimer_study": cookie.replace("P1.", "P2.")})
        assert forged.get("/study/api/state").status_code == 401
        assert anon.get("/study/api/state").status_code == 401
        assert p1.post("/study/api/chat", json={"text": "hi"}).status_code == 409  # consent first
        assert p1.post("/study/api/consent", content=b"{}",
                       headers={"content-type": "text/plain"}).status_code == 403  # a cross-site form
        assert p1.post("/study/api/consent", json={},
                       headers={"origin": "https://evil.example"}).status_code == 403
        assert p1.post("/study/api/consent", json={}).status_code == 200
        r = p1.post("/study/api/chat", json={"text": "hi", "model": "gpt-4o", "max_tokens": 99999,
                                             "messages": [{"role": "system", "content": "x"}]})
        turn = r.headers["x-study-turn"]
        assert r.status_code == 200 and "C0MPL3TE" not in r.text
        p2 = httpx.Client(base_url=proxy.url, timeout=30)
        p2.get("/study/?participant=P2")
        p2.post("/study/api/consent", json={})
        theirs = p2.post("/study/api/rate", json={"turn": turn, "scores": {"speed": 1, "quality": 1},
                                                  "slow": True})
        assert theirs.status_code == 404 and theirs.json()["error"] == "That response is not one of yours."
        bad = p1.post("/study/api/rate", json={"turn": turn, "scores": {"speed": 9, "quality": 1},
                                               "slow": True})
        assert bad.status_code == 400 and "speed: expected 1-7, got 9" in bad.json()["error"]
        assert p1.post("/study/api/chat", json={"text": "again"}).status_code == 409  # rate first
        ok = {"turn": turn, "scores": {"speed": 4, "quality": 4}, "slow": False}
        assert p1.post("/study/api/rate", json=ok).status_code == 200
        assert p1.post("/study/api/rate", json=ok).status_code == 409  # stored once
        assert p1.post("/study/api/next", json={}).status_code == 200
        r2 = p1.post("/study/api/chat", json={"text": "second"})
        p1.post("/study/api/rate", json={**ok, "turn": r2.headers["x-study-turn"]})
        third = p1.post("/study/api/chat", json={"text": "third"})
        assert third.status_code == 429 and "limit of 2 messages" in third.json()["error"]
        assert p1.post("/study/api/chat", json={"text": "x" * 5000}).status_code == 400
        # outside the page a header names nobody (anyone can set it): refused, nothing upstream
        direct = anon.post("/v1/chat/completions", headers={"X-Retimer-Participant": "P1"},
                           json={"model": "gpt-4o", "max_tokens": 1_000_000, "stream": True,
                                 "messages": [{"role": "user", "content": "hi"}]})
        assert direct.status_code == 403
        assert "outside the study page" in direct.json()["error"]["message"]
        time.sleep(0.3)
        lines = log_lines(proxy)
        served = fake.requests
        shown = proxy.stdout() + proxy.stderr()
    assert "  study    participants from their page links; other requests refused" in shown
    assert [json.loads(s.body)["model"] for s in served] == ["study-model"] * 2
    assert [json.loads(s.body)["max_completion_tokens"] for s in served] == [300] * 2
    assert [m["role"] for m in json.loads(served[0].body)["messages"]] == ["system", "user"]
    assert len([x for x in lines if x.get("type") == "rating"]) == 2
    written = proxy.log_path.read_text() + shown
    assert KEY not in written and cookie not in written


def test_export_has_the_page_scales_and_slow(tmp_path: Path) -> None:
    import csv
    import io

    from retimer.cli.records.export import write_csv
    from retimer.records.reader import read_lines

    stream = {"id": "s1", "emitted": {"ttft_ms": 50.0}, "participant": "P1", "condition": "a",
              "unit": 0, "study": "x"}
    rating = {"type": "rating", "stream": "s1", "participant": "P1", "unit": 0, "task": 1,
              "speed": 3, "effort": 6, "slow": True}
    out = io.StringIO()
    write_csv(read_lines([json.dumps(stream), json.dumps(rating)]), out)
    row = next(csv.DictReader(io.StringIO(out.getvalue())))
    assert (row["rating_speed"], row["rating_quality"], row["rating_slow"], row["rating_effort"]) == (
        "3", "", "true", "6")
    assert "rating_task" not in row and "rating_unit" not in row
    assert row["task"] == "1"  # the study page's task the rated response answered


def test_export_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`retimer export LOG | head -1`: the reader stops early; no traceback, no second error."""
    line = json.dumps({"id": "s", "emitted": {"ttft_ms": 5.0}, "participant": "P1"})
    log = tmp_path / "big.jsonl"
    log.write_text("".join(line.replace('"s"', f'"s{i}"') + "\n" for i in range(50_000)))
    result = subprocess.run(f"{sys.executable} -m retimer export {log} | head -1", shell=True,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("time,stream_id,") and result.stdout.count("\n") == 1
    assert result.stderr == "", result.stderr


def test_status_counts_units_ratings_and_exclusions(tmp_path: Path) -> None:
    from retimer.study.status import status_lines, summarize
    from tests.support.records import typed

    design, _ = load_study(str(page_study(tmp_path)))
    first = design.condition("P1", 0).name
    other = design.condition("P1", 1).name
    records = typed([
        {"type": "participant", "event": "consented", "study": "page-study", "participant": "P1"},
        {"study": "page-study", "participant": "P1", "condition": first, "unit": 0},
        {"study": "page-study", "participant": "P1", "condition": first, "unit": 0},  # a retry
        {"study": "page-study", "participant": "P1", "condition": other, "unit": 1,
         "upstream_bound": True, "state_wait_ms": 2512.0},  # late after a wait for the state
        {"study": "page-study", "participant": "P2", "condition": first, "unit": 0,
         "state_wait_ms": 80.0},  # a short wait: on time
        {"type": "rating", "stream": "s3", "study": "page-study", "participant": "P1",
         "condition": other},
        {"study": "page-study", "participant": None, "condition": None, "unit": None},
        {"study": "another", "participant": "P9", "condition": "x", "unit": 0},
    ])
    status = summarize(design, records)
    assert (status.participants, status.finished, status.units, status.ratings) == (2, 0, 3, 1)
    by = {c.name: c for c in status.conditions}
    assert (by[first].units, by[first].streams, by[other].excluded, by[other].ratings) == (2, 3, 1, 1)
    assert (status.untimed, status.other_studies) == (1, 1)
    assert (status.waited, status.waited_late, status.longest_wait_ms) == (2, 1, 2512.0)
    text = "\n".join(status_lines(design, status))
    assert "1 streams untimed" in text and "1 records of other studies left out" in text
    assert ("2 units waited for the study's state database (the longest 2.5 s); 1 of them late "
            "(upstream-bound, left out of the analysis)") in text


def test_page_state_refuses_a_second_tab_and_each_limit() -> None:
    from retimer.proxy.study.page_state import PENDING_S, PageRefused, PageState

    state = PageState()
    with pytest.raises(PageRefused, match="consent first"):
        state.start_turn("P1", "t0", "hi", 0.0, 2, None, None, None)
    state.consent("P1", 0.0)
    state.start_turn("P1", "t1", "hi", 10.0, 2, None, None, None)
    with pytest.raises(PageRefused, match="still coming in") as second_tab:
        state.start_turn("P1", "t2", "hi again", 11.0, 2, None, None, None)
    assert second_tab.value.status == 409
    state.start_turn("P1", "t3", "later", 10.0 + PENDING_S + 1, 2, None, None, None)  # t1 lost
    assert [t.status for t in state.progress("P1").turns] == ["broken", "pending"]
    state.finish_turn("t3", "a long answer", True, 500)
    state.rate("P1", "t3")
    with pytest.raises(PageRefused, match="limit of response length") as tokens:
        state.start_turn("P1", "t4", "more", 2000.0, 2, None, 500, None)
    assert tokens.value.status == 429
    with pytest.raises(PageRefused, match="at most 1 messages a minute"):
        state.start_turn("P1", "t5", "more", 10.0 + PENDING_S + 30, 2, None, None, 1)
    assert state.history("P1", 0) == [("user", "hi"), ("user", "later"),
                                      ("assistant", "a long answer")]
    with pytest.raises(PageRefused, match="not one of yours"):
        state.rate("P2", "t3")


def test_one_admin_token_per_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Derived from the study's page secret and name: instances on two machines (two confdirs)
    that share the secret take the same token, another study another; the environment's
    token wins; the confdir's file says it, readable by its owner only."""
    from retimer.proxy.study.page_keys import ADMIN_ENV, admin_token

    monkeypatch.delenv(ADMIN_ENV, raising=False)
    secret = b"a shared study secret, 32 bytes.."
    one, two = (admin_token(secret, "dinner", str(tmp_path / d)) for d in ("a", "b"))
    assert one == two and len(one) == 32
    assert admin_token(secret, "lunch", str(tmp_path / "a")) != one
    assert admin_token(b"another secret, just as long....", "dinner", str(tmp_path / "c")) != one
    assert (tmp_path / "b" / "study-admin-token").read_bytes().strip() == one
    assert (tmp_path / "b" / "study-admin-token").stat().st_mode & 0o077 == 0
    monkeypatch.setenv(ADMIN_ENV, "t" * 20)
    assert admin_token(secret, "dinner", str(tmp_path / "a")) == b"t" * 20


def test_idle_participants_are_listed_with_where_they_wait(tmp_path: Path) -> None:
    """Who started and went quiet for 10+ minutes, and what the page waits for: the admin
    view's and --status's list of participants who may be stuck."""
    from retimer.proxy.study.page_state import PageState
    from retimer.study.status import IDLE_S, IdleParticipant, status_lines, summarize

    state = PageState()
    for p in ("P1", "P2", "P3", "P4", "P5"):
        state.consent(p, 0.0)
    state.start_turn("P1", "t1", "hi", 10.0, 2, None, None, None)  # a reply never ended
    state.start_turn("P2", "t2", "hi", 20.0, 2, None, None, None)
    state.finish_turn("t2", "ok", True, 3)  # left unrated
    state.start_turn("P3", "t3", "hi", 30.0, 2, None, None, None)
    state.finish_turn("t3", "ok", True, 3)
    state.rate("P3", "t3")
    state.start_turn("P4", "t4", "hi", 900.0, 2, None, None, None)  # active a minute ago
    state.finish_turn("t4", "ok", True, 3)
    state.rate("P4", "t4")
    assert state.next_task("P4", 1, 1, 901.0)  # finished: never idle
    found = state.idle(960.0, IDLE_S)
    assert [(i.participant, i.task, i.waiting) for i in found] == [
        ("P5", 0, "a message"), ("P1", 0, "a reply"), ("P2", 0, "a rating"), ("P3", 0, "a message")]
    assert found[0].idle_s == 960.0
    design, _ = load_study(str(page_study(tmp_path)))
    status = summarize(design, [])
    status.idle = [IdleParticipant(i.participant, i.task, i.waiting, i.idle_s) for i in found]
    text = "\n".join(status_lines(design, status))
    assert ("idle for 10+ min, not finished: P5 (task 1, waiting for a message, 16 min); P1 (task "
            "1, waiting for a reply, 16 min)") in text
    assert status.as_json()["idle"][1] == {"participant": "P1", "task": 0, "waiting": "a reply",
                                           "idle_s": 950.0}


def test_the_whole_studys_caps_hold_whatever_the_ids() -> None:
    """Made-up participant ids each get a fresh personal budget: the study-wide caps on
    upstream calls and output tokens per hour, and on newcomers per minute, do not."""
    from retimer.proxy.study.page_state import BUSY, PageRefused, PageState

    state = PageState()
    for i in range(3):
        state.consent(f"P{i}", 100.0 + i, per_minute=3)
    with pytest.raises(PageRefused, match="starting this study right now") as full:
        state.consent("P3", 110.0, per_minute=3)
    assert full.value.status == 429
    assert state.consent("P3", 170.0, per_minute=3)  # a minute on, room again
    caps = {"study_per_hour": 3, "study_tokens_per_hour": 1000}
    for i in range(3):
        state.start_turn(f"P{i}", f"t{i}", "hi", 200.0 + i, 2, None, None, None, **caps)
        state.finish_turn(f"t{i}", "ok", True, 10, now=201.0 + i)
    with pytest.raises(PageRefused) as calls:
        state.start_turn("P3", "t3", "hi", 300.0, 2, None, None, None, **caps)
    assert calls.value.status == 429 and str(calls.value) == BUSY
    state.start_turn("P3", "t3", "hi", 3900.0, 2, None, None, None, **caps)  # an hour on
    state.finish_turn("t3", "long", True, 1000, now=3910.0)
    state.rate("P3", "t3")
    with pytest.raises(PageRefused, match="limit for the moment"):  # the tokens' cap now
        state.start_turn("P3", "t4", "more", 3920.0, 2, None, None, None, **caps)
    state.start_turn("P3", "t4", "more", 7600.0, 2, None, None, None, **caps)


def test_finishing_is_noted_once() -> None:
    from retimer.proxy.study.page_state import PageState

    state = PageState()
    state.consent("P1", 0.0)
    state.start_turn("P1", "t1", "hi", 1.0, 1, None, None, None)
    state.finish_turn("t1", "hello", True, 3)
    state.rate("P1", "t1")
    assert [state.next_task("P1", 1, 1, 2.0), state.next_task("P1", 1, 1, 3.0)] == [True, False]
    assert state.progress("P1").finished


def test_a_staircase_on_the_study_page(tmp_path: Path, fake: FakeLLM) -> None:
    """Each task's TTFT follows the participant's yes/no answers on the page."""
    from retimer.study.staircase import parse_staircase, position_after

    settings = {"vary": "ttft", "levels": [100, 200, 400, 800, 1600], "tps": 900, "jitter": 0,
                "profile": "gpt-5"}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "page-staircase", "seed": 3, "unit": "conversation", "staircase": settings,
        "page": {"model": "study-model", "tasks": [f"Task {i}" for i in range(5)],
                 "slow_question": True, "completion": {"code": "DONE"}}}))
    answers = [False, False, True, False, True]
    with PageProxy(tmp_path / "s", path, fake.url) as proxy:
        p1 = httpx.Client(base_url=proxy.url, timeout=30)
        p1.get("/study/?participant=P1")
        assert p1.post("/study/api/consent", json={}).status_code == 200
        for slow in answers:
            turn = p1.post("/study/api/chat", json={"text": "hi"}).headers["x-study-turn"]
            rated = p1.post("/study/api/rate", json={"turn": turn, "slow": slow,
                                                     "scores": {"speed": 4, "quality": 4}})
            assert rated.status_code == 200, rated.text
            assert p1.post("/study/api/next", json={}).status_code == 200
        assert p1.get("/study/api/state").json()["code"] == "DONE"
        time.sleep(0.3)
        streams = [x for x in log_lines(proxy) if x.get("type", "stream") == "stream"]
    stairs = parse_staircase(settings, ["speed"], {"tps": "900", "jitter": "0"})
    walked = [stairs.levels[position_after(stairs, [(stairs.levels.index(s["level"]), a)
                                                    for s, a in zip(streams[:k], answers)]).level]
              for k in range(len(answers))]
    assert [s["unit"] for s in streams] == [0, 1, 2, 3, 4]
    assert [s["level"] for s in streams] == walked == [400, 800, 1600, 800, 1600]
    assert [s["condition"] for s in streams] == [f"ttft-{v:g}ms" for v in walked]
    # each unit waited its own level: never sooner, and (levels double) short of the next one;
    # a quiet machine keeps it within tens of ms, an overloaded one (a hog and three heavy test
    # processes on 2 cores) had the first unit 252 ms late: what is held is which level it got
    assert all(s["level"] - 2 <= s["emitted"]["ttft_ms"] < 2 * s["level"] for s in streams), [
        (s["level"], s["emitted"]["ttft_ms"]) for s in streams]


def _page_session(proxy: RetimerProxy, pid: str, texts: list[str],
                  before: Any = None) -> list[dict[str, Any]]:
    """A participant's whole study through the page's API: each task's message sent (after
    `before(i)`, if given), its reply rated, on to the next; the turns as the page shows them."""
    turns = []
    with httpx.Client(base_url=proxy.url, timeout=30) as c:
        c.get(f"/study/?participant={pid}")
        assert c.post("/study/api/consent", json={}).status_code == 200
        for i, text in enumerate(texts):
            if before is not None:
                before(i)
            chat = c.post("/study/api/chat", json={"text": text})
            assert chat.status_code == 200, chat.text
            turns.append(c.get("/study/api/state").json()["turns"][-1])
            rated = c.post("/study/api/rate", json={"turn": chat.headers["x-study-turn"],
                                                    "scores": {"speed": 4, "quality": 4}})
            assert rated.status_code == 200, rated.text
            assert c.post("/study/api/next", json={}).status_code == 200
    return turns


def test_a_page_study_replays_a_cassette_its_pilot_recorded(tmp_path: Path) -> None:
    """Content-controlled tasks on the page: a pilot participant's conversation recorded with
    `--record`, then the study run with `--replay` and nothing upstream. Each participant's
    messages are answered with the recorded replies, at their own condition's pace (the fast
    one faster than the upstream was); a message the pilot never sent gets the page's error
    turn (a 400 with the cassette's reason, as an upstream error would be), not a hang."""
    from tests.support.proxy import free_port
    from tests.support.stream_bodies import make_openai_stream

    replies = ["A CSV file is text: one record per line, fields split by commas.",
               "Open it in a spreadsheet, or read it with Python's csv module."]
    texts = ["What is a CSV file?", "How do I open one?"]
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "replayed", "seed": 8, "unit": "conversation", "counterbalancing": "latin-square",
        "participant_ids": "numbered",
        # instant: faster than the pilot's upstream (0.6 s), with room for a loaded machine's
        # replay to start (at 50 ms, a replay under a busy test run came late: hunt 6)
        "conditions": [{"name": "instant", "profile": "gpt-5", "ttft": "300ms", "tps": 15000,
                        "jitter": 0},
                       {"name": "slow", "profile": "gpt-5", "ttft": "900ms", "tps": 40, "jitter": 0}],
        "page": {"model": "study-model", "system": "Be brief.", "completion": {"code": "RP"},
                 "tasks": ["Ask what a CSV file is.", "Ask how to open one."]}}))
    cassette = tmp_path / "cassette"
    with FakeLLM(bursts=4, burst_gap=0.2) as fake:
        def reply(i: int) -> None:
            fake.openai_body = make_openai_stream(replies[i])

        with PageProxy(tmp_path / "pilot", study, fake.url, "--record", str(cassette)) as pilot:
            recorded = _page_session(pilot, "P1", texts, reply)
        asked = len(fake.requests)
    assert [t["reply"] for t in recorded] == replies and asked == 2
    design, _ = load_study(str(study))
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens: the replay has no upstream
    with PageProxy(tmp_path / "p", study, gone, "--replay", str(cassette)) as proxy:
        turns = {pid: _page_session(proxy, pid, texts) for pid in ("P1", "P2")}
        with httpx.Client(base_url=proxy.url, timeout=30) as p3:
            p3.get("/study/?participant=P3")
            p3.post("/study/api/consent", json={})
            astray = p3.post("/study/api/chat", json={"text": "Something the pilot never asked"})
            time.sleep(0.3)
            after = p3.get("/study/api/state").json()
        lines = log_lines(proxy)
    assert {pid: [t["reply"] for t in ts] for pid, ts in turns.items()} == {
        "P1": replies, "P2": replies}
    # the page shows the error's message; the turn is over (broken), so P3 may send again
    assert astray.status_code == 400 and "matches no recorded call" in astray.json()["error"]["message"]
    assert [t["status"] for t in after["turns"]] == ["broken"]
    streams = [s for s in lines if "type" not in s and s["participant"] in ("P1", "P2")]
    assert len(streams) == 4 and all(s["cassette"]["match"] == "replayed" for s in streams)
    for s in streams:
        assert s["condition"] == design.condition(s["participant"], s["unit"]).name
        assert s["target"]["ttft_ms"] - 5 <= s["emitted"]["ttft_ms"]
        assert s["upstream_bound"] is False
    assert {s["condition"] for s in streams} == {"instant", "slow"}
    assert not [s for s in lines if "type" not in s and s["participant"] == "P3"]  # no stream
    assert proxy.stderr().count("retimer: cassette: a call to /v1/chat/completions diverged") == 1
