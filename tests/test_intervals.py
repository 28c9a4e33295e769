"""95 % intervals of measured acceptance vectors over prompts (engine/intervals.py)."""
from types import SimpleNamespace

import numpy as np
import pytest

from engine import domains, intervals, interpolation, profiler


def _prompts(rng, rates, positions):
    """Per-prompt rows [positions, rank-1 hits, misses] for prompts with these rank-1 rates."""
    rows = []
    for rate in rates:
        hits = int(rng.binomial(positions, rate))
        rows.append([float(positions), float(hits), float(positions - hits)])
    return rows


def _coverage(interval_of, sd_between: float, trials: int = 600, prompts: int = 12, positions: int = 128) -> float:
    """How often the interval holds the pair's mean rate when prompts' own rates spread by
    `sd_between` around it (as the embedded pair's do: ±0.05-0.08)."""
    rng = np.random.default_rng(7)
    mean, held = 0.8, 0
    for _ in range(trials):
        rates = np.clip(rng.normal(mean, sd_between, prompts), 0.01, 0.99) if sd_between else [mean] * prompts
        rows = _prompts(rng, rates, positions)
        total = sum(r[0] for r in rows)
        p = sum(r[1] for r in rows) / total
        half = interval_of([p], total, rows)[0]
        held += abs(p - mean) <= half
    return held / trials


def test_the_interval_over_prompts_holds_the_mean_where_positions_alone_do_not():
    """Prompts that differ (sd 0.06 around 0.8, 12 prompts x 128 positions): the interval over
    prompts holds the mean rate in about 95 % of measurements; the binomial one, which counts every
    position as independent, in about two thirds (it was the shipped vectors' interval)."""
    over_prompts = _coverage(lambda p, n, rows: intervals.vector_ci(p, n, rows)[0], 0.06)
    positions_only = _coverage(lambda p, n, rows: intervals.binomial(p, n), 0.06)
    assert 0.92 <= over_prompts <= 0.985, over_prompts
    assert positions_only < 0.80, positions_only


def test_alike_prompts_keep_at_least_the_binomial_interval():
    """Prompts of one rate: the spread over prompts is binomial noise, and the interval is never
    narrower than the binomial one; it still holds the mean about 95 % of the time or more."""
    assert _coverage(lambda p, n, rows: intervals.vector_ci(p, n, rows)[0], 0.0) >= 0.94
    rows = [[100.0, 80.0, 20.0]] * 5   # five identical prompts: no spread at all
    ci, basis = intervals.vector_ci([0.8], 500, rows)
    assert basis == "prompts" and ci == pytest.approx(intervals.binomial([0.8], 500))


def test_the_ratio_estimator_weighs_prompts_by_their_positions():
    """Three prompts, rates 0.5, 0.9, 0.9 over 100, 300, 600 positions: p = 0.86; the variance
    m/(m-1) * sum((c_i - p n_i)^2) / N^2 with Student's t for 2 degrees of freedom (4.303)."""
    rows = [[100.0, 50.0, 50.0], [300.0, 270.0, 30.0], [600.0, 540.0, 60.0]]
    residuals = [50 - 0.86 * 100, 270 - 0.86 * 300, 540 - 0.86 * 600]
    want = 4.302652729911275 * (1.5 * sum(r * r for r in residuals)) ** 0.5 / 1000
    assert intervals.over_prompts(rows, 1) == pytest.approx([want])


def test_too_few_prompts_fall_back_to_positions():
    assert intervals.over_prompts([[50.0, 40.0, 10.0], [50.0, 20.0, 30.0]], 1) is None
    ci, basis = intervals.vector_ci([0.6], 100, [[50.0, 40.0, 10.0], [50.0, 20.0, 30.0]])
    assert basis == "positions" and ci == intervals.binomial([0.6], 100)
    assert intervals.vector_ci([0.6], 100, None) == (intervals.binomial([0.6], 100), "positions")


