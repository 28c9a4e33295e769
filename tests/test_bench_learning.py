"""`bench --learning-check` (engine/bench_learning.py) on the tiny pair, with the boundary at 8
tokens instead of 64 so that it takes seconds: the tree is frozen at the boundary, the prediction
uses the posterior there, the rest is counted as the bench counts it, and the goals appear."""
import json

import pytest

from engine import bench, bench_goals, bench_learning, bench_report, learning, planning, profiler, step_yields
from engine.commands import bench as bench_cmd
from engine.prompts import Prompt
from engine.settings import Settings
from engine.tree import Tree
from tests.test_bench import engine
from tests.tiny import tiny_pair, tiny_pair_dirs

PROMPTS = [Prompt("c", "code", "def f"), Prompt("p", "prose", "hello world")]
START = [0.1, 0.05, 0.02, 0.01]  # far from the tiny pair's acceptance: learning re-plans early


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path / "cache"))  # nothing reaches the user's cache
    return tmp_path / "cache"


def _vec(pair):
    return profiler.AcceptanceVector(list(START), 0.82, 10, [0.1] * 4, pair.draft_name, pair.target_name, "greedy",
                                     0.0, 1.0, 4, 1, "x")


def _config(**changes):
    return bench.BenchConfig(**{**dict(temperatures=(0.0,), auto=False, budgets=(10,), max_depth=5,
                                       learning_check=True, learning_check_after=8, learning_check_tokens=16),
                                **changes})


def _recorded(monkeypatch):
    """Every StepEvent the check's generations yield, per run."""
    runs, real = [], bench_learning.generate

    def recording(*args, **kwargs):
        runs.append([])
        for event in real(*args, **kwargs):
            runs[-1].append(event)
            yield event
    monkeypatch.setattr(bench_learning, "generate", recording)
    return runs


def _boundary(steps, after):
    seen = 0
    for i, e in enumerate(steps):
        if seen >= after:
            return i
        seen += len(e.new_token_ids)
    return None


@pytest.mark.parametrize("noise", [0.15, 0.0])
def test_the_tree_is_frozen_at_the_boundary_and_predicted_from_the_posterior_there(monkeypatch, noise):
    pair = tiny_pair("llama", noise=noise)
    runs = _recorded(monkeypatch)
    check = bench_learning.run_check(pair, PROMPTS, _config(), {0.0: _vec(pair)}, None, say=lambda *_: None)
    assert [r["kind"] for r in check["runs"]] == ["code", "prose"] and "frozen" in check["frozen"]
    for row, events in zip(check["runs"], runs):
        steps = [e for e in events if e.nodes]
        i = _boundary(steps, 8)
        head, rest = steps[:i], steps[i:]
        assert row["tokens_before"] == sum(len(e.new_token_ids) for e in head) >= 8
        assert row["steps_before"] == len(head) and row["steps_after"] == len(rest) > 0
        assert row["tokens"] == 24 and row["tokens_before"] + row["tokens_after"] == 24
        # learning re-planned before the boundary, never after it: every later step ran the frozen tree
        assert row["replans_before_freeze"] > 0
        assert row["replans_after_freeze"] == 0 and row["tree_changes_after_freeze"] == 0
        frozen = row["frozen_tree"]["parents"]
        assert all(e.tree_parents == frozen for e in rest)
        assert len({tuple(e.tree_parents) for e in head} | {tuple(frozen)}) > 1  # learning changed the tree
        # predicted: the frozen tree under the posterior of the steps before the boundary
        tree = Tree.from_parents(frozen)
        posterior = learning.pooled(START, learning.events_evidence(head))
        assert row["posterior"] == pytest.approx(posterior)
        assert row["predicted_tokens_per_step"] == pytest.approx(tree.expected_tokens(posterior))
        assert row["predicted_tokens_per_step"] == pytest.approx(
            step_yields.rest_of_run(steps, tree, START, 8)["rest_predicted_tokens_per_step"])
        end = learning.pooled(START, learning.events_evidence(steps))  # not the end-of-run posterior
        assert row["predicted_tokens_per_step"] != pytest.approx(tree.expected_tokens(end), rel=1e-9)
        assert row["positions_behind_posterior"]["this_run"] == learning.events_evidence(head).nodes
        # observed: the rest's full step yields over its steps, the bench's count
        yields = sum(step_yields.step_yield(e) for e in rest)
        assert row["observed_tokens_per_step"] == pytest.approx(yields / len(rest))
        assert row["truncated_tokens_after"] == yields - row["tokens_after"]
        assert row["error"] == pytest.approx(row["predicted_tokens_per_step"] / row["observed_tokens_per_step"] - 1)
        # the rest's own 95 % interval: a block bootstrap over exactly the rest's step yields
        assert row["step_yields_after"] == [step_yields.step_yield(e) for e in rest]
        assert row["observed_interval_95"] == step_yields.yield_interval([row["step_yields_after"]])
        if len(rest) > 4:   # more than one block of steps to resample
            lo, hi = row["observed_interval_95"]
            assert lo <= row["observed_tokens_per_step"] <= hi
        else:
            assert row["observed_interval_95"] is None


