"""Does anything in an answer's opening, besides its acceptance, tell its rest's acceptance? (issue 15)

    .venv/bin/python bench/answer_signals.py bench/acceptance-ranks-320-nf4.json

The learner predicts an answer's rest rank-1 miss rate from the opening's misses (the prior worth
the domain's measured weight, times the measured rest/opening ratio: acceptance_dynamics.
predicted_rest_miss). Across the measurement answers that prediction errs by RMSE 0.03-0.04 in
the miss rate, which an 8-node chain turns into ~10 % of its yield. This tries text signals of the
opening that need no model: how much of it repeats text already there (prompt and opening), and
how varied its tokens are. For each signal, leave-one-prompt-out and nested (the held-out answer
takes no part in the fit, nor in the base predictions the fit corrects), a least-squares slope on
the others' residuals corrects the held-out answer's prediction. The RMSE with the correction
against the base RMSE says whether the signal carries information about the rest; twelve answers
per domain can show a large effect only. Needs a ranks file with token ids (acceptance_dynamics
measured after 2026-12-04 11:00 UTC).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import acceptance_dynamics as dynamics  # noqa: E402

OPENING = 64


def repeated_ngrams(context: list[int], text: list[int], n: int = 4) -> float:
    """Share of positions of `text` whose n-gram ending there already occurred in context + text
    before it: how much of the text copies what was already written."""
    whole = context + text
    seen = {tuple(whole[i - n:i]) for i in range(n, len(context) + 1)}
    hits = 0
    for end in range(max(len(context), n - 1), len(whole)):   # the n-gram whole[end-n+1 .. end]
        gram = tuple(whole[end - n + 1:end + 1])
        hits += gram in seen
        seen.add(gram)
    return hits / max(1, len(text))


def distinct(text: list[int]) -> float:
    return len(set(text)) / max(1, len(text))


SIGNALS = {
    "repeated 4-grams": lambda a: repeated_ngrams(a["prompt_ids"], a["answer_ids"][:OPENING]),
    "repeated 2-grams": lambda a: repeated_ngrams(a["prompt_ids"], a["answer_ids"][:OPENING], 2),
    "distinct tokens": lambda a: distinct(a["answer_ids"][:OPENING]),
}


def base_prediction(x: list[int], others: list[list[int]], weight: float) -> float:
    return dynamics.predicted_rest_miss(x, others, weight, OPENING)


def corrected_rmse(rows: list[list[int]], feature: list[float], weight: float) -> tuple[float, float]:
    """(base RMSE, corrected RMSE) of the rest miss rate, leave-one-out and nested."""
    base_errs, corrected_errs = [], []
    for i, x in enumerate(rows):
        others = [j for j in range(len(rows)) if j != i]
        actual = dynamics.miss([x], OPENING)
        base = base_prediction(x, [rows[j] for j in others], weight)
        # the others' residuals, each predicted without i and without itself
        res = [dynamics.miss([rows[j]], OPENING)
               - base_prediction(rows[j], [rows[k] for k in others if k != j], weight) for j in others]
        f = [feature[j] for j in others]
        mf, mr = statistics.mean(f), statistics.mean(res)
        var = sum((a - mf) ** 2 for a in f)
        slope = sum((a - mf) * (r - mr) for a, r in zip(f, res)) / var if var > 0 else 0.0
        base_errs.append(base - actual)
        corrected_errs.append(base + mr + slope * (feature[i] - mf) - actual)
    rmse = lambda e: statistics.mean(v * v for v in e) ** 0.5  # noqa: E731
    return rmse(base_errs), rmse(corrected_errs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ranks", type=Path)
    args = ap.parse_args()
    data, kernels = dynamics.load_ranks(args.ranks)
    if not all("answer_ids" in a for a in data):
        raise SystemExit(f"{args.ranks} holds no token ids: measure again with acceptance_dynamics.py")
    print(f"ranks measured with the draft on {kernels} kernels; opening {OPENING} tokens")
    for dom in ("code", "prose"):
        answers = [a for a in data if a["domain"] == dom]
        rows = [a["ranks"] for a in answers]
        weight = dynamics.best_weight(rows)
        rest = [dynamics.miss([x], OPENING) for x in rows]
        print(f"{dom}: {len(rows)} answers, weight {weight}; rest miss rate sd {statistics.pstdev(rest):.4f}")
        for name, signal in SIGNALS.items():
            feature = [signal(a) for a in answers]
            base, corrected = corrected_rmse(rows, feature, weight)
            corr = statistics.correlation(feature, rest) if statistics.pstdev(feature) > 0 else float("nan")
            print(f"  {name:<17} mean {statistics.mean(feature):.3f} (sd {statistics.pstdev(feature):.3f}), "
                  f"correlation with the rest's miss rate {corr:+.2f}; RMSE of the rest's miss rate: base "
                  f"{base:.4f}, corrected {corrected:.4f} ({corrected / base - 1:+.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
