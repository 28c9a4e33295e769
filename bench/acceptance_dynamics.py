"""How acceptance moves within an answer, on the embedded pair at T = 0 (issue 15's goals):

    .venv/bin/python bench/acceptance_dynamics.py [--ranks bench/acceptance-ranks.json]
    .venv/bin/python bench/acceptance_dynamics.py --tokens 320 --ranks bench/acceptance-ranks-320.json \
        --drift-out assets/measured/answer-drift.json          # measured with the int8 draft (AVX2)
    .venv/bin/python bench/acceptance_dynamics.py --tokens 320 --ranks bench/acceptance-ranks-320-nf4.json \
        --drift-out assets/measured/answer-drift-nf4.json      # with the NF4 draft (AVX512-BF16)

Part 1 (about 10 minutes on the 2-core CPU; skipped when --ranks names an existing file): for each
of the first 24 prompts of assets/measurement-prompts.json, the target's greedy answer (128 tokens,
decoded with chain(4): the same text) and, at every answer position, the rank of the target's
token among the draft's 16 most likely (0: not among them), from one causal forward of each
model (engine.replay.answer_logits; the draft on the kernels this machine gives it: int8 one row at a
time, or NF4 on an AVX512-BF16 CPU). Saved to --ranks with those kernels (profiler.draft_kernels);
engine/answer_drift.py serves each run the asset measured with its own draft kernels.

Part 2 (instant): from those ranks,
- rank-1 agreement overall, in the first 64 positions and after them, and after a hit / a miss
  at the previous position (how far acceptance along a path departs from independence);
- per-prompt rank-1 agreement (the spread between prompts of one domain);
- chains: F under the independent positional model vs the yield simulated on the real rank
  sequences (at T = 0 the walk follows the answer, so the ranks decide every step);
- the learning check mimicked on these held-out prompts: rank-1 estimated from the first 64
  positions, pooled with the domain's mean with w pseudo-observations (engine/learning.py's rule),
  predicts F(5-level chain) for the rest of the answer, against the simulated rest. The domain
  mean includes the prompt's own answer (one of 12), so w > 0 leans slightly towards it; at
  w = 0 the prediction uses the first 64 positions alone.

Part 3 (answers longer than 128 tokens only; `--tokens 320` takes about 35 minutes for part 1
with the int8 draft, 60 with NF4):
rank-1 misses per 64-position window, the rest/opening miss ratio engine/answer_drift.py applies
(with a 95 % interval from resampling prompts), the prior's weight against an answer's opening
(of WEIGHTS, the least leave-one-prompt-out error predicting each rest from its opening; also
shown with the opening's trials counted as chains record them), and the learning check mimicked
leave-one-prompt-out with and without the ratio and the weight; `--drift-out` writes the asset
(`--measured-at` says when --ranks was measured; re-analysing keeps the existing asset's date).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure_ranks(path: Path, tokens: int = 128) -> None:
    import torch

    from engine import methods, sampling
    from engine.decoding import generate_ids
    from engine.models import encode_prompt, load_pair
    from engine.profiler import draft_kernels
    from engine.replay import answer_logits
    from engine.settings import Settings
    pair = load_pair()
    out = []
    # the first 24: the set the shipped answer-drift files were measured on (8 were added on 2026-12-07)
    for i, item in enumerate(json.loads((ROOT / "assets/measurement-prompts.json").read_text())["prompts"][:24]):
        ids = encode_prompt(pair, item["prompt"], None)
        answer, _ = generate_ids(pair, ids, methods.chain(4), Settings(temperature=0.0, max_new_tokens=tokens, seed=i,
                                                                             ignore_eos=tokens > 128))
        p, q = answer_logits(pair, ids, answer, torch.device("cpu"))
        ranks = []
        for j in range(len(answer)):
            # the engine's own greedy verifier over the draft's 16 most likely: what a 16-wide star accepts
            verdict = sampling.verify_greedy(int(torch.argmax(p[j])), sampling.top_tokens(q[j], 16))
            ranks.append(0 if verdict.accepted is None else verdict.accepted + 1)
        out.append({"domain": item["kind"], "ranks": ranks, "prompt_ids": ids, "answer_ids": answer})
        print(i, item["kind"], len(ranks), sum(r == 1 for r in ranks) / max(1, len(ranks)), flush=True)
    path.write_text(json.dumps({"draft_kernels": draft_kernels(pair), "answers": out}))


# The ranks files written before they recorded their draft kernels (bench/acceptance-ranks*.json,
# a bare list) were all measured with the int8 draft, on an AVX2-only EPYC.
LEGACY_KERNELS = "fast"


def load_ranks(path: Path) -> tuple[list[dict], str]:
    """(answers, the draft kernels they were measured with) from a --ranks file."""
    obj = json.loads(path.read_text())
    return (obj, LEGACY_KERNELS) if isinstance(obj, list) else (obj["answers"], obj["draft_kernels"])


def chain_walk(ranks: list[int], drafted: int) -> tuple[int, int]:
    """(tokens, steps) of a chain drafting `drafted` tokens, walked over the real rank sequence."""
    steps = tokens = i = 0
    while i < len(ranks):
        a = 0
        while a < drafted and i + a < len(ranks) and ranks[i + a] == 1:
            a += 1
        steps, tokens, i = steps + 1, tokens + a + 1, i + a + 1
    return tokens, steps


def chain_yield(ranks: list[int], drafted: int) -> float:
    tokens, steps = chain_walk(ranks, drafted)
    return tokens / steps


def analyse(data: list[dict]) -> None:
    for dom in ("code", "prose"):
        rs = [x["ranks"] for x in data if x["domain"] == dom]
        flat = [r for x in rs for r in x]
        p1 = sum(r == 1 for r in flat) / len(flat)
        early, late = [r for x in rs for r in x[:64]], [r for x in rs for r in x[64:]]
        after_hit = sum(1 for x in rs for a, b in zip(x, x[1:]) if a == 1 and b == 1) / sum(
            1 for x in rs for a in x[:-1] if a == 1)
        after_miss = sum(1 for x in rs for a, b in zip(x, x[1:]) if a != 1 and b == 1) / max(1, sum(
            1 for x in rs for a in x[:-1] if a != 1))
        print(f"{dom}: {len(rs)} prompts, {len(flat)} positions; rank-1 {p1:.3f} (first 64 positions "
              f"{sum(r == 1 for r in early) / len(early):.3f}, after them {sum(r == 1 for r in late) / len(late):.3f});"
              f" after a hit {after_hit:.3f}, after a miss {after_miss:.3f}")
        per = [sum(r == 1 for r in x) / len(x) for x in rs]
        print("  per prompt: " + " ".join(f"{v:.2f}" for v in per) + f"  (sd {statistics.pstdev(per):.3f})")
        for levels in (2, 3, 4, 5, 7, 10):
            iid = sum(p1 ** j for j in range(levels))
            walks = [chain_walk(x, levels - 1) for x in rs]  # pooled as the bench pools: yields / steps
            sim = sum(t for t, _ in walks) / sum(s for _, s in walks)
            print(f"  chain of {levels} levels: independent model {iid:.2f}, simulated {sim:.2f} ({sim / iid - 1:+.1%})")
        for w in (0, 32, 100):
            errs = []
            for x in rs:
                head, rest = x[:64], x[64:]
                if len(rest) < 20:
                    continue
                post = 1 - rest_rank1_miss(1 - p1, sum(r != 1 for r in head), len(head), 1.0, w)   # no drift
                errs.append(sum(post ** j for j in range(5)) / chain_yield(rest, 4) - 1)
            within = sum(abs(e) <= 0.10 for e in errs)
            print(f"  learning check mimicked, w={w}: " + " ".join(f"{e:+.0%}" for e in errs)
                  + f"  | within 10 %: {within}/{len(errs)}")


def miss(rows: list[list[int]], lo: int, hi: int | None = None) -> float:
    """P(rank 1 missed) over answer positions lo..hi of `rows` (pooled over positions)."""
    flat = [r for x in rows for r in x[lo:hi]]
    return sum(r != 1 for r in flat) / len(flat)


WEIGHTS = (0, 16, 32, 64, 128, 256, 512)   # pseudo-observations the prior may be worth against an opening


def opening_counts(ranks: list[int], drafted: int | None = None) -> tuple[int, int]:
    """(rank-1 misses, trials) over `ranks`: every position a trial (a 16-wide star at each), or
    as a chain drafting `drafted` tokens records them (a step's bonus after a full chain is no
    trial: the learner's censored counts, engine/learning.py)."""
    if drafted is None:
        return sum(r != 1 for r in ranks), len(ranks)
    i = misses = trials = 0
    while i < len(ranks):
        a = 0
        while a < drafted and i + a < len(ranks) and ranks[i + a] == 1:
            a += 1
        missed = a < drafted and i + a < len(ranks)
        misses, trials, i = misses + missed, trials + a + missed, i + a + 1
    return misses, trials


def predicted_rest_miss(x: list[int], others: list[list[int]], weight: float, opening: int = 64,
                        prior_span: int = 128, drafted: int | None = None, apply_ratio: bool = True) -> float:
    """The learner's prediction of one answer's rest miss rate from its opening (learning.rest_posterior
    on rank 1): the others' opening-span miss rate as the prior worth `weight` observations, pooled
    with the opening's counts (opening_counts), times the others' rest/opening ratio (1 with
    `apply_ratio` False: a run whose domain's ratio is not applied)."""
    ratio = miss(others, opening) / miss(others, 0, opening) if apply_ratio else 1.0
    misses, trials = opening_counts(x[:opening], drafted)
    return rest_rank1_miss(miss(others, 0, prior_span), misses, trials, ratio, weight)


def rest_rank1_miss(prior_miss: float, opening_misses: float, trials: float, ratio: float, weight: float) -> float:
    """Rank 1 of learning.rest_posterior with no rest evidence yet, as a miss rate: the prior's miss
    worth `weight` observations pooled with the opening's misses over `trials`, times `ratio`
    (learning.drifted: a miss mass above 1 cannot be). Ranks 2.. are not modelled: where the
    learner's ranks sum past learning.MAX_TOTAL it scales them all down, rank 1 too. Every mimic
    of the learning check here and in answer_drift_sampled predicts with this one formula."""
    return min(1.0, ratio * (weight * prior_miss + opening_misses) / (weight + trials))


def loo_rmse(rows: list[list[int]], weight: float, opening: int = 64, drafted: int | None = None,
             ratio: bool = True) -> float:
    """Root mean square error of predicted_rest_miss, each answer predicted from the others."""
    errs = [predicted_rest_miss(x, rows[:i] + rows[i + 1:], weight, opening, drafted=drafted, apply_ratio=ratio)
            - miss([x], opening) for i, x in enumerate(rows)]
    return statistics.mean(e * e for e in errs) ** 0.5


def best_weight(rows: list[list[int]], opening: int = 64, ratio: bool = True) -> float:
    """The prior weight of WEIGHTS whose leave-one-prompt-out prediction of the rests erred least
    (with the rest/opening ratio applied, or, `ratio` False, not)."""
    return min(WEIGHTS, key=lambda w: loo_rmse(rows, w, opening, ratio=ratio))


REST_WEIGHTS = (0, 16, 32, 64, 128, 256, 512, 1024, 2048)   # the rest's prior against the rest's own evidence


def rest_weight_rmse(rows: list[list[int]], rest_weight: float | None, with_ratio: bool, window: int | None,
                     opening: int = 64, weights: list[float] | None = None) -> float:
    """The weight's second use, leave-one-prompt-out: once t - opening positions of the rest are
    seen (t = 96, 128, ..., 256), predict the miss rate of positions t..t+window (None: t to the
    end) from the opening's prediction (predicted_rest_miss with the others' best weight) as a prior
    worth `rest_weight` observations (None: the learner's rule, that weight + the opening's 64
    trials) pooled with the rest's misses so far. RMSE over answers and t. `weights`: each answer's
    nested best weight where the caller has them already (else found here)."""
    errs = []
    for i, x in enumerate(rows):
        others = rows[:i] + rows[i + 1:]
        w = weights[i] if weights is not None else best_weight(others, opening, ratio=with_ratio)
        rest0 = predicted_rest_miss(x, others, w, opening, apply_ratio=with_ratio)
        v = w + opening if rest_weight is None else rest_weight
        for t in range(opening + 32, len(x) - 63, 32):
            seen = x[opening:t]
            predicted = (v * rest0 + sum(r != 1 for r in seen)) / (v + len(seen))
            errs.append(predicted - miss([x], t, None if window is None else t + window))
    return statistics.mean(e * e for e in errs) ** 0.5


def analyse_drift(data: list[dict], opening: int = 64, prior_span: int = 128, seed: int = 0) -> dict:
    """How an answer's rest differs from its opening (longer answers than 128 tokens only):
    rank-1 miss rate per 64-position window, the rest/opening miss ratio with a 95 % interval
    (bootstrap over prompts), the prior's weight against an answer's opening (best_weight), and the
    learning check mimicked leave-one-prompt-out (prior, ratio, weight and the measurement set mean
    all from the other prompts) with and without the ratio."""
    import random
    rng, out = random.Random(seed), {}
    for dom in ("code", "prose"):
        rs = [x["ranks"] for x in data if x["domain"] == dom]
        n = min(map(len, rs))
        if n <= prior_span:
            return {}
        windows = [(lo, min(lo + 64, n)) for lo in range(0, n, 64)]
        samples = [[rng.choice(rs) for _ in rs] for _ in range(2000)]

        def with_interval(hi: int) -> tuple[float, float, float]:
            boots = sorted(miss(b, opening, hi) / miss(b, 0, opening) for b in samples)
            return miss(rs, opening, hi) / miss(rs, 0, opening), boots[50], boots[1949]
        ratio, lo95, hi95 = with_interval(n)
        horizons = {h: with_interval(h) for h in range(prior_span, n + 1, 64)}
        # per horizon, the weight for a run whose ratio is not applied: rests of positions 64..h-1
        unratioed_by_horizon = {h: {w: loo_rmse([x[:h] for x in rs], w, opening, ratio=False) for w in WEIGHTS}
                                for h in horizons}
        print(f"{dom}: {len(rs)} prompts x {n} positions; rank-1 miss per window: " + ", ".join(
            f"{a}-{b} {miss(rs, a, b):.3f}" for a, b in windows))
        print(f"  miss over the first {opening} {miss(rs, 0, opening):.3f}, the first {prior_span} "
              f"{miss(rs, 0, prior_span):.3f}, after {opening} {miss(rs, opening):.3f}: rest/opening ratio "
              f"{ratio:.3f} (95 % interval over prompts {lo95:.3f}-{hi95:.3f})")
        print("  by horizon (rest = positions 64..h-1): " + ", ".join(
            f"h={h} {r:.3f} ({a:.3f}-{b:.3f})" for h, (r, a, b) in horizons.items()))
        for h, got in unratioed_by_horizon.items():
            print(f"    h={h}, the ratio not applied: prior weight leave-one-prompt-out RMSE " + ", ".join(
                f"{w}: {e:.4f}" for w, e in got.items()) + f" -> {min(WEIGHTS, key=got.get)}")
        rmse = {w: loo_rmse(rs, w, opening) for w in WEIGHTS}
        weight = min(WEIGHTS, key=rmse.get)
        print("  prior weight against the opening, leave-one-prompt-out RMSE of the rest's miss rate: " + ", ".join(
            f"{w}: {e:.4f}" for w, e in rmse.items()) + f" -> {weight}")
        # the weight for runs where the ratio is not applied (its interval holds 1, or the horizon's does)
        rmse_unratioed = unratioed_by_horizon.get(n) or {w: loo_rmse(rs, w, opening, ratio=False) for w in WEIGHTS}
        weight_unratioed = min(WEIGHTS, key=rmse_unratioed.get)
        print("    with the ratio not applied (the rest predicted at the opening's rate): " + ", ".join(
            f"{w}: {e:.4f}" for w, e in rmse_unratioed.items()) + f" -> {weight_unratioed}")
        for drafted in (1, 3, 7):
            walked = {w: loo_rmse(rs, w, opening, drafted) for w in WEIGHTS}
            print(f"    with the opening's rank-1 trials as a chain drafting {drafted} records them: " + ", ".join(
                f"{w}: {e:.4f}" for w, e in walked.items()) + f" -> {min(WEIGHTS, key=walked.get)}")
        nested = [best_weight(rs[:i] + rs[i + 1:], opening) for i in range(len(rs))]  # no answer picks its own
        nested_unratioed = [best_weight(rs[:i] + rs[i + 1:], opening, ratio=False) for i in range(len(rs))]
        for with_ratio, weights in ((True, nested), (False, nested_unratioed)):
            for window in (None, 32):
                got = {v: rest_weight_rmse(rs, v, with_ratio, window, opening, weights) for v in REST_WEIGHTS}
                print(f"  the rest's prior against its own steps ({'ratio' if with_ratio else 'no ratio'}; "
                      f"predicting {'the rest of the answer' if window is None else f'the next {window} positions'}), "
                      "leave-one-prompt-out RMSE: " + ", ".join(f"{v}: {e:.4f}" for v, e in got.items())
                      + f"; the learner's rule (weight + {opening}): "
                        f"{rest_weight_rmse(rs, None, with_ratio, window, opening, weights):.4f}")
        openings, rests = [1 - miss([x], 0, opening) for x in rs], [1 - miss([x], opening) for x in rs]
        print(f"  rank-1 rate per answer: opening sd {statistics.pstdev(openings):.3f}, rest sd "
              f"{statistics.pstdev(rests):.3f}, correlation {statistics.correlation(openings, rests):.2f}")
        for levels in (4, 5, 8):   # 8: the 8-node chain the hardware-aware plan picks for code on an AVX512 EPYC
            plain, drift, weighted, unratioed = [], [], [], []
            for i, x in enumerate(rs):
                others = rs[:i] + rs[i + 1:]
                actual = chain_yield(x[opening:], levels - 1)
                post = 1 - miss(others, 0, prior_span)
                post = (32 * post + sum(r == 1 for r in x[:opening])) / (32 + opening)
                plain.append(sum(post ** j for j in range(levels)) / actual - 1)
                for errs, w, with_ratio in ((drift, 32, True), (weighted, nested[i], True),
                                            (unratioed, nested_unratioed[i], False)):
                    rest = 1 - predicted_rest_miss(x, others, w, opening, prior_span, apply_ratio=with_ratio)
                    errs.append(sum(rest ** j for j in range(levels)) / actual - 1)
            # the rest's own rank-1 rate, which no opening gives: what is left is the positional
            # model's error, so the rows above minus this one are the error of predicting the rate
            oracle = [sum((1 - miss([x], opening)) ** j for j in range(levels)) / chain_yield(x[opening:], levels - 1) - 1
                      for x in rs]
            for name, errs in (("pooled", plain), ("pooled + ratio", drift),
                               ("pooled + ratio, measured weight", weighted),
                               ("pooled, weight measured without the ratio", unratioed),
                               ("oracle: the rest's own rate", oracle)):
                print(f"  learning check mimicked, {levels}-level chain, {name}: "
                      + " ".join(f"{e:+.0%}" for e in errs)
                      + f" | mean {statistics.mean(errs):+.1%}, within 10 %: {sum(abs(e) <= .1 for e in errs)}"
                        f"/{len(errs)}")
        out[dom] = {"prompts": len(rs), "positions_per_prompt": n, "opening": opening,
                    "miss_opening": miss(rs, 0, opening), "miss_prior_span": miss(rs, 0, prior_span),
                    "miss_rest": miss(rs, opening), "rest_over_opening": ratio, "ci95": [lo95, hi95],
                    "prior_weight": weight, "prior_weight_loo_rmse": {str(w): e for w, e in rmse.items()},
                    "prior_weight_ratio_not_applied": weight_unratioed,
                    "prior_weight_ratio_not_applied_loo_rmse": {str(w): e for w, e in rmse_unratioed.items()},
                    "windows": {f"{a}-{b}": miss(rs, a, b) for a, b in windows},
                    "by_horizon": {str(h): {"rest_over_opening": r, "ci95": [a, b],
                                            "prior_weight_ratio_not_applied": min(WEIGHTS, key=unratioed_by_horizon[h].get),
                                            "prior_weight_ratio_not_applied_loo_rmse": {
                                                str(w): e for w, e in unratioed_by_horizon[h].items()}}
                                   for h, (r, a, b) in horizons.items()}}
    return out


def write_drift(path: Path, drift: dict, ranks: Path, measured_at: str, kernels: str) -> None:
    """The asset engine/answer_drift.py reads: the embedded pair's names, each domain's ratio with
    its interval and whether the stated rule applies it, and where it came from."""
    import platform

    from engine import answer_drift, embedded, profiler
    obj = {"draft": embedded.DRAFT.folder_name, "target": embedded.TARGET.folder_name, "draft_kernels": kernels,
           "definition": "rest_over_opening = P(rank 1 missed) over answer positions opening.. / over 0..opening, "
                         "the target's greedy answers (ignore_eos) to assets/measurement-prompts.json; "
                         "ci95: 2,000 bootstrap resamples of the prompts; prior_weight: of "
                         f"{list(WEIGHTS)}, the prior's pseudo-observations against a 64-token opening whose "
                         "leave-one-prompt-out prediction of the rest's rank-1 miss rate erred least (RMSE)",
           "rule": "applied where ci95 excludes 1 (engine/answer_drift.py)",
           "command": f"python bench/acceptance_dynamics.py --tokens 320 --ranks {ranks.name} --drift-out {path.name}",
           "measured_at": measured_at, "analysed_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
           "machine": {"platform": platform.platform(), "processor": profiler._cpu_name()},
           "domains": {d: {**v, "applied": answer_drift.applies(v),
                           "by_horizon": {h: {**e, "applied": answer_drift.applies(e)}
                                          for h, e in v["by_horizon"].items()}}
                       for d, v in drift.items()}}
    path.write_text(json.dumps(obj, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=Path, default=ROOT / "bench/acceptance-ranks.json")
    ap.add_argument("--tokens", type=int, default=128,
                    help="answer length to measure (over 128: ignore_eos, as the learning check runs)")
    ap.add_argument("--drift-out", type=Path, help="write the rest/opening drift per domain here (JSON)")
    ap.add_argument("--measured-at", help="when --ranks was measured (UTC, default: now if measured by this "
                                          "run, else the measured_at of an existing --drift-out)")
    args = ap.parse_args()
    measured_at = args.measured_at
    if not args.ranks.exists():
        measure_ranks(args.ranks, args.tokens)
        measured_at = measured_at or time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    data, kernels = load_ranks(args.ranks)
    print(f"ranks measured with the draft on {kernels} kernels")
    analyse(data)
    drift = analyse_drift(data)
    if drift and args.drift_out:
        if measured_at is None and args.drift_out.exists():
            measured_at = json.loads(args.drift_out.read_text()).get("measured_at")
        if measured_at is None:
            raise SystemExit("--measured-at is needed: when were the ranks in --ranks measured?")
        write_drift(args.drift_out, drift, args.ranks, measured_at, kernels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
