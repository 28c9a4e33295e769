"""The scripts behind the answer-drift asset and its checks (issue 15): bench/acceptance_dynamics.py's
choice of the prior's weight against an opening, and bench/learning_check_reweigh.py's recovery of
a learning check's opening evidence (the measuring halves need the embedded pair; their output is
committed under bench/)."""
import importlib.util
import json
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dynamics, reweigh = _script("acceptance_dynamics"), _script("learning_check_reweigh")


def _answers(rates, rest_of, n=320, seed=0):
    """Rank sequences (1 = hit, 0 = miss) with opening miss rate r and rest miss rate rest_of(r)."""
    rng = random.Random(seed)
    return [[0 if rng.random() < r else 1 for _ in range(64)] +
            [0 if rng.random() < rest_of(r) else 1 for _ in range(n - 64)] for r in rates]


def test_the_prior_weight_follows_how_much_an_opening_tells_its_rest():
    assert dynamics.opening_counts([1, 1, 0, 1, 1, 1, 1]) == (1, 7)   # every position a trial
    # a chain drafting 3: [1 1 0] a step with 2 accepts and a miss; [1 1 1] a full step (its bonus is
    # position 6, no trial); [1] a last step cut by the answer's end
    assert dynamics.opening_counts([1, 1, 0, 1, 1, 1, 1, 1], 3) == (1, 7)
    rates = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.3, 0.2]
    # the rest keeps its opening's rate (halved): the opening tells all, the prior should count little
    telling = _answers(rates, lambda r: r / 2)
    # every rest has the domain's rate whatever the opening: the prior should count most
    silent = _answers(rates, lambda r: 0.15)
    assert dynamics.best_weight(telling) <= 16 < 256 <= dynamics.best_weight(silent)
    x, others = telling[0], telling[1:]
    ratio = dynamics.miss(others, 64) / dynamics.miss(others, 0, 64)
    assert dynamics.predicted_rest_miss(x, others, 0) == pytest.approx(ratio * dynamics.miss([x], 0, 64))
    assert dynamics.predicted_rest_miss(x, others, 1e9) == pytest.approx(ratio * dynamics.miss(others, 0, 128))


def test_reweighing_recovers_the_opening_and_predicts_as_the_learner_would():
    """A row made by learning.rest_posterior from known opening evidence at one weight, re-predicted
    at another, gives what rest_posterior gives at that weight (the inversion is the rule's)."""
    from engine import learning
    from engine.answer_drift import Drift
    source = ROOT / "assets/measured/acceptance" / "57a48fd8cc2df2f8.json"   # a shipped code vector
    start = json.loads(source.read_text())["probabilities"]
    opening = learning.Evidence([35.0], [28.0], 35.0)
    for weight, other, ratio in ((64.0, 32.0, 0.65), (128.0, 0.0, 0.84), (32.0, 256.0, 1.2)):
        post = learning.rest_posterior(start, opening, learning.Evidence(), Drift(ratio, weight))
        row = {"frozen_tree": {"nodes": 6, "parents": [-1, 0, 1, 2, 3, 4]}, "rest_over_opening": ratio,
               "rest_prior_weight": weight, "positions_behind_posterior": {"this_run": 35},
               "posterior": post, "observed_tokens_per_step": 4.0, "start_source": str(source)}
        want = learning.rest_posterior(start, opening, learning.Evidence(), Drift(ratio, other))[0]
        assert reweigh.reweighed(row, other) == pytest.approx(reweigh.chain_yield(want, 6) / 4.0 - 1, rel=1e-3)
        assert reweigh.reweighed(row, None) == pytest.approx(reweigh.chain_yield(post[0], 6) / 4.0 - 1)
    row["rest_prior_weight"], row["rest_over_opening"] = 0.0, 0.65   # a measured weight of 0 is a weight
    row["posterior"] = learning.rest_posterior(start, opening, learning.Evidence(), Drift(0.65, 0.0))
    want = learning.rest_posterior(start, opening, learning.Evidence(), Drift(0.65, 64.0))[0]
    assert reweigh.reweighed(row, 64.0) == pytest.approx(reweigh.chain_yield(want, 6) / 4.0 - 1, rel=1e-3)
    # a row that ran without a drift (the rest taken as the opening, pooled at learning.PRIOR_WEIGHT)
    plain = {**row, "rest_over_opening": None, "rest_prior_weight": None,
             "posterior": learning.rest_posterior(start, opening, learning.Evidence(), None)}
    want = learning.rest_posterior(start, opening, learning.Evidence(), Drift(0.65, 64.0))[0]
    assert reweigh.repredicted(plain, Drift(0.65, 64.0)) == pytest.approx(reweigh.chain_yield(want, 6) / 4.0 - 1,
                                                                          rel=1e-3)
    assert reweigh.reweighed(plain, 64.0) is None   # no ratio of its own to re-weigh
    # what it cannot recover: a posterior no opening gives, stored evidence in the start, not a chain
    assert reweigh.reweighed({**row, "posterior": [0.9999]}, 32.0) is None
    assert reweigh.reweighed({**row, "positions_behind_posterior": {"this_run": 35, "stored": 100}}, 32.0) is None
    assert reweigh.reweighed({**row, "frozen_tree": {"nodes": 3, "parents": [-1, 0, 0]}}, 32.0) is None


