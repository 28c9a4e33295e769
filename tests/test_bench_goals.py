"""The benchmark's method-vs-method goals compare paired per-prompt ratios (engine/bench_goals.py)."""
import math

import pytest

from engine import bench_goals


def row(method, label, tps, prompts=None, **extra):
    tps = list(tps)
    return {"method": method, "label": label, "temperature": 0.0, "nodes": 8, "tokens_per_step": 3.0,
            "tokens_per_second": sorted(tps)[len(tps) // 2], "tokens_per_second_runs": tps,
            "prompt_runs": list(prompts if prompts is not None else range(len(tps))),
            "other_fraction": 0.01, "by_kind": {}, **extra}


def goal(goals, start):
    found = [g for g in goals if g["goal"].startswith(start)]
    assert len(found) == 1, [g["goal"] for g in goals]
    return found[0]


def test_geometric_mean():
    assert bench_goals.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert bench_goals.geometric_mean([]) is None
    assert bench_goals.geometric_mean([1.0, 0.0]) is None  # not silently dropped


def test_paired_ratio_pairs_prompts_not_medians():
    # a is 10 % faster than b on every prompt; the prompts differ 3x in easiness, so the medians
    # (middle prompts differ) would say a is 0.55x b
    b = row("chain", "chain d=5", [2.0, 6.0, 6.5, 7.0], prompts=[0, 1, 2, 3])
    a = row("sequoia-auto", "auto", [7.7, 7.15, 2.2, 6.6], prompts=[3, 2, 0, 1])
    ratio, detail = bench_goals.paired_ratio(a, b)
    assert ratio == pytest.approx(1.1)
    assert "per prompt 1.10, 1.10, 1.10, 1.10" in detail


def test_paired_ratio_uses_common_prompts_only():
    a = row("sequoia", "x", [4.0, 9.0], prompts=[0, 5])
    b = row("chain", "y", [2.0, 3.0], prompts=[0, 1])
    assert bench_goals.paired_ratio(a, b)[0] == pytest.approx(2.0)


def test_best_chain_and_best_swept_goals_use_the_paired_statistic():
    ar = row("ar", "ar", [1.0, 1.0, 1.0])
    chain = row("chain", "chain d=5", [3.0, 3.0, 3.0])
    chain_lucky = row("chain", "chain d=7", [1.0, 3.1, 3.1])       # higher median, lower geomean
    tree = row("sequoia", "sequoia n=8 d=8", [3.6, 3.6, 3.6])
    auto = row("sequoia-auto", "sequoia-auto", [3.48, 3.48, 3.48])
    goals = bench_goals.evaluate_goals([ar, chain, chain_lucky, tree, auto])
    g = goal(goals, "T=0: Sequoia (hardware-aware, sequoia-auto) tokens/s >= 1.15x the best chain")
    assert g["measured"] == pytest.approx(1.16) and g["met"]
    assert "best chain chain d=5" in g["detail"]
    g = goal(goals, "T=0: hardware-aware choice within 5 % of the best swept")
    assert g["measured"] == pytest.approx(3.48 / 3.6) and g["met"]
    assert "best sequoia n=8 d=8" in g["detail"]  # the fixed sweep, not the lane itself
    g = goal(goals, "T=0: Sequoia (best swept, sequoia n=8 d=8) tokens/s >= 1.15x the best chain")
    assert g["measured"] == pytest.approx(1.2)


def test_reports_without_prompt_runs_pair_runs_in_order():
    a, b = row("sequoia", "a", [2.0, 8.0]), row("chain", "b", [1.0, 2.0])
    del a["prompt_runs"], b["prompt_runs"]
    assert bench_goals.paired_ratio(a, b)[0] == pytest.approx(math.sqrt(2.0 * 4.0))


def test_regoal_rejudges_a_saved_report():
    """bench/regoal.py on the committed Xeon report (written before prompt_runs existed): the
    hardware-aware plan is judged against the fixed 8-node chain, prompt by prompt."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "bench" / "regoal.py"), str(root / "bench" / "results-cpu-xeon.json")],
                         capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("[met] T=0: hardware-aware choice within 5 %"))
    assert "vs best sequoia n=8 d=8: per prompt 0.95, 0.85, 1.01, 0.77, 1.26, 1.26" in line
    assert "medians over prompts 6.28 vs 7.36" in line


def test_a_prediction_says_how_far_the_vectors_rank1_interval_moves_it():
    """The range rank 1's 95 % interval allows (engine/bench_predictions.py rank1_range): a 3-level chain at
    P(rank 1) = 0.8 +- 0.1 predicts 1 + p + p^2, 2.44 as measured, 2.19 and 2.71 at the edges;
    pooled over runs as the predictions are (yields over predicted steps); named in the goal line."""
    from types import SimpleNamespace

    from engine import bench_predictions
    from engine.tree import Tree
    low, high = bench_predictions.rank1_range(Tree.chain(3), SimpleNamespace(probabilities=[0.8, 0.1], ci95=[0.1, 0.05]))
    assert (round(low, 4), round(high, 4)) == (2.19, 2.71)
    assert bench_predictions.rank1_range(Tree.chain(3), SimpleNamespace(probabilities=[0.8], ci95=[])) is None
    # a vector whose ranks fill the position: raising rank 1 takes from the others, so a star of 7
    # (at most 2 tokens a step) stays at most 2
    full = SimpleNamespace(probabilities=[0.7, 0.2, 0.1], ci95=[0.05, 0.04, 0.03])
    assert bench_predictions.rank1_range(Tree.star(7), full)[1] == pytest.approx(2.0)
    runs = [{"tokens": 30, "step_tokens": 30, "predicted_tokens_per_step": 2.5,
             "predicted_tokens_per_step_range": [2.0, 3.0]},
            {"tokens": 60, "step_tokens": 60, "predicted_tokens_per_step": 5.0,
             "predicted_tokens_per_step_range": [4.0, 6.0]}]
    # runs of one vector move together
    assert bench_predictions.pooled_range(runs) == pytest.approx([90 / (30 / 2 + 60 / 4), 90 / (30 / 3 + 60 / 6)])
    assert bench_predictions.pooled_range(runs[:1] + [{"tokens": 5}]) is None
    # runs of two vectors (code, prose) move independently: their shifts add in quadrature
    apart = [{**runs[0], "acceptance_domain": "code"}, {**runs[1], "acceptance_domain": "prose"}]
    center = 90 / (30 / 2.5 + 60 / 5)
    down = [90 / (30 / 2 + 60 / 5) - center, 90 / (30 / 2.5 + 60 / 4) - center]
    up = [90 / (30 / 3 + 60 / 5) - center, 90 / (30 / 2.5 + 60 / 6) - center]
    assert bench_predictions.pooled_range(apart) == pytest.approx([center - math.hypot(*down), center + math.hypot(*up)])
    together = bench_predictions.pooled_range(runs)
    assert together[0] < bench_predictions.pooled_range(apart)[0] and bench_predictions.pooled_range(apart)[1] < together[1]
    seq = row("sequoia", "sequoia n=3 d=3", [10.0], predicted_tokens_per_step=2.44,
              predicted_tokens_per_step_range=[low, high], steps=20)
    line = goal(bench_goals.evaluate_goals([seq]), "T=0: sequoia n=3 d=3 predicted tokens/step")
    assert "(2.19-2.71 with rank 1 at the edges of its 95 % interval)" in line["detail"], line["detail"]


def test_a_prediction_says_what_a_run_of_so_few_prompts_can_expect():
    """engine/bench_predictions.py these_prompts_range: rank 1's interval for the mean of k new prompts like the
    measured ones (engine/intervals.py for_new_prompts) is wider for fewer prompts, and absent for a
    vector that recorded no prompts; the goal line names it with the row's prompts and says
    whether the observed value lies inside."""
    from types import SimpleNamespace

    from engine import bench_predictions
    from engine.tree import Tree
    counts = [[400.0, 312.0, 88.0], [400.0, 336.0, 64.0], [400.0, 320.0, 80.0], [400.0, 332.0, 68.0]]
    vec = SimpleNamespace(probabilities=[0.8125], ci95=[0.02], prompt_counts=counts)
    one, four = bench_predictions.these_prompts_range(Tree.chain(5), vec, 1), bench_predictions.these_prompts_range(Tree.chain(5), vec, 4)
    narrow = bench_predictions.rank1_range(Tree.chain(5), vec)
    assert one[0] < four[0] < narrow[0] and narrow[1] < four[1] < one[1]
    assert bench_predictions.these_prompts_range(Tree.chain(5), SimpleNamespace(probabilities=[0.8], ci95=[0.1]), 4) is None
    seq = row("sequoia", "sequoia n=5 d=5", [10.0], predicted_tokens_per_step=3.4, steps=20,
              predicted_tokens_per_step_range_these_prompts=[2.9, 3.9],
              by_kind={"code": {"prompts": 4, "speedup_vs_ar": 1.0}, "prose": {"prompts": 2, "speedup_vs_ar": 1.0}})
    line = goal(bench_goals.evaluate_goals([seq]), "T=0: sequoia n=5 d=5 predicted tokens/step")
    assert "2.90-3.90 for 4 code + 2 prose prompts like the measured ones: observed" in line["detail"], line


def test_one_vector_for_both_kinds_gives_each_kinds_row_the_range_for_that_kinds_few_prompts():
    """Where code and prose share the pooled vector (they agree), a lane's row is judged against
    the mean of all the bench's prompts but its by_kind rows against their own few: each run
    carries both ranges (engine/bench_predictions.py prompts_sharing, run_prediction), and the kind's row must use
    the wider one (it used the row's, which is too narrow for 2 prompts of 6)."""
    from collections import Counter
    from types import SimpleNamespace

    from engine import bench_aggregate, bench_predictions
    from engine.tree import Tree
    sharing = Counter({("", "code"): 4, ("", "prose"): 2})
    assert bench_predictions.prompts_sharing(sharing, "", "prose", False) == (6, 2)
    assert bench_predictions.prompts_sharing(sharing, "", "prose", True) == (0, 0)
    assert bench_predictions.prompts_sharing(Counter({("code", "code"): 4, ("prose", "prose"): 2}), "code", "code", False) == (4, 4)
    counts = [[400.0, 312.0, 88.0], [400.0, 336.0, 64.0], [400.0, 320.0, 80.0], [400.0, 332.0, 68.0]]
    vec = SimpleNamespace(probabilities=[0.8125], ci95=[0.02], prompt_counts=counts, domain=None)
    spec = SimpleNamespace(tree=Tree.chain(5), predicted_tokens_per_step=1.0)
    got = bench_predictions.run_prediction(spec, vec, None, None, 0, 0.0, *bench_predictions.prompts_sharing(sharing, "", "prose", False), 64)
    of_all, of_kind = got[bench_predictions.THESE_PROMPTS], got[bench_predictions.THESE_PROMPTS_OF_KIND]
    assert of_kind[0] < of_all[0] and of_all[1] < of_kind[1]
    runs = [{"temperature": 0.0, "key": "s", "method": "sequoia", "prompt": i, "kind": kind, "tokens": 60, "steps": 20,
             "tokens_per_second": 5.0, "tokens_per_step": 3.0, "step_yields": [3] * 20, "draft_seconds": 1.0,
             "verify_seconds": 2.0, "other_seconds": 0.1, "engine_other_seconds": 0.0, "finish_reason": "length",
             "peak_memory_bytes": 1, "peak_memory_above_start_bytes": 1, "token_ids": [],
             **bench_predictions.run_prediction(spec, vec, None, None, 0, 0.0, *bench_predictions.prompts_sharing(sharing, "", kind, False), 64)}
            for i, kind in enumerate(["code"] * 4 + ["prose"] * 2)]
    lane = SimpleNamespace(key="s", family="sequoia", tree=Tree.chain(5), width=1, budget=5, matched_to=None,
                           predicted_tokens_per_step=1.0, predicted_tokens_per_second=None, predicted_speedup=None,
                           extra={})
    [entry] = bench_aggregate.aggregate(runs, {0.0: [lane]})
    assert entry[bench_predictions.THESE_PROMPTS] == pytest.approx(of_all)
    assert entry["by_kind"]["prose"][bench_predictions.THESE_PROMPTS] == pytest.approx(of_kind)
