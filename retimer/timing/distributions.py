"""Latency distributions for re-timing: TTFT, inter-token gaps, tokens per network event.

Why a quantile-matched shape: providers publish (or we measure) p50/p90/p99, and their tails
differ far more than their medians (TTFT p99/p50 runs from 1.6 to 10 by provider). A
log-normal fitted through p50 and p90 fixes p99 at p50 * (p90/p50) ** 1.815 and so misses heavy
tails; `QuantileShape` passes through all three quantiles exactly.

Why stratified, balanced gap blocks: a stream's perceived speed is its mean rate, and an
i.i.d. sampler drifts by several percent over a few hundred tokens. `GapSampler` makes every
block of 128 gaps sum to exactly 128 / tps and orders each block so that short prefixes are
balanced too, while the gap quantiles still match the profile.

All randomness comes from a caller-seeded `numpy.random.Generator`, so runs reproduce.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "Z90",
    "Z95",
    "Z99",
    "norm_ppf",
    "QuantileShape",
    "GapSampler",
    "ChunkSampler",
    "sample_ttft",
]

_ND = NormalDist()
Z90: float = _ND.inv_cdf(0.90)  # 1.2816
Z95: float = _ND.inv_cdf(0.95)  # 1.6449
Z99: float = _ND.inv_cdf(0.99)  # 2.3263

# Acklam's rational approximation of the standard-normal quantile (relative error < 1.2e-9):
# vectorised numpy, no scipy dependency, and far below any timing resolution.
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
      1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
      6.680131188771972e01, -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
      -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
      3.754408661907416e00)
_P_LOW = 0.02425


def norm_ppf(u: np.ndarray | float) -> np.ndarray:
    """Standard-normal quantile z(u) for u in [0, 1] (z(0) = -inf, z(1) = +inf)."""
    p = np.array(u, dtype=np.float64, ndmin=1)
    q = p - 0.5
    r = q * q
    num = (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]) * q
    den = ((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1.0
    z = num / den
    tail = np.minimum(p, 1.0 - p)
    outer = tail < _P_LOW
    if outer.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.sqrt(-2.0 * np.log(tail[outer]))
            num = ((((_C[0] * t + _C[1]) * t + _C[2]) * t + _C[3]) * t + _C[4]) * t + _C[5]
            den = (((_D[0] * t + _D[1]) * t + _D[2]) * t + _D[3]) * t + 1.0
            zt = num / den
        zt[tail[outer] == 0.0] = -np.inf
        z[outer] = np.where(p[outer] < 0.5, zt, -zt)
    return z


def _norm_sf(x: float) -> float:
    """1 - Phi(x), accurate in the upper tail."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _check_positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