@pytest.mark.parametrize("check", ["learning-check-weight-avx512.json", "learning-check-drift-avx2.json"])
def test_the_committed_checks_rows_predict_their_chains_from_their_posteriors(check):
    """What the re-weighing of the committed checks rests on: each row's prediction is its frozen
    chain's yield at its stored posterior's rank 1."""
    runs = json.loads((ROOT / "bench" / check).read_text())["learning_check"]["runs"]
    for row in runs:
        assert reweigh.reweighed(row, None) == pytest.approx(row["error"], abs=1e-9), row["prompt"]


def test_the_shipped_drift_is_what_the_learner_gets():
    """Each assets/measured/answer-drift*.json as engine/answer_drift.py serves it to a run of the
    embedded pair with the draft kernels it was measured with: each domain's 320-token ratio with the
    weight the grid's least error picked; where a ratio is not applied, ratio 1 with the weight
    measured for that case."""
    from engine import answer_drift, learning
    kernels = []
    for path in answer_drift.shipped():
        obj = json.loads(path.read_text())
        kernels.append(obj["draft_kernels"])
        for name, entry in obj["domains"].items():
            rmse = {float(w): e for w, e in entry["prior_weight_loo_rmse"].items()}
            assert sorted(rmse) == [float(w) for w in dynamics.WEIGHTS]
            assert entry["prior_weight"] == min(rmse, key=rmse.get), name
            got = answer_drift.drift_for(obj["draft"], obj["target"], name, 320, draft_kernels=obj["draft_kernels"])
            at = entry["by_horizon"]["320"]
            assert at["applied"] == (at["ci95"][0] > 1 or at["ci95"][1] < 1)   # the stated rule, as written down
            want = answer_drift.Drift(pytest.approx(at["rest_over_opening"]), float(entry["prior_weight"]),
                                      obj["draft_kernels"])
            unratioed = {float(w): e for w, e in entry["prior_weight_ratio_not_applied_loo_rmse"].items()}
            assert entry["prior_weight_ratio_not_applied"] == min(unratioed, key=unratioed.get), name
            weight_only = answer_drift.Drift(1.0, float(entry["prior_weight_ratio_not_applied"]), obj["draft_kernels"])
            assert got == (want if at["applied"] else weight_only), name
            # the weight measured without the ratio beats the learner's default where it is used
            assert unratioed[entry["prior_weight_ratio_not_applied"]] < unratioed[learning.PRIOR_WEIGHT], name
            for h, e in entry["by_horizon"].items():   # a horizon whose ratio is not applied: its own weight only
                at_h = answer_drift.drift_for(obj["draft"], obj["target"], name, int(h), draft_kernels=obj["draft_kernels"])
                grid = {float(w): v for w, v in e["prior_weight_ratio_not_applied_loo_rmse"].items()}
                assert e["prior_weight_ratio_not_applied"] == min(grid, key=grid.get), (name, h)
                assert grid[e["prior_weight_ratio_not_applied"]] < grid[learning.PRIOR_WEIGHT], (name, h)
                if not e["applied"]:
                    assert at_h == answer_drift.Drift(1.0, float(e["prior_weight_ratio_not_applied"]),
                                                      obj["draft_kernels"]), (name, h)
                else:
                    assert at_h.ratio == pytest.approx(e["rest_over_opening"]), (name, h)
    assert kernels[0] == "fast" and len(set(kernels)) == len(kernels)   # the int8 draft's first; one per kernels


