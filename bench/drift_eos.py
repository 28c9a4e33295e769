"""Does the drift change when an answer stops at its own EOS? (issue 15)

    .venv/bin/python bench/drift_eos.py bench/acceptance-ranks-320-nf4.json \
        bench/answer-drift-sampled-t07-nf4.json bench/answer-drift-sampled-t1-nf4.json

The drift assets were measured on answers continued to 320 tokens with ignore_eos, as the
learning check runs; a run in the app stops at the target's EOS. This reads the committed answers
(their token ids) and gives each domain's rest/opening P(rank 1 missed) both ways: over every
position, and over the positions up to and including the answer's first EOS (the embedded
target's <|im_end|>, the one id its generation config stops on). Greedy ranks files count misses as rank != 1; sampled
answer files (bench/answer_drift_sampled.py) count 1 - the chance of rank 1. The interval: 2,000
bootstrap resamples of the answers, the same draws for both ways (as the assets', not the same
draws: the third decimal may differ from theirs).
The int8 draft's ranks files hold no token ids, so only the NF4 one is read.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

OPENING = 64
EOS_IDS = (151645,)   # <|im_end|>: the embedded target's generation_config eos_token_id, what a run stops on


def misses(answer: dict) -> list[float]:
    """Per position, the miss (greedy ranks: 0 or 1) or its chance (sampled answers)."""
    if "ranks" in answer:
        return [float(r != 1) for r in answer["ranks"]]
    return [1.0 - a for a in answer["rank1_accept"]]


def until_eos(answer: dict, eos_ids=EOS_IDS) -> int | None:
    """The number of positions up to and including the answer's first EOS (None: no EOS)."""
    return next((i + 1 for i, t in enumerate(answer["answer_ids"]) if t in eos_ids), None)


def ratio(answers: list[dict], cut: bool) -> tuple[float, int]:
    """(rest/opening miss ratio pooled over positions, the rest's positions), each answer cut after
    its EOS when `cut`."""
    opening = rest = opening_n = rest_n = 0.0
    for a in answers:
        m = misses(a)[:until_eos(a) if cut else None]
        opening, opening_n = opening + sum(m[:OPENING]), opening_n + len(m[:OPENING])
        rest, rest_n = rest + sum(m[OPENING:]), rest_n + len(m[OPENING:])
    return (rest / rest_n) / (opening / opening_n), int(rest_n)


def report(path: Path) -> None:
    obj = json.loads(path.read_text())
    answers = obj["answers"] if isinstance(obj, dict) else obj
    print(f"{path.name}: " + ", ".join(
        f"{d} {sum(until_eos(a) is not None for a in answers if a['domain'] == d)} of "
        f"{sum(a['domain'] == d for a in answers)} answers reach EOS" for d in ("code", "prose")))
    for domain in ("code", "prose"):
        mine = [a for a in answers if a["domain"] == domain]
        for cut in (False, True):
            rng = random.Random(0)   # one set of resamples per domain, for both ways
            r, n = ratio(mine, cut)
            boots = sorted(ratio([rng.choice(mine) for _ in mine], cut)[0] for _ in range(2000))
            print(f"  {domain}, {'cut at EOS' if cut else 'ignore_eos'}: rest/opening {r:.3f} "
                  f"(95 % {boots[50]:.3f}-{boots[1949]:.3f}), {n} rest positions")


def main(*paths: str) -> int:
    for p in paths:
        report(Path(p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
