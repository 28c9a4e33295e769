"""Does an answer's rest drift from its opening at T > 0 as it does at T = 0? (issue 15)

    .venv/bin/python bench/answer_drift_sampled.py --temperature 0.7 \
        --answers bench/answer-drift-sampled-t07-nf4.json

engine/answer_drift.py's ratios and weights were measured on the target's greedy answers
(bench/acceptance_dynamics.py) and a run at T > 0 uses them. This measures the same quantities
on answers sampled at T:

Part 1 (skipped when --answers exists): for each of the first 24 prompts of
assets/measurement-prompts.json, an answer of --tokens tokens sampled from the target at T
(ignore_eos, seed = the prompt's index; decoded with chain(4), which samples exactly the target's
distribution), then one causal forward of each model over it (engine.replay.answer_logits, as the
greedy ranks were measured) and, at every answer position, P(rank 1 accepted) under the Sequoia
sampler: a first child x ~ q is accepted with probability min(1, p(x)/q(x)), so the chance is
sum_x min(p(x), q(x)) for the warped p and q the engine verifies with (engine/sampling.py).

Part 2: per domain, the rank-1 miss per 64-position window and the rest/opening ratio per horizon
(95 % interval: 2,000 bootstrap resamples of the prompts) on those expected misses, beside the
T = 0 asset this machine's draft kernels use; then the ratio, interval and prior weights as
bench/acceptance_dynamics.py chooses them (analyse_drift) on hits drawn once per position from
those chances (what a run's evidence looks like: each visited node's rank 1 is a hit or a miss),
repeated for --draws seeds, so the weights' spread from the draws alone shows.

Part 3 (mimic): the learning check mimicked on these answers at each horizon: the T = 0 drift runs
get, a drift measured at this T where the stated rule would apply it, and none; at the whole
answer also the prior weight's grid and soft evidence (each opening position's chance of a miss
instead of a drawn miss). bench/predictions-and-learning.md, "The drift at T = 0.7 and T = 1", reads the output.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import acceptance_dynamics as dynamics  # noqa: E402

OPENING = 64


def overlap(p_logits, q_logits, temperature: float, top_p: float = 1.0, top_k: int = 0):
    """min(p, q) over the vocabulary at one position, for the distributions the engine verifies
    with (p warped as plain sampling warps it, q at T): its sum is P(the first child drawn from q
    is accepted), and an accepted first child is distributed as it, normalised."""
    import torch

    from engine import sampling
    return torch.minimum(sampling.target_distribution(p_logits, temperature, top_p, top_k),
                         sampling.draft_distribution(q_logits, temperature))


def rank1_chance(p_logits, q_logits, temperature: float, top_p: float = 1.0, top_k: int = 0) -> float:
    """P(the first child drawn from q is accepted) at one position: sum_x min(p(x), q(x))."""
    return float(overlap(p_logits, q_logits, temperature, top_p, top_k).sum())


def measure(path: Path, temperature: float, top_p: float, tokens: int, limit: int | None = None,
            top_k: int = 0) -> None:
    import torch

    from engine import methods
    from engine.decoding import generate_ids
    from engine.models import encode_prompt, load_pair
    from engine.profiler import draft_kernels
    from engine.replay import answer_logits
    from engine.settings import Settings
    pair = load_pair()
    out, started = [], time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    for i, item in enumerate(json.loads((ROOT / "assets/measurement-prompts.json").read_text())["prompts"][:limit]):
        ids = encode_prompt(pair, item["prompt"], None)
        settings = Settings(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=tokens, seed=i,
                            ignore_eos=True)
        answer, _ = generate_ids(pair, ids, methods.chain(4), settings)
        with torch.inference_mode():
            p_logits, q_logits = answer_logits(pair, ids, answer, torch.device("cpu"))
            accept = [rank1_chance(p_logits[j], q_logits[j], temperature, top_p, top_k) for j in range(len(answer))]
        out.append({"domain": item["kind"], "rank1_accept": [round(a, 5) for a in accept],
                    "prompt_ids": ids, "answer_ids": answer})
        print(i, item["kind"], len(answer), f"{statistics.mean(accept):.3f}", flush=True)
    path.write_text(json.dumps({"draft_kernels": draft_kernels(pair), "temperature": temperature, "top_p": top_p,
                                **({"top_k": top_k} if top_k else {}), "measured_at": started, "answers": out}))


def expected_miss(rows: list[list[float]], lo: int, hi: int | None = None) -> float:
    """Mean P(rank 1 missed) over answer positions lo..hi of `rows` (pooled over positions)."""
    flat = [1.0 - a for x in rows for a in x[lo:hi]]
    return sum(flat) / len(flat)


def ratio_with_interval(rows: list[list[float]], hi: int, seed: int = 0) -> tuple[float, float, float]:
    rng = random.Random(seed)
    boots = sorted(expected_miss(b, OPENING, hi) / expected_miss(b, 0, OPENING)
                   for b in ([rng.choice(rows) for _ in rows] for _ in range(2000)))
    return expected_miss(rows, OPENING, hi) / expected_miss(rows, 0, OPENING), boots[50], boots[1949]


def drawn_ranks(data: list[dict], seed: int) -> list[dict]:
    """Each position's rank 1 drawn as a hit (1) or a miss (0) from its chance: ranks as
    bench/acceptance_dynamics.py reads them."""
    rng = random.Random(seed)
    return [{"domain": a["domain"], "ranks": [1 if rng.random() < p else 0 for p in a["rank1_accept"]]}
            for a in data]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=Path, required=True)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=320)
    ap.add_argument("--draws", type=int, default=20, help="seeds of drawn hits for the weights (part 2)")
    ap.add_argument("--limit", type=int, default=24,
                    help="the first N prompts (default 24: the set had 24 when the shipped results were measured)")
    args = ap.parse_args()
    if not args.answers.exists():
        measure(args.answers, args.temperature, args.top_p, args.tokens, args.limit, args.top_k)
    obj = json.loads(args.answers.read_text())
    ratios(obj)
    weights(obj, args.draws)
    mimic(obj["answers"], obj["draft_kernels"], args.draws)
    return 0


def _zero_asset(kernels: str) -> dict:
    """The T = 0 drift asset a run with these draft kernels uses."""
    from engine import answer_drift, embedded
    return answer_drift.asset_for(embedded.DRAFT.folder_name, embedded.TARGET.folder_name, kernels)


def ratios(obj: dict) -> None:
    """Per domain: the expected miss per window and the rest/opening ratio per horizon, beside the
    T = 0 asset's; how the openings' and rests' chances vary between answers."""
    from engine import answer_drift
    data, kernels = obj["answers"], obj["draft_kernels"]
    asset = _zero_asset(kernels)
    print(f"answers sampled at T={obj['temperature']:g}, top-p={obj['top_p']:g} (measured {obj['measured_at']} UTC), "
          f"draft on {kernels} kernels; beside the T = 0 asset measured with {asset.get('draft_kernels')} kernels")
    for dom in ("code", "prose"):
        rows = [a["rank1_accept"] for a in data if a["domain"] == dom]
        n = min(map(len, rows))
        zero = (asset.get("domains") or {}).get(dom, {})
        print(f"\n{dom}: {len(rows)} answers x {n} positions; expected rank-1 miss per window: " + ", ".join(
            f"{lo}-{min(lo + 64, n)} {expected_miss(rows, lo, lo + 64):.3f}" for lo in range(0, n, 64))
            + "\n  T = 0 (greedy answers): " + ", ".join(f"{w} {m:.3f}" for w, m in (zero.get("windows") or {}).items()))
        for h in range(128, n + 1, 64):
            r, lo, hi = ratio_with_interval([x[:h] for x in rows], h)
            z = answer_drift.entry_for(zero, h) if zero else {}
            zr, zci = z.get("rest_over_opening"), z.get("ci95") or [float("nan")] * 2
            print(f"  h={h}: rest/opening {r:.3f} (95 % {lo:.3f}-{hi:.3f}; applied by the rule: "
                  f"{answer_drift.applies({'rest_over_opening': r, 'ci95': [lo, hi]})})"
                  + (f"   T = 0: {zr:.3f} ({zci[0]:.3f}-{zci[1]:.3f}; applied: {answer_drift.applies(z)})"
                     if zr else ""))
        opening = [1 - expected_miss([x], 0, OPENING) for x in rows]
        rest = [1 - expected_miss([x], OPENING) for x in rows]
        print(f"  rank-1 chance per answer: opening sd {statistics.pstdev(opening):.3f}, rest sd "
              f"{statistics.pstdev(rest):.3f}, correlation {statistics.correlation(opening, rest):.2f}")