@dataclass(frozen=True, slots=True)
class QuantileShape:
    """A positive distribution whose log is piecewise-linear in the normal z score.

    log q(z) runs through (0, ln p50), (Z90, ln p90), (Z99, ln p99). Below Z90 it keeps the
    p50-p90 slope (so the body is a log-normal mirrored about the median); above Z99 it keeps
    the p90-p99 slope. Equal quantiles are allowed (p50 == p90 == p99 is a constant).
    """

    p50: float
    p90: float
    p99: float

    def __post_init__(self) -> None:
        for name in ("p50", "p90", "p99"):
            object.__setattr__(self, name, _check_positive(name, getattr(self, name)))
        if not self.p50 <= self.p90 <= self.p99:
            raise ValueError(
                f"quantiles must not decrease: p50={self.p50:g}, p90={self.p90:g}, p99={self.p99:g}"
            )

    @classmethod
    def lognormal(cls, p50: float, p90: float) -> QuantileShape:
        """The plain log-normal through p50 and p90 (its p99 follows from the same slope)."""
        p50, p90 = _check_positive("p50", p50), _check_positive("p90", p90)
        return cls(p50, p90, p50 * (p90 / p50) ** (Z99 / Z90))

    @classmethod
    def from_p95(cls, p50: float, p95: float, p99: float) -> QuantileShape:
        """The shape through p50, p95 and p99, for sources that publish p95 rather than p90.

        p95 lies on the upper segment (Z90 < Z95 < Z99), so the p90-p99 slope is
        ln(p99/p95) / (Z99 - Z95) and p90 follows. Raises when the tail is so heavy against
        the body that p90 would fall to the median or below.
        """
        p50, p95, p99 = (_check_positive(n, v) for n, v in zip(("p50", "p95", "p99"),
                                                                (p50, p95, p99), strict=True))
        if not p50 < p95 <= p99:
            raise ValueError(f"need p50 < p95 <= p99, got {p50:g}, {p95:g}, {p99:g}")
        slope = math.log(p99 / p95) / (Z99 - Z95)
        p90 = p95 * math.exp(-slope * (Z95 - Z90))
        if p90 <= p50:
            raise ValueError(
                f"p95={p95:g} and p99={p99:g} imply p90={p90:g} <= p50={p50:g}: this tail "
                "cannot be one upper segment; give p90 directly"
            )
        return cls(p50, p90, p99)

    @property
    def body_slope(self) -> float:
        """d ln q / dz below Z90 (the log-normal sigma of the body)."""
        return math.log(self.p90 / self.p50) / Z90

    @property
    def tail_slope(self) -> float:
        """d ln q / dz above Z90."""
        return math.log(self.p99 / self.p90) / (Z99 - Z90)

    @property
    def is_constant(self) -> bool:
        return self.p50 == self.p99

    def ppf(self, u: np.ndarray | float) -> np.ndarray:
        """Quantile function: the value below which a fraction u of the mass lies."""
        z = norm_ppf(u)
        if self.is_constant:
            return np.full_like(z, self.p50)
        s1, s2 = self.body_slope, self.tail_slope
        with np.errstate(over="ignore", invalid="ignore"):
            out = self.p50 * np.exp(s1 * np.minimum(z, Z90) + s2 * np.maximum(z - Z90, 0.0))
        if not np.isfinite(z).all():  # u = 0 or 1: pin the end points (0 * inf is nan)
            out[z == np.inf] = np.inf if s2 > 0 else self.p90
            out[z == -np.inf] = 0.0 if s1 > 0 else self.p50
        return out

    def quantile(self, q: float) -> float:
        """ppf for one probability, as a Python float (scalar math: ~2 us, not ~40 us)."""
        if not 0.0 < q < 1.0:
            return float(self.ppf(np.array([q]))[0])
        if self.is_constant:
            return self.p50
        z = _ND.inv_cdf(q)
        if z <= Z90:
            return self.p50 * math.exp(self.body_slope * z)
        return self.p90 * math.exp(self.tail_slope * (z - Z90))

    def mean(self) -> float:
        """Exact mean: the two log-linear pieces integrate in closed form against phi(z).

        E = p50 e^{s1^2/2} Phi(Z90 - s1) + p90 e^{-s2 Z90 + s2^2/2} (1 - Phi(Z90 - s2)).
        (tests check it against a direct numeric integral of ppf).
        """
        if self.is_constant:
            return self.p50
        s1, s2 = self.body_slope, self.tail_slope
        body = self.p50 * math.exp(0.5 * s1 * s1) * (1.0 - _norm_sf(Z90 - s1))
        tail = self.p90 * math.exp(-s2 * Z90 + 0.5 * s2 * s2) * _norm_sf(Z90 - s2)
        return body + tail

    def scaled(self, k: float) -> QuantileShape:
        """The same shape with every quantile multiplied by k > 0."""
        k = _check_positive("scale", k)
        return QuantileShape(self.p50 * k, self.p90 * k, self.p99 * k)

    def jittered(self, jitter: float) -> QuantileShape:
        """Same median, log-spread times `jitter`: ratios r -> r ** jitter (0 is a constant)."""
        j = float(jitter)
        if not (math.isfinite(j) and j >= 0.0):
            raise ValueError(f"jitter must be a finite number >= 0, got {jitter!r}")
        if j == 1.0:
            return self
        return QuantileShape(
            self.p50, self.p50 * (self.p90 / self.p50) ** j, self.p50 * (self.p99 / self.p50) ** j
        )


def sample_ttft(shape: QuantileShape, rng: np.random.Generator, jitter: float = 1.0) -> float:
    """One TTFT draw in the shape's unit; jitter scales the spread about the median."""
    u = rng.random()  # always drawn, so the generator advances the same way for any jitter
    jittered = shape.jittered(jitter)
    if jittered.is_constant:
        return jittered.p50
    return jittered.quantile(u)


