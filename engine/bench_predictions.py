"""What the bench predicts for a run and a lane, and how far a prediction can be off: F(tree) under
the vector of the run's prompt's kind, tokens/s from the profile corrected by the bench's own
step costs, and the ranges that rank 1's 95 % interval gives (over the vector's prompts, and for
the mean of as few prompts as the bench runs). Runs are pooled as the bench pools what it
observes (engine/bench_aggregate.py): step yields over steps."""
from __future__ import annotations

import statistics
from collections import Counter
from types import SimpleNamespace
from typing import TYPE_CHECKING

from engine import intervals
from engine.planning import predict, vector_for_prompt
from engine.settings import Settings
from engine.tree import Tree

if TYPE_CHECKING:
    from engine.bench import MethodSpec

THESE_PROMPTS = "predicted_tokens_per_step_range_these_prompts"   # the range for a bench of so few prompts
THESE_PROMPTS_OF_KIND = THESE_PROMPTS + "_of_kind"   # the same for the run's kind's row (by_kind)


def prompts_per_vector(pair, prompts, settings: Settings) -> Counter:
    """How many of the bench's prompts are predicted from each vector (by domain, "" = pooled), by
    the prompts' kind: the sample of new prompts whose mean a lane's prediction for that vector is
    judged against (all of them in the lane's row, those of one kind in its by_kind row)."""
    return Counter((vector_for_prompt(pair, settings, "sequoia", p.text)[1], p.kind) for p in prompts)


def prompts_sharing(sharing: Counter, domain: str, kind: str, measured_on_them: bool) -> tuple[int, int]:
    """(prompts predicted from the vector of `domain`, those of them of `kind`); (0, 0) where the
    vector was measured on the bench's own prompts (they are not new to it: no such range)."""
    if measured_on_them:
        return 0, 0
    return sum(n for (d, _), n in sharing.items() if d == domain), sharing[domain, kind]


def run_prediction(spec: MethodSpec, vec, prof, costs, behind: int, temperature: float,
                    sharing: int = 1, sharing_of_kind: int | None = None, tokens: int | None = None) -> dict:
    """A run's own prediction, from the vector of its prompt's domain where code and prose differ
    (engine/domains.py), else the pooled one: what the planner would predict for that prompt.
    Tokens/s from the profile corrected by the step costs of this bench's warm-up and earlier
    prompts' runs (`costs`, what the app's planner does with the runs it has seen), and from the
    profile alone (`*_profile`). `sharing`: how many of the bench's prompts use this vector (0: the
    vector was measured on them, so no range for new prompts), `sharing_of_kind` how many of those
    are of this run's prompt's kind (the same where code and prose have their own vectors; fewer
    where one pooled vector serves both); `tokens`: each answer's length."""
    if spec.predicted_tokens_per_step is None:
        return {}
    these = these_prompts_range(spec.tree, vec, sharing, tokens)
    of_kind = sharing if sharing_of_kind is None else sharing_of_kind
    out = {"predicted_tokens_per_step": spec.tree.expected_tokens(vec.probabilities), "acceptance_domain": vec.domain,
           "predicted_tokens_per_step_range": rank1_range(spec.tree, vec), THESE_PROMPTS: these,
           # one vector per kind (the shipped case): the kind's prompts are the vector's, same range
           THESE_PROMPTS_OF_KIND: these if of_kind == sharing else these_prompts_range(spec.tree, vec, of_kind, tokens)}
    if prof is not None:
        sampling = temperature > 0
        corrected = predict(spec.tree, vec.probabilities, costs, sampling)
        out.update(predicted_tokens_per_second=corrected.tokens_per_second, predicted_speedup=corrected.speedup,
                   predicted_tokens_per_second_profile=predict(spec.tree, vec.probabilities, prof,
                                                               sampling).tokens_per_second,
                   cost_model_observed_steps=behind)
    return out


