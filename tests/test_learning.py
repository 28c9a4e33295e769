"""Learning the acceptance vector while decoding (engine/learning.py), re-planning between steps
(planning.Replanner), and interpolated vectors (engine/interpolation.py)."""
import json
import random
from types import SimpleNamespace

import pytest

from engine import interpolation, learning, planning, profiler
from engine.decoding import Decoder
from engine.models import encode_prompt
from engine.settings import Settings
from tests.tiny import tiny_pair


def _event(parents, outcomes):
    """A StepEvent-like record: outcomes maps a visited node to the accepted child rank (or None:
    all its children rejected). The walk follows accepted children from the root."""
    kids = {}
    for i, p in enumerate(parents):
        if p >= 0:
            kids.setdefault(p, []).append(i)
    status, path, ranks, v = {0: "root"}, [0], [], 0
    while True:
        children = kids.get(v, [])
        r = outcomes.get(v)
        for k, c in enumerate(children, 1):
            if r is None or k < r:
                status[c] = "rejected"
            elif k == r:
                status[c] = "accepted"
        if r is None:
            break
        v = children[r - 1]
        path.append(v)
        ranks.append(r)
    nodes = [SimpleNamespace(index=i, status=status.get(i, "unreached")) for i in range(len(parents))]
    nodes.append(SimpleNamespace(index=len(parents), status="bonus"))
    return SimpleNamespace(tree_parents=list(parents), nodes=nodes, accepted_path=path, accepted_ranks=ranks,
                           new_token_ids=[0] * len(path))


def test_censored_counts():
    # root: 3 children, rank 2 accepted; that child has 1 child, rejected
    ev = learning.step_evidence(_event([-1, 0, 0, 0, 2], {0: 2, 2: None}))
    assert ev.trials == [2, 1, 1] and ev.accepts == [0, 1, 0] and ev.nodes == 2
    # "none of c" is a rejection of ranks 1..c only; ranks above c get no trial
    ev = learning.step_evidence(_event([-1, 0], {0: None}))
    assert ev.trials == [1] and ev.accepts == [0]


def test_pooling_rule():
    ev = learning.Evidence([10, 4], [6, 1], 10)
    post = learning.pooled([0.5, 0.2], ev, weight=32)
    assert post == pytest.approx([(32 * 0.5 + 6) / 42, (32 * 0.2 + 1) / 36])
    assert sum(learning.pooled([0.9, 0.9], learning.Evidence())) == pytest.approx(learning.MAX_TOTAL)


def _simulate(truth, steps, rng):
    """Trees whose nodes have 1..4 children; outcomes drawn from the positional model."""
    events = []
    for _ in range(steps):
        c = rng.randint(1, 4)
        parents = [-1] + [0] * c
        u, acc, r = rng.random(), 0.0, None
        for k in range(c):
            acc += truth[k]
            if u < acc:
                r = k + 1
                break
        events.append(_event(parents, {0: r} if r else {0: None}))
    return events


def test_censored_estimate_recovers_the_vector_and_a_naive_one_does_not(monkeypatch):
    truth = [0.5, 0.2, 0.1, 0.05]
    events = _simulate(truth, 20000, random.Random(0))
    ev = learning.events_evidence(events)
    assert ev.observed() == pytest.approx(truth, abs=0.02)
    # mutant: every decided node counted as a trial of every rank (no censoring): biased low
    def naive(event):
        out = learning.Evidence()
        r = event.accepted_ranks[0] if event.accepted_ranks else None
        out.add_node(4, r)
        return out
    monkeypatch.setattr(learning, "step_evidence", naive)
    wrong = learning.events_evidence(events).observed()
    assert wrong != pytest.approx(truth, abs=0.02)


def test_learner_moves_toward_the_evidence_and_asks_to_replan():
    learner = learning.Learner([0.2, 0.1, 0.05, 0.02])
    for ev in _simulate([0.8, 0.1, 0.05, 0.02], 200, random.Random(1)):
        learner.observe(ev)
    assert learner.posterior[0] > 0.7 and learner.should_replan()
    state = learner.state()
    assert state["prior"][0] == 0.2 and state["observed"][0][1] == 200