class _BalancedOrder:
    """Random orders of strata 0..k-1 whose aligned runs are spread over the quantiles.

    An Owen-scrambled van der Corput order: every aligned run of 2**m positions holds one
    stratum from each of 2**m equal quantile bands. That is what keeps the mean of a short
    prefix near the target (a plain shuffle gives 3x the error at 200 gaps). Then each aligned
    run of `group` is shuffled, which removes the strict low/high alternation of adjacent
    gaps (lag-1 autocorrelation -0.40 -> about -0.09) and keeps the balance at that scale.
    """

    def __init__(self, k: int, group: int) -> None:
        bits = k.bit_length() - 1
        pos = np.arange(k, dtype=np.int64)
        rev = np.zeros(k, dtype=np.int64)  # bit-reversed positions: van der Corput order
        for b in range(bits):
            rev |= ((pos >> b) & 1) << (bits - 1 - b)
        shifts = np.arange(bits - 1, -1, -1, dtype=np.int64)[:, None]
        self._digit = (rev[None, :] >> shifts) & 1  # stratum digits, most significant first
        # one random flip per node of the binary tree: node index = offset of its level + prefix
        offsets = (1 << np.arange(bits, dtype=np.int64))[:, None] - 1
        self._node = offsets + (rev[None, :] >> (shifts + 1))
        self._weights = (1 << shifts)
        self._k, self._group = k, group

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        flips = rng.integers(0, 2, size=self._k - 1)
        out = ((self._digit ^ flips[self._node]) * self._weights).sum(axis=0)
        if self._group > 1:
            out = rng.permuted(out.reshape(-1, self._group), axis=1).reshape(-1)
        return out


class GapSampler:
    """Inter-token gaps (seconds) with mean exactly 1/tps and the profile's p90/p99 ratios.

    The shape is given relative to the median gap (p90/p50, p99/p50); the median is then
    chosen so the MEAN gap is 1/tps. Gaps come in blocks of K (default 128) stratified draws
    u_j = (j + U_j)/K. The top stratum (above the 1 - 1/K quantile, so above p99 for K >= 128)
    absorbs the block's sampling error: its gap is set so the running total after each block
    is exactly (gaps so far) / tps, never below its stratum's floor. So the quantiles up to
    p99 are the profile's, the mean is exact at every block end, and in between it is
    balanced by the block order (see `_BalancedOrder`). Beyond p99.2 single gaps are capped
    near the tail's conditional mean: rare long pauses belong to a stall model, not here.

    `slowdown=(offset, half_rate_at)` makes the mean of gap i equal to
    (1 + (offset + i) / half_rate_at) / tps: decode slows as the context grows. The top stratum
    then absorbs the block's error against that weighted target, so the sum over whole blocks
    is still exact (sum of 1/rate at each position).
    """

    def __init__(
        self,
        tps: float,
        p90_ratio: float,
        p99_ratio: float,
        rng: np.random.Generator,
        jitter: float = 1.0,
        block: int = 128,
        group: int = 8,
        slowdown: tuple[float, float] | None = None,
    ) -> None:
        self.tps = _check_positive("tps", tps)
        if slowdown is not None:
            offset, half = float(slowdown[0]), _check_positive("half_rate_at", slowdown[1])
            if not (math.isfinite(offset) and offset >= 0.0):
                raise ValueError(f"slowdown offset must be a number >= 0, got {slowdown[0]!r}")
            slowdown = (offset, half)
        self.slowdown = slowdown
        r90, r99 = float(p90_ratio), float(p99_ratio)
        if not (math.isfinite(r90) and math.isfinite(r99) and 1.0 <= r90 <= r99):
            raise ValueError(
                f"gap ratios need 1 <= p90 <= p99, got p90={p90_ratio!r}, p99={p99_ratio!r}"
            )
        if block < 8 or block & (block - 1) or group < 1 or block % group or group & (group - 1):
            raise ValueError(
                f"block must be a power of two >= 8 and group a power of two dividing it, "
                f"got {block}, {group}"
            )
        self.jitter = float(jitter)
        unit = QuantileShape(1.0, r90, r99).jittered(self.jitter)
        self.mean_gap = 1.0 / self.tps
        self._unit_mean = unit.mean()
        # The shape in seconds: median chosen so that the mean is exactly 1/tps.
        self.shape = unit.scaled(self.mean_gap / self._unit_mean)
        self._unit = unit
        self._rng = rng
        self._k = block
        self._group = group
        self._constant = unit.is_constant
        self._order = _BalancedOrder(block, group)
        self._floor = unit.quantile(1.0 - 1.0 / block) / self._unit_mean
        self._blocks = 0
        self._total = 0.0  # sum of emitted unit-mean values (weighted, with a slowdown)
        self._target = 0.0  # what that sum should be at the last block end (weighted)
        self._buf: list[float] = []
        self._i = 0

    @property
    def median(self) -> float:
        """The median gap at an empty context."""
        return self.shape.p50

    def weights(self, start: int, n: int) -> np.ndarray:
        """Mean-gap multipliers of gaps start..start+n-1 (all 1 without a slowdown)."""
        if self.slowdown is None:
            return np.ones(n)
        offset, half = self.slowdown
        return 1.0 + (offset + np.arange(start, start + n, dtype=np.float64)) / half

    def _refill(self) -> None:
        k = self._k
        start = self._blocks * k
        if self._constant:
            self._blocks += 1
            self._buf = (self.weights(start, k) * self.mean_gap).tolist()
            self._i = 0
            return
        rng = self._rng
        u = (np.arange(k) + rng.random(k)) / k
        v = self._unit.ppf(u) / self._unit_mean  # unit-mean values, v[-1] is the top stratum
        self._blocks += 1
        if self.slowdown is None:
            target = self._blocks * k - self._total - float(v[:-1].sum())
            v[-1] = max(target, self._floor)
            self._total += float(v.sum())
            self._buf = (v[self._order.draw(rng)] * self.mean_gap).tolist()
        else:
            order = self._order.draw(rng)
            w = self.weights(start, k)
            out = v[order] * w
            top = int(np.flatnonzero(order == k - 1)[0])
            self._target += float(w.sum())
            rest = float(out.sum()) - float(out[top])
            out[top] = max((self._target - self._total - rest) / w[top], self._floor) * w[top]
            self._total += float(out.sum())
            self._buf = (out * self.mean_gap).tolist()
        self._i = 0

    def next(self) -> float:
        """The next gap in seconds (a Python float; amortised O(1))."""
        if self._i >= len(self._buf):
            self._refill()
        g = self._buf[self._i]
        self._i += 1
        return g

    def take(self, n: int) -> list[float]:
        """The next n gaps."""
        return [self.next() for _ in range(n)]