def _drift_asset(monkeypatch, tmp_path, pair, ratio=0.5, weight=40):
    """A measured drift for the tiny pair's names (the real answer_drift.drift_for reads it, its
    boundary and horizon rules included); the tiny pair plans with the pooled vector, so the
    wrapper looks the drift up as code's. Returns the calls drift_for got."""
    from engine import answer_drift
    asset = tmp_path / "drift.json"
    asset.write_text(json.dumps({"draft": pair.draft_name, "target": pair.target_name, "domains": {"code": {
        "rest_over_opening": ratio, "ci95": [ratio - 0.1, ratio + 0.1], "prior_weight": weight}}}))
    real, calls = answer_drift.drift_for, []

    def drift_for(draft, target, domain, horizon=None, opening=None, draft_kernels=None):
        calls.append(dict(domain=domain, horizon=horizon, opening=opening, draft_kernels=draft_kernels))
        return real(draft, target, "code", horizon, opening, path=asset, draft_kernels=draft_kernels)
    monkeypatch.setattr(answer_drift, "drift_for", drift_for)
    return calls


def test_past_the_boundary_the_posterior_is_for_the_rest_of_the_answer(monkeypatch, tmp_path):
    """Where a rest/opening drift applies (engine/answer_drift.py), the frozen tree's prediction
    uses the opening's posterior (the prior worth the measured weight) drifted to the rest, and the
    row says by how much."""
    from engine import answer_drift
    pair = tiny_pair("llama", noise=0.15)
    calls = _drift_asset(monkeypatch, tmp_path, pair)
    monkeypatch.setattr(answer_drift, "OPENING", 8)   # the check's boundary (8 here, 64 for real)
    runs = _recorded(monkeypatch)
    row = bench_learning.run_check(pair, PROMPTS[:1], _config(), {0.0: _vec(pair)}, None,
                                   say=lambda *_: None)["runs"][0]
    assert calls[-1]["opening"] == 8 and calls[-1]["horizon"] == 8 + 16   # the boundary and the 16 tokens after it
    assert calls[-1]["draft_kernels"] == profiler.draft_kernels(pair)     # the asset measured with the run's draft
    steps = [e for e in runs[0] if e.nodes]
    head = learning.events_evidence(steps[:_boundary(steps, 8)])
    drift = answer_drift.Drift(0.5, 40.0)
    posterior = learning.rest_posterior(START, head, learning.Evidence(), drift)
    assert row["rest_over_opening"] == 0.5 and row["rest_prior_weight"] == 40
    assert row["posterior"] == pytest.approx(posterior)
    assert posterior != pytest.approx(learning.rest_posterior(START, head, learning.Evidence(),
                                                              answer_drift.Drift(0.5, None)))  # the weight counts
    assert posterior[0] > learning.pooled(START, head, 40)[0]   # the rest misses rank 1 half as often
    tree = Tree.from_parents(row["frozen_tree"]["parents"])
    # the frozen tree is the DP tree of the rest's posterior (the boundary re-planned it)
    assert tree.parents == planning.plan_from_vector(planning.MethodSpec("sequoia", 10, 5), posterior).parents
    assert row["predicted_tokens_per_step"] == pytest.approx(tree.expected_tokens(posterior))
    assert row["predicted_tokens_per_step"] == pytest.approx(
        step_yields.rest_of_run(steps, tree, START, 8, drift)["rest_predicted_tokens_per_step"])
    text = bench_learning.format_check({"after": 8, "tokens": 16, "frozen": "f", "storage": "s", "runs": [row]})
    assert "drifted to the rest by 0.500, prior worth 40" in text
    # the drift was measured for a 64-token opening (8 here): at another boundary none applies
    monkeypatch.setattr(answer_drift, "OPENING", 64)
    row = bench_learning.run_check(pair, PROMPTS[:1], _config(), {0.0: _vec(pair)}, None,
                                   say=lambda *_: None)["runs"][0]
    assert calls[-1]["opening"] == 8 and row["rest_over_opening"] is None and row["rest_prior_weight"] is None


