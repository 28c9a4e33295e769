"""Would predicting a 64-token run from the answers' opening rate have helped? (issue 15, offline)

The shipped vectors count answer positions 0-127; the bench's runs are 64 tokens, and an answer's
opening (positions 0-63) misses rank 1 at another rate than its first 128 positions
(assets/measured/answer-drift*.json, measured on greedy answers: code more often, 0.147 against
0.133 with the int8 draft, prose a little less often, 0.310 against 0.319). This recomputes the
Sequoia lanes of recorded `python -m engine bench --json` reports as if each run's domain vector had
its rank-1 miss scaled by that opening / first-128 ratio (the other ranks keep their share of the
misses), at both temperatures as a horizon-aware start would, and counts the lanes within ±10 %.
Each run's recorded prediction is scaled by the correction's relative effect on its tree under
the domain's vector: the one the report names for the prompt, else the shipped one for the
report's draft kernels and temperature (older reports name only the pooled vector; its rank-1
miss differs from a domain's, and so would the correction's effect). No model runs.

    python bench/opening_rate_whatif.py bench/results-cpu-xeon-int8.json bench/results-heldout-xeon.json ...
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import depth_survival  # noqa: E402
from engine.bench_predictions import pooled_per_step  # noqa: E402
from engine.tree import Tree  # noqa: E402

DRIFT = {kernels: json.loads((ROOT / "assets/measured" / name).read_text())["domains"]
         for kernels, name in (("fast", "answer-drift.json"), ("fast+nf4", "answer-drift-nf4.json"))}


def with_opening_rate(p: list[float], ratio: float) -> list[float]:
    """The vector with rank 1's miss scaled by `ratio`; ranks 2.. keep their share of the misses."""
    miss = 1.0 - p[0]
    scale = min(1.0, miss * ratio) / miss if miss > 0 else 1.0
    return [1.0 - miss * scale] + [x * scale for x in p[1:]]


def shipped_vector(kernels: str, temperature: float, domain: str) -> list[float]:
    """The shipped vector for these draft kernels, temperature (top-p 1) and prompt domain."""
    for path in sorted((ROOT / "assets/measured/acceptance").glob("*.json")):
        v = json.loads(path.read_text())
        if (v.get("draft_kernels"), v.get("temperature"), v.get("top_p"), v.get("domain")) == (
                kernels, temperature, 1.0, domain) and not v.get("top_k"):
            return v["probabilities"]
    raise LookupError(f"no shipped vector for {kernels} kernels, T={temperature:g}, {domain or 'pooled'}")


def domain_vector(report: dict, tkey: str, run: dict, kernels: str) -> list[float]:
    """The vector the run's prediction came from, or the shipped one of its domain (module docstring)."""
    info = report["acceptance"][tkey]
    if (info.get("per_prompt") or {}).get(str(run["prompt"]), {}).get("source"):
        return depth_survival.domain_vector(report, tkey, run["prompt"])
    return shipped_vector(kernels, float(run["temperature"]), run["acceptance_domain"])


def opening_ratio(kernels: str, domain: str, horizon: int) -> float:
    d = DRIFT[kernels][domain]
    return d["miss_opening"] / d["miss_prior_span"] if horizon <= 64 else 1.0


def lanes(report: dict) -> list[tuple[float, str, float, float]]:
    """(temperature, label, error now, error with the opening rate) per fixed Sequoia lane."""
    kernels = "fast+nf4" if "nf4" in (report["acceptance"]["0"].get("draft_kernels") or "") else "fast"
    horizon = report["config"].get("max_new_tokens", 64)
    out = []
    for row in report["results"]:
        if row["method"] != "sequoia":   # the hardware-aware lane's trees differ per prompt
            continue
        runs = [r for r in report["runs"] if r["temperature"] == row["temperature"] and r["method"] == "sequoia"
                and r["nodes"] == row["nodes"]]
        if not runs or not all(r.get("predicted_tokens_per_step") for r in runs):
            continue
        tree = Tree(tuple(row["parents"]))
        tkey = "0" if row["temperature"] == 0 else str(row["temperature"])
        observed = sum(r.get("step_tokens", r["tokens"]) for r in runs) / sum(r["steps"] for r in runs)
        now = pooled_per_step(runs, [r["predicted_tokens_per_step"] for r in runs])
        scaled = []
        for r in runs:
            domain, factor = r.get("acceptance_domain") or "", 1.0
            if domain:
                p = domain_vector(report, tkey, r, kernels)
                factor = (tree.expected_tokens(with_opening_rate(p, opening_ratio(kernels, domain, horizon)))
                          / tree.expected_tokens(p))
            scaled.append(r["predicted_tokens_per_step"] * factor)
        out.append((row["temperature"], row["label"], observed / now - 1, observed / pooled_per_step(runs, scaled) - 1))
    return out


def main(paths: list[str]) -> int:
    every: dict[float, list] = {}
    for path in paths:
        report = json.loads(Path(path).read_text())
        print(f"{Path(path).name} ({report.get('started_at', '?')}, {report['machine'].get('processor')})")
        for t, label, now, scaled in lanes(report):
            every.setdefault(t, []).append((now, scaled))
            print(f"  T={t:g} {label:<22s} observed / predicted - 1: {100 * now:+.1f} % now, {100 * scaled:+.1f} % "
                  "from the opening rate")
    for t, errs in sorted(every.items()):
        print(f"T={t:g}, {len(errs)} lanes: within 10 % {sum(abs(a) <= 0.1 for a, _ in errs)} now, "
              f"{sum(abs(b) <= 0.1 for _, b in errs)} from the opening rate; mean error "
              f"{100 * statistics.mean(a for a, _ in errs):+.1f} -> {100 * statistics.mean(b for _, b in errs):+.1f} %, "
              f"mean |error| {100 * statistics.mean(abs(a) for a, _ in errs):.1f} -> "
              f"{100 * statistics.mean(abs(b) for _, b in errs):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
