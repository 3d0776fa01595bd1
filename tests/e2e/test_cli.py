"""The command line: one clear line for every bad input, the profile table, start-up banner."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from retimer.profile.loader import builtin_profiles, load_profile
from tests.support.cli_main import refused
from tests.support.proxy import RetimerProxy, run_cli


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "cerebrus"], "cerebrus"),
        (["--tps", "0"], "--tps"),
        (["--tps", "-3"], "--tps"),
        (["--tps", "fast"], "--tps"),
        (["--tps", "1e-9"], "0.01 to 1,000,000"),
        (["--ttft", "5000s"], "at most 1 hour"),
        (["--speed", "1e6"], "0.001x to 1000x"),
        (["--ttft", "soon"], "--ttft"),
        (["--ttft", "-5ms"], "--ttft"),
        (["--jitter", "-1"], "--jitter"),
        (["--jitter", "lots"], "--jitter"),
        (["--listen-port", "70000"], "--listen-port"),
        (["--listen-port", "abc"], "--listen-port"),
        (["--seed", "-4"], "--seed"),
        (["--intercept", "(unclosed"], "--intercept"),
        (["--set", "confdir"], "--set"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--profile", "passthrough", "--tps", "40"], "passthrough"),
    ],
)
def test_bad_options_get_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each is refused before the proxy is built, so `retimer ARGS` runs in this process (the
    installed command's own one line: test_suggestion_from_the_installed_command; an unknown
    `--set` option, found by mitmproxy: test_unknown_set_option_gets_a_suggestion)."""
    code, err = refused(args, capsys, monkeypatch)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("retimer: error:")
    assert needle in lines[0]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("name: [unclosed\n", "broken.yaml"),
        ("- a list\n", "broken.yaml"),
        ("name: x\nsource: s\nttft: {p50: 1ms, p90: 2ms, p99: 3ms}\ndecode: {tps: 0}\n", "tps"),
        ("name: x\nsource: s\nttft: {p50: 1ms, p90: 2ms, p99: 3ms}\ndecode: {tps: 5}\nspeed: 3\n",
         "speed"),
        ("name: x\nsource: s\nttft: {p50: 9ms, p90: 2ms, p99: 3ms}\ndecode: {tps: 5}\n", "ttft"),
    ],
)
def test_broken_profile_file_gets_one_line(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(content)
    result = run_cli("--profile", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "broken.yaml" in lines[0] and needle in lines[0], result.stderr


def test_missing_profile_file(tmp_path: Path) -> None:
    result = run_cli("--profile", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "nope.yaml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_profiles_lists_every_builtin() -> None:
    result = run_cli("profiles")
    assert result.returncode == 0
    for profile in builtin_profiles():
        assert profile.name in result.stdout
        for alias in profile.aliases:
            assert alias in result.stdout


def test_profile_detail_names_its_source() -> None:
    result = run_cli("profiles", "o3")
    assert result.returncode == 0
    assert "openai-o3" in result.stdout and "Speed table row 19" in result.stdout


def test_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run_cli("--listen-port", str(port), "--set", f"confdir={tmp_path}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--listen-port" in lines[0] and str(port) in lines[0]


def test_banner_says_where_and_how(tmp_path: Path) -> None:
    with RetimerProxy(tmp_path, "--profile", "groq") as proxy:
        pass
    out = proxy.stdout()
    assert f"127.0.0.1:{proxy.port}" in out
    assert "groq-llama-3.3-70b" in out
    assert str(proxy.ca_path) in out
    assert "HTTPS_PROXY=" in out and "curl --proxy" in out
    bundle = proxy.confdir / "retimer-ca-bundle.pem"
    assert bundle.read_text().count("BEGIN CERTIFICATE") >= 2
    assert proxy.ca_path.read_text().strip() in bundle.read_text()


def test_strategy_speed_and_cache_flags_reach_the_records(tmp_path: Path) -> None:
    """--strategy, --speed and --cache from the command line, seen in the records."""
    import httpx

    from tests.support.proxy import RetimerProxy
    from tests.support.upstream import FakeLLM

    cache = tmp_path / "cache"
    with FakeLLM() as fake, RetimerProxy(
        tmp_path / "p", "--profile", "cerebras", "--strategy", "replay", "--speed", "0.5x",
        "--cache", str(cache), "--jitter", "0",
    ) as proxy:
        assert "strategy replay, speed 0.5x, cache" in proxy.stdout()
        with httpx.Client(proxy=proxy.url, timeout=30) as c:
            for _ in range(2):
                r = c.post(fake.url + "/v1/chat/completions", json={"stream": True, "messages": []})
                assert r.status_code == 200
        first, second = proxy.records(2)
    assert len(fake.requests) == 1  # the second came from the cache
    assert [first["cache"], second["cache"]] == ["stored", "hit"]
    assert first["strategy"] == second["strategy"] == "replay"
    assert first["model"]["speed"] == 0.5
    full = load_profile("cerebras")
    assert first["target"]["tps"] == pytest.approx(full.tps / 2)


# -- mistakes get the nearest right word ------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--porfile", "cerebras"], "unrecognized argument --porfile; did you mean --profile?"),
        (["--porfile=cerebras"], "unrecognized argument --porfile; did you mean --profile?"),
        (["--listen-prot", "9"], "did you mean --listen-port?"),
        (["--profile", "cerebrass"], "did you mean 'cerebras'?"),
        (["--strategy", "liv"], "got 'liv'; did you mean live?"),
        (["--profile", "o3", "--thinking", "medum"], "got 'medum'; did you mean medium?"),
        (["repot", "x.jsonl"], "unknown command 'repot'; did you mean report?"),
        (["profile", "o3"], "unknown command 'profile'; did you mean profiles?"),
        (["xyzzy"], "unknown command 'xyzzy'; commands: browser, run, env"),
        (["--bogus"], "unrecognized argument --bogus (see"),  # nothing close: no guess
        (["env", "--shell", "fsh"], "--shell: invalid choice: 'fsh'; did you mean fish?"),
        (["env", "--shell", "zzz"], "choose from sh, fish, powershell"),
        (["browser", "chromum"], "invalid choice: 'chromum'; did you mean chromium?"),
        (["run", "--porfile", "x", "--", "true"], "--porfile; did you mean --profile?"),
        (["report", "x.jsonl", "--outptu", "y"], "--outptu; did you mean --output?"),
        (["fit", "x.jsonl", "--hots", "y"], "--hots; did you mean --host?"),
        (["export", "--csvv", "x"], "--csvv; did you mean --csv?"),
        (["profiles", "--hlp"], "--hlp; did you mean --help?"),
        (["study", "s.yaml", "--partcipant", "p1"], "--partcipant; did you mean --participant?"),
    ],
)
def test_mistakes_get_a_suggestion(args: list[str], expected: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _main_error(args, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retimer"), err
    assert expected in lines[0]
    if "(see" in expected:
        assert "did you mean" not in lines[0]


def _main_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    """`retimer ARGS` in this process (each of these fails before anything starts)."""
    from retimer.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(list(args))
    return exited.value.code, capsys.readouterr().err


def test_suggestion_from_the_installed_command() -> None:
    result = run_cli("--porfile", "cerebras")
    assert result.returncode == 2 and result.stderr == (
        "retimer: error: unrecognized argument --porfile; did you mean --profile? "
        "(see retimer --help)\n")


def test_profiles_help_is_help_not_a_profile(capsys: pytest.CaptureFixture[str]) -> None:
    from retimer.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["profiles", "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and out.startswith("usage: retimer profiles")


def test_unknown_set_option_gets_a_suggestion(tmp_path: Path) -> None:
    result = run_cli("--set", f"confdir={tmp_path}", "--set", "ssl_insecur=true",
                     "--listen-port", "0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ssl_insecur; did you mean ssl_insecure?" in lines[0]


def test_set_reaches_the_options_a_script_declares(tmp_path: Path) -> None:
    """`--set scripts=x.py --set its_option=v`, as mitmdump takes it: the option waits for
    the script to declare it (tests/support/clients/upstream_map.py is configured this way)."""
    import time

    out = tmp_path / "seen.txt"
    script = tmp_path / "probe.py"
    script.write_text(
        "from mitmproxy import ctx\n"
        "def load(loader):\n"
        "    loader.add_option('probe_value', str, '', 'a value for the test')\n"
        "def configure(updated):\n"
        f"    if 'probe_value' in updated and ctx.options.probe_value:\n"
        f"        open({str(out)!r}, 'w').write(ctx.options.probe_value)\n")
    with RetimerProxy(tmp_path, "--set", f"scripts={script}", "--set", "probe_value=forty-two"):
        deadline = time.monotonic() + 20
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert out.read_text() == "forty-two"


@pytest.mark.parametrize(
    "args",
    [["--ttft", "-1s"], ["--ttft", "-5ms"], ["--speed", "-2x"], ["--tps", "-.5"],
     ["run", "--ttft", "-1s", "--", "true"], ["fit", "x.jsonl", "--since", "-2h"]],
)
def test_negative_values_get_the_usual_message(args: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`--ttft -1s` says what `--ttft=-1s` says, not argparse's "expected one argument"."""
    i = next(i for i, a in enumerate(args) if a.startswith("-") and a[1:2] in "0123456789.")
    joined = [*args[:i - 1], f"{args[i - 1]}={args[i]}", *args[i + 1:]]
    spaced, glued = _main_error(args, capsys), _main_error(joined, capsys)
    assert spaced[0] == glued[0] == 2
    assert spaced[1] == glued[1]
    assert "expected one argument" not in spaced[1] and args[i] in spaced[1]
    assert len(spaced[1].strip().splitlines()) == 1


def test_negative_value_rule_keeps_flags_and_the_command() -> None:
    """Only a value that looks like a negative number joins its option; a flag after an
    option, and anything after `--`, stay as they are."""
    from retimer.cli.cmdline import OneLineParser

    p = OneLineParser(prog="t")
    p.add_argument("--ttft", default="")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("rest", nargs="*")
    assert p.parse_args(["--ttft", "-1s"]).ttft == "-1s"
    assert p.parse_args(["--quiet", "--", "--ttft", "-1s"]).rest == ["--ttft", "-1s"]
    with pytest.raises(SystemExit):
        p.parse_args(["--ttft", "--quiet"])  # a flag is not taken as the value


def test_report_without_output_says_where_it_wrote(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.support import synthetic_traffic

    log = tmp_path / "log.jsonl"
    recs = synthetic_traffic.records(load_profile("groq"), 3, (20, 40))
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    work = tmp_path / "cwd"
    work.mkdir()
    result = subprocess.run([sys.executable, "-m", "retimer", "report", str(log)], cwd=work,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    written = work / "report.html"
    assert written.stat().st_size > 0
    assert f"3 streams -> {written}" in result.stderr
    help_text = run_cli("report", "--help").stdout
    assert "default: report.html" in " ".join(help_text.split())
    missing = run_cli("report", str(log), "--protocol", "opena-chat")
    assert "did you mean openai-chat?" in missing.stderr


def test_profile_sources_are_indented_lines() -> None:
    result = run_cli("profiles", "o3")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    start = lines.index("  source:")
    notes = lines[start + 1:]
    assert len(notes) > 5
    assert all(line.startswith("    ") and len(line) <= 80 for line in notes)
    assert " ".join(x.strip() for x in notes) == " ".join(load_profile("o3").source.split())
    # each sentence starts a line; its continuation lines are indented further
    starts = [x for x in notes if not x.startswith("      ")]
    assert len(starts) >= 5 and all(x[4].isupper() for x in starts)


def test_every_command_is_dispatched_and_suggested() -> None:
    """One table dispatches the subcommands; the did-you-mean list names the same words."""
    from retimer.cli.cmdline import COMMANDS
    from retimer.cli.main import SUBCOMMANDS

    assert sorted(SUBCOMMANDS) == sorted(COMMANDS)
