"""95 % intervals of a measured acceptance vector: over prompts, not only over positions.

A vector's P(rank k) is a share of positions, but positions come in prompts, and prompts differ:
on the embedded pair the rank-1 rate of one prompt's greedy answer ranges over about ±0.05 (code)
and ±0.08 (prose) around the mean (bench/acceptance-ranks-320-nf4.json, the 12 + 12 measurement
prompts). A binomial interval counts every position as independent and is about half as wide as
one over those prompts; it says how well the measured positions are known, not how well the pair's
rate on such prompts is. So a vector that recorded its prompts' counts gets the interval of the
ratio estimator over prompts (the cluster-robust one: each prompt is one draw, weighted by its
positions) with Student's t for m - 1 degrees of freedom, and never narrower than the binomial one
(with few prompts that agree by chance the estimate over prompts can come out narrower than what
the positions alone allow). With fewer than MIN_PROMPTS prompts it is the binomial one."""
from __future__ import annotations

import math

MIN_PROMPTS = 3   # below this a spread over prompts is not estimated


def binomial(probabilities: list[float], positions: float) -> list[float]:
    """Half-width of a 95 % interval per rank, for shares observed over `positions`: the normal
    one, or, where larger, the distance from the share to the farther end of Wilson's score
    interval. A rank seen 0 times in 5 positions had a half-width of 1e-6 (the normal interval
    vanishes at a share of 0 or 1), a certainty 5 positions cannot give; Wilson's reaches 0.43
    there, and agrees with the normal one within a few % for shares between 0.1 and 0.9 over
    some hundreds of positions."""
    z, n = 1.96, max(float(positions), 1e-12)
    out = []
    for p in probabilities:
        normal = z * math.sqrt(max(p * (1 - p), 1e-12) / n)
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        out.append(max(normal, abs(centre - half - p), abs(centre + half - p)))
    return out


def prompt_row(counts: list[float], positions: float) -> list[float]:
    """One prompt's record in a vector: [positions, count of rank 1, ..., rank W, none]."""
    return [float(positions), *map(float, counts)]


def over_prompts(prompt_counts: list[list[float]], width: int) -> list[float] | None:
    """Half-width per rank of the 95 % interval over prompts (None with fewer than MIN_PROMPTS
    prompts that had positions). Ratio estimator p = sum(c_i) / sum(n_i); its variance
    m / (m - 1) * sum((c_i - p n_i)^2) / (sum n_i)^2."""
    from scipy.stats import t as student_t   # lazy: scipy's import is slow and few callers need it
    rows = [row for row in prompt_counts if row and row[0] > 0]
    m = len(rows)
    if m < MIN_PROMPTS:
        return None
    total = sum(row[0] for row in rows)
    quantile = float(student_t.ppf(0.975, m - 1))
    out = []
    for k in range(width):
        p = sum(row[1 + k] for row in rows) / total
        spread = sum((row[1 + k] - p * row[0]) ** 2 for row in rows) * m / (m - 1)
        out.append(quantile * math.sqrt(spread) / total)
    return out


def vector_ci(probabilities: list[float], positions: float,
              prompt_counts: list[list[float]] | None) -> tuple[list[float], str]:
    """(half-widths, basis): over prompts where at least MIN_PROMPTS recorded their counts (never
    narrower than the binomial interval), else over positions."""
    positional = binomial(probabilities, positions)
    spread = over_prompts(prompt_counts or [], len(probabilities))
    if spread is None:
        return positional, "positions"
    return [max(a, b) for a, b in zip(spread, positional)], "prompts"


def for_new_prompts(prompt_counts: list[list[float]], width: int, new_prompts: int,
                    new_positions: float | None = None) -> list[float] | None:
    """Half-width per rank of the 95 % interval for the mean share over `new_prompts` other prompts
    like the measured ones (a prediction interval, t with m - 1 degrees of freedom): the measured
    mean's own variance plus each new prompt's, over new_prompts. A new prompt's variance is the
    measured prompts' spread of their shares, s^2, which holds their own position noise (binomial,
    p(1 - p) / n_i); with `new_positions` (the new prompts are shorter or longer: a bench's answers
    of 64 tokens against 128 measured) that noise is swapped for p(1 - p) / new_positions, the
    spread between prompts, s^2 less the measured noise, kept (at least 0). Never narrower than
    the vector's own interval (vector_ci). What a benchmark of a few prompts can expect to see
    around the vector; None with fewer than MIN_PROMPTS measured prompts."""
    from scipy.stats import t as student_t
    rows = [row for row in prompt_counts if row and row[0] > 0]
    m = len(rows)
    if m < MIN_PROMPTS or new_prompts < 1:
        return None
    quantile = float(student_t.ppf(0.975, m - 1))
    total = sum(row[0] for row in rows)
    probs = [sum(row[1 + k] for row in rows) / total for k in range(width)]
    own, _ = vector_ci(probs, total, rows)
    out = []
    for k, p in enumerate(probs):
        mean_var = sum((row[1 + k] - p * row[0]) ** 2 for row in rows) * m / (m - 1) / total ** 2
        shares = [row[1 + k] / row[0] for row in rows]
        mean_share = sum(shares) / m
        spread = sum((x - mean_share) ** 2 for x in shares) / (m - 1)
        if new_positions:
            noise = p * (1 - p)
            spread = max(0.0, spread - sum(noise / row[0] for row in rows) / m) + noise / new_positions
        out.append(max(own[k], quantile * math.sqrt(mean_var + spread / new_prompts)))
    return out
