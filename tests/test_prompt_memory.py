"""What earlier runs of the same prompt observed (engine/prompt_memory.py) and how a run uses it."""
import json
import random

import pytest

from engine import learning, paths, planning, profiler, prompt_memory
from engine.answer_drift import Drift
from engine.decoding import Decoder
from engine.models import encode_prompt
from engine.settings import Settings
from tests.test_learning import _event, _pair_measured_at, _simulate
from tests.tiny import tiny_pair


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    return tmp_path


def test_a_prompt_is_named_by_its_tokens():
    assert prompt_memory.digest([1, 2, 3]) == prompt_memory.digest([1, 2, 3])
    assert prompt_memory.digest([1, 2, 3]) != prompt_memory.digest([1, 23])
    assert prompt_memory.digest([12, 3]) != prompt_memory.digest([1, 23])


def test_runs_of_a_prompt_add_up_and_stay_apart_from_other_prompts(cache):
    head, tail = learning.Evidence([10, 4], [6, 1], 10), learning.Evidence([20], [18], 20)
    assert prompt_memory.recall("k", "p") is None
    prompt_memory.remember("k", "p", head, tail)
    got = prompt_memory.remember("k", "p", head, tail)
    assert got.runs == 2 and got.head.trials == [20, 8] and got.tail.accepts == [36] and got.positions == 60
    back = prompt_memory.recall("k", "p")
    assert back.head.to_dict() == got.head.to_dict() and back.tail.to_dict() == got.tail.to_dict()
    assert prompt_memory.recall("k", "q") is None and prompt_memory.recall("other key", "p") is None
    assert prompt_memory.remember("k", "q", learning.Evidence(), learning.Evidence()) is None   # nothing observed


def test_memory_is_capped_and_forgets_the_least_recently_run_prompt(cache, monkeypatch):
    monkeypatch.setattr(prompt_memory, "MAX_PROMPTS", 2)
    big = learning.Evidence([3000], [1500], 3000)
    got = prompt_memory.remember("k", "a", big, learning.Evidence())
    assert got.head.nodes == prompt_memory.CAP and got.head.accepts[0] == pytest.approx(prompt_memory.CAP / 2)
    clock = iter(range(100, 200))
    monkeypatch.setattr(prompt_memory.time, "time", lambda: next(clock))
    for name in ("a", "b", "a", "c"):
        prompt_memory.remember("k", name, learning.Evidence([1], [1], 1), learning.Evidence())
    assert prompt_memory.recall("k", "b") is None            # run least recently
    assert prompt_memory.recall("k", "a").runs == 3 and prompt_memory.recall("k", "c").runs == 1


def test_an_unreadable_or_unwritable_memory_changes_nothing_else(cache, monkeypatch):
    path = prompt_memory.path_for("k")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert prompt_memory.recall("k", "p") is None
    # set aside, not overwritten unseen
    assert prompt_memory.remember("k", "p", learning.Evidence([1], [1], 1), learning.Evidence()).runs == 1
    assert path.with_suffix(".json.corrupt").read_text() == "{not json"
    # entries no run could have stored are not recalled (they would break the posterior)
    for bad in ({"head": "x"}, {"head": {"trials": [3, 1], "accepts": [1]}, "tail": {}, "runs": 1},
                {"head": {"trials": [3], "accepts": [5], "nodes": 3}, "tail": {}, "runs": 1},
                {"head": {"trials": [float("nan")], "accepts": [0], "nodes": 1}, "tail": {}, "runs": 1}):
        path.write_text(json.dumps({"prompts": {"p": bad, "q": "not an entry"}}))
        assert prompt_memory.recall("k", "p") is None and prompt_memory.recall("k", "q") is None
    got = prompt_memory.remember("k", "p", learning.Evidence([1], [1], 1), learning.Evidence())
    assert got.runs == 1 and prompt_memory.recall("k", "p").runs == 1

    def refuse(*a, **k):
        raise OSError("read-only")
    monkeypatch.setattr(paths.tempfile, "mkstemp", refuse)
    got = prompt_memory.remember("k", "p", learning.Evidence([1], [1], 1), learning.Evidence())
    assert got.runs == 2 and prompt_memory.recall("k", "p").runs == 1   # the run goes on; nothing is stored
    assert not list(path.parent.glob("*.tmp"))


