"""The figures one test of a study produces, as the views and the JSON show them. Pure data.

Every figure carries what a methods section needs to report it: the test that made it, its
degrees of freedom, and an interval from that same test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Companion", "Comparison", "EffectSize", "ModelReport", "Omnibus"]


@dataclass(frozen=True)
class EffectSize:
    """A standardized effect (d_z for paired differences, Hedges' g between groups)."""

    name: str
    value: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class Companion:
    """Another test of the same comparison, printed beside the headline: its own estimate,
    interval and p (an interval and a p always come from the same test)."""

    test: str  # paired-t | wilcoxon | mann-whitney | welch
    estimate: float
    ci: tuple[float, float]
    p: float
    df: float | None = None


@dataclass(frozen=True)
class Comparison:
    """One condition against another on one scale: the headline test's figures."""

    scale: str
    condition: str
    reference: str
    test: str  # welch | paired | mixed-model
    estimate: float  # condition minus reference, in rating points
    ci: tuple[float, float]
    p: float
    participants: int
    effect_size: EffectSize | None = None
    df: float | None = None
    p_holm: float | None = None  # adjusted over the scale's family of comparisons
    family: int = 1  # how many comparisons that family holds
    companions: tuple[Companion, ...] = ()


@dataclass(frozen=True)
class Omnibus:
    """Do the conditions differ at all (three or more): an F test with its df."""

    scale: str
    test: str  # mixed-model F (Satterthwaite) | Welch's ANOVA
    f: float
    df1: float
    df2: float
    p: float


@dataclass(frozen=True)
class ModelReport:
    """The mixed model fitted for a scale, and why it is that one."""

    scale: str
    formula: str  # the model fitted, in lme4's notation
    maximal: str  # the model the design supports
    simplified: str  # why the fitted one is simpler ("" when it is the maximal one)
    method: str
    sds: dict[str, float] = field(default_factory=dict)  # random effects' and residual SDs
    correlations: dict[str, float] = field(default_factory=dict)
    observations: int = 0
    participants: int = 0