def test_each_step_tree_is_planned_from_earlier_steps_only(tmp_path, monkeypatch):
    """With learning, the tree of step t is the DP tree for the posterior of steps < t."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    settings = Settings(temperature=0.0, max_new_tokens=40, ignore_eos=True)
    start = [0.1, 0.05, 0.02, 0.01]  # far off: the posterior moves, so the tree changes
    vec = profiler.AcceptanceVector(start, 0.82, 10, [0.1] * 4, pair.draft_name, pair.target_name, "greedy",
                                    0.0, 1.0, 4, 1, "x")
    spec = planning.MethodSpec("sequoia", 10, 5)
    tree = planning.plan_from_vector(spec, start)
    result = planning.PlanResult(spec, planning.methods_mod.sequoia(tree), None, vec, "", True)
    replan = planning.Replanner(pair, result, settings, learn=True)
    events = []
    for ev in Decoder(pair, result.method, settings, plan=replan).run(encode_prompt(pair, "hello world", False)):
        replan.observe(ev)
        events.append(ev)
    steps = [e for e in events if e.nodes]
    assert len({tuple(e.tree_parents) for e in steps}) > 1  # it did re-plan
    planned_with = start
    for t, e in enumerate(steps):
        post = learning.pooled(start, learning.events_evidence(steps[:t]))
        if t and any(abs(a - b) > learning.MIN_CHANGE for a, b in zip(post, planned_with)):
            planned_with = post
        assert tuple(e.tree_parents) == tuple(planning.plan_from_vector(spec, planned_with).parents)
    stored = replan.finish()
    assert stored.runs == 1 and stored.nodes == learning.events_evidence(steps).nodes
    assert learning.load(planning.learning_key(pair, settings)).nodes == stored.nodes


def _vec(T, top_p, probs, sampler="sequoia"):
    return profiler.AcceptanceVector(probs, 1 - sum(probs), 100, [0.01] * len(probs), "d", "t", sampler, T, top_p,
                                     len(probs), 3, "2026", source=f"m{T}")


def test_interpolation_between_measured_temperatures():
    pair = SimpleNamespace(draft_name="d", target_name="t", cpu_kernels={})
    vecs = [_vec(0.0, 1.0, [0.8, 0.1], "greedy"), _vec(0.7, 1.0, [0.5, 0.2]), _vec(1.0, 1.0, [0.4, 0.2])]
    v = interpolation.interpolated_vector(pair, 0.35, 1.0, vectors=vecs)
    assert v.probabilities == pytest.approx([0.65, 0.15]) and interpolation.is_interpolated(v)
    assert v.temperature == 0.35 and "interpolated" in v.source
    v = interpolation.interpolated_vector(pair, 0.85, 1.0, vectors=vecs)
    assert v.probabilities == pytest.approx([0.45, 0.2])
    # top-p between two measured top-p values at the same T
    vecs.append(_vec(0.7, 0.8, [0.7, 0.1]))
    v = interpolation.interpolated_vector(pair, 0.7, 0.9, vectors=vecs)
    assert v.probabilities == pytest.approx([0.6, 0.15])
    # outside every measured range: nothing to interpolate (planning then says "nearest")
    assert interpolation.interpolated_vector(pair, 1.5, 1.0, vectors=vecs[:3]) is None


def _pair_measured_at(*vectors):
    """The tiny pair, its cache (SEQUOIA_CACHE) holding these (temperature, probabilities) vectors."""
    pair = tiny_pair("llama")
    for T, probs in vectors:
        v = _vec(T, 1.0, probs)
        v.draft, v.target = pair.draft_name, pair.target_name
        profiler.save_acceptance(pair, v)
    return pair


def _pair_measured_at_half_and_one(tmp_path, monkeypatch):
    """A tiny pair whose (empty, private) cache holds vectors measured at T = 0.5 and T = 1.0."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    return _pair_measured_at((0.5, [0.6, 0.2]), (1.0, [0.4, 0.2]))


def test_quick_plan_uses_an_interpolated_vector_labelled_so(tmp_path, monkeypatch):
    pair = _pair_measured_at_half_and_one(tmp_path, monkeypatch)
    plan = planning.build_plan(pair, planning.MethodSpec("sequoia", 8, 4), Settings(temperature=0.75),
                               measure=False, allow_nearest=True)
    assert not plan.exact and "INTERPOLATED" in plan.acceptance_note
    assert plan.acceptance.probabilities == pytest.approx([0.5, 0.2])
    assert plan.summary()["acceptance_interpolated"]