def test_the_bench_rows_rest_check_uses_the_runs_domain_drift(monkeypatch, tmp_path):
    """bench._learner (learning on in a bench run) predicts a run's rest with the drift of the run's
    prompt domain and length, as the learner of a Live run would."""
    from engine import answer_drift, methods
    from engine.decoding import generate
    from engine.models import encode_prompt
    pair = tiny_pair("llama", noise=0.15)
    calls = _drift_asset(monkeypatch, tmp_path, pair, ratio=0.6, weight=48)
    settings = Settings(temperature=0.0, max_new_tokens=96, ignore_eos=True)
    spec = bench.MethodSpec("chain", methods.chain(4), width=1)
    events = list(generate(pair, encode_prompt(pair, "def f", None), spec.method, settings))
    steps = [e for e in events if e.nodes]
    r = {"events": steps}
    vec, info = _vec(pair), {}
    learner = bench._learner(pair, _config(learn=True), settings, spec, r, vec, learning.Evidence(), domain="prose")
    bench._store_prompt([learner], settings, info, domain="prose")
    assert calls == [dict(domain="prose", horizon=96, opening=None, draft_kernels=profiler.draft_kernels(pair))]
    head = learning.events_evidence(steps[:_boundary(steps, 64)])
    want = spec.tree.expected_tokens(learning.rest_posterior(START, head, learning.Evidence(),
                                                        answer_drift.Drift(0.6, 48.0)))
    assert r["rest_predicted_tokens_per_step"] == pytest.approx(want)
    assert (r["rest_over_opening"], r["rest_prior_weight"]) == (0.6, 48)
    # as a Learner with a drift: only the opening's evidence is stored (the next start is an opening rate)
    assert info["learned_by_domain"]["prose"]["positions"] == head.nodes < learning.events_evidence(steps).nodes


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_a_bench_prompts_lanes_store_one_greedy_answer_once(temperature, monkeypatch):
    """At T = 0 a bench prompt's Sequoia lanes give one greedy answer: the settings' store gains one
    run per prompt, as a race's lanes add one (they added one per lane, so the store the learning
    check starts from weighed each answer as many times as the bench had learning lanes); sampled
    lanes are answers of their own. Every lane's rest check starts from the store as it was before
    its prompt (a later lane's start held the earlier lanes' answer of the same prompt)."""
    pair = tiny_pair("llama", noise=0.15)
    config = bench.BenchConfig(temperatures=(temperature,), auto=False, budgets=(4, 8), chain_depths=(),
                               specinfer=(), match_specinfer=False, max_new_tokens=80, warmup_tokens=2,
                               acceptance_width=4, acceptance_tokens=8, seed=1, ignore_eos=True)
    starts, real = [], learning.with_stored

    def seen(vec, stored):   # the store each lane's rest check starts from
        starts.append((stored.runs, stored.nodes))
        return real(vec, stored)
    monkeypatch.setattr(learning, "with_stored", seen)
    report = bench.run_bench(pair, PROMPTS, config, progress=lambda *_: None)
    settings = Settings(temperature=temperature, top_p=config.top_p, top_k=config.top_k)
    runs = sum(learning.load(planning.learning_key(pair, settings, domain=d)).runs for d in ("", "code", "prose"))
    lanes = [r for r in report["runs"] if r["method"] == "sequoia"]
    assert len(lanes) == 2 * len(PROMPTS)
    assert runs == (len(PROMPTS) if temperature == 0 else len(lanes))
    assert len(starts) == len(lanes) and starts[0] == (0, 0.0)
    assert all(starts[i] == starts[i + 1] for i in range(0, len(starts), 2)), starts   # a prompt's two lanes