def test_ranks_files_say_which_draft_kernels_measured_them(tmp_path):
    legacy, new = tmp_path / "old.json", tmp_path / "new.json"
    legacy.write_text(json.dumps([{"domain": "code", "ranks": [1, 0]}]))
    new.write_text(json.dumps({"draft_kernels": "fast+nf4", "answers": [{"domain": "code", "ranks": [1]}]}))
    assert dynamics.load_ranks(legacy) == ([{"domain": "code", "ranks": [1, 0]}], "fast")   # int8, before the field
    assert dynamics.load_ranks(new) == ([{"domain": "code", "ranks": [1]}], "fast+nf4")


def test_a_drift_asset_re_predicts_the_check_it_was_used_in():
    """The check on the AVX512 EPYC ran with the int8 draft's asset (ratios 0.653 / 0.841, weights
    64 / 128): re-predicting its rows with that asset gives each row's own error, and with no drift
    (the rest taken as the opening) a different, lower one for the code chains."""
    from engine import answer_drift
    check = json.loads((ROOT / "bench" / "learning-check-weight-avx512.json").read_text())["learning_check"]
    for row in check["runs"]:
        drift = reweigh.drift_of_asset(answer_drift.SHIPPED, row, check)
        assert (drift.ratio, drift.weight) == (row["rest_over_opening"], row["rest_prior_weight"])
        assert reweigh.repredicted(row, drift) == pytest.approx(row["error"], abs=1e-9), row["prompt"]
        if row["kind"] == "code":
            assert reweigh.repredicted(row, None) < row["error"]   # the code rest is easier than its opening


@pytest.mark.parametrize("asset", ["answer-drift.json", "answer-drift-nf4.json"])
def test_each_shipped_drift_comes_from_its_ranks_file(asset, capsys):
    """The asset names the ranks it was analysed from; those ranks were measured with the draft
    kernels the asset claims, and re-analysing them gives the asset's ratios and weights."""
    obj = json.loads((ROOT / "assets/measured" / asset).read_text())
    ranks = ROOT / "bench" / obj["command"].split("--ranks ")[1].split()[0]
    data, kernels = dynamics.load_ranks(ranks)
    assert kernels == obj["draft_kernels"]
    again = dynamics.analyse_drift(data)
    capsys.readouterr()
    for name, entry in obj["domains"].items():
        assert again[name]["rest_over_opening"] == pytest.approx(entry["rest_over_opening"])
        assert again[name]["ci95"] == pytest.approx(entry["ci95"])
        assert again[name]["prior_weight"] == entry["prior_weight"]
        assert again[name]["prior_weight_ratio_not_applied"] == entry["prior_weight_ratio_not_applied"]
        for h, e in entry["by_horizon"].items():
            assert again[name]["by_horizon"][h]["prior_weight_ratio_not_applied"] == e["prior_weight_ratio_not_applied"]


def test_text_signals_and_their_nested_correction():
    signals = _script("answer_signals")
    assert signals.repeated_ngrams([1, 2, 3, 4], [1, 2, 3, 4, 9], 4) == pytest.approx(1 / 5)   # only 1 2 3 4 again
    assert signals.repeated_ngrams([], [5, 5, 5, 5, 5, 5], 2) == pytest.approx(4 / 6)
    assert signals.distinct([1, 1, 2, 3]) == 0.75
    rng = random.Random(3)
    rates = [rng.uniform(0.05, 0.3) for _ in range(12)]
    # the rest's miss rate is set by a feature the opening's misses do not show
    feature = [rng.uniform(0, 1) for _ in rates]
    rows = _answers(rates, lambda r: 0.0, seed=4)
    rows = [x[:64] + [0 if rng.random() < 0.05 + 0.3 * f else 1 for _ in range(256)] for x, f in zip(rows, feature)]
    base, corrected = signals.corrected_rmse(rows, feature, 64)
    assert corrected < 0.75 * base   # (0.33-0.63 of base over five seeds)
    noise = [rng.uniform(0, 1) for _ in rates]   # a feature that tells nothing gains nothing
    base, corrected = signals.corrected_rmse(rows, noise, 64)
    assert corrected > 0.85 * base   # (0.87-1.07 of base over five seeds)