def _vector(rows, domain="", temperature=0.0, interval="prompts"):
    n = sum(r[0] for r in rows)
    probs = [sum(r[1] for r in rows) / n, sum(r[2] for r in rows) / n]
    ci, basis = intervals.vector_ci(probs, n, rows) if interval == "prompts" else (intervals.binomial(probs, n),
                                                                                  "positions")
    sampler = "sequoia" if temperature else "greedy"
    return profiler.AcceptanceVector(probs, 1 - sum(probs), int(n), ci, "d", "t", sampler,
                                     temperature, 1.0, 2, len(rows), domain=domain,
                                     prompt_counts=rows if interval == "prompts" else [], interval=basis)


def test_pooling_code_and_prose_keeps_every_prompt():
    """The pooled vector's interval is over the code and prose prompts together: prompts of two
    kinds that differ make it wider than either kind's own binomial interval suggests."""
    code = _vector([[100.0, 90.0, 5.0, 5.0], [100.0, 88.0, 6.0, 6.0], [100.0, 92.0, 4.0, 4.0]], "code")
    prose = _vector([[100.0, 60.0, 20.0, 20.0], [100.0, 70.0, 15.0, 15.0], [100.0, 65.0, 20.0, 15.0]], "prose")
    pooled = domains.pooled_vector([code, prose])
    assert pooled.interval == "prompts" and len(pooled.prompt_counts) == 6
    assert pooled.ci95[0] > 2 * intervals.binomial(pooled.probabilities, pooled.positions)[0]
    # a wider part (3 ranks): its third rank counts as "none" in the pooled rows, which still add up
    wide_rows = [[100.0, 60.0, 20.0, 10.0, 10.0]] * 3
    wide = profiler.AcceptanceVector([0.6, 0.2, 0.1], 0.1, 300, [0.05] * 3, "d", "t", "greedy", 0.0, 1.0, 3, 3,
                                     domain="prose", prompt_counts=wide_rows, interval="prompts")
    narrow = domains.pooled_vector([code, wide])
    assert narrow.width == 2 and all(row[0] == sum(row[1:]) for row in narrow.prompt_counts)
    assert narrow.prompt_counts[-1] == [100.0, 60.0, 20.0, 20.0]
    # a part from a file that never recorded its prompts: the pooled interval is over positions
    old = _vector([[100.0, 60.0, 20.0, 20.0]] * 3, "prose", interval="positions")
    mixed = domains.pooled_vector([code, old])
    assert mixed.interval == "positions" and mixed.prompt_counts == []


def test_an_interpolated_vector_keeps_no_prompts_of_its_own():
    """A mix of two measured temperatures has no prompts of its own: it must not carry one end's."""
    low = _vector([[100.0, 90.0, 5.0, 5.0]] * 3, temperature=0.3)
    high = _vector([[100.0, 80.0, 10.0, 10.0]] * 3, temperature=0.7)
    mid = interpolation._mix([(0.5, low), (0.5, high)])
    assert mid[0][0] == pytest.approx(0.85)
    vec = interpolation.interpolated_vector(SimpleNamespace(cpu_kernels={}), 0.5, vectors=[low, high])
    assert vec is not None and vec.prompt_counts == [] and vec.interval == "prompts"
    assert vec.ci95[0] == pytest.approx((low.ci95[0] + high.ci95[0]) / 2)


def test_the_planner_caption_says_what_the_bars_are_over():
    from app import render
    measured = _vector([[100.0, 90.0, 5.0, 5.0]] * 3)
    assert render.interval_words(measured) == "bars: ±95 % interval over its 3 prompts"
    older = _vector([[100.0, 90.0, 5.0, 5.0]] * 3, interval="positions")
    assert "over positions" in render.interval_words(older)
    # pooled with a run's evidence: the learner's own interval, wider than the measured one's
    from engine import learning
    run = learning.Evidence()
    for _ in range(24):
        run.add_node(3, 1)
    learned = learning.with_stored(measured, run)
    assert learned.interval == "posterior" and "learner's 95 % interval" in render.interval_words(learned)
    assert learned.ci95[0] > measured.ci95[0]


