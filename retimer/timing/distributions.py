"""Samplers for re-timing: inter-token gaps and tokens per network event.

Why stratified, balanced gap blocks: a stream's perceived speed is its mean rate, and an
i.i.d. sampler drifts by several percent over a few hundred tokens. `GapSampler` makes every
block of 128 gaps sum to exactly 128 / tps and orders each block so that short prefixes are
balanced too, while the gap quantiles still match the profile (a `QuantileShape`, in
retimer.timing.quantiles, as the TTFT draw is).

All randomness comes from a caller-seeded `numpy.random.Generator`, so runs reproduce.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np

from retimer.timing.quantiles import QuantileShape, check_positive

__all__ = ["ChunkSampler", "GapSampler"]


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


@functools.lru_cache(maxsize=16)
def _balanced_order(k: int, group: int) -> _BalancedOrder:
    """One order per (k, group), shared by every stream: it only reads its arrays when it
    draws, and building one costs more than the rest of a stream's samplers."""
    return _BalancedOrder(k, group)


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
        self.tps = check_positive("tps", tps)
        if slowdown is not None:
            offset, half = float(slowdown[0]), check_positive("half_rate_at", slowdown[1])
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
        self._order = _balanced_order(block, group)
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
