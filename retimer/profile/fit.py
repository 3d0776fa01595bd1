"""Fit a speed profile to recorded upstream traffic (`retimer fit`). Sans-io: records in, YAML out.

The fit inverts retimer's own timing model (retimer/timing/model.py, retimer/timing/pacer.py), so a profile
fitted to traffic that model produced gives back its parameters. Events are taken as the
network delivered them: adapter events that arrived in one read (same time) are one event.
Records left out: not complete, non-streaming, cache hits (the upstream was a local replay),
partly unparsed, or without a trace (logs from before traces).
- TTFT: the first upstream event with tokens, per stream; the profile's p50/p90/p99 are the
  empirical quantiles. With `prefill`, each TTFT is first moved to a reference-size prompt.
- prefill: a Theil-Sen line (robust to TTFT's heavy tails) of TTFT against the records'
  `model.prompt_tokens`, fitted only when the prompts spread and the slope shows in the TTFTs.
- decode.tps: the first event's tokens come together; every later token waits one gap, and an
  event of n tokens leaves with its last one. So the mean gap is (time between first and last
  event, stalls left out) / (tokens after the first event).
- decode.gap: quantiles of single-token events' gaps over their median (chunk sizes do not
  depend on gaps, so these are plain token gaps). With too few of them, each event's gap per
  token stands in (a sum of n gaps spreads less: the fitted shape is then narrower).
- chunking: tokens per event; each stream's last event only says "at least" (the end cuts it
  short), so a Kaplan-Meier estimate takes it as censored.
- stalls: event gaps beyond n x mean gap + STALL_K x (p99 of the gap basis): their count per
  token after the first event, and the durations (gap minus n mean gaps). Shorter pauses hide
  in the shape, so the rate is a lower bound when stalls are short.
Not fitted: context slowdown, prompt cache, hidden reasoning, speculative steps, stalls.where
(hidden reasoning and context slowdown show up in the fitted TTFT and rate instead).
Merged trace tails (retimer.timing.metrics) count for TTFT, rate and stalls, not for shape or chunking.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from retimer.timing.quantiles import Z90, Z99

STALL_K = 4.0
MIN_SINGLE_GAPS = 50  # single-token gaps needed to take the shape from them
MIN_STALLS = 3  # fewer pauses are noted in `source`, not modelled
MIN_PREFILL_STREAMS = 10
MAX_CHUNK_SIZES = 40
MIN_CHUNK_SHARE = 0.002


class FitError(Exception):
    """Nothing fit-worthy in the records: one line for the user."""


@dataclass(slots=True)
class UpstreamStream:
    """One recorded stream's upstream token events, as the fit reads them."""

    t_ms: np.ndarray  # event times from the request start (events with tokens only)
    n: np.ndarray  # tokens per event
    exact: int  # leading events recorded one per entry (the rest are merged groups)
    prompt_tokens: int | None
    protocol: str


@dataclass(slots=True)
class Fit:
    """The fitted numbers and what they rest on."""

    streams: int
    tokens: int
    ttft_ms: tuple[float, float, float]
    tps: float
    gap: tuple[float, float]
    gap_basis: str
    chunking: dict[int, float]
    stalls: int = 0
    stall_per_1000: float = 0.0
    stall_ms: tuple[float, float, float] | None = None
    prefill: tuple[float, int] | None = None  # (tokens/s, reference_tokens)
    protocols: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def network_events(t: np.ndarray, n: np.ndarray, exact: int,
                    ) -> tuple[np.ndarray, np.ndarray, int]:
    """Token events as the network delivered them: events without tokens dropped, and events
    that arrived at the same instant (one read) merged into one, as a client receives them."""
    keep = n > 0
    exact = int(keep[:exact].sum())
    t, n = t[keep], n[keep]
    if len(t) == 0:
        return t, n, 0
    last = np.r_[np.diff(t) > 0, True]  # the last event of each same-time run
    ends = np.flatnonzero(last)
    sums = np.cumsum(n)[ends]
    return t[ends], np.diff(sums, prepend=0), int((ends < exact).sum())


