"""Do the models' own confidences over an answer's opening tell its rest's acceptance? (issue 15)

    .venv/bin/python bench/answer_confidence.py bench/acceptance-ranks-320-nf4.json \
        --features bench/answer-confidence-nf4.json

The learner predicts an answer's rest rank-1 miss rate from the opening's misses: 64 hits and
misses, whose binomial noise (sd ~0.05 at a miss rate of 0.2) is larger than the spread of the rest
rates between answers (sd ~0.04). bench/answer_signals.py found that text signals of the opening
carry nothing more. This tries the signals a running engine also holds at each verified position,
smooth where a hit is 0 or 1:
- the draft's probability of the target's token, q(y);
- the target's probability of its own greedy token, max p (how sure the text is);
- the draft's top probability, max q;
- the overlap sum_x min(p(x), q(x)) at T = 1 (P(rank 1 accepted) under sampling at T = 1).
Part 1 (a few minutes; skipped when --features exists): one causal forward of each model over each
answer of the ranks file (engine.replay.answer_logits, as acceptance_dynamics measured the ranks), the
features per position saved to --features; the greedy agreement they imply is checked against the
ranks file. Part 2: for each feature, its opening mean's correlation with the rest's miss rate, and
the nested leave-one-prompt-out correction of the learner's prediction (answer_signals.corrected_rmse):
a signal that carries information about the rest lowers the RMSE.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import acceptance_dynamics as dynamics  # noqa: E402
import answer_signals  # noqa: E402

OPENING = answer_signals.OPENING
FEATURES = ("draft_p_of_target_token", "target_top_p", "draft_top_p", "overlap_t1")


def position_features(p_logits, q_logits, answer: list[int]) -> dict[str, list[float]]:
    """Per answer position, the FEATURES from the two models' logits (rows aligned with `answer`)."""
    import torch
    p, q = torch.softmax(p_logits.float(), -1), torch.softmax(q_logits.float(), -1)
    y = torch.tensor(answer)
    rows = torch.arange(len(answer))
    out = {"draft_p_of_target_token": q[rows, y], "target_top_p": p.max(-1).values, "draft_top_p": q.max(-1).values,
           "overlap_t1": torch.minimum(p, q).sum(-1), "greedy_hit": (q.argmax(-1) == p.argmax(-1)).float()}
    return {name: [round(v, 4) for v in t.tolist()] for name, t in out.items()}


def measure(ranks_path: Path, out: Path) -> None:
    import torch

    from engine.models import load_pair
    from engine.profiler import draft_kernels
    from engine.replay import answer_logits
    data, kernels = dynamics.load_ranks(ranks_path)
    pair = load_pair()
    if draft_kernels(pair) != kernels:
        raise SystemExit(f"{ranks_path} was measured with the draft on {kernels} kernels; this machine runs "
                         f"{draft_kernels(pair)}: the features would not describe the same draft")
    rows = []
    with torch.inference_mode():
        for i, a in enumerate(data):
            p, q = answer_logits(pair, a["prompt_ids"], a["answer_ids"], torch.device("cpu"))
            rows.append({"domain": a["domain"], **position_features(p, q[:, :p.shape[-1]], a["answer_ids"])})
            print(i, a["domain"], f"{statistics.mean(rows[-1]['draft_p_of_target_token']):.3f}", flush=True)
    out.write_text(json.dumps({"draft_kernels": kernels, "ranks": ranks_path.name, "answers": rows}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ranks", type=Path)
    ap.add_argument("--features", type=Path, required=True)
    args = ap.parse_args()
    if not args.features.exists():
        measure(args.ranks, args.features)
    data, kernels = dynamics.load_ranks(args.ranks)
    feats = json.loads(args.features.read_text())["answers"]
    agree = statistics.mean(
        float((r == 1) == bool(h)) for a, f in zip(data, feats) for r, h in zip(a["ranks"], f["greedy_hit"]))
    print(f"ranks measured with the draft on {kernels} kernels; opening {OPENING} tokens; the features' greedy "
          f"agreement matches the ranks file's rank 1 at {agree:.1%} of positions")
    for dom in ("code", "prose"):
        pairs = [(a, f) for a, f in zip(data, feats) if a["domain"] == dom]
        rows = [a["ranks"] for a, _ in pairs]
        weight = dynamics.best_weight(rows)
        rest = [dynamics.miss([x], OPENING) for x in rows]
        opening_miss = [dynamics.miss([x], 0, OPENING) for x in rows]
        print(f"{dom}: {len(rows)} answers, weight {weight}; rest miss rate sd {statistics.pstdev(rest):.4f}; "
              f"the opening's miss rate correlates {statistics.correlation(opening_miss, rest):+.2f} with it")
        for name in FEATURES:
            feature = [statistics.mean(f[name][:OPENING]) for _, f in pairs]
            rest_mean = [statistics.mean(f[name][OPENING:]) for _, f in pairs]
            base, corrected = answer_signals.corrected_rmse(rows, feature, weight)
            print(f"  {name:<24} opening mean {statistics.mean(feature):.3f} (sd {statistics.pstdev(feature):.3f}); "
                  f"correlation with the rest's miss rate {statistics.correlation(feature, rest):+.2f}, with the "
                  f"opening's {statistics.correlation(feature, opening_miss):+.2f}, opening vs rest mean "
                  f"{statistics.correlation(feature, rest_mean):+.2f}; RMSE of the rest's miss rate: base "
                  f"{base:.4f}, corrected {corrected:.4f} ({corrected / base - 1:+.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