def test_a_chain_is_predicted_from_the_vector_a_sequoia_plan_there_uses_and_never_measured_for(tmp_path,
                                                                                                monkeypatch):
    """A chain at settings with no vector of their own said "no prediction" (Live card, race table)
    where a Sequoia plan at the same settings used an interpolated or nearest vector; it gets that
    vector, labelled so, and never waits for a measurement; SpecInfer's sampler has none."""
    pair = _pair_measured_at_half_and_one(tmp_path, monkeypatch)
    monkeypatch.setattr(profiler, "measure_acceptance", lambda *a, **k: pytest.fail("measured for a chain"))
    chain = planning.MethodSpec("chain", 4, 4)
    between = planning.build_plan(pair, chain, Settings(temperature=0.75), measure=True)
    assert "INTERPOLATED" in between.acceptance_note and between.acceptance.probabilities == pytest.approx([0.5, 0.2])
    beyond = planning.build_plan(pair, chain, Settings(temperature=1.6), measure=True)
    assert "nearest" in beyond.acceptance_note and beyond.acceptance.temperature == 1.0
    assert beyond.summary()["expected_tokens"] == pytest.approx(1 + 0.4 + 0.4 ** 2 + 0.4 ** 3)
    specinfer = planning.build_plan(pair, planning.MethodSpec("specinfer", 9, 3, width=4), Settings(temperature=0.75),
                                    measure=True)
    assert specinfer.acceptance is None and "no prediction" in specinfer.acceptance_note

def test_a_learning_run_outside_the_measured_range_starts_at_once_from_the_nearest(tmp_path, monkeypatch):
    """Learning on (the app's and CLI's default): a temperature beyond every measured one plans from
    the nearest vector, labelled so, instead of blocking on a measurement; the run refines it."""
    pair = _pair_measured_at_half_and_one(tmp_path, monkeypatch)

    def no_measuring(*a, **k):
        raise AssertionError("measured although learning could start from a measured vector")

    monkeypatch.setattr(profiler, "measure_acceptance", no_measuring)
    plan = planning.build_plan(pair, planning.MethodSpec("sequoia", 8, 4), Settings(temperature=1.6),
                               measure=True, learn=True)
    assert not plan.exact and "nearest" in plan.acceptance_note and plan.acceptance.temperature == 1.0
    with pytest.raises(AssertionError, match="measured although"):  # learning off: it measures
        planning.build_plan(pair, planning.MethodSpec("sequoia", 8, 4), Settings(temperature=1.6),
                            measure=True, learn=False)