def _theil_sen(x: np.ndarray, y: np.ndarray, max_pairs: int = 200_000) -> float:
    """Median slope over pairs (all, or a fixed random sample of them when there are many)."""
    k = len(x)
    if k * (k - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(k, 1)
    else:
        rng = np.random.default_rng(0)
        i, j = rng.integers(0, k, max_pairs), rng.integers(0, k, max_pairs)
    dx = x[j] - x[i]
    ok = dx != 0
    return float(np.median((y[j] - y[i])[ok] / dx[ok])) if ok.any() else 0.0


def _prefill(streams: list[UpstreamStream], ttft: np.ndarray,
             notes: list[str]) -> tuple[float, int, np.ndarray] | None:
    """(ms per prompt token, reference tokens, TTFTs moved to the reference) or None."""
    known = np.array([s.prompt_tokens is not None for s in streams])
    if known.sum() < MIN_PREFILL_STREAMS:
        return None
    x = np.array([s.prompt_tokens for s in streams if s.prompt_tokens is not None], dtype=float)
    y = ttft[known]
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    if p90 - p10 < 500 or p90 < 1.5 * p10:
        notes.append(f"prefill not fitted: prompts of {p10:.0f}-{p90:.0f} tokens (p10-p90) "
                     "spread too little")
        return None
    slope = _theil_sen(x, y)
    if slope <= 0 or slope * (p90 - p10) < 0.1 * float(np.median(y)):
        notes.append("prefill not fitted: TTFT does not grow clearly with the prompt")
        return None
    # 1000 tokens, the built-in profiles' reference, when the prompts span it
    ref = 1000 if p10 <= 1000 <= p90 else int(float(f"{p50:.2g}"))
    moved = ttft.copy()
    moved[known] = np.maximum(y - slope * (x - ref), 0.05 * y)
    return slope, max(ref, 1), moved


def _quantiles(v: np.ndarray) -> tuple[float, float, float]:
    p50, p90, p99 = (float(q) for q in np.percentile(v, [50, 90, 99]))
    return p50, p90, p99


def fit_streams(streams: list[UpstreamStream]) -> Fit:
    if not streams:
        raise FitError("no fit-worthy stream: none is complete, streaming and has an "
                       "upstream trace")
    notes: list[str] = []
    ttft = np.array([s.t_ms[0] for s in streams])
    gaps, sizes, exact, chunks, cuts = [], [], [], [], []
    for s in streams:
        gaps.append(np.diff(s.t_ms))
        sizes.append(s.n[1:])
        exact.append(np.arange(1, len(s.n)) < s.exact)
        chunks.append(s.n[:s.exact])
        cuts.append(np.arange(s.exact) == len(s.n) - 1)  # the last event: cut short by the end
    g, n, ex = np.concatenate(gaps), np.concatenate(sizes), np.concatenate(exact)
    chunk, cut = np.concatenate(chunks), np.concatenate(cuts)
    if len(g) == 0 or g.sum() <= 0:
        raise FitError("every stream came in one network event: no decode rate to fit")
    single = (n == 1) & ex
    if single.sum() >= MIN_SINGLE_GAPS:
        basis_all, per_token, basis_name = g, False, "single-token events' gaps"
        in_basis = single
    else:
        basis_all, per_token = g / n, True
        basis_name = "gaps per token of each event (too few single-token events)"
        in_basis = ex
    b = basis_all[in_basis]
    med = float(np.median(b))
    clean = b[b <= 50 * med] if med > 0 else b
    typical = g <= n * 50 * med if med > 0 else np.ones(len(g), bool)
    mean = float(g[typical].sum() / n[typical].sum())
    q99 = max(float(np.percentile(clean, 99)), 2 * mean)  # never 0: a floor for the threshold
    stall = np.zeros(len(g), bool)
    for _ in range(2):
        excess = g - n * mean
        stall = excess > STALL_K * q99 * (n if per_token else 1)
        if stall.all():
            raise FitError("no steady decoding between the upstream's pauses to fit a rate to")
        mean = float(g[~stall].sum() / n[~stall].sum())
    if mean <= 0:
        raise FitError("upstream events came with no time between them: no decode rate to fit")
    shape = basis_all[in_basis & ~stall]
    p50, p90, p99 = _quantiles(shape) if len(shape) else (0.0, 0.0, 0.0)
    r90, r99 = (p90 / p50, p99 / p50) if p50 > 0 else (1.3, 2.5)
    if p50 <= 0:
        notes.append("decode.gap not fitted (the default shape): too few gaps")
    pre = _prefill(streams, ttft, notes)
    if pre is not None and pre[0] * pre[1] >= 0.98 * float(np.median(pre[2])):
        notes.append("prefill not fitted: it would take up all of the median TTFT")
        pre = None
    if pre is not None:
        ttft = pre[2]
    fit = Fit(
        streams=len(streams), tokens=int(sum(int(s.n.sum()) for s in streams)),
        ttft_ms=_quantiles(ttft), tps=1000.0 / mean, gap=(r90, r99), gap_basis=basis_name,
        chunking=_chunking(chunk, cut), protocols=dict(Counter(s.protocol for s in streams)),
        notes=notes, prefill=(1000.0 / pre[0], pre[1]) if pre is not None else None,
    )
    durations = (g - n * mean)[stall]
    fit.stalls = int(stall.sum())
    threshold = STALL_K * q99  # ms, for single-token events
    if fit.stalls >= MIN_STALLS:
        fit.stall_per_1000 = 1000.0 * fit.stalls / float(n.sum())
        fit.stall_ms = _stall_quantiles(durations)
    elif fit.stalls:
        notes.append(f"{fit.stalls} pause(s) of over {threshold:.0f} ms not modelled (too few)")
    return fit


def _stall_quantiles(d: np.ndarray) -> tuple[float, float, float]:
    """Empirical with enough pauses; else a log-normal through their median and log spread."""
    if len(d) >= 30:
        return _quantiles(d)
    logs = np.log(np.maximum(d, 1e-3))
    sigma = float(np.std(logs, ddof=1)) if len(d) > 1 else 0.0
    sigma = max(sigma, 0.1)
    p50 = float(np.exp(np.median(logs)))
    return p50, p50 * math.exp(sigma * Z90), p50 * math.exp(sigma * Z99)


def _chunking(sizes: np.ndarray, cut: np.ndarray) -> dict[int, float]:
    """{tokens per event: probability} from event sizes, where `cut` marks each stream's last
    event: the end cut it short, so its draw was at least its size (right-censored). Leaving
    those out would under-count big chunks (they end streams more often); a Kaplan-Meier
    estimate counts them as "at least". Sizes under MIN_CHUNK_SHARE and past the
    MAX_CHUNK_SIZES most common are dropped; rounded to 4 decimals summing to exactly 1."""
    full, censored = sizes[~cut], sizes[cut]
    if len(full) == 0:
        return {1: 1.0}
    probs: dict[int, float] = {}
    alive = 1.0
    for k in np.unique(full):
        at_risk = int((full >= k).sum() + (censored > k).sum())
        hazard = int((full == k).sum()) / at_risk
        probs[int(k)] = alive * hazard
        alive *= 1.0 - hazard
    if alive > 0:  # draws beyond every full event seen: the largest size takes them
        probs[max(probs)] += alive
    kept = sorted(probs.items(), key=lambda kv: -kv[1])[:MAX_CHUNK_SIZES]
    kept = [(k, p) for k, p in kept if p >= MIN_CHUNK_SHARE] or kept[:1]
    total = sum(p for _, p in kept)
    out = {k: round(p / total, 4) for k, p in sorted(kept)}
    top = max(out, key=lambda k: out[k])
    out[top] = round(out[top] + 1.0 - sum(out.values()), 4)
    return out


# ---------------------------------------------------------------- YAML


def _sig(v: float, digits: int = 4) -> str:
    """v with `digits` significant digits, never in exponent form."""
    if v == 0 or not math.isfinite(v):
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(v)))
    if decimals <= 0:
        return str(int(round(v, decimals)))
    return f"{v:.{decimals}f}".rstrip("0").rstrip(".")