def test_a_memory_that_cannot_be_kept_costs_the_run_nothing_else(cache, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("disk on fire")
    monkeypatch.setattr(prompt_memory, "remember", broken)
    learner = learning.Learner([0.7, 0.1], key="k", prompt_digest="p")
    learner.observe(_event([-1, 0], {0: 1}))
    assert learner.record().nodes == 1 and learning.load("k").nodes == 1   # the pooled store still got it


def test_the_learner_counts_a_prompts_rests_as_evidence_of_this_rest():
    """The stated rule (learning.Learner): memory.head joins the opening, memory.tail the rest."""
    rng = random.Random(5)
    prior, drift = [0.7, 0.1, 0.05, 0.02], Drift(1.0, 128.0)
    memory = prompt_memory.Remembered(learning.events_evidence(_simulate([0.5, 0.1, 0.05, 0.02], 30, rng)),
                                      learning.events_evidence(_simulate([0.95, 0.02, 0.01, 0.01], 200, rng)), 1)
    opening = _simulate([0.5, 0.1, 0.05, 0.02], 30, rng)
    with_memory = learning.Learner(prior, drift=drift, opening=10 ** 6, memory=memory)
    without = learning.Learner(prior, drift=drift, opening=10 ** 6)
    for ev in opening:
        with_memory.observe(ev)
        without.observe(ev)
    head = learning.events_evidence(opening)
    assert with_memory.posterior == pytest.approx(learning.pooled(prior, memory.head.add(head)))
    # the chart counts the remembered positions the posterior counts: the openings in the opening
    assert with_memory.state()["remembered"] == {"runs": 1, "positions": memory.head.nodes, "carried_from": ""}
    with_memory.opening = without.opening = with_memory.tokens   # the opening ends here
    assert with_memory.posterior == pytest.approx(learning.rest_posterior(prior, head, memory.tail, drift, 128.0))
    # this prompt's rest accepts at 0.95 where its opening did at 0.5: the memory says so, the opening cannot
    assert with_memory.posterior[0] > without.posterior[0] + 0.1 and without.posterior[0] < 0.7
    assert with_memory.state()["remembered"] == {"runs": 1, "positions": memory.tail.nodes, "carried_from": ""}   # the rests past it
    # without a drift the answer is one rate: all of the memory pools with all of the run
    plain = learning.Learner(prior, memory=memory)
    for ev in opening:
        plain.observe(ev)
    assert plain.posterior == pytest.approx(learning.pooled(prior, memory.head.add(memory.tail).add(head)))


def test_a_second_run_of_a_prompt_starts_from_what_the_first_observed(cache):
    pair = tiny_pair("llama")
    settings = Settings(temperature=0.0, max_new_tokens=24, ignore_eos=True)
    start = [0.1, 0.05, 0.02, 0.01]   # far off: what the first run observes moves the plan
    vec = profiler.AcceptanceVector(start, 0.82, 10, [0.1] * 4, pair.draft_name, pair.target_name, "greedy",
                                    0.0, 1.0, 4, 1, "x")
    spec = planning.MethodSpec("sequoia", 10, 5)
    result = planning.PlanResult(spec, planning.methods_mod.sequoia(planning.plan_from_vector(spec, start)), None,
                                 vec, "", True)
    ids, other = encode_prompt(pair, "hello world", False), encode_prompt(pair, "a different prompt", False)

    def run(prompt_ids, learn=True):   # an 8-token opening: the memory holds a rest too
        replan = planning.Replanner(pair, result, settings, learn=learn, prompt_ids=prompt_ids, opening=8)
        events = []
        for ev in Decoder(pair, result.method, settings, plan=replan).run(prompt_ids):
            replan.observe(ev)
            events.append(ev)
        replan.finish()
        return replan, [e for e in events if e.nodes], events[-1].token_ids

    first, first_steps, first_out = run(ids)
    assert first.learner.memory is None
    # the Done line's count: re-plans that gave another tree, as the steps' trees show (no context cut here)
    trees = [tuple(e.tree_parents) for e in first_steps]
    assert first.tree_changes == sum(a != b for a, b in zip(trees, trees[1:])) <= first.replans
    assert first.tree_changes > 0 and first.state()["tree_changes"] == first.tree_changes
    second, second_steps, second_out = run(ids)
    memory = second.learner.memory
    assert memory is not None and memory.runs == 1
    assert memory.head.nodes > 0 and memory.tail.nodes > 0
    assert memory.head.add(memory.tail).nodes == learning.events_evidence(first_steps).nodes
    # its first step is planned from the memory (the past; no drift for the tiny pair: all of it
    # pools), and the output stays the target's
    assert tuple(second_steps[0].tree_parents) == tuple(
        planning.plan_from_vector(spec, learning.pooled(start, memory.head.add(memory.tail))).parents)
    assert tuple(second_steps[0].tree_parents) != tuple(first_steps[0].tree_parents)
    assert second_out == first_out
    assert run(other)[0].learner.memory is None
    key = planning.learning_key(pair, settings)
    assert prompt_memory.recall(key, prompt_memory.digest(ids)).runs == 2
    run(ids, learn=False)
    assert prompt_memory.recall(key, prompt_memory.digest(ids)).runs == 2   # learning off keeps nothing


def test_the_plan_of_a_prompt_run_before_is_planned_from_its_memory(cache):
    """The plan the page and the CLI show (build_plan) is the tree the run's learning starts from,
    and says which positions back it; the run then does not re-plan before its first step."""
    from app import render
    measured = [0.3, 0.1, 0.05, 0.02]
    pair = _pair_measured_at((0.5, measured))
    settings = Settings(temperature=0.5, max_new_tokens=24)
    spec = planning.MethodSpec("sequoia", 10, 5)
    ids, other = encode_prompt(pair, "hello world", False), encode_prompt(pair, "another prompt", False)
    before = planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert before.remembered is None and "remembered" not in render.plan_line(before)
    key = planning.learning_key(pair, settings, domain=before.domain)
    easy = learning.Evidence([200, 40, 10], [190, 6, 2], 200)   # this prompt accepts rank 1 at 0.95
    prompt_memory.remember(key, prompt_memory.digest(ids), easy, learning.Evidence())

    plan = planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    posterior = learning.pooled(measured, easy)   # no drift for the tiny pair: all pools
    assert plan.remembered == {"runs": 1, "positions": 200, "posterior": pytest.approx(posterior), "carried_from": ""}
    assert tuple(plan.tree.parents) == tuple(planning.plan_from_vector(spec, posterior).parents)
    assert tuple(plan.tree.parents) != tuple(before.tree.parents)
    assert plan.expected_tokens == pytest.approx(plan.tree.expected_tokens(posterior))
    assert plan.acceptance.probabilities == before.acceptance.probabilities   # the learner's start
    assert plan.backing_positions == before.backing_positions + 200
    assert plan.summary()["remembered"] == {"runs": 1, "positions": 200, "carried_from": ""}
    assert "200 positions remembered from 1 earlier run of this prompt" in render.plan_line(plan)
    # the same plan for another prompt, with learning off, or without the prompt's tokens
    for again in (planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True, prompt_ids=other),
                  planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=False, prompt_ids=ids),
                  planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True)):
        assert again.remembered is None and tuple(again.tree.parents) == tuple(before.tree.parents)
    # the run starts from this tree: its learning does not re-plan before the first step
    replan = planning.Replanner(pair, plan, settings, learn=True, prompt_ids=ids)
    assert replan() is plan.tree and replan.replans == 0
    assert replan.learner.posterior == pytest.approx(posterior)