def test_the_hardware_aware_plan_learns_and_freezes_too(monkeypatch):
    pair = tiny_pair("llama")
    prof = profiler.DeviceProfile({1: 0.010, 8: 0.011, 16: 0.012}, {1: 0.001, 8: 0.0011, 16: 0.0012}, 0.001, 16, 3,
                                  "d", "t", "cpu", "float32")  # flat verify cost: the choice drafts a tree
    runs = _recorded(monkeypatch)
    config = _config(auto=True, auto_max_budget=16)
    check = bench_learning.run_check(pair, PROMPTS[:1], config, {0.0: _vec(pair)}, prof, say=lambda *_: None)
    row, steps = check["runs"][0], [e for e in runs[0] if e.nodes]
    assert row["method"] == "sequoia-auto" and 1 < row["frozen_tree"]["nodes"] <= 16
    assert row["replans_before_freeze"] > 0 and row["replans_after_freeze"] == 0
    assert all(e.tree_parents == row["frozen_tree"]["parents"] for e in steps[-row["steps_after"]:])


def test_the_check_plans_with_the_costs_the_bench_observed_when_given():
    """The bench hands the check the profile corrected by its runs' step costs (what its
    hardware-aware lanes planned with): those, not the bare profile, choose the tree."""
    pair = tiny_pair("llama")
    flat = profiler.DeviceProfile({1: 0.010, 8: 0.011, 16: 0.012}, {1: 0.001, 8: 0.0011, 16: 0.0012}, 0.001, 16, 3,
                                  "d", "t", "cpu", "float32")
    steep = profiler.DeviceProfile({1: 0.010, 2: 1.0, 8: 4.0, 16: 8.0}, {1: 0.05, 8: 0.4, 16: 0.8}, 0.001, 16, 3,
                                   "d", "t", "cpu", "float32")  # drafting never pays: plain decoding
    config = _config(auto=True, auto_max_budget=16)
    quiet = lambda *_: None  # noqa: E731
    on_profile = bench_learning.run_check(pair, PROMPTS[:1], config, {0.0: _vec(pair)}, flat, say=quiet)
    on_costs = bench_learning.run_check(pair, PROMPTS[:1], config, {0.0: _vec(pair)}, flat, say=quiet,
                                        costs={0.0: steep})
    assert on_profile["runs"][0]["frozen_tree"]["nodes"] > 1
    assert on_costs["runs"][0]["error"] is None and "drafts nothing" in on_costs["runs"][0]["note"]


def test_a_cut_last_step_counts_its_full_yield_after_the_boundary():
    pair = tiny_pair("llama", noise=0.0)  # draft = target: the learned tree accepts its whole main path
    check = bench_learning.run_check(pair, PROMPTS[:1], _config(), {0.0: _vec(pair)}, None, say=lambda *_: None)
    row = check["runs"][0]
    assert row["truncated_tokens_after"] > 0                 # max-new-tokens cut the last step
    full = (row["tokens_after"] + row["truncated_tokens_after"]) / row["steps_after"]
    assert row["observed_tokens_per_step"] == pytest.approx(full)
    assert row["observed_tokens_per_step"] > row["tokens_after"] / row["steps_after"]


def test_evidence_is_stored_after_all_check_runs_only_with_learn():
    pair = tiny_pair("llama")
    key = planning.learning_key(pair, Settings(temperature=0.0))
    quiet = lambda *_: None  # noqa: E731
    off = bench_learning.run_check(pair, PROMPTS, _config(learn=False), {0.0: _vec(pair)}, None, say=quiet)
    assert off["evidence_stored"] is False and learning.load(key).nodes == 0
    on = bench_learning.run_check(pair, PROMPTS, _config(), {0.0: _vec(pair)}, None, say=quiet)
    assert on["evidence_stored"] is True
    stored = learning.load(key)
    assert stored.runs == 2
    # both runs started from the same store (neither saw the other's evidence)
    assert [r["positions_behind_posterior"]["stored"] for r in on["runs"]] == [0, 0]
    again = bench_learning.run_check(pair, PROMPTS, _config(learn=False), {0.0: _vec(pair)}, None, say=quiet)
    assert [r["positions_behind_posterior"]["stored"] for r in again["runs"]] == [int(stored.nodes)] * 2
    assert all(r["start_source"].endswith("over 2 runs") for r in again["runs"])