def test_the_rests_own_steps_count_where_the_opening_misleads(capsys):
    """rest_weight_rmse (the weight's second use): where each rest runs at a rate its opening gets
    wrong, a light prior lets the rest's own steps correct it; where every answer runs at one rate,
    the prior already knows it and a heavy one beats the rest's noisy steps."""
    rates = [0.05 + 0.3 * i / 11 for i in range(12)]
    misled = _answers(rates, lambda r: 0.4 - r, seed=1)   # the rest's rate mirrors its opening's
    assert dynamics.rest_weight_rmse(misled, 16, True, None) < 0.8 * dynamics.rest_weight_rmse(misled, 512, True, None)
    alike = _answers([0.2] * 12, lambda r: r, seed=2)
    assert dynamics.rest_weight_rmse(alike, 512, False, None) < 0.8 * dynamics.rest_weight_rmse(alike, 0, False, None)


def test_the_across_temperature_reading_matches_the_committed_output(capsys):
    """bench/learning_check_across_t.py, whose output bench/predictions-and-learning.md quotes,
    reads the committed checks into the committed bench/learning-check-across-t.txt; prompts that
    froze other trees are left out."""
    across = _script("learning_check_across_t")
    committed = (ROOT / "bench" / "learning-check-across-t.txt").read_text()
    for check in ("learning-check-repeat-avx512.json", "learning-check-weight-avx512.json"):
        assert across.main(str(ROOT / "bench" / check)) == 0
        out = capsys.readouterr().out
        assert out in committed
    assert "code: correlation over 3 prompts (of 6; the others froze other trees)" in committed


sampled = _script("answer_drift_sampled")


def test_the_rank1_chance_is_what_the_engine_s_verifier_accepts():
    """bench/answer_drift_sampled.py's chance that a position's first drafted child is accepted,
    sum_x min(p, q) over the warped distributions, against the engine's own draw and verifier at
    that position; a chance taken at the wrong temperature or without the target's top-p misses."""
    import torch

    from engine import sampling
    torch.manual_seed(0)
    p_logits, q_logits = torch.randn(8) * 2, torch.randn(8) * 2
    T, top_p = 0.7, 0.8
    p, q = sampling.target_distribution(p_logits, T, top_p), sampling.draft_distribution(q_logits, T)
    gen = torch.Generator().manual_seed(1)
    draws = 20000
    hits = sum(sampling.verify_sequoia(p, q, sampling.draw_without_replacement(q, 1, gen), gen).accepted == 0
               for _ in range(draws))
    chance = sampled.rank1_chance(p_logits, q_logits, T, top_p)
    sd = (chance * (1 - chance) / draws) ** 0.5
    assert abs(hits / draws - chance) < 4 * sd
    for wrong in (sampled.rank1_chance(p_logits, q_logits, 1.0, top_p), sampled.rank1_chance(p_logits, q_logits, T)):
        assert abs(hits / draws - wrong) > 8 * sd


def test_the_sampled_drift_ratio_and_the_drawn_hits():
    """Expected misses pooled over positions, their rest/opening ratio with an interval over
    answers, and hits drawn at the chances' rates (what acceptance_dynamics reads as ranks)."""
    rows = [[0.8] * 64 + [0.9] * 256, [0.6] * 64 + [0.8] * 256]   # misses 0.2 -> 0.1 and 0.4 -> 0.2
    assert sampled.expected_miss(rows, 0, 64) == pytest.approx(0.3)
    ratio, lo, hi = sampled.ratio_with_interval(rows, 320)
    assert ratio == pytest.approx(0.5) and lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    uneven = [[0.8] * 64 + [0.9] * 256, [0.6] * 64 + [0.4] * 256]
    ratio, lo, hi = sampled.ratio_with_interval(uneven, 320)
    assert lo < ratio < hi and ratio == pytest.approx((0.1 + 0.6) / (0.2 + 0.4))
    drawn = sampled.drawn_ranks([{"domain": "code", "rank1_accept": [0.75] * 4000}], seed=3)
    assert drawn[0]["domain"] == "code" and set(drawn[0]["ranks"]) == {0, 1}
    assert abs(sum(drawn[0]["ranks"]) / 4000 - 0.75) < 4 * (0.75 * 0.25 / 4000) ** 0.5


@pytest.mark.parametrize("answers", ["answer-drift-sampled-t07-nf4", "answer-drift-sampled-t1-nf4"])
def test_the_sampled_drift_reading_matches_the_committed_output(answers, capsys):
    """The table of the drift at T = 0.7 and T = 1 (bench/predictions-and-learning.md) comes from
    the committed answers: the ratios and the mimicked check re-read from them print what the
    committed output says (the weights' part, about a minute, is left to the script)."""
    obj = json.loads((ROOT / "bench" / f"{answers}.json").read_text())
    committed = (ROOT / "bench" / f"{answers}.txt").read_text()
    sampled.ratios(obj)
    sampled.mimic(obj["answers"], obj["draft_kernels"], 20)
    out = capsys.readouterr().out
    for line in out.strip().splitlines():
        assert line in committed
    assert "h=320: rest/opening" in out and "the T = 0 drift runs get" in out


