"""The bench counts a step cut by max-new-tokens with its full verified yield (engine/bench.py)."""
from engine import bench, bench_aggregate, bench_predictions, step_yields
from engine import methods as M
from engine.models import encode_prompt
from engine.settings import Settings
from tests.tiny import tiny_pair


def test_a_cut_last_step_counts_its_full_yield():
    pair = tiny_pair("llama", noise=0.0)  # draft = target: every chain step yields depth tokens
    spec = bench.MethodSpec("chain", M.chain(5), width=1)
    r = bench.run_once(pair, encode_prompt(pair, "hello world", False), spec,
                       Settings(temperature=0.0, max_new_tokens=7, ignore_eos=True))
    assert r["tokens"] == 7 and r["steps"] == 2          # 5 + 2 of 5 kept
    assert r["step_tokens"] == 10 and r["truncated_tokens"] == 3
    assert r["tokens_per_step"] == 5.0                   # the old count said 3.5
    runs = [{**r, "temperature": 0.0, "method": "chain", "key": spec.key, "prompt": 0, "kind": "code"}]
    entry = bench_aggregate.aggregate(runs, {0.0: [spec]})[0]
    assert entry["tokens_per_step"] == 5.0 and entry["tokens"] == 7 and entry["truncated_tokens"] == 3
    assert entry["by_kind"]["code"]["tokens_per_step"] == 5.0


def test_the_hardware_aware_lane_is_planned_per_prompt_from_its_vector_and_the_corrected_costs():
    """The bench plans sequoia-auto as the app does for each prompt: a code prompt's vector and a
    prose prompt's give their own trees, and step costs seen so far change the plan."""
    from types import SimpleNamespace

    from engine import observed, planning
    from engine.profiler import DeviceProfile
    from engine.tree import Tree
    config = bench.BenchConfig(auto_max_budget=16, max_depth=8)
    flat = DeviceProfile({1: 0.1, 16: 0.1}, {1: 0.01, 16: 0.01}, 0.0, 128, 3, "d", "t", "cpu", "float32")
    spec = bench.MethodSpec("sequoia-auto", M.sequoia(Tree((-1,)), name="sequoia-auto"), extra={"x": 1})
    easy = SimpleNamespace(probabilities=[0.9, 0.05])
    hard = SimpleNamespace(probabilities=[0.4, 0.2, 0.1, 0.05])
    a = bench._auto_for_prompt(spec, config, easy, flat, 0.0)
    b = bench._auto_for_prompt(spec, config, hard, flat, 0.0)
    assert a.tree == planning.hardware_aware(easy.probabilities, flat, 16, 8).tree != b.tree
    assert a.key == b.key == "sequoia-auto" and a.extra["x"] == 1 and a.extra["chosen_budget"] == a.tree.size
    # runs saw every target forward of more than one token cost 10x the profile: the plan shrinks
    seen = observed.Observations()
    events = [SimpleNamespace(step=i, nodes=[0] * a.tree.size, tree_parents=list(a.tree.parents),
                              verify_seconds=1.0, draft_seconds=0.01 * (a.tree.depth - 1), other_seconds=0.0)
              for i in range(2, 6)]
    events += [SimpleNamespace(step=i, nodes=[0], tree_parents=[-1], verify_seconds=0.1, draft_seconds=0.0,
                               other_seconds=0.0) for i in range(2, 6)]
    observed.add_events(seen, flat, events, False)
    slow = observed.corrected(flat, seen, False)
    assert bench._auto_for_prompt(spec, config, easy, slow, 0.0).tree.size < a.tree.size
    assert bench._auto_for_prompt(bench.MethodSpec("chain", M.chain(3), width=1), config, easy, slow, 0.0).key \
        == "chain d=3"  # other lanes are left as they are


def test_speed_prediction_compares_the_same_runs_not_medians_of_different_prompts():
    """Three prompts: two predicted within 13 %, one far off. The medians over prompts pair the
    measured prose run with the predicted code run (-29 %); pooling the same runs' tokens over
    their measured and predicted seconds does not."""
    measured, predicted = [15.23, 8.51, 9.52], [13.49, 14.34, 9.68]
    runs = [{"tokens": 32, "seconds": 32 / m, "tokens_per_second": m, "predicted_tokens_per_second": p}
            for m, p in zip(measured, predicted)]
    pooled = bench_predictions.speed_prediction_pooled(runs)
    assert pooled["tokens_per_second_pooled"] == 96 / sum(32 / m for m in measured)
    assert pooled["predicted_tokens_per_second_pooled"] == 96 / sum(32 / p for p in predicted)
    assert [round(e, 3) for e in pooled["predicted_tokens_per_second_error_runs"]] == [0.129, -0.407, -0.017]
    error = pooled["tokens_per_second_pooled"] / pooled["predicted_tokens_per_second_pooled"] - 1
    assert -0.15 < error < -0.14  # the far-off prompt still weighs: its run took the longest
    assert bench_predictions.speed_prediction_pooled([{**runs[0], "predicted_tokens_per_second": None}]) == {}


def test_profile_goals_use_the_round_by_round_ratios_when_the_profile_has_them():
    from types import SimpleNamespace

    from engine import bench_goals
    pair = SimpleNamespace(model_bytes=lambda: 4 * 2**30)
    prof = SimpleNamespace(target_seconds={1: 0.100, 4: 0.130}, draft_seconds={1: 0.030}, quality={})
    old = {g["goal"]: g for g in bench_goals.loaded_pair_goals(pair, prof)}
    assert old["profile: t(4)/t(1) <= 1.15"]["measured"] == 0.130 / 0.100
    prof.quality = {"round_ratios": {"target_over_t1": {"1": 1.0, "4": 1.12}, "draft_over_t1": {"1": 0.24}}}
    goals = {g["goal"]: g for g in bench_goals.loaded_pair_goals(pair, prof)}
    t4 = goals["profile: t(4)/t(1) <= 1.15"]
    assert t4["measured"] == 1.12 and t4["met"] and "ratio of the medians 1.300" in t4["detail"]
    draft = goals["profile: one-token draft forward <= 0.25 of a one-token target forward"]
    assert draft["measured"] == 0.24 and draft["met"] and "0.300" in draft["detail"]


def test_tokens_per_step_interval_is_a_block_bootstrap_of_the_steps():
    assert step_yields.yield_interval([[3] * 20, [3] * 8]) == [3.0, 3.0]  # no spread, no uncertainty
    assert step_yields.yield_interval([[2]]) is None                      # one block: nothing to resample
    import random
    rng = random.Random(1)
    few = [[rng.choice([1, 5]) for _ in range(12)]]
    many = [[rng.choice([1, 5]) for _ in range(400)]]
    lo, hi = step_yields.yield_interval(few)
    assert lo < sum(few[0]) / 12 < hi
    lo2, hi2 = step_yields.yield_interval(many)
    assert lo2 < 3.0 < hi2 and (hi2 - lo2) < (hi - lo) / 3     # 33x the steps: about a sixth as wide


def test_interval_over_answers_counts_how_much_answers_differ():
    assert step_yields.answer_interval([[3, 3, 3]]) is None                # one answer: nothing to resample
    assert step_yields.answer_interval([[3] * 20, [3] * 8]) == [3.0, 3.0]
    # two long answers, one easy and one hard: steps look certain, the answers say otherwise
    easy, hard = [5] * 200, [1] * 200
    lo, hi = step_yields.answer_interval([easy, hard])
    block_lo, block_hi = step_yields.yield_interval([easy, hard])
    assert lo == 1.0 and hi == 5.0 and lo < block_lo <= block_hi < hi