def weights(obj: dict, draws: int) -> None:
    """The ratio and prior weights as acceptance_dynamics chose the T = 0 asset's, on hits drawn
    from the chances (`draws` seeds: the draws' own spread shows); about a minute."""
    data, asset = obj["answers"], _zero_asset(obj["draft_kernels"])
    chosen: dict[str, list] = {"code": [], "prose": []}
    for seed in range(draws):
        with contextlib.redirect_stdout(io.StringIO()):
            got = dynamics.analyse_drift(drawn_ranks(data, seed))
        for dom, v in got.items():
            chosen[dom].append((v["rest_over_opening"], v["prior_weight"], v["prior_weight_ratio_not_applied"]))
    print(f"\nOn hits drawn from the chances ({draws} seeds; acceptance_dynamics.analyse_drift):")
    for dom, runs in chosen.items():
        zero = (asset.get("domains") or {}).get(dom, {})
        print(f"  {dom}: ratio {statistics.median(r for r, _, _ in runs):.3f} (median; draws "
              f"{min(r for r, _, _ in runs):.3f}-{max(r for r, _, _ in runs):.3f}); prior weight with the ratio "
              f"{sorted(w for _, w, _ in runs)}, without {sorted(w for _, _, w in runs)}   T = 0: ratio "
              f"{zero.get('rest_over_opening', float('nan')):.3f}, weights {zero.get('prior_weight')} / "
              f"{zero.get('prior_weight_ratio_not_applied')}")


