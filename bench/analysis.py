"""Pure analysis of what the client saw: TTFT, achieved rate, lateness, gaps, added latency.

Definitions (client side; all times `time.monotonic()` seconds from bench/client.py):
- client TTFT: first token-bearing event's arrival minus the moment the request was sent.
- achieved rate: (N - 1) / (t_last - t_first), N tokens counted with retimer's splitter
  (Artificial Analysis / AIPerf definition).
- lateness of an event: its arrival minus the nominal due time of its last token i, where the
  nominal first-token time is the request's arrival at the proxy + the target TTFT and token i
  is due (sum of the first i drawn gaps) later; with --jitter 0 every gap is 1/rate, so this
  is first-token time + i/rate. The draws are reproduced from the proxy's seed and the
  stream's ordinal (the record's `stream`) exactly as `Profile.stream_timing` makes them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from bench.harness import pct
from retimer.profile.model import Profile
from retimer.timing.distributions import GapSampler


def nominal_offsets(profile: Profile, seed: int, index: int,
                    n_tokens: int) -> tuple[float, np.ndarray]:
    """(target TTFT, offsets of tokens 0..n-1 from the first token) as the proxy drew them."""
    timing = profile.stream_timing(np.random.default_rng([seed, index]))
    gaps = [timing.gap() for _ in range(max(0, n_tokens - 1))]
    return timing.ttft, np.concatenate([[0.0], np.cumsum(gaps)])


def wall_of(iso: str) -> float:
    """Seconds since the epoch of a record's ISO `time` (the request's arrival at the proxy)."""
    return datetime.fromisoformat(iso).timestamp()


def stream_fidelity(res: dict[str, Any], rec: dict[str, Any], profile: Profile,
                    seed: int) -> dict[str, Any]:
    """Timing of one paced stream at the client, next to the proxy's own record of it.

    Two client lateness figures: against the proxy's schedule (the request's arrival at the
    proxy + TTFT + drawn gaps, mapped to the client's clock through the shared wall and
    monotonic clocks), and against the client's own first token (t_first + offsets), which
    hides the first token's own error.
    """
    times = np.array([t for t, _ in res["events"]])
    counts = np.array([n for _, n in res["events"]])
    n = int(counts.sum())
    ttft_target, offsets = nominal_offsets(profile, seed, rec["stream"], n)
    last_idx = np.cumsum(counts) - 1
    t0 = times[0]
    start = wall_of(rec["time"]) - (res["w_sent"] - res["t_sent"])  # proxy start, monotonic
    late_ms = (times - (start + ttft_target + offsets[last_idx])) * 1000
    late_rel_ms = (times - (t0 + offsets[last_idx])) * 1000
    span = times[-1] - t0
    rate = (n - 1) / span if span > 0 else float("nan")
    assert profile.tps is not None
    client_ttft = (t0 - res["t_sent"]) * 1000
    request_ms = (start - res["t_sent"]) * 1000
    em = rec["emitted"]
    return {
        "tokens": n,
        "tokens_record": em["tokens"],
        "tokens_upstream": rec["upstream"]["tokens"],
        "events": len(times),
        "target_ttft_ms": ttft_target * 1000,
        "record_target_ttft_ms": rec["target"]["ttft_ms"],
        "client_ttft_ms": client_ttft,
        "client_ttft_err_ms": client_ttft - ttft_target * 1000,
        "proxy_ttft_err_ms": em["ttft_ms"] - ttft_target * 1000,
        "request_to_proxy_ms": request_ms,  # client send -> request timestamp at the proxy
        "proxy_to_client_ms": client_ttft - request_ms - em["ttft_ms"],  # first token delivery
        "client_rate": rate,
        "client_rate_err_pct": (rate / profile.tps - 1) * 100,
        "proxy_rate_err_pct": (em["tps"] / profile.tps - 1) * 100 if em["tps"] else None,
        "late_ms": late_ms.round(4).tolist(),
        "late_rel_ms": late_rel_ms.round(4).tolist(),
        "late_client": _p50_p99_max(late_ms),
        "late_client_rel": _p50_p99_max(late_rel_ms),
        "late_proxy": rec["lateness_ms"],
        "gaps_ms": (np.diff(times) * 1000).round(4).tolist(),
        "nominal_gaps_ms": (np.diff(offsets) * 1000).round(4).tolist(),
        "upstream_bound": rec["upstream_bound"],
        "outcome": rec["outcome"],
    }


def _p50_p99_max(values: np.ndarray) -> dict[str, float]:
    p50, p99 = pct(values, 50, 99)
    return {"p50": p50, "p99": p99, "max": float(np.max(values))}


def summarize_fidelity(streams: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row from several streams: per-stream TTFT and rate errors, pooled client
    lateness, the proxy's per-stream lateness as median p50, median p99 and overall max."""
    late = np.concatenate([np.asarray(s["late_ms"]) for s in streams])
    late_rel = np.concatenate([np.asarray(s["late_rel_ms"]) for s in streams])
    proxy = [s["late_proxy"] for s in streams if s["late_proxy"]]
    ttft_c = [s["client_ttft_err_ms"] for s in streams]
    ttft_p = [s["proxy_ttft_err_ms"] for s in streams]
    rate = [s["client_rate_err_pct"] for s in streams]
    prate = [s["proxy_rate_err_pct"] for s in streams if s["proxy_rate_err_pct"] is not None]
    return {
        "streams": len(streams),
        "tokens": int(np.median([s["tokens"] for s in streams])),
        "token_count_mismatches": sum(s["tokens"] != s["tokens_record"] for s in streams),
        "upstream_bound": sum(bool(s["upstream_bound"]) for s in streams),
        "incomplete": sum(s["outcome"] != "complete" for s in streams),
        "client_ttft_err_ms": {"median": _med(ttft_c), "max": max(ttft_c), "min": min(ttft_c)},
        "proxy_ttft_err_ms": {"median": _med(ttft_p), "max": max(ttft_p), "min": min(ttft_p)},
        "request_to_proxy_ms": _med([s["request_to_proxy_ms"] for s in streams]),
        "proxy_to_client_ms": _med([s["proxy_to_client_ms"] for s in streams]),
        "client_rate_err_pct": {"median": _med(rate), "worst": max(rate, key=abs)},
        "proxy_rate_err_pct": ({"median": _med(prate), "worst": max(prate, key=abs)}
                               if prate else None),
        "late_client_ms": _p50_p99_max(late),
        "late_client_rel_ms": _p50_p99_max(late_rel),
        "late_proxy_ms": {
            "p50": _med([p["p50"] for p in proxy]),
            "p99": _med([p["p99"] for p in proxy]),
            "p99_worst": max(p["p99"] for p in proxy),
            "max": max(p["max"] for p in proxy),
        } if proxy else None,
    }