def test_the_goals_judge_the_measured_error():
    rows = [{"temperature": 0.7, "kind": "code", "error": 0.04, "predicted_tokens_per_step": 2.6,
             "observed_tokens_per_step": 2.5, "steps_after": 90, "tokens_after": 256,
             "positions_behind_posterior": {"total": 500}},
            {"temperature": 0.7, "kind": "prose", "error": -0.2, "predicted_tokens_per_step": 2.0,
             "observed_tokens_per_step": 2.5, "steps_after": 90, "tokens_after": 256,
             "positions_behind_posterior": {"total": 500}},
            {"temperature": 0.0, "kind": "code", "error": None, "note": "the run ended"}]
    goals = bench_goals.learning_check_goals({"after": 64, "runs": rows})
    assert [g["goal"] for g in goals] == [
        "T=0.7: learning after 64 tokens: predicted tokens/step within 10 % of the rest of the run (code)",
        "T=0.7: learning after 64 tokens: predicted tokens/step within 10 % of the rest of the run (prose)",
        "T=0: learning after 64 tokens: predicted tokens/step within 10 % of the rest of the run (code)"]
    assert [g["met"] for g in goals] == [True, False, False]
    assert [g["measured"] for g in goals] == [0.04, -0.2, None]
    shown = bench_report.format_goals({"goals": goals})
    assert "+4.0%" in shown and "-20.0%" in shown and "[NOT met]" in shown and "not measured" in shown
    assert bench_goals.learning_check_goals(None) == []


def test_the_check_is_off_unless_asked():
    parser = bench_cmd.argparse.ArgumentParser()
    bench_cmd.register(parser.add_subparsers())
    for flags in ([], ["--quick"]):
        config = bench_cmd.config_from_args(parser.parse_args(["bench", *flags]))
        assert config.learning_check is False
    config = bench_cmd.config_from_args(parser.parse_args(["bench", "--learning-check"]))
    assert config.learning_check and config.learning_check_after == 64 and config.learning_check_tokens == 256


def test_bench_learning_check_end_to_end(tmp_path):
    draft, target = tiny_pair_dirs("llama")
    out = tmp_path / "bench.json"
    # --no-auto: the DP tree of the largest budget (on the tiny pair the hardware-aware choice depends on
    # the machine's timings and may be a 1-node tree, which drafts nothing and so cannot learn)
    run = engine("bench", "--quick", "--draft", draft, "--target", target, "--temperatures", "0", "--no-auto",
                 "--learning-check", "--learning-check-after", "8", "--learning-check-tokens", "16", "--json", out)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    check = report["learning_check"]
    assert report["config"]["learning_check"] is True and check["after"] == 8 and check["evidence_stored"]
    assert [(r["temperature"], r["kind"], r["method"]) for r in check["runs"]] == [
        (0.0, "code", "sequoia"), (0.0, "prose", "sequoia")]
    for r in check["runs"]:
        assert r["replans_after_freeze"] == 0 and r["tokens"] == 24 and r["frozen_tree"]["nodes"] == 8
    names = [g["goal"] for g in report["goals"] if "learning after" in g["goal"]]
    assert names == [f"T=0: learning after 8 tokens: predicted tokens/step within 10 % of the rest of the run ({k})"
                     for k in ("code", "prose")]
    assert "learning check (8 + 16 tokens" in run.stdout and "learning after 8 tokens" in run.stdout


