"""How far each tree's predicted tokens/step can move with its vector's rank-1 interval: over
positions (the binomial interval the shipped vectors had) and over prompts (engine/intervals.py).

For every fixed Sequoia and chain lane of a `python -m engine bench --json` report, per
temperature: the observed tokens/step (the report's, truncated last steps counted as the bench
counts them), the prediction from the acceptance vectors in --vectors (each run's domain file, as
the report names it: by default the shipped ones of this checkout, which may be newer than the
report's), and engine.bench.rank1_range with each interval, pooled over runs as the bench pools
predictions. It says whether the observed value lies inside each range. The range is a lower
bound on what the vector leaves open (only rank 1 moves), and says nothing of how far a bench's
own few prompts sit from the measurement prompts' mean (the report's interval over answers does).

    python bench/prediction_ranges.py bench/results-cpu-sampler-fix.json
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from engine import intervals  # noqa: E402
from engine.bench import _pooled_per_step, rank1_range  # noqa: E402
from engine.profiler import AcceptanceVector  # noqa: E402
from engine.tree import Tree  # noqa: E402


def run_vector(report: dict, run: dict, folder: Path) -> AcceptanceVector:
    """The vector the run was predicted from, read from `folder` by the file name the report names."""
    tkey = "0" if run["temperature"] == 0 else str(run["temperature"])
    info = report["acceptance"][tkey]
    source = (info.get("per_prompt") or {}).get(str(run["prompt"]), {}).get("source") or info["source"]
    return AcceptanceVector(**json.loads((folder / Path(source).name).read_text()))


def lanes(report: dict, methods: set[str]):
    """(row, its runs, its tree) for each fixed lane of these methods."""
    for row in report["results"]:
        if row["method"] not in methods:
            continue
        runs = [r for r in report["runs"] if r["method"] == row["method"] and r["temperature"] == row["temperature"]
                and r["nodes"] == row["nodes"] and r["depth"] == row["depth"]]
        yield row, runs, Tree.chain(row["depth"]) if row["method"] == "chain" else Tree(tuple(row["parents"]))


def summary(runs: list[dict], tree: Tree, vectors: list[AcceptanceVector]) -> dict:
    """Prediction and both ranges over `runs`, each run with its own vector."""
    predicted = [tree.expected_tokens(v.probabilities) for v in vectors]
    by_positions = [rank1_range(tree, replace(v, ci95=intervals.binomial(v.probabilities, v.positions)))
                    for v in vectors]
    by_prompts = [rank1_range(tree, v) for v in vectors]
    return {"predicted": _pooled_per_step(runs, predicted),
            "over_positions": [_pooled_per_step(runs, [r[i] for r in by_positions]) for i in (0, 1)],
            "over_prompts": [_pooled_per_step(runs, [r[i] for r in by_prompts]) for i in (0, 1)],
            "interval_basis": sorted({v.interval for v in vectors})}


def observed(runs: list[dict]) -> float:
    """All step yields over all steps, as the bench pools them (a truncated last step counts whole)."""
    return sum(r.get("step_tokens", r["tokens"]) for r in runs) / max(sum(r["steps"] for r in runs), 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--vectors", default=str(ROOT / "assets" / "measured" / "acceptance"),
                    help="folder of acceptance files (looked up by the file names the report gives)")
    ap.add_argument("--methods", default="sequoia,chain")
    ap.add_argument("--json", default=None, help="also write the table here")
    args = ap.parse_args(argv)
    report = json.loads(Path(args.report).read_text())
    folder, out = Path(args.vectors), []
    print(f"{args.report}; vectors from {folder}")
    print(f"{'T':>4} {'lane':18} {'kind':6} {'steps':>5} {'observed':>8} {'pred':>6} {'err':>7}  "
          f"{'range over positions':>22}  {'range over prompts':>22}")
    for row, runs, tree in lanes(report, set(args.methods.split(","))):
        kinds = {"all": runs, **{k: [r for r in runs if r.get("kind") == k] for k in ("code", "prose")}}
        for kind, rs in kinds.items():
            if not rs:
                continue
            s = summary(rs, tree, [run_vector(report, r, folder) for r in rs])
            seen = observed(rs)
            s.update(temperature=row["temperature"], lane=row["label"], kind=kind, steps=sum(r["steps"] for r in rs),
                     observed=seen, error=seen / s["predicted"] - 1)

            def where(span):
                return "in " if span[0] <= seen <= span[1] else "OUT"
            print(f"{row['temperature']:>4g} {row['label']:18} {kind:6} {s['steps']:>5} {seen:8.2f} {s['predicted']:6.2f} "
                  f"{100 * s['error']:+6.1f}%  {s['over_positions'][0]:6.2f}-{s['over_positions'][1]:5.2f} "
                  f"({where(s['over_positions'])}) {100 * (s['over_positions'][0] / s['predicted'] - 1):+4.0f}/"
                  f"{100 * (s['over_positions'][1] / s['predicted'] - 1):+3.0f}%  "
                  f"{s['over_prompts'][0]:6.2f}-{s['over_prompts'][1]:5.2f} ({where(s['over_prompts'])}) "
                  f"{100 * (s['over_prompts'][0] / s['predicted'] - 1):+4.0f}/{100 * (s['over_prompts'][1] / s['predicted'] - 1):+3.0f}%")
            out.append(s)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