def gap_shape(streams: list[dict[str, Any]], profile: Profile) -> dict[str, Any]:
    """Achieved inter-token gaps (one token per event) vs the drawn gaps vs the profile's shape."""
    assert profile.tps is not None
    shape = GapSampler(profile.tps, *profile.gap, np.random.default_rng(0),
                       jitter=profile.jitter).shape
    got = np.concatenate([np.asarray(s["gaps_ms"]) for s in streams])
    drawn = np.concatenate([np.asarray(s["nominal_gaps_ms"]) for s in streams])
    nominal = {"p50": shape.p50 * 1000, "p90": shape.p90 * 1000, "p99": shape.p99 * 1000,
               "mean": 1000 / profile.tps}
    drawn_q, got_q = _quantiles(drawn), _quantiles(got)
    return {
        "profile_ms": nominal,
        "drawn_ms": drawn_q,
        "client_ms": got_q,
        "drawn_vs_profile_pct": _rel_pct(drawn_q, nominal),
        "client_vs_profile_pct": _rel_pct(got_q, nominal),
        "n_gaps": int(got.size),
    }


def _rel_pct(got: dict[str, float], nominal: dict[str, float]) -> dict[str, float]:
    """Relative error in % of each quantile (and the mean) against the profile's."""
    return {k: (got[k] / nominal[k] - 1) * 100 for k in nominal}


def memory_per_stream(results: list[dict[str, Any]], samples: list[tuple[float, int, float]],
                      idle_kb: float, hwm_before_kb: int, hwm_after_kb: int,
                      after_kb: int) -> dict[str, Any]:
    """Proxy RSS while all N streams were active, minus its idle RSS before, divided by N.

    "All active" is the client's view: from the last stream's first token to the first
    stream's last byte, so every flow is open (and its answer buffered) in the proxy. Peak is
    the higher of the samples and, when the run raised it, the kernel's high-water mark
    (which catches a peak between samples but is itself updated lazily, so can lag).
    """
    n = len(results)
    firsts = [r["events"][0][0] for r in results if r["events"]]
    lasts = [r["reads"][-1][0] for r in results if r["reads"]]
    lo, hi = (max(firsts), min(lasts)) if firsts and lasts else (0.0, -1.0)
    inside = [kb for t, kb, _ in samples if lo <= t <= hi]
    active = float(np.median(inside)) if inside else None
    sampled_peak = max((kb for _, kb, _ in samples), default=0)
    hwm = hwm_after_kb if hwm_after_kb > hwm_before_kb else 0
    peak = max(hwm, sampled_peak)
    return {
        "streams": n,
        "idle_kb": idle_kb,
        "all_active_s": max(0.0, hi - lo),
        "active_samples": len(inside),
        "active_kb": active,
        "peak_kb": peak,
        "peak_from_hwm": hwm > sampled_peak,
        "after_kb": after_kb,
        "per_stream_kb": (active - idle_kb) / n if active is not None and n else None,
        "peak_per_stream_kb": (peak - idle_kb) / n if n else None,
    }


def _quantiles(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = pct(values, 50, 90, 99)
    return {"p50": p50, "p90": p90, "p99": p99, "mean": float(values.mean())}


def added_latency(res: dict[str, Any], writes: list[tuple[int, float]]) -> np.ndarray:
    """Per upstream write: client arrival of its last byte minus the upstream's write time (ms).

    The body is byte-identical through every route, so a write's end offset in the upstream
    body is the offset the client must have read to have it.
    """
    ends = np.cumsum([size for size, _ in writes])
    sent = np.array([mono for _, mono in writes])
    got = np.cumsum([n for _, n in res["reads"]])
    t = np.array([t for t, _ in res["reads"]])
    if got.size == 0 or got[-1] < ends[-1]:
        raise ValueError(f"client read {got[-1] if got.size else 0} of {ends[-1]} bytes")
    idx = np.searchsorted(got, ends, side="left")
    return (t[idx] - sent) * 1000


def _med(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def cpu_while_streaming(results: list[dict[str, Any]],
                        samples: list[tuple[float, int, float]]) -> dict[str, float] | None:
    """Proxy CPU from the first request's send to the last byte at the client, interpolated
    between samples: client set-up before (connections, warm-up GETs) stays out of it."""
    if len(samples) < 2:
        return None
    lo = min(r["t_sent"] for r in results)
    hi = max(r["reads"][-1][0] for r in results if r["reads"])
    t = np.array([x[0] for x in samples])
    cpu = np.array([x[2] for x in samples])
    used = float(np.interp(hi, t, cpu) - np.interp(lo, t, cpu))
    return {"span_s": hi - lo, "cpu_s": used, "pct": used / (hi - lo) * 100 if hi > lo else 0.0}
