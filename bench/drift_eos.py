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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import answer_drift_sampled as sampled  # noqa: E402  (its expected misses and bootstrap interval)

OPENING = sampled.OPENING
EOS_IDS = (151645,)   # <|im_end|>: the embedded target's generation_config eos_token_id, what a run stops on


def chances(answer: dict) -> list[float]:
    """Per position, rank 1's chance of acceptance: a greedy rank's hit (1) or miss (0), or a
    sampled answer's chance."""
    if "ranks" in answer:
        return [float(r == 1) for r in answer["ranks"]]
    return answer["rank1_accept"]


def until_eos(answer: dict, eos_ids=EOS_IDS) -> int | None:
    """The number of positions up to and including the answer's first EOS (None: no EOS)."""
    return next((i + 1 for i, t in enumerate(answer["answer_ids"]) if t in eos_ids), None)


def rows(answers: list[dict], cut: bool) -> list[list[float]]:
    """Each answer's chances, cut after its EOS when `cut`."""
    return [chances(a)[:until_eos(a) if cut else None] for a in answers]


def ratio(answers: list[dict], cut: bool) -> tuple[float, int]:
    """(rest/opening miss ratio pooled over positions, the rest's positions), each answer cut after
    its EOS when `cut`."""
    got = rows(answers, cut)
    return (sampled.expected_miss(got, OPENING) / sampled.expected_miss(got, 0, OPENING),
            sum(len(x[OPENING:]) for x in got))


def report(path: Path) -> None:
    obj = json.loads(path.read_text())
    answers = obj["answers"] if isinstance(obj, dict) else obj
    print(f"{path.name}: " + ", ".join(
        f"{d} {sum(until_eos(a) is not None for a in answers if a['domain'] == d)} of "
        f"{sum(a['domain'] == d for a in answers)} answers reach EOS" for d in ("code", "prose")))
    for domain in ("code", "prose"):
        mine = [a for a in answers if a["domain"] == domain]
        for cut in (False, True):
            r, n = ratio(mine, cut)
            _, lo, hi = sampled.ratio_with_interval(rows(mine, cut), None)   # one set of resamples, both ways
            print(f"  {domain}, {'cut at EOS' if cut else 'ignore_eos'}: rest/opening {r:.3f} "
                  f"(95 % {lo:.3f}-{hi:.3f}), {n} rest positions")


def main(*paths: str) -> int:
    for p in paths:
        report(Path(p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