def test_the_nearest_vector_note_names_the_top_k_that_differs(tmp_path, monkeypatch):
    """Top-k 1 at T = 0.7 with only a top-k-off vector at T = 0.7 measured: the note said "no vector
    measured at T=0.7, top-p=1: using the nearest measured one (T=0.7, top-p=1; ...)", naming the
    same settings twice and never the top-k that differs."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = _pair_measured_at((0.7, [0.6, 0.2]))
    plan = planning.build_plan(pair, planning.MethodSpec("sequoia", 8, 4), Settings(temperature=0.7, top_k=1),
                               measure=False, allow_nearest=True)
    assert not plan.exact and plan.acceptance_note.startswith(
        "no vector measured at T=0.7, top-p=1, top-k=1: using the nearest measured one (T=0.7, top-p=1;"), \
        plan.acceptance_note
    assert planning.settings_words(0, 1, 5) == "T=0, top-p=1"   # top-k does nothing at T = 0


# ---------------------------------------------------------------- the rest of an answer (answer_drift)
def test_drift_scales_the_miss_mass():
    assert learning.drifted([0.8, 0.1, 0.05], 1.0) == pytest.approx([0.8, 0.1, 0.05])
    assert learning.drifted([0.8, 0.1, 0.05], 0.5) == pytest.approx([0.9, 0.05, 0.025])
    up = learning.drifted([0.8, 0.1, 0.05], 1.5)   # a harder rest: rank 1 misses more often
    assert up == pytest.approx([0.7, 0.15, 0.075])
    # a miss mass past 1 is clipped: rank 1 never accepts, the others keep their shape
    assert learning.drifted([0.1, 0.5, 0.3], 1.5) == pytest.approx([0.0, 0.5 / 0.9, 0.3 / 0.9])


def test_rest_posterior_rule():
    from engine.answer_drift import Drift
    prior, opening = [0.7, 0.1], learning.Evidence([40, 10], [30, 2], 40)
    start = learning.drifted(learning.pooled(prior, opening, 32), 0.5)
    # no evidence after the opening: the opening's posterior, drifted
    assert learning.rest_posterior(prior, opening, learning.Evidence(), Drift(0.5, None), 32) == pytest.approx(start)
    # the rest's own evidence updates it, against a prior as strong as what backs the opening
    rest = learning.Evidence([20, 4], [19, 1], 20)
    assert learning.rest_posterior(prior, opening, rest, Drift(0.5, None), 32) == pytest.approx(
        [(72 * start[0] + 19) / 92, (42 * start[1] + 1) / 46])
    # a measured weight replaces the default one, for the opening's pooling and for the rest's prior
    heavy = learning.drifted(learning.pooled(prior, opening, 128), 0.5)
    assert learning.rest_posterior(prior, opening, rest, Drift(0.5, 128.0), 32) == pytest.approx(
        [(168 * heavy[0] + 19) / 188, (138 * heavy[1] + 1) / 142])
    assert heavy[0] < start[0]   # this opening (30 of 40) beat the prior (0.7): a heavier prior holds it back


def test_learner_predicts_the_rest_of_the_answer_past_the_opening():
    """With a drift the posterior switches to the rest's at `opening` tokens; without, it stays pooled."""
    from engine.answer_drift import Drift
    rng = random.Random(3)
    opening = _simulate([0.6, 0.1, 0.05, 0.02], 30, rng)
    later = _simulate([0.9, 0.05, 0.02, 0.01], 30, rng)
    prior = [0.7, 0.1, 0.05, 0.02]
    plain, drift = learning.Learner(prior), learning.Learner(prior, drift=Drift(0.4, None), opening=10 ** 6)
    for ev in opening:
        plain.observe(ev)
        drift.observe(ev)
    assert drift.posterior == pytest.approx(plain.posterior) and not drift.past_opening
    drift.opening = drift.tokens   # the opening ends here
    head = learning.events_evidence(opening)
    assert drift.past_opening and drift.state()["drift"]["applied"]
    assert drift.posterior == pytest.approx(learning.rest_posterior(prior, head, learning.Evidence(), Drift(0.4, None)))
    for ev in later:
        plain.observe(ev)
        drift.observe(ev)
    assert drift.head.nodes == head.nodes and drift.tail.nodes == learning.events_evidence(later).nodes
    assert drift.run.nodes == head.nodes + drift.tail.nodes   # all of it is stored, as before
    assert drift.posterior == pytest.approx(
        learning.rest_posterior(prior, head, learning.events_evidence(later), Drift(0.4, None)))
    assert plain.posterior == pytest.approx(learning.pooled(prior, learning.events_evidence(opening + later)))
    assert plain.state()["drift"] is None