def test_quick_plan_reads_the_live_prompts_memory(cache):
    from engine.worker import Worker
    pair = _pair_measured_at((0.5, [0.3, 0.1, 0.05, 0.02]))
    settings = Settings(temperature=0.5, max_new_tokens=24)
    spec = planning.MethodSpec("sequoia", 10, 5)
    ids = encode_prompt(pair, "hello world")   # as a run encodes it (chat template when it has one)
    key = planning.learning_key(pair, settings)
    prompt_memory.remember(key, prompt_memory.digest(ids), learning.Evidence([50], [45], 50), learning.Evidence())
    worker = Worker()
    worker._pair = pair
    try:
        assert worker.quick_plan(spec, settings, prompt="hello world").remembered["positions"] == 50
        assert worker.quick_plan(spec, settings, prompt="hello world", learn=False).remembered is None
        assert worker.quick_plan(spec, settings, prompt="   ").remembered is None   # no prompt: no memory
    finally:
        worker.close()


def test_with_a_drift_the_plan_counts_only_the_remembered_openings(cache, monkeypatch):
    """A run long enough to have a rest (a drift applies) starts in its opening, where only the
    remembered openings count (learning.Learner): the plan is planned from, and counts, them alone."""
    measured = [0.3, 0.1, 0.05, 0.02]
    pair = _pair_measured_at((0.5, measured))
    monkeypatch.setattr(planning.answer_drift, "drift_for", lambda *a, **k: Drift(0.7, 128.0))
    settings = Settings(temperature=0.5, max_new_tokens=200)
    spec = planning.MethodSpec("sequoia", 10, 5)
    ids = encode_prompt(pair, "hello world", False)
    key = planning.learning_key(pair, settings)
    head, tail = learning.Evidence([60, 10], [50, 3], 60), learning.Evidence([150, 20], [148, 1], 150)
    prompt_memory.remember(key, prompt_memory.digest(ids), head, tail)
    plan = planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert plan.remembered["positions"] == 60 and plan.remembered["runs"] == 1
    assert plan.remembered["posterior"] == pytest.approx(learning.pooled(measured, head))
    replan = planning.Replanner(pair, plan, settings, learn=True, prompt_ids=ids)
    assert replan() is plan.tree and replan.replans == 0
    assert replan.state()["remembered"] == {"runs": 1, "positions": 60, "carried_from": ""}