def _increasing(q: tuple[float, float, float], step: float = 1.001) -> tuple[float, ...]:
    """Quantiles rounded for YAML, nudged so p50 < p90 < p99 holds after rounding."""
    out = [float(_sig(q[0]))]
    for v in q[1:]:
        v = max(v, out[-1] * step)
        while float(_sig(v)) <= out[-1]:
            v *= step
        out.append(float(_sig(v)))
    return tuple(out)


def _ms(v: float) -> str:
    return f"{_sig(v)}ms"


def _gap_ratios(r90: float, r99: float) -> tuple[str, str]:
    a = max(round(r90, 3), 1.01)
    b = max(round(r99, 3), round(a + 0.01, 3))
    return f"{a:g}", f"{b:g}"


SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")


def slug(text: str) -> str:
    """A profile name from free text (a log file's name): lowercase a-z 0-9 . _ -."""
    s = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return s or "fitted"


def to_yaml(fit: Fit, name: str, log_name: str, read: int, skipped: Counter[str],
            filters: str = "", when: str = "") -> str:
    """The profile as YAML `retimer --profile` loads; `source` says what it rests on."""
    protocols = ", ".join(f"{p} {c}" for p, c in sorted(fit.protocols.items()))
    left = ", ".join(f"{r} {c}" for r, c in sorted(skipped.items()))
    ttft = _increasing(fit.ttft_ms)
    basis = "TTFT quantiles: empirical over streams"
    if fit.prefill is not None:
        basis += f", each moved to a {fit.prefill[1]}-token prompt by the fitted prefill slope"
    source = (
        f"retimer fit of {log_name}{' on ' + when if when else ''}: {fit.streams} upstream "
        f"streams ({protocols}), {fit.tokens} tokens; {read} records read"
        f"{', left out: ' + left if left else ''}{'; filters: ' + filters if filters else ''}. "
        f"{basis}. decode.tps: tokens after each stream's first event over the time to its "
        f"last, stalls left out. decode.gap: quantiles of {fit.gap_basis} over their median. "
        f"chunking: tokens per upstream event (each stream's last event counted as cut short). "
        f"stalls: {fit.stalls} event gaps beyond n mean gaps + {STALL_K:g}x the p99 gap."
        + "".join(f" {note}." for note in fit.notes)
    )
    r90, r99 = _gap_ratios(*fit.gap)
    chunking = ", ".join(f"{k}: {v:g}" for k, v in fit.chunking.items())
    lines = [
        f"# Fitted by `retimer fit` from {json.dumps(log_name)[1:-1]}",
        f"name: {name}",
        f"description: {json.dumps(f'Fitted from {fit.streams} upstream streams in {log_name}')}",
        f"source: {json.dumps(source)}",
        f"ttft: {{p50: {_ms(ttft[0])}, p90: {_ms(ttft[1])}, p99: {_ms(ttft[2])}}}",
        "decode:",
        f"  tps: {_sig(fit.tps)}",
        f"  gap: {{p90: {r90}, p99: {r99}}}",
        f"chunking: {{{chunking}}}",
    ]
    if fit.prefill is not None:
        lines.append(f"prefill: {{tps: {_sig(fit.prefill[0], 3)}, "
                     f"reference_tokens: {fit.prefill[1]}}}")
    if fit.stall_ms is not None:
        d = _increasing(fit.stall_ms)
        lines += ["stalls:", f"  per_1000_tokens: {_sig(fit.stall_per_1000, 3)}",
                  f"  duration: {{p50: {_ms(d[0])}, p90: {_ms(d[1])}, p99: {_ms(d[2])}}}",
                  "  where: any"]
    return "\n".join(lines) + "\n"
