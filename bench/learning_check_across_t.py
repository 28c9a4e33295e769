"""Does a prompt's rest accept alike at two temperatures? (issue 15: could the prompt memory be
shared across temperatures?)

    .venv/bin/python bench/learning_check_across_t.py bench/learning-check-repeat-avx512.json

Reads the first runs of a `bench --learning-check` run at two temperatures (each temperature
samples its own answer; at T = 0 the greedy one). Per prompt kind it prints the correlation over
prompts of the rests' observed tokens/step at the two temperatures, and for each prompt the error
of predicting its rest at the second temperature from its rest at the first, scaled by the
kind's ratio of mean rests between the two (optimistic for sharing the memory across
temperatures: the ratio is fitted on the same prompts), beside the first run's own error and, when the check
ran with --learning-check-repeat, the error of a repeat at the same temperature.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(path: str) -> int:
    with open(path) as f:
        runs = json.load(f)["learning_check"]["runs"]
    rows = {(r["temperature"], r["prompt"]): r for r in runs if r.get("observed_tokens_per_step")}
    low, high = sorted({t for t, _ in rows})[:2]
    print(f"{Path(path).name}: rests at T={low:g} and T={high:g} (first runs; each temperature its own answer)")
    for kind in sorted({r["kind"] for r in rows.values()}):
        both = [p for (t, p), r in rows.items() if t == low and r["kind"] == kind and (high, p) in rows]
        # tokens/step of different trees do not compare: only prompts whose plan froze one tree at both
        prompts = [p for p in both if rows[(low, p)].get("frozen_tree") == rows[(high, p)].get("frozen_tree")]
        if len(prompts) < 3:
            print(f"{kind}: {len(prompts)} of {len(both)} prompts froze the same tree at both temperatures: "
                  "too few to compare")
            continue
        a = [rows[(low, p)]["observed_tokens_per_step"] for p in prompts]
        b = [rows[(high, p)]["observed_tokens_per_step"] for p in prompts]
        scale = statistics.mean(b) / statistics.mean(a)
        others = f" (of {len(both)}; the others froze other trees)" if len(prompts) < len(both) else ""
        print(f"{kind}: correlation over {len(prompts)} prompts{others} {statistics.correlation(a, b):+.2f}; "
              f"ratio of means T={high:g} / T={low:g} {scale:.3f}")
        within = 0
        for p, x, y in zip(prompts, a, b):
            err = x * scale / y - 1
            within += abs(err) <= 0.10
            first = rows[(high, p)]["predicted_tokens_per_step"] / y - 1
            repeat = (rows[(high, p)].get("repeat") or {}).get("error")
            print(f"  {p:34s} observed {y:.2f}; from T={low:g}'s rest {err:+6.1%}; first run {first:+6.1%}"
                  + (f"; repeat at T={high:g} {repeat:+6.1%}" if repeat is not None else ""))
        print(f"  within 10 % from T={low:g}'s rest: {within} of {len(prompts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
