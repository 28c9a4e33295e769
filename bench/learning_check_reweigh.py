"""A learning check's frozen trees re-predicted with other prior weights or drifts (issue 15):

    .venv/bin/python bench/learning_check_reweigh.py bench/learning-check-weight-avx512.json [--weights 0,32,128] \
        [--drift assets/measured/answer-drift-nf4.json]

Each row of `bench --learning-check` stores the rest's posterior it predicted with, the drift
(ratio and prior weight) and how many opening positions backed it. In a chain every node has one
child, so the opening's evidence is `trials` tries of rank 1 with some number of accepts, and
only rank 1 decides the chain's yield: the accepts are found by bisection such that
learning.rest_posterior (the row's start vector, read from its start_source file name under
assets/measured/acceptance; its ratio and weight) gives the stored rank 1, and the same frozen
chain is then predicted by rest_posterior at another weight (or with another drift asset's ratio
and weight for the row's domain and length). The tree the plan would have frozen
with that weight may differ; this compares predictions for the trees that ran, against what
they observed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPERSEDED = ROOT / "bench" / "acceptance-vectors-24-prompts.json"   # shipped vectors before 2026-12-07
sys.path.insert(0, str(ROOT))


def chain_yield(p: float, nodes: int) -> float:
    return sum(p ** j for j in range(nodes))


def recovered(row: dict) -> tuple[list[float], object] | None:
    """(start vector, the opening's Evidence) behind a row's stored posterior (with the row's drift,
    or pooled as the rest's without one); None where it cannot be recovered: not a chain (rank 1
    alone does not decide it), a start that is not a shipped vector alone (stored evidence pooled
    in, interpolated), or a stored posterior no opening gives."""
    from engine import learning
    from engine.answer_drift import Drift
    tree, behind = row["frozen_tree"], row["positions_behind_posterior"]
    if tree["parents"] != list(range(-1, tree["nodes"] - 1)):
        return None
    start = start_vector(Path(row["start_source"]).name, behind.get("measured"))
    if behind.get("stored") or start is None:
        return None
    trials, ratio = float(behind["this_run"]), row.get("rest_over_opening")
    own = None if not ratio else Drift(ratio, learning.PRIOR_WEIGHT if row.get("rest_prior_weight") is None
                                       else row["rest_prior_weight"])

    def rank1(accepts: float) -> float:
        return learning.rest_posterior(start, learning.Evidence([trials], [accepts], trials),
                                       learning.Evidence(), own)[0]
    lo, hi = 0.0, trials   # rank 1 grows with the accepts
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rank1(mid) < row["posterior"][0] else (lo, mid)
    accepts = (lo + hi) / 2
    if abs(rank1(accepts) - row["posterior"][0]) > 1e-9:
        return None
    return start, learning.Evidence([trials], [accepts], trials)


def start_vector(name: str, positions: int | None) -> list[float] | None:
    """The shipped vector `name` as the run read it: the file's, or, where its positions say the run
    read an earlier version (the 24-prompt files before 2026-12-07), that version's."""
    source = ROOT / "assets/measured/acceptance" / name
    if not source.is_file():
        return None
    vec = json.loads(source.read_text())
    if positions is not None and vec["positions"] != positions:
        vec = json.loads(SUPERSEDED.read_text())["vectors"].get(name)
        if vec is None or vec["positions"] != positions:
            return None
    return [float(x) for x in vec["probabilities"]]


def repredicted(row: dict, drift) -> float | None:
    """The row's prediction error for its frozen chain with the opening carried to the rest by
    `drift` (an answer_drift.Drift, or None: the rest taken as the opening); None as recovered()."""
    from engine import learning
    got = recovered(row)
    if got is None:
        return None
    start, opening = got
    rest = learning.rest_posterior(start, opening, learning.Evidence(), drift)[0]
    return chain_yield(rest, row["frozen_tree"]["nodes"]) / row["observed_tokens_per_step"] - 1


def reweighed(row: dict, weight: float | None) -> float | None:
    """The row's prediction error with the opening pooled at `weight` (None: the row's own) and the
    row's own ratio; None as recovered()."""
    from engine.answer_drift import Drift
    if not row.get("rest_over_opening"):
        return None
    own = row.get("rest_prior_weight")
    return repredicted(row, Drift(row["rest_over_opening"], own if weight is None else weight))


def drift_of_asset(path: Path, row: dict, check: dict):
    """The Drift an asset gives a check's row (its domain, the check's boundary and run length, as
    the run asked drift_for), None where none applies."""
    from engine import answer_drift
    obj = json.loads(path.read_text())
    return answer_drift.drift_for(obj["draft"], obj["target"], row["kind"], check["after"] + check["tokens"],
                                  check["after"], path=path, draft_kernels=obj.get("draft_kernels"))


def _summary(label: str, runs: list[dict], error) -> str:
    errs = {}
    for r in runs:
        e = error(r)
        if e is not None:
            errs.setdefault(r["kind"], []).append((r["temperature"], e))
    parts = [f"{sum(map(len, errs.values()))} of {len(runs)} rows recovered"]
    for kind, es in errs.items():
        rms = (sum(e * e for _, e in es) / len(es)) ** 0.5
        parts.append(f"{kind}: {sum(abs(e) <= 0.10 for _, e in es)}/{len(es)} within 10 %, RMS {rms:.1%} ("
                     + ", ".join(f"T={t:g} {e:+.1%}" for t, e in es) + ")")
    return f"{label:7s} " + " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check", type=Path, help="a bench --json file with a learning_check")
    ap.add_argument("--weights", default="0,32,64,128,256")
    ap.add_argument("--drift", type=Path, action="append", default=[],
                    help="also re-predict with this drift asset's ratio and weight (assets/measured/answer-drift*.json)")
    args = ap.parse_args()
    check = json.loads(args.check.read_text())["learning_check"]
    runs = check["runs"]
    for label, w in [("as run", None)] + [(f"w={x}", float(x)) for x in args.weights.split(",")]:
        print(_summary(label, runs, lambda r: reweighed(r, w)))
    for path in args.drift:
        print(_summary(path.name, runs, lambda r: repredicted(r, drift_of_asset(path, r, check))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