def rest_prediction_errors(data: list[dict], domain: str, ratio: float | None, weight: float, seed: int,
                           levels: int = 5, soft: bool = False,
                           horizon: int | None = None) -> tuple[list[float], list[float]]:
    """The learning check mimicked on sampled answers, rest = positions OPENING..horizon-1: each
    answer's rest miss rate predicted from its opening (dynamics.rest_rank1_miss; every opening position
    a trial, as a 16-wide star records them and as the T = 0 weights were chosen; the others' mean
    miss over their first 128 positions as the prior; `ratio` None: the others' own rest/opening
    ratio), against the rest's expected miss rate. Returns (miss errors, errors of a `levels`-level
    chain's tokens/step under the positional model). `soft`: the opening counts each position's
    chance of a miss instead of a drawn miss (what a verifier at T > 0 could record: it holds p and q
    at every visited node), so no draw's noise enters."""
    rows = [a["rank1_accept"][:horizon] for a in data if a["domain"] == domain]
    hits = [x["ranks"] for x in drawn_ranks(data, seed) if x["domain"] == domain]
    misses, yields = [], []
    for i, x in enumerate(rows):
        others = rows[:i] + rows[i + 1:]
        r = ratio if ratio is not None else expected_miss(others, OPENING) / expected_miss(others, 0, OPENING)
        opening_misses = (sum(1 - a for a in x[:OPENING]) if soft else sum(h != 1 for h in hits[i][:OPENING]))
        predicted = dynamics.rest_rank1_miss(expected_miss(others, 0, 128), opening_misses, OPENING, r, weight)
        actual = expected_miss([x], OPENING)
        misses.append(predicted - actual)
        yields.append(sum((1 - predicted) ** j for j in range(levels)) / sum((1 - actual) ** j for j in range(levels))
                      - 1)
    return misses, yields