def rank1_range(tree: Tree, vec) -> list[float] | None:
    """F(tree) with the vector's rank-1 rate at either edge of its 95 % interval (the other ranks as
    measured, scaled down where they would no longer fit beside it): how far rank 1's interval alone
    moves a prediction (a lower bound on the vector's uncertainty: the other ranks' is left out).
    The interval is over the vector's prompts where it recorded them (engine/intervals.py), else
    over its positions. Rank 1 carries most of F, and more the deeper the tree."""
    ci = list(getattr(vec, "ci95", None) or [])
    if not ci or not vec.probabilities:
        return None
    p1, half, rest = vec.probabilities[0], ci[0], list(vec.probabilities[1:])

    def at(v: float) -> float:
        v = min(max(v, 0.0), 1.0)
        # ranks are shares of one position: a higher rank 1 takes its share from the others
        scale = min(1.0, (1.0 - v) / sum(rest)) if sum(rest) > 0 else 1.0
        return tree.expected_tokens([v] + [q * scale for q in rest])

    return [at(p1 - half), at(p1 + half)]


def these_prompts_range(tree: Tree, vec, prompts: int, tokens: int | None = None) -> list[float] | None:
    """rank1_range with rank 1's interval for the mean of `prompts` new prompts like the measured
    ones, answers of `tokens` tokens (each a decided node, about: engine/intervals.py
    for_new_prompts: the vector's own uncertainty plus how much so few prompts spread): what a run
    on that many prompts can expect to see around the prediction; None for a vector that recorded
    no prompts."""
    half = intervals.for_new_prompts(getattr(vec, "prompt_counts", None) or [], len(vec.probabilities), prompts,
                                     tokens)
    return None if half is None else rank1_range(tree, SimpleNamespace(probabilities=vec.probabilities, ci95=half))


def speed_prediction_pooled(rs: list[dict]) -> dict:
    """Each run's tokens/s against its own prediction, and the lane's tokens over its decode time
    against the time its runs were predicted to take (the same runs on both sides: the median
    over prompts of each side can come from different prompts)."""
    preds = [r.get("predicted_tokens_per_second") for r in rs]
    if not rs or not all(preds):
        return {}
    tokens, seconds = sum(r["tokens"] for r in rs), sum(r["seconds"] for r in rs)
    return {"tokens_per_second_pooled": tokens / seconds if seconds else None,
            "predicted_tokens_per_second_pooled": tokens / sum(r["tokens"] / p for r, p in zip(rs, preds)),
            "predicted_tokens_per_second_error_runs": [r["tokens_per_second"] / p - 1 for r, p in zip(rs, preds)]}


def pooled_prediction(rs: list[dict]) -> tuple[float | None, float | None]:
    """(tokens/step, tokens/s) predicted for runs pooled as the bench pools what it observes:
    step yields over steps (so the runs' own predictions combine harmonically, weighted by their
    yields) and the median over prompts of tokens/s."""
    preds = [r.get("predicted_tokens_per_step") for r in rs]
    if not rs or not all(preds):
        return None, None
    speeds = [r.get("predicted_tokens_per_second") for r in rs]
    return pooled_per_step(rs, preds), (statistics.median(speeds) if all(speeds) else None)


def pooled_per_step(rs: list[dict], per_run: list[float]) -> float | None:
    """Runs' predicted tokens/step pooled as observed ones are: all yields over all predicted steps."""
    yields = [r.get("step_tokens", r["tokens"]) for r in rs]
    return sum(yields) / sum(y / p for y, p in zip(yields, per_run)) if sum(yields) else None


def pooled_range(rs: list[dict], key: str = "predicted_tokens_per_step_range") -> list[float] | None:
    """The runs' rank1_range (or another range, `key`) pooled as pooled_prediction pools their predictions.
    Runs predicted from one vector move together (their edges are taken at once); runs of different
    vectors (code and prose: other measurement prompts, other bench prompts) move independently,
    so each vector's shift of the pooled prediction is combined with the others' in quadrature."""
    ranges = [r.get(key) for r in rs]
    preds = [r.get("predicted_tokens_per_step") for r in rs]
    if not rs or not all(ranges) or not all(preds):
        return None
    center = pooled_per_step(rs, preds)
    if center is None:
        return None
    groups = {r.get("acceptance_domain", "") for r in rs}
    edges = []
    for i in (0, 1):
        shifts = [pooled_per_step(rs, [span[i] if r.get("acceptance_domain", "") == g else p
                                        for r, span, p in zip(rs, ranges, preds)]) - center for g in groups]
        edges.append(center + (1 if i else -1) * sum(d * d for d in shifts) ** 0.5)
    return edges
