"""The statistics of the sampling section: chi-square goodness of fit of sampled tokens against exact
distributions, per token where groups are large enough and by the randomised probability integral
transform where they are not; and the deviation such a test detects."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.stats import chi2, ncx2

from engine.check.config import ALPHA, MIN_EXPECTED, POWER


@dataclass
class ChiSquare:
    statistic: float
    df: int
    pvalue: float | None      # None when the samples cannot form two bins of expected count >= 5
    samples: int              # samples in the groups that were tested
    bins: int
    impossible: int           # samples of tokens with probability 0 (p-value forced to 0)
    detectable: float | None  # chi-square distance detected with POWER at alpha
    pit_samples: int = 0      # of `samples`, those pooled by the probability integral transform
    pit_bins: int = 0         # of `bins`, the probability-ordered ones

    def to_dict(self) -> dict:
        return asdict(self)


def chi_square(groups: Sequence[tuple[dict, np.ndarray]], alpha: float = ALPHA,
               min_expected: float = MIN_EXPECTED, leftovers: list | None = None) -> ChiSquare:
    """Goodness of fit of several independent groups of samples, each against its own exact
    distribution: groups are (counts {token: n}, probabilities over the vocabulary).

    Per group: one bin per token expected >= min_expected times, the tail in an "other" bin (merged
    into the smallest bin when it expects fewer); statistics and degrees of freedom add up. Groups too
    small for two such bins are skipped (appended to `leftovers` when given)."""
    stat, df, used, bins, impossible = 0.0, 0, 0, 0, 0
    for counts, probs in groups:
        probs = np.asarray(probs, dtype=np.float64)
        n = int(sum(counts.values()))
        if n == 0:
            continue
        impossible += sum(c for tok, c in counts.items() if probs[tok] <= 0)
        order = np.argsort(-probs, kind="stable")
        k = int(np.searchsorted(-(probs[order] * n), -min_expected, side="right"))
        chosen = order[:k]
        expected = list(probs[chosen] * n)
        observed = [float(counts.get(int(t), 0)) for t in chosen]
        rest_expected = float(probs[order[k:]].sum() * n)
        rest_observed = n - sum(observed)
        if rest_expected >= min_expected or (not expected and rest_expected > 0):
            expected.append(rest_expected)
            observed.append(rest_observed)
        elif expected:
            expected[-1] += rest_expected
            observed[-1] += rest_observed
        if len(expected) < 2 or min(expected) < min_expected:
            if leftovers is not None:
                leftovers.append((counts, probs))
            continue
        e, o = np.array(expected), np.array(observed)
        stat += float(((o - e) ** 2 / e).sum())
        df += len(e) - 1
        used += n
        bins += len(e)
    if impossible:
        return ChiSquare(math.inf, df, 0.0, used, bins, impossible, None)
    if df == 0:
        return ChiSquare(0.0, 0, None, used, 0, 0, None)
    return ChiSquare(stat, df, float(chi2.sf(stat, df)), used, bins, 0, detectable_distance(df, used, alpha))


def pit_chi_square(groups: Sequence[tuple[dict, np.ndarray]], rng: np.random.Generator, alpha: float = ALPHA,
                   max_bins: int = 10, per_bin: int = 10) -> ChiSquare:
    """Goodness of fit for many small groups at once (each group: counts {token: n} against its own exact
    distribution), by the randomised probability integral transform: order each group's vocabulary by
    decreasing probability; a sample of token x becomes u drawn uniformly from [F(before x), F(x)].
    Under exactness every u is Uniform(0, 1) whatever its group, so all samples pool into k equal bins
    (k = samples / per_bin, between 2 and max_bins). Tests mass moved between likely and unlikely tokens."""
    us, impossible = [], 0
    for counts, probs in groups:
        probs = np.asarray(probs, dtype=np.float64)
        if not counts:
            continue
        order = np.argsort(-probs, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        cumulative = np.cumsum(probs[order])
        for token, c in counts.items():
            if probs[token] <= 0:
                impossible += c
                continue
            hi = cumulative[position[token]]
            lo = hi - probs[token]
            us.extend((lo + rng.random(c) * (hi - lo)).tolist())
    n = len(us) + impossible
    if impossible:
        return ChiSquare(math.inf, 0, 0.0, n, 0, impossible, None)
    k = min(max_bins, n // per_bin)
    if k < 2:
        return ChiSquare(0.0, 0, None, n, 0, 0, None)
    observed = np.bincount(np.minimum((np.array(us) * k).astype(int), k - 1), minlength=k)
    expected = n / k
    stat = float(((observed - expected) ** 2 / expected).sum())
    return ChiSquare(stat, k - 1, float(chi2.sf(stat, k - 1)), n, k, 0, detectable_distance(k - 1, n, alpha))


def sample_test(groups: Sequence[tuple[dict, np.ndarray]], rng: np.random.Generator,
                alpha: float = ALPHA) -> ChiSquare:
    """Per-token bins for the groups large enough (chi_square), the randomised PIT (pit_chi_square)
    for the samples of all the other groups together; the two statistics cover disjoint samples, so
    they add up into one chi-square test."""
    leftovers: list = []
    tokens = chi_square(groups, alpha, leftovers=leftovers)
    if tokens.impossible:
        return tokens
    pit = pit_chi_square(leftovers, rng, alpha)
    if pit.impossible:
        return pit
    parts = [r for r in (tokens, pit) if r.pvalue is not None]
    samples = sum(r.samples for r in parts)
    df = sum(r.df for r in parts)
    if df == 0:
        return ChiSquare(0.0, 0, None, tokens.samples + pit.samples, 0, 0, None)
    stat = sum(r.statistic for r in parts)
    pit_used = pit.pvalue is not None
    return ChiSquare(stat, df, float(chi2.sf(stat, df)), samples, sum(r.bins for r in parts), 0,
                     detectable_distance(df, samples, alpha), pit.samples if pit_used else 0,
                     pit.bins if pit_used else 0)


def detectable_distance(df: int, samples: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest chi-square distance sum((p'-p)^2/p) over the bins that a test with these df and samples
    detects with probability `power` at level `alpha` (noncentral chi-square, lambda = samples * d)."""
    critical = chi2.isf(alpha, df)
    lam = brentq(lambda x: ncx2.sf(critical, df, x) - power, 1e-9, 1e6)
    return float(lam / samples)