def test_a_prompts_own_runs_count_once(cache):
    """A run keeps its evidence twice, in the settings' store and in the prompt's memory; a later
    run of the prompt counted it from both ("26 learned over 1 run, 26 positions remembered from 1
    earlier run of this prompt", the same 26). The store now counts only other prompts' runs."""
    measured = [0.3, 0.1, 0.05, 0.02]
    pair = _pair_measured_at((0.5, measured))
    settings = Settings(temperature=0.5, max_new_tokens=24)
    spec = planning.MethodSpec("sequoia", 10, 5)
    ids, other = encode_prompt(pair, "hello world", False), encode_prompt(pair, "another prompt", False)
    key = planning.learning_key(pair, settings)
    mine, theirs = learning.Evidence([200, 40, 10], [190, 6, 2], 200, 1), learning.Evidence([100, 30], [60, 9], 100, 1)
    for prompt, ev in ((ids, mine), (other, theirs)):   # as Learner.record keeps a run (no drift: all of it)
        prompt_memory.remember(key, prompt_memory.digest(prompt), ev, learning.Evidence())
        learning.record(key, ev)
    plan = planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert plan.learned["positions"] == 100 and plan.learned["runs"] == 1   # the other prompt's run only
    assert plan.remembered["positions"] == 200
    assert plan.backing_positions == plan.measured_acceptance.positions + 300   # each run once
    start = learning.pooled(measured, theirs)
    assert plan.acceptance.probabilities == pytest.approx(start)
    assert plan.remembered["posterior"] == pytest.approx(learning.pooled(start, mine))
    # another prompt counts both runs from the store
    third = planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True,
                                prompt_ids=encode_prompt(pair, "a third one", False))
    assert third.learned["positions"] == 300 and not third.learned["at_cap"] and not plan.learned["at_cap"]
    # a full store (older runs fade) says so: its positions stop growing, and less this prompt's
    # own they even fall as the prompt's memory grows ("plan backed by" looked stuck)
    learning.record(key, learning.Evidence([learning.STORED_CAP], [0.8 * learning.STORED_CAP], learning.STORED_CAP))
    full = planning.build_plan(pair, spec, settings, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert full.learned["at_cap"] and full.learned["positions"] < learning.STORED_CAP


def test_rescaling_scales_rank_1_misses_and_the_ranks_after_alike():
    ev = learning.Evidence([100, 40, 10], [80, 8, 2], 100)
    harder = prompt_memory.rescaled(ev, 1.5)   # 20 misses -> 30; ranks 2.. x1.5
    assert harder.trials == ev.trials and harder.accepts == pytest.approx([70, 12, 3]) and harder.nodes == 100
    assert prompt_memory.rescaled(ev, 10).accepts == pytest.approx([0, 40, 10])   # never above trials
    assert prompt_memory.rescaled(ev, 1.0).accepts == pytest.approx(ev.accepts)
    perfect = learning.Evidence([50, 0], [50, 0], 50)   # no misses to rescale; and nothing at all
    assert prompt_memory.rescaled(perfect, 2.0).accepts == [50, 0]
    assert prompt_memory.rescaled(learning.Evidence(), 2.0).trials == []


def _meta(T, domain="code", top_p=1.0):
    return {"draft": "d", "target": "t", "draft_kernels": "fast", "domain": domain, "temperature": T,
            "top_p": top_p, "top_k": 0}


def test_a_prompt_new_at_these_settings_carries_its_runs_at_the_nearest_others(cache):
    head, tail = learning.Evidence([40], [30], 40), learning.Evidence([100], [90], 100)
    prompt_memory.remember("k0", "p", head, tail, _meta(0.0), base_miss=0.2)
    prompt_memory.remember("k7", "p", head, tail, _meta(0.7), base_miss=0.25)
    prompt_memory.remember("k7", "p", head, tail, _meta(0.7), base_miss=0.25)
    prompt_memory.remember("prose", "p", head, tail, _meta(0.5, domain="prose"), base_miss=0.5)   # another family
    got = prompt_memory.carried("k5", "p", _meta(0.5), base_miss=0.3)
    assert got.carried_from == "T=0.7" and got.runs == 2   # nearest temperature; the other family is not read
    prompt_memory.remember("prose7", "p", head, tail, _meta(0.7, domain="prose"), base_miss=0.5)
    assert prompt_memory.carried("prose5", "p", _meta(0.5, domain="prose"), 0.5) is None   # prose is not carried
    assert got.tail.accepts == pytest.approx([200 - 20 * 0.3 / 0.25]) and got.tail.trials == [200]
    assert prompt_memory.carried("k5", "q", _meta(0.5), base_miss=0.3) is None   # another prompt
    assert prompt_memory.carried("k5", "p", _meta(0.5), base_miss=None) is None  # nothing to rescale by
    # a key's own file is never carried into itself; a store written before families is not read
    assert prompt_memory.carried("k0", "p", _meta(0.0), 0.2).carried_from == "T=0.7"
    old = prompt_memory.path_for("old")
    old.write_text(json.dumps({"format": 1, "prompts": {"p": {"head": head.to_dict(), "tail": tail.to_dict(),
                                                              "runs": 9, "base_miss": 0.3}}}))
    assert prompt_memory.carried("k0", "p", _meta(0.0), 0.2).runs == 2
    # a tie in temperature: the most runs, then the lower temperature (not the folder's order)
    prompt_memory.remember("k3", "p", head, tail, _meta(0.3), base_miss=0.25)
    assert prompt_memory.carried("k5", "p", _meta(0.5), 0.3).carried_from == "T=0.7"   # 2 runs against 1
    prompt_memory.remember("k3", "p", head, tail, _meta(0.3), base_miss=0.25)
    assert prompt_memory.carried("k5", "p", _meta(0.5), 0.3).carried_from == "T=0.3"   # 2 and 2: the lower T
    # a greedy store's label ignores the top-p and top-k it was written with
    prompt_memory.remember("g", "q", head, tail, {**_meta(0.0), "top_p": 0.9, "top_k": 5}, base_miss=0.2)
    assert prompt_memory.carried("k5", "q", _meta(0.5), 0.3).carried_from == "T=0"


def test_a_damaged_store_of_another_setting_is_skipped(cache, caplog):
    """carried() reads every file of the family: none that is damaged may cost a plan."""
    head, tail = learning.Evidence([40], [30], 40), learning.Evidence([100], [90], 100)
    prompt_memory.remember("k7", "p", head, tail, _meta(0.7), base_miss=0.25)
    fam = prompt_memory.family(_meta(0.7))
    entry = {"head": head.to_dict(), "tail": tail.to_dict(), "runs": 1, "base_miss": 0.25}
    bad = {"strings": {"family": fam, "settings": {"temperature": "0.6", "top_p": "x", "top_k": 0},
                       "prompts": {"p": entry}},
           "no settings": {"family": fam, "prompts": {"p": entry}},
           "nan": {"family": fam, "settings": {"temperature": float("nan"), "top_p": 1, "top_k": 0},
                   "prompts": {"p": entry}},
           "entry not a dict": {"family": fam, "settings": _meta(0.6), "prompts": {"p": [1, 2]}},
           "runs overflow": {"family": fam, "settings": _meta(0.6), "prompts": {"p": {**entry, "runs": 1e999}}}}
    for name, obj in bad.items():
        prompt_memory.path_for(name.replace(" ", "-")).write_text(json.dumps(obj))
    prompt_memory.path_for("deep").write_text("[" * 100000 + "]" * 100000)   # RecursionError when parsed
    got = prompt_memory.carried("k5", "p", _meta(0.5), 0.3)
    assert got is not None and got.carried_from == "T=0.7"


def test_a_run_at_a_new_temperature_plans_from_the_prompts_runs_at_another(cache, monkeypatch):
    """Learning on: a first run of a prompt at T = 0.5 after runs of it at T = 0.7 starts from
    their memory rescaled, says so, and keeps its own evidence under its own settings."""
    from app import render
    monkeypatch.setattr(prompt_memory, "CARRIED_DOMAINS", ("",))   # the tiny pair's vectors are pooled ones
    pair = _pair_measured_at((0.5, [0.3, 0.1, 0.05, 0.02]), (0.7, [0.2, 0.1, 0.05, 0.02]))
    spec = planning.MethodSpec("sequoia", 10, 5)
    ids = encode_prompt(pair, "hello world", False)
    warm = Settings(temperature=0.7, max_new_tokens=24)
    plan = planning.build_plan(pair, spec, warm, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    learner = planning.learner_for(pair, plan, warm, prompt_ids=ids)
    learner.head = learning.Evidence([200, 40], [190, 6], 200)   # what a run at T = 0.7 observed
    learner.record()
    cool = Settings(temperature=0.5, max_new_tokens=24)
    plan = planning.build_plan(pair, spec, cool, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert plan.remembered["carried_from"] == "T=0.7" and plan.remembered["positions"] == 200
    ratio = 0.7 / 0.8   # the measured vectors' P(rank 1 missed) at T = 0.5 over T = 0.7
    carried = prompt_memory.rescaled(learning.Evidence([200, 40], [190, 6], 200), ratio)
    assert plan.remembered["posterior"] == pytest.approx(learning.pooled([0.3, 0.1, 0.05, 0.02], carried))
    assert "200 positions remembered from 1 earlier run of this prompt at T=0.7 (rescaled)" in render.plan_line(plan)
    run = planning.learner_for(pair, plan, cool, prompt_ids=ids)
    assert run.memory.carried_from == "T=0.7"
    run.head = learning.Evidence([10], [5], 10)
    run.record()   # kept at T = 0.5 only: the next run there reads its own settings' memory
    own = planning.build_plan(pair, spec, cool, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert own.remembered["carried_from"] == "" and own.remembered["positions"] == 10
    key7 = planning.learning_key(pair, warm)
    assert prompt_memory.recall(key7, prompt_memory.digest(ids)).runs == 1


def test_a_plan_reads_the_prompts_memory_at_its_settings_once(cache, monkeypatch):
    """build_plan reads the prompt's memory at its settings to count the store without it; finding
    none, it looks only for memory carried from other settings (it read the same file twice), and
    still finds that."""
    monkeypatch.setattr(prompt_memory, "CARRIED_DOMAINS", ("",))   # the tiny pair's vectors are pooled ones
    pair = _pair_measured_at((0.5, [0.3, 0.1, 0.05, 0.02]), (0.7, [0.2, 0.1, 0.05, 0.02]))
    spec = planning.MethodSpec("sequoia", 10, 5)
    ids = encode_prompt(pair, "hello world", False)
    warm, cool = Settings(temperature=0.7, max_new_tokens=24), Settings(temperature=0.5, max_new_tokens=24)
    plan = planning.build_plan(pair, spec, warm, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    learner = planning.learner_for(pair, plan, warm, prompt_ids=ids)
    learner.head = learning.Evidence([200, 40], [190, 6], 200)
    learner.record()
    reads = []
    real_recall = prompt_memory.recall
    monkeypatch.setattr(prompt_memory, "recall", lambda key, digest: reads.append(key) or real_recall(key, digest))
    plan = planning.build_plan(pair, spec, cool, measure=False, allow_nearest=True, learn=True, prompt_ids=ids)
    assert reads == [planning.learning_key(pair, cool)]
    assert plan.remembered["carried_from"] == "T=0.7"
