"""How a run's steps are counted: a step's full verified yield (also a last step that
max-new-tokens cut: engine/bench.py says why that keeps tokens/step unbiased), a run split into
its opening and rest at the Learner's boundary, the rest predicted from the posterior after the
opening, and 95 % intervals of pooled tokens/step by bootstrap (over blocks of steps, or whole
answers)."""
from __future__ import annotations

from engine import answer_drift, learning
from engine.tree import Tree


def step_yield(event) -> int:
    """Tokens one step produced before any max-new-tokens cut: accepted nodes + the bonus."""
    return sum(n.status == "accepted" for n in event.nodes) + any(n.status == "bonus" for n in event.nodes)


def split_at(events, after: int = answer_drift.OPENING) -> tuple[list, list]:
    """(opening, rest): the steps that start before `after` generated tokens, and the others (the
    Learner's split: a step that starts in the opening counts for it)."""
    seen = 0
    for i, e in enumerate(events):
        if not learning.in_opening(seen, after):
            return list(events[:i]), list(events[i:])
        seen += len(e.new_token_ids)
    return list(events), []


def rest_of_run(events, tree: Tree, start: list[float], after: int = answer_drift.OPENING,
                drift: answer_drift.Drift | None = None) -> dict | None:
    """The posterior after the first `after` generated tokens (start pooled with their censored
    outcomes; for the rest of the answer by the domain's measured `drift` where one applies,
    learning.rest_posterior) predicts F(tree) for the rest of the run; compared with the rest's
    observed yield."""
    head, rest = split_at(events, after)
    if not rest:
        return None
    post = learning.rest_posterior(start, learning.events_evidence(head), learning.Evidence(), drift)
    yields = [step_yield(x) for x in rest]
    observed = sum(yields) / len(yields)
    predicted = tree.expected_tokens(post)
    # How far the rest's tokens/step could fall from its text's rate by the luck of its steps (one
    # answer; engine/bench_learning.py says what this interval leaves out): a run's power to judge.
    return {"rest_steps": len(rest), "rest_observed_tokens_per_step": observed,
            "rest_observed_interval_95": yield_interval([yields]), "rest_step_yields": yields,
            "rest_predicted_tokens_per_step": predicted, "rest_error": predicted / observed - 1,
            "rest_over_opening": drift.ratio if drift else None, "rest_prior_weight": drift.weight if drift else None,
            "rest_drift_kernels": drift.draft_kernels if drift else None}


def yield_interval(runs: list[list[int]], block: int = 4, resamples: int = 2000, seed: int = 0) -> list[float] | None:
    """95 % interval of pooled tokens/step (yields over steps) by a block bootstrap: blocks of
    `block` consecutive steps of one run are drawn with replacement, because a run's steps are not
    independent (an easy stretch of text makes several long steps in a row). At T > 0 each run's
    text is a sample, so a few dozen steps leave tokens/step uncertain by 10 % and more."""
    return _pooled_bootstrap([run[i:i + block] for run in runs for i in range(0, len(run), block)],
                             resamples, seed)


def answer_interval(runs: list[list[int]], resamples: int = 2000, seed: int = 0) -> list[float] | None:
    """95 % interval of pooled tokens/step by resampling whole runs (answers) with replacement.
    Acceptance drifts within an answer and differs between answers by more than blocks of steps
    show (bench/acceptance-dynamics.txt), so with a few answers this is the wider, honest one."""
    return _pooled_bootstrap(runs, resamples, seed)


def _pooled_bootstrap(units: list[list[int]], resamples: int, seed: int) -> list[float] | None:
    """95 % interval of pooled yields over steps when whole units (lists of step yields) are drawn
    with replacement; None with fewer than two non-empty units (nothing to resample)."""
    import random
    units = [u for u in units if u]
    if len(units) < 2:
        return None
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        drawn = [rng.choice(units) for _ in units]
        means.append(sum(map(sum, drawn)) / sum(map(len, drawn)))
    means.sort()
    return [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]]