class ChunkSampler:
    """Tokens per network event, from a small discrete distribution {size: probability}.

    Providers batch differently (OpenAI about 1 token per event, Anthropic bursts of 1-7,
    Gemini 20-60); the scheduler groups re-timed tokens into events of these sizes.
    Probabilities must sum to 1 (within 1e-3; they are then normalised). `stratified` draws
    each block systematically (every size gets floor or ceil of its share, then shuffled), so
    the tokens per block stay within one largest size of their mean.
    """

    def __init__(
        self, distribution: Mapping[int, float], rng: np.random.Generator, block: int = 256,
        stratified: bool = False,
    ) -> None:
        if not distribution:
            raise ValueError("chunk distribution is empty")
        sizes, probs = [], []
        for size, p in distribution.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"chunk size must be a positive integer, got {size!r}")
            ok = isinstance(p, (int, float)) and not isinstance(p, bool)
            if not (ok and math.isfinite(p) and p > 0):
                raise ValueError(f"probability of chunk size {size} must be positive, got {p!r}")
            sizes.append(size)
            probs.append(float(p))
        total = sum(probs)
        if abs(total - 1.0) > 1e-3:
            raise ValueError(f"chunk probabilities must sum to 1, got {total:g}")
        self.sizes = np.array(sizes, dtype=np.int64)
        self.probs = np.array(probs) / total
        self._rng = rng
        self._block = block
        self._stratified = stratified
        self._cdf = np.cumsum(self.probs)
        self._buf: list[int] = []
        self._i = 0

    def mean(self) -> float:
        """Expected tokens per event."""
        return float(np.dot(self.sizes, self.probs))

    def next(self) -> int:
        """Tokens in the next event (a Python int)."""
        if self._i >= len(self._buf):
            if len(self.sizes) == 1:
                self._buf = [int(self.sizes[0])] * self._block
            elif self._stratified:
                u = (np.arange(self._block) + self._rng.random()) / self._block
                idx = np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self.sizes) - 1)
                self._buf = self._rng.permutation(self.sizes[idx]).tolist()
            else:
                self._buf = self._rng.choice(self.sizes, size=self._block, p=self.probs).tolist()
            self._i = 0
        n = self._buf[self._i]
        self._i += 1
        return n
