"""A learning check's frozen trees re-predicted with other prior weights (issue 15):

    .venv/bin/python bench/learning_check_reweigh.py bench/learning-check-weight-avx512.json [--weights 0,32,128]

Each row of `bench --learning-check` stores the rest's posterior it predicted with, the drift
(ratio and prior weight) and how many opening positions backed it. In a chain every node has one
child, so the opening's evidence is `trials` tries of rank 1 with some number of accepts, and
only rank 1 decides the chain's yield: the accepts are found by bisection such that
learning.rest_posterior (the row's start vector, read from its start_source file name under
assets/measured/acceptance; its ratio and weight) gives the stored rank 1, and the same frozen
chain is then predicted by rest_posterior at another weight. The tree the plan would have frozen
with that weight may differ; this compares predictions for the trees that ran, against what
they observed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def chain_yield(p: float, nodes: int) -> float:
    return sum(p ** j for j in range(nodes))


def reweighed(row: dict, weight: float | None) -> float | None:
    """The row's prediction error with the opening pooled at `weight` (None: the row's own); None
    where it cannot be recovered: no drift, not a chain (rank 1 alone does not decide it), a start
    that is not a shipped vector alone (stored evidence pooled in, interpolated), or a stored
    posterior no opening gives."""
    from engine import learning
    from engine.answer_drift import Drift
    tree, behind = row["frozen_tree"], row["positions_behind_posterior"]
    if not row.get("rest_over_opening") or tree["parents"] != list(range(-1, tree["nodes"] - 1)):
        return None
    source = ROOT / "assets/measured/acceptance" / Path(row["start_source"]).name
    if behind.get("stored") or not source.is_file():
        return None
    start = [float(x) for x in json.loads(source.read_text())["probabilities"]]
    trials, ratio = float(behind["this_run"]), row["rest_over_opening"]
    own = learning.PRIOR_WEIGHT if row.get("rest_prior_weight") is None else row["rest_prior_weight"]

    def rank1(accepts: float, w: float) -> float:
        opening = learning.Evidence([trials], [accepts], trials)
        return learning.rest_posterior(start, opening, learning.Evidence(), Drift(ratio, w))[0]
    lo, hi = 0.0, trials   # rank 1 grows with the accepts
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rank1(mid, own) < row["posterior"][0] else (lo, mid)
    accepts = (lo + hi) / 2
    if abs(rank1(accepts, own) - row["posterior"][0]) > 1e-9:
        return None
    rest = rank1(accepts, own if weight is None else weight)
    return chain_yield(rest, tree["nodes"]) / row["observed_tokens_per_step"] - 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check", type=Path, help="a bench --json file with a learning_check")
    ap.add_argument("--weights", default="0,32,64,128,256")
    args = ap.parse_args()
    runs = json.loads(args.check.read_text())["learning_check"]["runs"]
    for label, w in [("as run", None)] + [(f"w={x}", float(x)) for x in args.weights.split(",")]:
        errs = {}
        for r in runs:
            e = reweighed(r, w)
            if e is not None:
                errs.setdefault(r["kind"], []).append((r["temperature"], e))
        parts = []
        for kind, es in errs.items():
            rms = (sum(e * e for _, e in es) / len(es)) ** 0.5
            parts.append(f"{kind}: {sum(abs(e) <= 0.10 for _, e in es)}/{len(es)} within 10 %, RMS {rms:.1%} ("
                         + ", ".join(f"T={t:g} {e:+.1%}" for t, e in es) + ")")
        print(f"{label:7s} " + " | ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
