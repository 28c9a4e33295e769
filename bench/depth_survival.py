"""Where a tree's observed tokens/step part from its prediction: level by level.

For every fixed tree lane (chains and the swept Sequoia trees) of a `python -m engine bench --json`
report, per temperature and the domain of the vector each run was predicted from (code and
prose stay apart where their vectors differ): the observed share of steps whose yield reached each
level, P(yield >= k), pooled over the domain's runs, against the positional model's (the domain's
acceptance vector on the lane's tree: the sum over the tree's nodes at depth k-1 of the product of
p_rank along their paths), and the per-level continuation P(yield >= k+1) / P(yield >= k). For a
chain, also the rank-1 rate its own steps saw and the model at that rate: a vector whose rate is
off moves a deep tree's prediction more than a shallow one's (at 12 levels a rate 0.889 instead of
0.865 is +11.6 %, at 4 levels +3.7 %), while a rate that changes with the level changes the shape.

The lanes' trees are the report's own (a chain, or the `parents` of the lane's results row); each
is checked against the runs' own predicted tokens/step.

    python bench/depth_survival.py bench/results-cpu-sampler-fix.json [--methods sequoia,chain]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.tree import Tree  # noqa: E402


def reached_by_level(tree: Tree, p: list[float]) -> list[float]:
    """P(the accepted path reaches level m), m = 0 (the root) .. depth - 1: P(yield >= m + 1) under
    the model (`Tree.depth` counts the root's level)."""
    value = tree.reach_probabilities(p)
    return [sum(v for v, d in zip(value, tree.depth_of) if d == m) for m in range(tree.depth)]


def lane_tree(report: dict, run: dict) -> Tree:
    """The tree the lane ran: a chain's, or the one its results row records (`parents`)."""
    if run["method"] == "chain":
        return Tree.chain(run["depth"])
    row = next(r for r in report["results"] if r["method"] == run["method"]
               and r["temperature"] == run["temperature"] and r["nodes"] == run["nodes"])
    return Tree(tuple(row["parents"]))


ROOT = Path(__file__).resolve().parents[1]


def domain_vector(report: dict, temperature_key: str, prompt: int) -> list[float]:
    """The vector the run was predicted from: its domain's shipped file (named by the report with
    the path of the checkout that ran it, so looked for in this one too), else the pooled one."""
    info = report["acceptance"][temperature_key]
    source = (info.get("per_prompt") or {}).get(str(prompt), {}).get("source")
    if source:
        for path in (Path(source), ROOT / "assets" / "measured" / "acceptance" / Path(source).name):
            if path.exists():
                return json.loads(path.read_text())["probabilities"]
    return info["probabilities"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--methods", default="sequoia,chain")
    args = ap.parse_args(argv)
    report = json.loads(Path(args.report).read_text())
    methods = set(args.methods.split(","))
    groups: dict = {}
    for run in report["runs"]:
        if run["method"] in methods:
            groups.setdefault((run["temperature"], run["method"], run["nodes"], run["acceptance_domain"]), []).append(run)
    for (temperature, method, nodes, domain), runs in sorted(groups.items()):
        tkey = "0" if temperature == 0 else str(temperature)
        tree = lane_tree(report, runs[0])
        p = domain_vector(report, tkey, runs[0]["prompt"])
        model = reached_by_level(tree, p)
        check = max(abs(sum(model) - r["predicted_tokens_per_step"]) for r in runs)
        yields = np.array([y for r in runs for y in r["step_yields"]])
        seen = [float((yields >= m + 1).mean()) for m in range(tree.depth)]
        print(f"T={temperature} {runs[0]['key']:<18s} {domain:<5s} {len(runs)} runs, {len(yields)} steps: "
              f"observed {yields.mean():.2f}, predicted {sum(model):.2f} ({100 * (yields.mean() / sum(model) - 1):+.1f} %)"
              f"; level widths {tree.level_widths}" + ("" if check < 1e-6 else f"  (tree differs from the run's: {check:.3f})"))
        print("   P(yield >= k), k = 1..  observed  " + " ".join(f"{v:.2f}" for v in seen))
        print("                           predicted " + " ".join(f"{v:.2f}" for v in model))
        if tree.level_widths == [1] * tree.depth and tree.depth > 1:
            # a chain: the rank-1 rate its own steps saw (accepted / (accepted + misses)), and the
            # model at that rate, so a wrong rate and a wrong shape can be told apart
            accepted = yields - 1
            rate = accepted.sum() / (accepted.sum() + (accepted < tree.depth - 1).sum())
            at_rate = [rate ** m for m in range(tree.depth)]
            print(f"   the chain's own rank-1 rate {rate:.3f} (the vector's {p[0]:.3f}); at that rate the model "
                  f"gives {sum(at_rate):.2f}: " + " ".join(f"{v:.2f}" for v in at_rate))
        go_on = lambda v: " ".join(f"{b / a:.2f}" if a > 0 else "  - " for a, b in zip(v, v[1:]))  # noqa: E731
        print("   going on from level k   observed  " + go_on(seen))
        print("                           predicted " + go_on(model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