def test_the_drift_cut_at_eos_matches_the_committed_output(capsys):
    """bench/drift_eos.py: a rest cut after the answer's first EOS counts only the positions up to
    it; its reading of the committed answers is the committed output that
    bench/predictions-and-learning.md quotes."""
    eos = _script("drift_eos")
    answer = {"domain": "code", "ranks": [1] * 60 + [0] * 4 + [1, 0, 1, 0] + [0] * 8,
              "answer_ids": [5] * 67 + [eos.EOS_IDS[0]] + [7] * 8}
    assert eos.until_eos(answer) == 68
    assert eos.ratio([answer], cut=False) == (pytest.approx((10 / 12) / (4 / 64)), 12)
    assert eos.ratio([answer], cut=True) == (pytest.approx((2 / 4) / (4 / 64)), 4)
    sampled_answer = {"domain": "code", "rank1_accept": [0.9] * 64 + [0.8] * 4, "answer_ids": [5] * 68}
    assert eos.until_eos(sampled_answer) is None
    assert eos.ratio([sampled_answer], cut=True)[0] == pytest.approx(2.0)
    files = ("acceptance-ranks-320-nf4.json", "answer-drift-sampled-t07-nf4.json", "answer-drift-sampled-t1-nf4.json")
    assert eos.main(*(str(ROOT / "bench" / f) for f in files)) == 0
    assert capsys.readouterr().out == (ROOT / "bench" / "drift-eos.txt").read_text()


def test_the_mimicked_check_predicts_rank_1_as_the_learner_does():
    """acceptance_dynamics.rest_rank1_miss, which every mimic predicts with, is learning.rest_posterior's rank 1 (as a miss rate)
    for an opening of 64 trials and no rest evidence yet, with and without a ratio, and where the
    drifted miss would pass 1 (ranks 2.. low enough that the learner's cap on their sum stays off)."""
    from engine import learning
    from engine.answer_drift import Drift
    prior = [0.8, 0.05, 0.02]
    for misses, ratio, weight in ((10, 0.736, 128.0), (25, 1.0, 256.0), (3, 1.2, 32.0), (60, 3.0, 16.0)):
        opening = learning.Evidence([64.0, float(misses)], [64.0 - misses, 0.0], 64.0)
        expected = 1 - learning.rest_posterior(prior, opening, learning.Evidence(), Drift(ratio, weight))[0]
        assert dynamics.rest_rank1_miss(1 - prior[0], misses, 64, ratio, weight) == pytest.approx(expected)


def test_the_learning_checks_bias_reading_matches_the_committed_output(capsys):
    """bench/learning_check_bias.py, whose totals bench/predictions-and-learning.md and the README
    quote, reads the committed checks' first runs (a repeated or carried run and a running twin
    are left out) into the committed output."""
    bias = _script("learning_check_bias")
    check = {"learning_check": {"runs": [
        {"temperature": 0.0, "kind": "code", "error": 0.1}, {"temperature": 0.0, "kind": "code", "error": -0.3},
        {"temperature": 0.0, "kind": "code", "error": 0.5, "remembered": {"runs": 1}},
        {"temperature": 0.0, "kind": "code", "error": 0.5, "frozen": False},
        {"temperature": 0.7, "kind": "prose", "error": None}]}}
    assert [r["error"] for r in bias.first_runs(check)] == [0.1, -0.3]
    checks = sorted(str(p) for p in (ROOT / "bench").glob("learning-check-*.json"))
    assert len(checks) == 11   # the committed checks, the Xeon's with the fixed sampler (2026-12-05) the eleventh
    assert bias.main(*checks) == 0
    assert capsys.readouterr().out == (ROOT / "bench" / "learning-check-bias.txt").read_text()