def test_more_check_prompts_per_kind_give_a_rate():
    prompts = [Prompt("c1", "code", "a"), Prompt("p1", "prose", "b"), Prompt("c2", "code", "c"),
               Prompt("c3", "code", "d")]
    assert [(p.title, i) for p, i in bench_learning.check_prompts(prompts)] == [("c1", 0), ("p1", 1)]
    assert [(p.title, i) for p, i in bench_learning.check_prompts(prompts, 2)] == [("c1", 0), ("c2", 2), ("p1", 1)]
    assert [p.kind for p, _ in bench_learning.check_prompts(prompts[:1], 3)] == ["code", "prose"]  # a shipped prose
    runs = [{"temperature": 0.0, "kind": k, "prompt": t, "error": e, "method": "sequoia", "note": "n/a",
             "predicted_tokens_per_step": 2.0, "observed_tokens_per_step": 2.0, "steps_after": 9, "tokens_after": 16,
             "tokens_before": 8, "steps_before": 3, "replans_before_freeze": 0, "replans_after_freeze": 0,
             "truncated_tokens_after": 0, "positions_behind_posterior": {"total": 1, "measured": 1, "stored": 0,
                                                                         "this_run": 0}}
            for k, t, e in (("code", "c1", 0.05), ("code", "c2", -0.2), ("prose", "p1", None))]
    check = {"after": 8, "tokens": 16, "frozen": "f", "storage": "s", "runs": runs}
    text = bench_learning.format_check(check)
    assert "up to 2 runs per temperature and kind" in text and "T=0: within 10 %: code 1 of 2, prose 0 of 1" in text
    assert "inside the rest's own 95 % interval: code 0 of 0, prose 0 of 0" in text   # rows without intervals
    runs[0]["observed_interval_95"], runs[1]["observed_interval_95"] = [1.9, 2.3], [2.1, 2.5]
    text = bench_learning.format_check(check)
    assert "inside the rest's own 95 % interval: code 1 of 2, prose 0 of 0" in text
    assert "observed 2.00 (95 % 1.90-2.30) tok/step" in text and "observed 2.00 (95 % 2.10-2.50) tok/step" in text
    assert bench_learning.inside_interval(runs[0]) and not bench_learning.inside_interval(runs[1])
    assert bench_learning.inside_interval(runs[2]) is None
    goals = bench_goals.learning_check_goals(check)
    assert [g["goal"].split("(")[-1] for g in goals] == ["code: c1)", "code: c2)", "prose)"]
    assert [g["met"] for g in goals] == [True, False, False]
    one = bench_learning.format_check({**check, "runs": [runs[0], runs[2]]})
    assert "one run per temperature and kind" in one and "within 10 %:" not in one


def test_check_prompts_flag():
    parser = bench_cmd.argparse.ArgumentParser()
    bench_cmd.register(parser.add_subparsers())
    config = bench_cmd.config_from_args(parser.parse_args(["bench", "--learning-check", "--learning-check-prompts", "3"]))
    assert config.learning_check_prompts == 3
    assert bench_cmd.config_from_args(parser.parse_args(["bench"])).learning_check_prompts == 1
    with pytest.raises(bench_cmd.UserError, match="--learning-check-prompts must be >= 1"):
        bench_cmd.config_from_args(parser.parse_args(["bench", "--learning-check", "--learning-check-prompts", "0"]))
    with pytest.raises(bench_cmd.UserError, match="--learning-check-prompts needs --learning-check"):
        bench_cmd.config_from_args(parser.parse_args(["bench", "--learning-check-prompts", "3"]))   # not a default bench


def test_a_rests_own_interval_is_its_steps_luck():
    """step_yields.yield_interval on one run: steps all alike leave no doubt; steps that differ do; too
    few steps (one block of 4) give none."""
    assert step_yields.yield_interval([[3] * 40]) == [3.0, 3.0]
    import random
    rng = random.Random(0)
    yields = [rng.randint(1, 8) for _ in range(50)]   # an 8-node chain's yields, ~50 steps
    lo, hi = step_yields.yield_interval([yields])
    mean = sum(yields) / len(yields)
    assert lo < mean < hi and 0.1 < (hi - lo) / 2 / mean < 0.3   # roughly +-15 %, wider than the goal's 10 %
    assert step_yields.yield_interval([[1, 2, 3, 4]]) is None


def test_the_running_check_predicts_each_rest_step_from_the_steps_before_it(monkeypatch):
    """--learning-check-running: a second run per prompt that keeps re-planning; each step after the
    boundary is predicted by the tree it ran under the posterior of the steps before it (one step
    ahead), and the row compares the mean prediction with the rest's observed yields."""
    pair = tiny_pair("llama", noise=0.15)
    runs = _recorded(monkeypatch)
    check = bench_learning.run_check(pair, PROMPTS, _config(learning_check_running=True), {0.0: _vec(pair)}, None,
                                     say=lambda *_: None)
    assert "running" in check and len(runs) == 4   # frozen and running, per prompt
    for row, events in zip(check["runs"], runs[1::2]):
        running = row["running"]
        steps = [e for e in events if e.nodes]
        i = _boundary(steps, 8)
        rest = steps[i:]
        assert running["steps_after"] == len(rest) == len(running["step_predictions"]) > 0
        for j, (e, predicted) in enumerate(zip(rest, running["step_predictions"])):
            posterior = learning.pooled(START, learning.events_evidence(steps[:i + j]))   # the steps before it only
            assert predicted == pytest.approx(Tree.from_parents(e.tree_parents).expected_tokens(posterior))
        yields = [step_yields.step_yield(e) for e in rest]
        assert running["step_yields_after"] == yields
        assert running["observed_tokens_per_step"] == pytest.approx(sum(yields) / len(yields))
        mean = sum(running["step_predictions"]) / len(rest)
        assert running["error"] == pytest.approx(mean / running["observed_tokens_per_step"] - 1)
        assert running["replans_after"] >= 0
    text = bench_learning.format_check(check)
    assert text.count("running (re-planned all along): mean prediction") == 2