def _rmse(errors: list[float]) -> float:
    return statistics.mean(e * e for e in errors) ** 0.5


def mimic(data: list[dict], kernels: str, draws: int) -> None:
    """Which rule predicts these answers' rests better, per horizon: the T = 0 drift a run at this
    temperature gets now (answer_drift.drift_for); a drift measured at this temperature (these
    answers' own ratio at the horizon, leave-one-prompt-out, where the stated rule would apply it:
    its interval over all answers excludes 1; else none), with the same weight; or no ratio (the
    weight measured without the ratio at T = 0). At the whole answer also the weight grid and soft
    evidence."""
    from engine import answer_drift, embedded
    asset = _zero_asset(kernels)
    n = min(len(a["rank1_accept"]) for a in data)
    print(f"\nThe learning check mimicked on these answers (rest = positions {OPENING}..h-1; openings' hits "
          f"drawn, {draws} seeds; errors of a 5-level chain's tokens/step, positional model):")
    for dom in ("code", "prose"):
        for h in range(128, n + 1, 64):
            now = answer_drift.drift_for(embedded.DRAFT.folder_name, embedded.TARGET.folder_name, dom, h,
                                         draft_kernels=kernels)
            unratioed = answer_drift.entry_for((asset.get("domains") or {}).get(dom, {}), h)
            w_none = unratioed.get("prior_weight_ratio_not_applied") or 32
            rows = [a["rank1_accept"][:h] for a in data if a["domain"] == dom]
            own, lo, hi = ratio_with_interval(rows, h)
            own_applies = answer_drift.applies({"rest_over_opening": own, "ci95": [lo, hi]})
            rules = [(f"the T = 0 drift runs get (ratio {now.ratio:.3f}, weight {now.weight:g})", now.ratio,
                      now.weight),
                     (f"a drift measured at this T ({f'ratio {own:.3f} leave-one-out' if own_applies else 'none'}), "
                      f"weight {now.weight:g}", None if own_applies else 1.0, now.weight),
                     (f"no ratio, weight {w_none:g}", 1.0, w_none)]
            for name, ratio, weight in rules:
                got = [rest_prediction_errors(data, dom, ratio, weight, seed, horizon=h) for seed in range(draws)]
                rmse = statistics.mean(_rmse(m) for m, _ in got)
                bias = statistics.mean(statistics.mean(y) for _, y in got)
                within = statistics.mean(sum(abs(e) <= 0.1 for e in y) for _, y in got)
                print(f"  {dom}, h={h}, {name}: RMSE of the rest's miss rate {rmse:.4f}; chain error mean "
                      f"{bias:+.1%}, within 10 %: {within:.1f} of {len(got[0][1])}")
        now = answer_drift.drift_for(embedded.DRAFT.folder_name, embedded.TARGET.folder_name, dom, n,
                                     draft_kernels=kernels)
        grid = {w: statistics.mean(_rmse(rest_prediction_errors(data, dom, now.ratio, w, seed)[0])
                                   for seed in range(draws))
                for w in dynamics.WEIGHTS + (1024,)}
        print(f"    h={n}, the same ratio ({now.ratio:.3f}) with other prior weights: RMSE " + ", ".join(
            f"{w}: {e:.4f}" for w, e in grid.items()) + f" -> {min(grid, key=grid.get)}")
        soft = {w: _rmse(rest_prediction_errors(data, dom, now.ratio, w, 0, soft=True)[0])
                for w in dynamics.WEIGHTS}
        print("    soft evidence (the opening's chances of a miss, not drawn misses), the same ratio: RMSE " + ", ".join(
            f"{w}: {e:.4f}" for w, e in soft.items()) + f" -> {min(soft, key=soft.get)}; best with hits "
            f"{min(grid.values()):.4f}")


if __name__ == "__main__":
    raise SystemExit(main())