def test_depth_survival_compares_each_level_with_the_positional_model(tmp_path, capsys):
    """bench/depth_survival.py: a 3-level chain at P(rank 1) = 0.5 reaches levels 1..3 with
    1, 0.5, 0.25 under the model; four steps yielding 1, 2, 3, 3 reach them with 1, 0.75, 0.5."""
    survival = _script("depth_survival")
    run = {"method": "chain", "key": "chain d=3", "nodes": 3, "depth": 3, "temperature": 0.0, "prompt": 0,
           "acceptance_domain": "code", "step_yields": [1, 2, 3, 3], "predicted_tokens_per_step": 1.75}
    report = {"acceptance": {"0": {"probabilities": [0.5], "per_prompt": {}}}, "config": {"max_depth": 4},
              "runs": [run]}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert survival.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "observed 2.25, predicted 1.75 (+28.6 %)" in out and "tree differs" not in out, out
    assert "observed  1.00 0.75 0.50" in out and "predicted 1.00 0.50 0.25" in out, out
    assert "observed  0.75 0.67" in out and "predicted 0.50 0.50" in out, out
    assert "own rank-1 rate 0.714 (the vector's 0.500)" in out, out  # 5 accepted, 2 misses


def test_prediction_ranges_widen_with_an_interval_over_prompts(tmp_path, capsys):
    """bench/prediction_ranges.py: a 3-level chain whose vector (rank 1 = 0.5 over 4 prompts that
    differ: 0.2, 0.8, 0.3, 0.7) predicts 1.75 tokens a step; its range over prompts holds the
    binomial one (a spread of prompts is wider than positions alone), and the observed 2.25 lies
    inside the wider range only."""
    ranges = _script("prediction_ranges")
    from engine import intervals
    rows = [[100.0, 20.0, 80.0], [100.0, 80.0, 20.0], [100.0, 30.0, 70.0], [100.0, 70.0, 30.0]]
    ci, basis = intervals.vector_ci([0.5], 400, rows)
    vec = {"probabilities": [0.5], "none": 0.5, "positions": 400, "ci95": ci, "draft": "d", "target": "t",
           "sampler": "greedy", "temperature": 0.0, "top_p": 1.0, "width": 1, "prompts": 4, "prompt_counts": rows,
           "interval": basis}
    (tmp_path / "vec.json").write_text(json.dumps(vec))
    run = {"method": "chain", "nodes": 3, "depth": 3, "temperature": 0.0, "prompt": 0, "kind": "code",
           "step_tokens": 9, "tokens": 9, "steps": 4}
    report = {"acceptance": {"0": {"source": "/elsewhere/vec.json", "per_prompt": {}}},
              "results": [{"method": "chain", "label": "chain d=3", "temperature": 0.0, "nodes": 3, "depth": 3}],
              "runs": [run]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert ranges.main([str(tmp_path / "report.json"), "--vectors", str(tmp_path),
                        "--json", str(tmp_path / "out.json")]) == 0
    got = json.loads((tmp_path / "out.json").read_text())[0]
    assert got["predicted"] == pytest.approx(1.75) and got["observed"] == pytest.approx(2.25)
    low, high = got["over_positions"]
    wide_low, wide_high = got["over_prompts"]
    assert wide_low < low < 1.75 < high < 2.25 < wide_high, got
    # one prompt of its kind in the lane: the spread of a single new prompt widens it further
    these = got["for_these_prompts"]
    assert these[0] <= wide_low and these[1] >= wide_high and these != got["over_prompts"], got
    assert "(OUT)" in capsys.readouterr().out
    # two reports: the count over their lanes (here the same report twice)
    assert ranges.main([str(tmp_path / "report.json")] * 2 + ["--vectors", str(tmp_path)]) == 0
    assert ("T=0: 2 lanes; within ±10 % of the prediction 0; inside the range over positions 0, over prompts 2, "
            "for these prompts 2" in capsys.readouterr().out)


def test_the_opening_rate_what_if_scales_rank_one_misses_and_keeps_the_other_ranks_shares():
    whatif = _script("opening_rate_whatif")
    p = [0.8, 0.1, 0.05]
    got = whatif.with_opening_rate(p, 1.5)
    assert got[0] == pytest.approx(0.7) and got[1] / got[2] == pytest.approx(2.0)
    assert got[1] == pytest.approx(0.15)   # rank 2 keeps half of the misses, as before
    assert whatif.with_opening_rate(p, 1.0) == pytest.approx(p)
    assert whatif.opening_ratio("fast", "code", 64) > 1 > whatif.opening_ratio("fast", "prose", 64)
    assert whatif.opening_ratio("fast", "code", 96) == 1.0   # a run past the opening: the vector's span