def test_the_running_check_predicts_the_tree_a_step_ran_when_the_context_cut_it(monkeypatch):
    """Near the context limit the Decoder cuts the plan (Decoder._fitted): a step is predicted by
    the tree it ran, not by the plan it was given."""
    pair = tiny_pair("llama", noise=0.15)
    real = bench_learning.encode_prompt

    def encode(pair, text, chat):   # the check's prompt leaves room for 14 of its 24 tokens
        ids = real(pair, text, chat)
        pair.context_limit = len(ids) + 14
        return ids
    monkeypatch.setattr(bench_learning, "encode_prompt", encode)
    runs = _recorded(monkeypatch)
    check = bench_learning.run_check(pair, PROMPTS[:1], _config(learning_check_running=True), {0.0: _vec(pair)},
                                     None, say=lambda *_: None)
    running = check["runs"][0]["running"]
    steps = [e for e in runs[1] if e.nodes]
    rest = steps[_boundary(steps, 8):]
    assert any(Tree.from_parents(e.tree_parents).depth < 5 for e in rest)   # the context did cut
    for j, (e, predicted) in enumerate(zip(rest, running["step_predictions"])):
        posterior = learning.pooled(START, learning.events_evidence(steps[:len(steps) - len(rest) + j]))
        assert predicted == pytest.approx(Tree.from_parents(e.tree_parents).expected_tokens(posterior))


def test_the_running_check_with_the_boundary_at_zero_predicts_every_step(monkeypatch):
    """After 0 tokens every step is the rest's: the Decoder's extra plan() before its first step
    (check_fits) must not add a prediction."""
    pair = tiny_pair("llama", noise=0.15)
    runs = _recorded(monkeypatch)
    check = bench_learning.run_check(pair, PROMPTS[:1], _config(learning_check_running=True, learning_check_after=0),
                                     {0.0: _vec(pair)}, None, say=lambda *_: None)
    running = check["runs"][0]["running"]
    steps = [e for e in runs[1] if e.nodes]
    assert running["error"] is not None and running["steps_after"] == len(steps)
    assert running["step_predictions"][0] == pytest.approx(Tree.from_parents(steps[0].tree_parents).expected_tokens(START))


def test_the_running_check_needs_the_learning_check():
    from engine.errors import UserError
    with pytest.raises(UserError, match="needs --learning-check"):
        bench_cmd._validate(_config(learning_check=False, learning_check_running=True))


