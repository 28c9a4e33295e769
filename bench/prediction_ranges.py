"""How far each tree's predicted tokens/step can move with its vector's rank-1 interval: over
positions (the binomial interval the shipped vectors had) and over prompts (engine/intervals.py).

For every fixed Sequoia and chain lane of a `python -m engine bench --json` report, per
temperature: the observed tokens/step (the report's, truncated last steps counted as the bench
counts them), the prediction from the acceptance vectors in --vectors (each run from its prompt
kind's vector, as the bench predicts now; by default the shipped ones of this checkout, which may
be newer than the report's), and engine.bench_predictions.rank1_range with rank 1's interval over positions,
over prompts, and for a run of as many prompts as the lane ran from that vector
(bench_predictions.these_prompts_range), pooled over runs as the bench pools them. It says whether the
observed value lies inside each range. Only rank 1 moves in them (the other ranks' uncertainty is
left out).

    python bench/prediction_ranges.py bench/results-cpu-sampler-fix.json [more reports ...]

With several reports it ends with a count per temperature over their lanes (all prompts pooled):
how many lie within ±10 % of their prediction and inside each range. The range for these prompts
is the one to judge a run by: the vector's uncertainty plus the spread of so few prompts.
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
from engine.bench_predictions import pooled_per_step, pooled_range, rank1_range, these_prompts_range  # noqa: E402
from engine.profiler import AcceptanceVector  # noqa: E402
from engine.tree import Tree  # noqa: E402


def run_vector(report: dict, run: dict, folder: Path) -> AcceptanceVector:
    """The vector of the run's prompt kind at the report's settings, as the bench predicts now (a
    code or prose prompt gets its kind's vector): read from `folder`, found beside the file the
    report names (older reports predicted every run from the pooled one); that file itself where
    no vector of the run's kind is there."""
    tkey = "0" if run["temperature"] == 0 else str(run["temperature"])
    info = report["acceptance"][tkey]
    source = (info.get("per_prompt") or {}).get(str(run["prompt"]), {}).get("source") or info["source"]
    named = json.loads((folder / Path(source).name).read_text())
    if run.get("kind") in ("code", "prose") and named.get("domain", "") != run["kind"]:
        same = ("temperature", "top_p", "width", "draft_kernels", "sampler", "draft", "target")
        for path in sorted(folder.glob("*.json")):
            other = json.loads(path.read_text())
            if not isinstance(other, dict) or other.get("domain") != run["kind"]:
                continue
            top_k_alike = (other.get("top_k") or 0) == (named.get("top_k") or 0)
            if top_k_alike and all(other.get(k) == named.get(k) for k in same):
                return AcceptanceVector(**other)
    return AcceptanceVector(**named)


def lanes(report: dict, methods: set[str]):
    """(row, its runs, its tree) for each fixed lane of these methods."""
    for row in report["results"]:
        if row["method"] not in methods:
            continue
        runs = [r for r in report["runs"] if r["method"] == row["method"] and r["temperature"] == row["temperature"]
                and r["nodes"] == row["nodes"] and r["depth"] == row["depth"]]
        yield row, runs, Tree.chain(row["depth"]) if row["method"] == "chain" else Tree(tuple(row["parents"]))


def summary(runs: list[dict], tree: Tree, vectors: list[AcceptanceVector], tokens: int | None) -> dict:
    """Prediction and the ranges over `runs`, each run with its own vector: rank 1 at the edges of
    its interval over positions, over prompts, and for as many new prompts of `tokens` tokens as
    the lane ran from that vector (bench_predictions.these_prompts_range); pooled as the bench pools them
    (bench_predictions.pooled_range: runs of one vector move together, vectors independently)."""
    of_vector = {}
    for v in vectors:
        of_vector[v.domain] = of_vector.get(v.domain, 0) + 1
    rows = [{**r, "acceptance_domain": v.domain,
             "predicted_tokens_per_step": tree.expected_tokens(v.probabilities),
             "over_positions": rank1_range(tree, replace(v, ci95=intervals.binomial(v.probabilities, v.positions))),
             "over_prompts": rank1_range(tree, v),
             "for_these_prompts": these_prompts_range(tree, v, of_vector[v.domain], tokens)}
            for r, v in zip(runs, vectors)]
    return {"predicted": pooled_per_step(rows, [r["predicted_tokens_per_step"] for r in rows]),
            **{key: pooled_range(rows, key) for key in ("over_positions", "over_prompts", "for_these_prompts")},
            "interval_basis": sorted({v.interval for v in vectors})}


def observed(runs: list[dict]) -> float:
    """All step yields over all steps, as the bench pools them (a truncated last step counts whole)."""
    return sum(r.get("step_tokens", r["tokens"]) for r in runs) / max(sum(r["steps"] for r in runs), 1)


def table(path: str, folder: Path, methods: set[str]) -> list[dict]:
    """Print one report's lanes (all prompts, then per kind); returns their summaries."""
    report = json.loads(Path(path).read_text())
    out = []
    print(f"{path}; vectors from {folder}")
    print(f"{'T':>4} {'lane':18} {'kind':6} {'steps':>5} {'observed':>8} {'pred':>6} {'err':>7}  "
          f"{'range over positions':>27}  {'range over prompts':>27}  {'range for these prompts':>27}")
    for row, runs, tree in lanes(report, methods):
        kinds = {"all": runs, **{k: [r for r in runs if r.get("kind") == k] for k in ("code", "prose")}}
        for kind, rs in kinds.items():
            if not rs:
                continue
            s = summary(rs, tree, [run_vector(report, r, folder) for r in rs],
                        report.get("config", {}).get("max_new_tokens"))
            seen = observed(rs)
            s.update(report=path, temperature=row["temperature"], lane=row["label"], kind=kind,
                     steps=sum(r["steps"] for r in rs), observed=seen, error=seen / s["predicted"] - 1)
            print(f"{row['temperature']:>4g} {row['label']:18} {kind:6} {s['steps']:>5} {seen:8.2f} "
                  f"{s['predicted']:6.2f} {100 * s['error']:+6.1f}%  {_span(s['over_positions'], s)}  "
                  f"{_span(s['over_prompts'], s)}  {_span(s['for_these_prompts'], s)}")
            out.append(s)
    return out


def inside(span: list[float], value: float) -> bool:
    return span[0] <= value <= span[1]


def _span(span: list[float] | None, s: dict) -> str:
    if span is None:
        return f"{'-':>27}"
    where = "in " if inside(span, s["observed"]) else "OUT"
    return (f"{span[0]:6.2f}-{span[1]:5.2f} ({where}) {100 * (span[0] / s['predicted'] - 1):+4.0f}/"
            f"{100 * (span[1] / s['predicted'] - 1):+3.0f}%")


def counts(rows: list[dict]) -> None:
    """Per temperature, over the lanes with all prompts pooled."""
    print("\nover every report's lanes, all prompts pooled:")
    for t in sorted({r["temperature"] for r in rows}):
        rs = [r for r in rows if r["temperature"] == t and r["kind"] == "all"]
        near = sum(abs(r["error"]) <= 0.10 for r in rs)
        by_positions = sum(inside(r["over_positions"], r["observed"]) for r in rs)
        by_prompts = sum(inside(r["over_prompts"], r["observed"]) for r in rs)
        these = sum(inside(r["for_these_prompts"], r["observed"]) for r in rs if r["for_these_prompts"])
        print(f"T={t:g}: {len(rs)} lanes; within ±10 % of the prediction {near}; inside the range over positions "
              f"{by_positions}, over prompts {by_prompts}, for these prompts {these}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="+")
    ap.add_argument("--vectors", default=str(ROOT / "assets" / "measured" / "acceptance"),
                    help="folder of acceptance files (looked up by the file names the report gives)")
    ap.add_argument("--methods", default="sequoia,chain")
    ap.add_argument("--json", default=None, help="also write the table here")
    args = ap.parse_args(argv)
    rows = []
    for path in args.report:
        rows += table(path, Path(args.vectors), set(args.methods.split(",")))
    if len(args.report) > 1:
        counts(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
