"""Is acceptance one level down an accepted path higher than the replay's marginal rate? (issue 15)

    .venv/bin/python bench/path_tilt.py --answers bench/answer-drift-sampled-t07-nf4.json \
        --out bench/path-tilt-t07.json

The lead this tests (bench/predictions-and-learning.md): at T > 0 a node's first child x ~ q is
accepted with probability min(1, p(x)/q(x)), so an accepted token is distributed as
min(p, q) / sum(min(p, q)), not as p: it leans toward tokens both models like. The next level of
the path is drafted after that token, a context the replay never visits (it measures at the
target's own samples, distributed as p). If tilted contexts are easier for the draft, deep trees
gain more than the positional model (independent ranks at the replay's rates) predicts, which is
what the bench sees at T = 0.7 (n = 16 and n = 32 above prediction in most runs).

For each answer of --answers (prompts and answers sampled from the target at T; the target's
tokens do not depend on the draft's kernels) and each of its first --positions positions j, with
the draft on this machine's kernels and both models stepping one token at a time (the int8
draft's rows are coupled: a one-token forward is what a decoding step's root computes):
  a_j  = sum(min(p_j, q_j)): P(rank 1 accepted) at j, the replay's own quantity;
  level 2 tilted:   x ~ min(p_j, q_j) (normalised); c_j = sum(min(p, q)) after x;
  level 2 untilted: the answer's own token (a draw from p_j); a_{j+1};
  level 3 tilted:   x2 ~ min(p, q) after x; e_j = sum(min(p, q)) after x, x2;
  level 3 untilted: a_{j+2}.
A chain's continuation from level 1 to 2 given level 1 accepted is then sum_j a_j c_j / sum_j a_j
on policy, against sum_j a_j a_{j+1} / sum_j a_j had the accepted token been a draw from p (the
same positions and weights: only the tilt differs), and the independent model's plain mean a.
95 % intervals: 2,000 bootstrap resamples of the answers, per domain.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from answer_drift_sampled import overlap  # noqa: E402  (the replay's P(rank 1) at a position, and what it samples)


def _step(model, cache, token: int):
    from engine import attention
    return attention.forward_causal(model, cache, [token])[-1]


def measure_answer(pair, prompt_ids: list[int], answer: list[int], positions: int, temperature: float,
                   generator, top_p: float = 1.0, top_k: int = 0) -> dict:
    """Per position j < positions: a_j, c_j, e_j, and a_j up to j = positions + 1 (module docstring).
    The target's distribution is warped as the answer was sampled (temperature, top-p, top-k)."""
    from engine import attention, sampling
    from engine.decoding import fit_vocab

    def chance(p_logits, q_logits):   # min(p, q), and its sum: P(rank 1 accepted)
        both = overlap(p_logits, fit_vocab(q_logits[None], pair.vocab_size, p_logits.device)[0], temperature,
                       top_p, top_k)
        return both, float(both.sum())

    tc, dc = attention.new_cache(pair.target), attention.new_cache(pair.draft)
    p_row = attention.forward_causal(pair.target, tc, prompt_ids)[-1]
    q_row = attention.forward_causal(pair.draft, dc, prompt_ids)[-1]
    a, c, e = [], [], []
    for j in range(positions + 2):
        both, a_j = chance(p_row, q_row)
        a.append(a_j)
        if j == positions + 1:   # the untilted level 3 of the last position: nothing more to step
            break
        if j < positions:
            base = len(prompt_ids) + j
            c_j = e_j = 0.0   # never accepted here (a_j = 0): no tilted token, and a weight of 0
            if a_j > 0:
                x = sampling.sample_token(both / a_j, generator)
                both2, c_j = chance(_step(pair.target, tc, x), _step(pair.draft, dc, x))
                if c_j > 0:
                    x2 = sampling.sample_token(both2 / c_j, generator)
                    _, e_j = chance(_step(pair.target, tc, x2), _step(pair.draft, dc, x2))
            c.append(c_j)
            e.append(e_j)
            attention.commit(tc, base, [])
            attention.commit(dc, base, [])
        p_row, q_row = _step(pair.target, tc, answer[j]), _step(pair.draft, dc, answer[j])
    return {"a": [round(v, 5) for v in a], "c": [round(v, 5) for v in c], "e": [round(v, 5) for v in e]}


def measure(answers_path: Path, out: Path, positions: int, limit: int | None) -> None:
    import torch

    from engine.models import load_pair
    from engine.profiler import draft_kernels, machine_description
    src = json.loads(answers_path.read_text())
    if not src["temperature"] > 0:
        raise SystemExit("the tilt exists only at T > 0 (at T = 0 an accepted token is the target's own)")
    if len(src["answers"][0]["answer_ids"]) < positions + 1:
        raise SystemExit(f"--positions {positions} needs answers of at least {positions + 1} tokens")
    pair = load_pair()
    generator = torch.Generator().manual_seed(0)
    rows, started = [], time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    with torch.inference_mode():
        for i, item in enumerate(src["answers"][:limit]):
            got = measure_answer(pair, item["prompt_ids"], item["answer_ids"], positions, src["temperature"],
                                 generator, src.get("top_p", 1.0), src.get("top_k", 0))
            rows.append({"domain": item["domain"], **got})
            print(i, item["domain"], f"a {sum(got['a'][:positions]) / positions:.3f} "
                  f"c {sum(got['c']) / positions:.3f} e {sum(got['e']) / positions:.3f}", flush=True)
    out.write_text(json.dumps({"answers_from": str(answers_path),
                               "temperature": src["temperature"], "positions": positions,
                               "draft_kernels": draft_kernels(pair), "machine": machine_description(),
                               "measured_at": started, "rows": rows}))