def test_the_repeat_check_remembers_the_first_runs_opening_and_rest(monkeypatch):
    """--learning-check-repeat: a second frozen run per prompt, seed + REPEAT_SEED, whose learner
    holds the first run's opening and rest as the prompt's memory; the store on disk is not used."""
    from engine import prompt_memory
    pair = tiny_pair("llama", noise=0.15)
    runs = _recorded(monkeypatch)
    seeds = []
    real = bench_learning.run_one

    def run_one(pair, ids, result, settings, after, memory=None):
        seeds.append((settings.seed, memory))
        return real(pair, ids, result, settings, after, memory=memory)
    monkeypatch.setattr(bench_learning, "run_one", run_one)
    check = bench_learning.run_check(pair, PROMPTS, _config(learning_check_repeat=True), {0.0: _vec(pair)}, None,
                                     say=lambda *_: None)
    assert "repeat" in check and len(runs) == 4   # first and repeated, per prompt
    for n, row in enumerate(check["runs"]):
        first, again = runs[2 * n], runs[2 * n + 1]
        (seed, none), (seed_again, memory) = seeds[2 * n], seeds[2 * n + 1]
        assert none is None and seed_again == seed + bench_learning.REPEAT_SEED
        steps = [e for e in first if e.nodes]
        i = _boundary(steps, 8)
        assert memory.runs == 1 and memory.head.nodes == learning.events_evidence(steps[:i]).nodes
        assert memory.tail.nodes == learning.events_evidence(steps[i:]).nodes
        repeat = row["repeat"]
        assert repeat["remembered"] == {"runs": 1, "positions": memory.positions, "carried_from": ""}
        # no drift for the tiny pair: the answer is one rate, and all of the memory pools with the run.
        # Its first step was planned from the memory, before it observed anything
        second = [e for e in again if e.nodes]
        remembered = memory.head.add(memory.tail)
        spec = planning.MethodSpec("sequoia", 10, 5)
        assert tuple(second[0].tree_parents) == tuple(
            planning.plan_from_vector(spec, learning.pooled(START, remembered)).parents)
        j = _boundary(second, 8)
        assert repeat["predicted_tokens_per_step"] == pytest.approx(
            Tree.from_parents(repeat["frozen_tree"]["parents"]).expected_tokens(
                learning.pooled(START, remembered.add(learning.events_evidence(second[:j])))))
    assert not list(prompt_memory.path_for("x").parent.glob("*.json"))   # nothing stored
    text = bench_learning.format_check(check)
    assert text.count("repeated (the same answer: in-sample), remembering the first run: predicted") == 2


def test_the_repeat_check_needs_the_learning_check():
    from engine.errors import UserError
    with pytest.raises(UserError, match="needs --learning-check"):
        bench_cmd._validate(_config(learning_check=False, learning_check_repeat=True))


def test_the_across_check_carries_the_first_temperatures_run_rescaled(monkeypatch):
    """--learning-check-across-t: at T = 0.7 each prompt runs once more, frozen, with its first
    run's seed, carrying the T = 0 run's opening and rest with rank-1 misses scaled by the ratio of
    the two vectors' misses (prompt_memory.carried's rule); the store on disk is not used."""
    from engine import prompt_memory
    pair = tiny_pair("llama", noise=0.15)
    seen = []
    real = bench_learning.run_one

    def run_one(pair, ids, result, settings, after, memory=None):
        row, replan = real(pair, ids, result, settings, after, memory=memory)
        seen.append((settings.temperature, settings.seed, memory, replan.learner))
        return row, replan
    monkeypatch.setattr(bench_learning, "run_one", run_one)
    hot = profiler.AcceptanceVector([0.05, 0.05, 0.02, 0.01], 0.87, 10, [0.1] * 4, pair.draft_name, pair.target_name,
                                    "sequoia", 0.7, 1.0, 4, 1, "x")
    config = _config(temperatures=(0.0, 0.7), learning_check_across=True)
    check = bench_learning.run_check(pair, PROMPTS, config, {0.0: _vec(pair), 0.7: hot}, None, say=lambda *_: None)
    assert "across" in check and len(seen) == 6   # 2 first runs at T = 0; 2 first and 2 carrying at T = 0.7
    ratio = (1 - 0.05) / (1 - START[0])
    for n, row in enumerate(check["runs"][2:]):
        (_, seed, none, _), (t, seed_across, memory, _) = seen[2 + 2 * n], seen[3 + 2 * n]
        first = seen[n][3]
        assert none is None and t == 0.7 and seed_across == seed
        assert memory.carried_from == "T=0" and memory.runs == 1
        assert memory.head.to_dict() == prompt_memory.rescaled(first.head, ratio).to_dict()
        assert memory.tail.to_dict() == prompt_memory.rescaled(first.tail, ratio).to_dict()
        assert row["across"]["carried_from"] == "T=0" and row["across"]["miss_ratio"] == pytest.approx(ratio)
    assert all("across" not in row for row in check["runs"][:2])
    assert not list(prompt_memory.path_for("x").parent.glob("*.json"))   # nothing stored
    text = bench_learning.format_check(check)
    assert text.count("carrying the run at T=0: predicted") == 2
    from engine.errors import UserError
    with pytest.raises(UserError, match="at least two"):
        bench_cmd._validate(_config(learning_check_across=True))