def test_a_step_that_starts_in_the_opening_counts_for_the_opening(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    two = _event([-1, 0, 1], {0: 1, 1: 1})       # accepts 2 nodes: 3 tokens with the bonus
    one = _event([-1, 0], {0: None})             # accepts none: 1 token
    from engine.answer_drift import Drift
    learner = learning.Learner([0.7, 0.1], key="k", drift=Drift(0.5, None), opening=4)
    for ev in (two, two, one):                   # the second step starts at token 3 and ends at 6
        learner.observe(ev)
    assert learner.tokens == 7 and learner.head.nodes == 4 and learner.tail.nodes == 1
    # with a drift only the opening is stored (the next start is an opening rate)
    assert learner.record().nodes == 4
    assert learning.Learner([0.7, 0.1], key="j").record() is not None


def test_answer_drift_takes_the_entry_of_the_runs_horizon(tmp_path):
    from engine import answer_drift
    path = tmp_path / "drift.json"
    path.write_text('{"draft": "d", "target": "t", "domains": {"code": {"rest_over_opening": 0.65, '
                    '"ci95": [0.5, 0.8], "prior_weight": 64, '
                    '"by_horizon": {"128": {"rest_over_opening": 0.8, "ci95": [0.6, 1.03]},'
                    '"192": {"rest_over_opening": 0.7, "ci95": [0.6, 0.9]},'
                    '"320": {"rest_over_opening": 0.65, "ci95": [0.5, 0.8]}}}}}')
    got = {h: answer_drift.drift_for("d", "t", "code", h, path=path) for h in (None, 64, 100, 128, 150, 320, 999)}
    assert {h: d and d.ratio for h, d in got.items()} == \
        {None: 0.65, 64: None, 100: None, 128: None, 150: 0.7, 320: 0.65, 999: 0.65}
    assert {d.weight for d in got.values() if d} == {64.0}   # one weight per domain, whatever the horizon
    # measured for a 64-token opening: a learner with another boundary gets none
    assert answer_drift.drift_for("d", "t", "code", 320, opening=64, path=path).ratio == 0.65
    assert answer_drift.drift_for("d", "t", "code", 320, opening=32, path=path) is None
    for bad in ('{"rest_over_opening": -1, "ci95": [0.5, 0.8]}', '{"rest_over_opening": 0.5, "ci95": null}',
                '{"ci95": [0.5, 0.8]}', '[1]'):
        path = tmp_path / f"bad{len(bad)}.json"
        path.write_text('{"draft": "d", "target": "t", "domains": {"code": %s}}' % bad)
        assert answer_drift.drift_for("d", "t", "code", path=path) is None
    for bad_weight in ('-1', '"64"', 'null'):   # an insane weight: the learner's default
        path = tmp_path / f"w{len(bad_weight)}.json"
        path.write_text('{"draft": "d", "target": "t", "domains": {"code": {"rest_over_opening": 0.8, '
                        '"ci95": [0.7, 0.9], "prior_weight": %s}}}' % bad_weight)
        assert answer_drift.drift_for("d", "t", "code", path=path) == answer_drift.Drift(0.8, None)


def test_answer_drift_applies_only_where_measured_and_clear(tmp_path):
    from engine import answer_drift
    path = tmp_path / "drift.json"
    path.write_text('{"draft": "d", "target": "t", "domains": {'
                    '"code": {"rest_over_opening": 0.8, "ci95": [0.7, 0.9]},'
                    '"prose": {"rest_over_opening": 0.9, "ci95": [0.7, 1.1]}}}')
    assert answer_drift.drift_for("d", "t", "code", path=path) == answer_drift.Drift(0.8, None)
    assert answer_drift.drift_for("d", "t", "prose", path=path) is None      # interval holds 1: not applied
    assert answer_drift.drift_for("d", "t", "", path=path) is None           # domain unsure: pooled vector
    assert answer_drift.drift_for("d", "other", "code", path=path) is None   # another pair
    assert answer_drift.drift_for("d", "t", "code", path=tmp_path / "missing.json") is None
    # with a weight measured for it, a domain whose ratio is not applied gets that weight, ratio 1
    path = tmp_path / "weight-only.json"
    path.write_text('{"draft": "d", "target": "t", "domains": {'
                    '"prose": {"rest_over_opening": 0.9, "ci95": [0.7, 1.1], "prior_weight": 256, '
                    '"prior_weight_ratio_not_applied": 128}}}')
    assert answer_drift.drift_for("d", "t", "prose", 320, path=path) == answer_drift.Drift(1.0, 128.0)
    assert answer_drift.drift_for("d", "t", "prose", 64, path=path) is None   # no rest
    assert answer_drift.drift_for("d", "t", "", path=path) is None


def test_a_weight_only_drift_pools_the_whole_run_with_the_measured_weight():
    """Drift(1.0, w): the rest is predicted at the opening's rate, the prior worth w observations
    instead of the learner's default (what pooling the whole run with w gives)."""
    from engine.answer_drift import Drift
    prior = [0.7, 0.1, 0.05]
    head = learning.Evidence([40.0, 12.0, 3.0], [26.0, 4.0, 1.0], 40.0)
    rest = learning.Evidence([30.0, 6.0], [25.0, 2.0], 30.0)
    got = learning.rest_posterior(prior, head, rest, Drift(1.0, 128.0))
    assert got == pytest.approx(learning.pooled(prior, head.add(rest), 128.0))
    assert got != pytest.approx(learning.rest_posterior(prior, head, rest, None))   # the default 32 differs
    learner = learning.Learner(prior, drift=Drift(1.0, 128.0), opening=0)
    assert learner.state()["weight"] == 128.0 and learner.state()["drift"]["ratio"] == 1.0


def test_a_weight_only_drift_stores_the_opening_only(tmp_path, monkeypatch):
    """Like any run with a drift (the next run's start is an opening rate)."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    from engine.answer_drift import Drift
    two = _event([-1, 0, 1], {0: 1, 1: 1})       # accepts 2 nodes: 3 tokens with the bonus
    learner = learning.Learner([0.7, 0.1], key="w", drift=Drift(1.0, 128.0), opening=4)
    for ev in (two, two, two):                   # the third step starts at token 6: the rest's
        learner.observe(ev)
    assert learner.head.nodes == 4 and learner.tail.nodes == 2
    assert learner.record().nodes == 4



def test_a_run_takes_the_drift_measured_with_its_own_draft_kernels(tmp_path, monkeypatch):
    """One asset per draft kernels measured; a run gets its own kernels' asset, else the first
    shipped one for the pair (SHIPPED: the int8 draft's), never another pair's."""
    from engine import answer_drift

    def asset(name, kernels, ratio, draft="d"):
        (tmp_path / name).write_text(json.dumps({"draft": draft, "target": "t", "draft_kernels": kernels, "domains": {
            "code": {"rest_over_opening": ratio, "ci95": [ratio - 0.1, ratio + 0.1], "prior_weight": 64}}}))
    asset("answer-drift.json", "fast", 0.65)
    asset("answer-drift-nf4.json", "fast+nf4", 0.8)
    asset("answer-drift-other.json", "default", 0.5, draft="other")
    monkeypatch.setattr(answer_drift, "MEASURED", tmp_path)
    monkeypatch.setattr(answer_drift, "SHIPPED", tmp_path / "answer-drift.json")
    assert answer_drift.shipped()[0] == tmp_path / "answer-drift.json" and len(answer_drift.shipped()) == 3
    assert answer_drift.drift_for("d", "t", "code", draft_kernels="fast+nf4") == answer_drift.Drift(0.8, 64.0, "fast+nf4")
    assert answer_drift.drift_for("d", "t", "code", draft_kernels="fast") == answer_drift.Drift(0.65, 64.0, "fast")
    # a pruned head ('+head<n>') keeps the numerics' asset
    assert answer_drift.drift_for("d", "t", "code", draft_kernels="fast+nf4+head32768").ratio == 0.8
    # kernels nobody measured (here the other pair's): the pair's first shipped asset, which says what it was
    assert answer_drift.drift_for("d", "t", "code", draft_kernels="default") == answer_drift.Drift(0.65, 64.0, "fast")
    assert answer_drift.drift_for("d", "t", "code") == answer_drift.Drift(0.65, 64.0, "fast")
    assert answer_drift.drift_for("other", "t", "code", draft_kernels="fast").ratio == 0.5
    assert answer_drift.drift_for("nobody", "t", "code", draft_kernels="fast") is None
    learner = learning.Learner([0.7, 0.1], drift=answer_drift.Drift(0.8, 64.0, "fast+nf4"))
    assert learner.state()["drift"]["draft_kernels"] == "fast+nf4"


def test_the_learners_state_reports_the_weight_in_use():
    from engine.answer_drift import Drift
    learner = learning.Learner([0.7, 0.1], drift=Drift(0.5, 96.0), opening=4)
    assert learner.state()["weight"] == learning.PRIOR_WEIGHT   # the opening pools as always
    learner.observe(_event([-1, 0, 1, 2, 3], {0: 1, 1: 1, 2: 1, 3: 1}))
    assert learner.past_opening and learner.state()["weight"] == 96.0


def test_evidence_stored_before_the_rest_was_kept_out_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    stored = learning.record("k", learning.Evidence([10.0], [8.0], 10.0))
    assert learning.load("k").nodes == stored.nodes == 10
    path = learning.learned_path("k")
    obj = json.loads(path.read_text())
    assert obj["format"] == learning.STORED_FORMAT
    del obj["format"]   # as files of earlier versions: whole runs, rests included
    path.write_text(json.dumps(obj))
    assert learning.load("k").nodes == 0
    assert learning.record("k", learning.Evidence([5.0], [4.0], 5.0)).nodes == 5   # starts afresh
