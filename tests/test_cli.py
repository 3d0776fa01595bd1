"""The command line: one clear line for every bad input, the profile table, start-up banner."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from proxy import RetimerProxy, run_cli

from retimer.profile import builtin_profiles, load_profile


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
        (["--set", "no_such_option=1"], "no_such_option"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--profile", "passthrough", "--tps", "40"], "passthrough"),
    ],
)
def test_bad_options_get_one_line(args: list[str], needle: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("retimer: error:")
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


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
    from proxy import RetimerProxy
    from upstream import FakeLLM

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
