"""A bench's runs summed up per lane (a method at a temperature): tokens/s and tokens/step with
their intervals, the paired speedup over autoregressive, the predictions pooled as the
observations are (engine/bench_predictions.py), the time split, memory, and per prompt kind; and
the step costs the runs show (what the profile times)."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from engine import bench_goals
from engine.bench_predictions import (THESE_PROMPTS, THESE_PROMPTS_OF_KIND, pooled_prediction, pooled_range,
                                      speed_prediction_pooled)
from engine.step_yields import answer_interval, yield_interval
from engine.tree import Tree

if TYPE_CHECKING:
    from engine.bench import MethodSpec

def auto_label(nodes: int, depth: int) -> str:
    """The hardware-aware lane named by the tree it ran."""
    return f"sequoia-auto n={nodes} d={depth}"


def trees_label(spec: MethodSpec, rs: list[dict]) -> tuple[str, list[dict]]:
    """The label of a result row and, for the per-prompt hardware-aware lane, which trees ran."""
    if spec.family != "sequoia-auto":
        return spec.key, []
    trees: dict[tuple, dict] = {}
    for r in rs:
        t = trees.setdefault(tuple(r["parents"]), {"nodes": r["nodes"], "depth": r["depth"],
                                                  "parents": r["parents"], "prompts": []})
        t["prompts"].append(r["prompt"])
    if len(trees) == 1:
        (t,) = trees.values()
        return auto_label(t["nodes"], t["depth"]), list(trees.values())
    return "sequoia-auto (per prompt)", list(trees.values())


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def aggregate(runs: list[dict], specs_by_t: dict[float, list[MethodSpec]]) -> list[dict]:
    ar = {(r["temperature"], r["prompt"]): r for r in runs if r["method"] == "ar"}
    results = []
    for temperature, specs in specs_by_t.items():
        for s in specs:
            rs = sorted((r for r in runs if r["temperature"] == temperature and r["key"] == s.key),
                        key=lambda r: r["prompt"])
            if not rs:
                continue
            tps = [r["tokens_per_second"] for r in rs]
            speed = [r["tokens_per_second"] / ar[(temperature, r["prompt"])]["tokens_per_second"]
                     for r in rs if (temperature, r["prompt"]) in ar]
            tokens, steps = sum(r["tokens"] for r in rs), sum(r["steps"] for r in rs)
            yields = sum(r.get("step_tokens", r["tokens"]) for r in rs)  # see DEFINITIONS: tokens_per_step
            draft, verify, other = (sum(r[k] for r in rs) for k in ("draft_seconds", "verify_seconds", "other_seconds"))
            total = draft + verify + other
            tree = s.tree
            pred_step, pred_speed = pooled_prediction(rs)
            label, trees = trees_label(s, rs)
            if trees:  # the row's own shape: that of the most prompts' tree
                top = max(trees, key=lambda t: len(t["prompts"]))
                tree = Tree(tuple(top["parents"]))
            entry = {
                "method": s.family, "label": label, "temperature": temperature,
                "nodes": tree.size, "depth": tree.depth, "width": s.width, "budget": s.budget,
                "level_widths": tree.level_widths, "matched_to": s.matched_to,
                "tokens_per_second": statistics.median(tps), "tokens_per_second_min": min(tps),
                "tokens_per_second_max": max(tps), "tokens_per_second_runs": tps,
                "tokens_per_second_geomean": bench_goals.geometric_mean(tps), "prompt_runs": [r["prompt"] for r in rs],
                "tokens_per_step": yields / steps if steps else 0.0,
                "truncated_tokens": sum(r.get("truncated_tokens", 0) for r in rs),
                "tokens_per_step_runs": [r["tokens_per_step"] for r in rs],
                "tokens_per_step_interval_95": yield_interval([r["step_yields"] for r in rs]),
                "tokens_per_step_interval_95_by_answer": answer_interval([r["step_yields"] for r in rs]),
                "speedup_vs_ar": _median(speed), "speedup_vs_ar_runs": speed,
                "predicted_tokens_per_step": pred_step or s.predicted_tokens_per_step,
                "predicted_tokens_per_second": pred_speed or s.predicted_tokens_per_second,
                "predicted_tokens_per_second_profile": _median([r.get("predicted_tokens_per_second_profile")
                                                                for r in rs]),
                "predicted_tokens_per_step_pooled_vector": s.predicted_tokens_per_step,
                "predicted_tokens_per_step_range": pooled_range(rs),
                THESE_PROMPTS: pooled_range(rs, THESE_PROMPTS),
                "predicted_speedup": _median([r.get("predicted_speedup") for r in rs]) or s.predicted_speedup,
                "draft_seconds": draft, "verify_seconds": verify, "other_seconds": other,
                "engine_other_seconds": sum(r["engine_other_seconds"] for r in rs),
                "draft_fraction": draft / total if total else None,
                "verify_fraction": verify / total if total else None,
                "other_fraction": other / total if total else None,
                "seconds": total, "tokens": tokens, "steps": steps, "prompts": len(rs),
                "peak_memory_bytes": max((r["peak_memory_bytes"] or 0) for r in rs) or None,
                "peak_memory_above_start_bytes": max((r["peak_memory_above_start_bytes"] or 0) for r in rs) or None,
                "finish_reasons": [r["finish_reason"] for r in rs],
                "by_kind": {},
            }
            if s.family in ("sequoia", "sequoia-auto"):
                entry["parents"] = list(tree.parents)
            if trees:
                entry["trees_by_prompt"] = trees
            if entry["predicted_tokens_per_step"]:
                entry["observed_over_predicted"] = entry["tokens_per_step"] / entry["predicted_tokens_per_step"]
            entry.update(speed_prediction_pooled(rs))
            # the per-prompt lane's choices are in trees_by_prompt, not the first plan's extra
            entry.update({k: v for k, v in s.extra.items() if not (trees and k.startswith("chosen_"))})
            if temperature == 0:
                entry["matches_ar"] = all(
                    r["token_ids"] == ar[(temperature, r["prompt"])]["token_ids"]
                    for r in rs if (temperature, r["prompt"]) in ar)
            for kind in sorted({r["kind"] for r in rs}):
                kr = [r for r in rs if r["kind"] == kind]
                ks = [r["tokens_per_second"] / ar[(temperature, r["prompt"])]["tokens_per_second"]
                      for r in kr if (temperature, r["prompt"]) in ar]
                entry["by_kind"][kind] = {
                    "prompts": len(kr), "tokens_per_second": statistics.median(r["tokens_per_second"] for r in kr),
                    "tokens_per_step": (sum(r.get("step_tokens", r["tokens"]) for r in kr)
                                        / max(sum(r["steps"] for r in kr), 1)),
                    "speedup_vs_ar": _median(ks), "predicted_tokens_per_step": pooled_prediction(kr)[0],
                    "predicted_tokens_per_step_range": pooled_range(kr),
                    THESE_PROMPTS: pooled_range(kr, THESE_PROMPTS_OF_KIND)}
            results.append(entry)
    return results


def observed_costs(runs: list[dict]) -> dict | None:
    """What the profile times, read off this run's lanes (interleaved, so every size in the same
    minutes): the target's verify seconds per step by tree size, over t(1) from the plain-decoding
    lanes, and the draft's seconds per level of the chains (one draft forward per level after the
    root; the first also catches up on the previous step's accepted tokens) over t(1). On this
    machine a profile and a benchmark a minute apart can see different speeds (t(1) 77 ms in the
    profile, 130-140 ms per plain-decoding token in the run), so both are reported."""
    fast = [r for r in runs if r["method"] != "ar-default-kernels" and r["steps"]]
    by_size: dict[int, list[tuple[float, int]]] = {}
    for r in fast:
        by_size.setdefault(r["nodes"], []).append((r["verify_seconds"], r["steps"]))
    if 1 not in by_size:
        return None
    t = {n: sum(v for v, _ in xs) / sum(k for _, k in xs) for n, xs in sorted(by_size.items())}
    chains = [r for r in fast if r["method"] == "chain" and r["depth"] > 1]
    level = (sum(r["draft_seconds"] for r in chains) / sum(r["steps"] * (r["depth"] - 1) for r in chains)
             if chains else None)
    return {"t1_seconds": t[1], "target_over_t1": {str(n): v / t[1] for n, v in t.items()},
            "draft_level_over_t1": level / t[1] if level is not None else None,
            "draft_level_seconds": level}