def test_acceptance_bars_stay_between_0_and_1():
    """A learned posterior's ± (0.1 on ranks near 0, 0.11 on a rank 1 of 0.9) was drawn as
    symmetric bars below 0 and above 1 in the Planner tab."""
    from app import plots
    fig = plots.acceptance_figure([0.9, 0.05, 0.0], ci=[0.11, 0.1, 0.1])
    bars = fig.data[0].error_y
    lows = [p - m for p, m in zip(fig.data[0].y, bars.arrayminus)]
    highs = [p + a for p, a in zip(fig.data[0].y, bars.array)]
    assert min(lows) >= 0 and max(highs) <= 1 + 1e-12
    assert highs[0] == pytest.approx(1.0) and lows[0] == pytest.approx(0.79) and highs[2] == pytest.approx(0.1)


def test_an_interval_for_new_prompts_holds_their_mean():
    """A benchmark of 4 new prompts like the 12 measured ones (rates spread by sd 0.06), answers
    of 64 positions against 128 measured: the mean rate of the 4 lies inside the vector's
    interval for new prompts about 95 % of the time, and inside its interval over prompts (for the
    measured mean only) far less often."""
    rng = np.random.default_rng(11)
    held_new = held_mean = 0
    trials = 600
    for _ in range(trials):
        measured = _prompts(rng, np.clip(rng.normal(0.8, 0.06, 12), 0.01, 0.99), 128)
        bench = _prompts(rng, np.clip(rng.normal(0.8, 0.06, 4), 0.01, 0.99), 64)
        p = sum(r[1] for r in measured) / sum(r[0] for r in measured)
        seen = sum(r[1] for r in bench) / sum(r[0] for r in bench)
        held_new += abs(seen - p) <= intervals.for_new_prompts(measured, 1, 4, new_positions=64)[0]
        held_mean += abs(seen - p) <= intervals.over_prompts(measured, 1)[0]
    assert 0.92 <= held_new / trials <= 0.99, held_new / trials
    assert held_mean / trials < 0.75, held_mean / trials
    assert intervals.for_new_prompts(measured[:2], 1, 4) is None


def test_the_interval_for_new_prompts_by_hand():
    """Three prompts, rates 0.5, 0.9, 0.9 over 100, 300, 600 positions, two new prompts: t(2) times
    the root of the ratio estimator's variance plus the shares' sample variance over 2; with new
    answers of 50 positions the shares' binomial noise (p(1-p) over each prompt's positions) is
    swapped for p(1-p)/50; never narrower than the vector's own interval."""
    rows = [[100.0, 50.0, 50.0], [300.0, 270.0, 30.0], [600.0, 540.0, 60.0]]
    t2, p = 4.302652729911275, 0.86
    mean_var = 1.5 * sum(r * r for r in (50 - 0.86 * 100, 270 - 0.86 * 300, 540 - 0.86 * 600)) / 1000 ** 2
    shares = [0.5, 0.9, 0.9]
    spread = sum((x - sum(shares) / 3) ** 2 for x in shares) / 2
    assert intervals.for_new_prompts(rows, 1, 2) == pytest.approx([t2 * (mean_var + spread / 2) ** 0.5])
    between = spread - sum(p * (1 - p) / n for n in (100, 300, 600)) / 3
    shorter = t2 * (mean_var + (between + p * (1 - p) / 50) / 2) ** 0.5
    assert intervals.for_new_prompts(rows, 1, 2, new_positions=50) == pytest.approx([shorter])
    alike = [[100.0, 80.0, 20.0]] * 4   # no spread at all: the vector's own interval is the floor
    assert intervals.for_new_prompts(alike, 1, 100) == pytest.approx(intervals.vector_ci([0.8], 400, alike)[0])


def test_a_rank_never_seen_in_a_few_positions_keeps_an_honest_interval():
    """`measure --tokens-per-prompt 8 --width 4` reported ranks seen 0 times in 5 positions with a
    half-width of 8.8e-7: the normal interval vanishes at a share of 0. The interval reaches
    Wilson's upper end (0.43 for 0 of 5) and, over some hundreds of positions, stays within a few %
    of the normal one for shares inside (0.1, 0.9)."""
    import math
    assert intervals.binomial([0.0, 1.0], 5) == pytest.approx([0.4345, 0.4345], abs=1e-3)
    for p in (0.1, 0.5, 0.8):
        normal = 1.96 * math.sqrt(p * (1 - p) / 1500)
        assert normal <= intervals.binomial([p], 1500)[0] <= 1.07 * normal
