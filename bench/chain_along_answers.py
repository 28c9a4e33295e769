"""Chains simulated along recorded answers, steps restarting after each miss, against the
positional model (one rank-1 rate for every level). D counts drafted tokens per step (a chain of
`Tree.depth` D + 1 with its root).

Each answer of an acceptance-dynamics file gives, per position, the draft's rank-1 outcome (`ranks`:
1 = hit, at T = 0) or its probability (`rank1_accept`, at T > 0). A chain of D levels steps along
the answer: from its first position it goes on while the rank-1 draft is accepted (drawn at the
position's own rate), up to D levels, then the next step starts after the yield (accepted + bonus).
The mean yield per step is set against the model's 1 + a + ... + a^D at the kind's mean rate a.
What this keeps fixed is the answer's own tokens: a real tree goes on through the draft's accepted
tokens instead (bench/predictions-and-learning.md, "Level by level").

    python bench/chain_along_answers.py bench/acceptance-ranks-320-nf4.json bench/answer-drift-sampled-t07-nf4.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DEPTHS = (4, 7, 10, 14)


def rates_of(answer: dict) -> list[float]:
    if "rank1_accept" in answer:
        return [float(a) for a in answer["rank1_accept"]]
    return [1.0 if r == 1 else 0.0 for r in answer["ranks"]]


def mean_yield(rates: list[float], depth: int, repeats: int, rng: np.random.Generator) -> float:
    yields = []
    for _ in range(repeats):
        start = 0
        while start + depth < len(rates):
            accepted = 0
            while accepted < depth and rng.random() < rates[start + accepted]:
                accepted += 1
            yields.append(accepted + 1)
            start += accepted + 1
    return float(np.mean(yields))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--repeats", type=int, default=40, help="passes over each answer where outcomes are drawn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    for file in args.files:
        answers = json.loads(Path(file).read_text())["answers"]
        for kind in sorted({a["domain"] for a in answers}):
            seqs = [rates_of(a) for a in answers if a["domain"] == kind]
            drawn = any("rank1_accept" in a for a in answers)
            a = float(np.mean(np.concatenate(seqs)))
            cells = []
            for depth in DEPTHS:
                model = sum(a ** k for k in range(depth + 1))
                seen = np.mean([mean_yield(s, depth, args.repeats if drawn else 1, rng) for s in seqs])
                cells.append(f"{depth} drafted {100 * (seen / model - 1):+.1f} %")
            print(f"{Path(file).name} {kind}: {len(seqs)} answers, mean rank-1 rate {a:.3f}; simulated "
                  f"steps against the model: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