def continuations(rows: list[dict]) -> dict:
    """The chain's continuation rates from the rows (module docstring)."""
    def ratio(num, den):
        return sum(num) / sum(den)
    n = len(rows[0]["c"])
    a = [r["a"] for r in rows]
    w1 = [x[j] for x in a for j in range(n)]
    return {
        "marginal": sum(w1) / len(w1),
        "level2_untilted": ratio([x[j] * x[j + 1] for x in a for j in range(n)], w1),
        "level2_tilted": ratio([r["a"][j] * r["c"][j] for r in rows for j in range(n)], w1),
        "level3_untilted": ratio([x[j] * x[j + 1] * x[j + 2] for x in a for j in range(n)],
                                 [x[j] * x[j + 1] for x in a for j in range(n)]),
        "level3_tilted": ratio([r["a"][j] * r["c"][j] * r["e"][j] for r in rows for j in range(n)],
                               [r["a"][j] * r["c"][j] for r in rows for j in range(n)]),
    }


BOOTSTRAPS = 2000


def interval(values) -> tuple[float, float]:
    """The central 95 % of bootstrap values."""
    v = sorted(values)
    return v[int(0.025 * len(v))], v[int(0.975 * len(v)) - 1]


def tilt_effect(got: dict, depth: int) -> float:
    """A `depth`-token chain's tokens/step with the tilted continuations over those had an accepted
    token been a draw from p, less 1 (level 1 at the marginal rate in both; levels past 3 at level 3's)."""
    tilted, untilted = (chain_tokens(got["marginal"], got[f"level2_{k}"], got[f"level3_{k}"], depth)
                        for k in ("tilted", "untilted"))
    return tilted / untilted - 1


def report(obj: dict) -> None:
    m = obj["machine"]
    print(f"answers {obj['answers_from']} (T = {obj['temperature']:g}), first {obj['positions']} positions; draft on "
          f"{obj['draft_kernels']} kernels; {m.get('processor')}; measured {obj['measured_at']} UTC; "
          f"95 % intervals over {BOOTSTRAPS} bootstrap resamples of the answers")
    rng = random.Random(0)
    for dom in ("code", "prose"):
        rows = [r for r in obj["rows"] if r["domain"] == dom]
        got = continuations(rows)
        boots = [continuations([rng.choice(rows) for _ in rows]) for _ in range(BOOTSTRAPS)]
        print(f"\n{dom}: {len(rows)} answers")
        for key, value in got.items():
            lo, hi = interval(b[key] for b in boots)
            print(f"  {key:16s} {value:.3f}  (95 % {lo:.3f}-{hi:.3f})")
        for level in (2, 3):
            tilt = got[f"level{level}_tilted"] - got[f"level{level}_untilted"]
            lo, hi = interval(b[f"level{level}_tilted"] - b[f"level{level}_untilted"] for b in boots)
            print(f"  tilt at level {level}: {tilt:+.3f} (95 % {lo:+.3f} to {hi:+.3f})")
        for depth in (4, 8, 12):
            lo, hi = interval(tilt_effect(b, depth) for b in boots)
            independent = chain_tokens(got["marginal"], got["marginal"], got["marginal"], depth)
            print(f"  chain of {depth}: {chain_tokens(got['marginal'], got['level2_tilted'], got['level3_tilted'], depth):.2f}"
                  f" tokens/step with the tilted continuations, "
                  f"{chain_tokens(got['marginal'], got['level2_untilted'], got['level3_untilted'], depth):.2f} had an "
                  f"accepted token been a draw from p: the tilt's own effect {100 * tilt_effect(got, depth):+.1f} % "
                  f"(95 % {100 * lo:+.1f} to {100 * hi:+.1f} %); the independent model at the marginal rate "
                  f"{independent:.2f}")


def chain_tokens(first: float, second: float, deeper: float, depth: int) -> float:
    """A chain of `depth` drafted tokens' expected tokens/step when level 1 is accepted at `first`,
    level 2 given level 1 at `second`, and every deeper level given the one above at `deeper`."""
    reach, total = 1.0, 1.0
    for k in range(depth):
        reach *= first if k == 0 else second if k == 1 else deeper
        total += reach
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=Path, required=True, help="a bench/answer_drift_sampled.py answers file")
    ap.add_argument("--out", type=Path, required=True, help="where the measured chances go (read if it exists)")
    ap.add_argument("--positions", type=int, default=64, help="answer positions per answer (the bench's runs: 64)")
    ap.add_argument("--limit", type=int, help="the first N answers only (a smoke run)")
    args = ap.parse_args()
    if not args.out.exists():
        measure(args.answers, args.out, args.positions, args.limit)
    report(json.loads(args.out.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
