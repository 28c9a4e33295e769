"""The background engine: one job at a time, in order; stop between steps; a failing job leaves
the worker ready; two readers at once both get their full runs."""
import threading
import time

import pytest

from engine.decoding import StepEvent
from engine.errors import UserError
from engine.settings import Settings
from engine.tree import Tree
from engine.jobs import DROPPED_THE_PAIR, KEPT_THE_PAIR, UNPROFILED, Note, Progress
from engine.planning import MethodSpec, NeedsMeasurement
from engine.worker import DONE, FAILED, STOPPED, Worker
from tests.robustness.served import wait_for
from tests.tiny import tiny_pair_dirs

LONG = Settings(max_new_tokens=200, ignore_eos=True)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    # a cache of its own: other tests measure vectors for the same tiny pair
    patch = pytest.MonkeyPatch()
    patch.setenv("SEQUOIA_CACHE", str(tmp_path_factory.mktemp("worker-cache")))
    draft, target = tiny_pair_dirs("llama")
    w = Worker(measure_prompts=["hello world", "a tree of tokens"], measure_tokens=24, profile_budget=8)
    w.load(str(draft), str(target), "cpu", "float32").wait(120)
    yield w
    w.close()
    patch.undo()


def steps(job):
    return [x for x in job.stream(timeout=60) if isinstance(x, StepEvent)]


def test_a_job_whose_stream_ended_is_done():
    """The page asks `running` right after a run's stream ends (the re-plan chained after it): the
    job must read done by then, even when the worker thread is slow to mark it."""
    w = Worker()
    release = threading.Event()

    class SlowToMark(threading.Event):
        def set(self):
            release.wait(0.3)   # the worker thread marking the job, late
            super().set()

    def job_fn(ctx):
        ctx.job._finished = SlowToMark()
        yield 1

    job = w.submit("one", job_fn)
    assert list(job.stream(timeout=10)) == [1]
    assert job.done, "a reader whose stream ended saw the job still running"
    release.set()
    w.close()


def test_a_background_unit_running_is_no_job_ahead():
    """A run behind the background measurement read "waiting for the model worker (1 job ahead)"
    while the header said idle: the unit stops at its next step for any job, so none is ahead."""
    from engine.worker import Job
    w = Worker()
    unit, run, race = (Job(w, name, lambda ctx: iter(()), (), {}) for name in ("unit", "run", "race"))
    unit.background = True
    try:
        with w._lock:
            w._current, w._pending[:] = unit, [run, race]
        assert (run.position, race.position) == (0, 1)
        unit.background = False   # a user's job running: it is ahead of both
        assert (run.position, race.position) == (1, 2)
    finally:
        with w._lock:
            w._current, w._pending[:] = None, []
        w.close()


def test_jobs_run_one_at_a_time_in_order():
    w = Worker()
    spans, lock, checked = [], threading.Lock(), threading.Event()

    def slow(ctx, name):
        start = time.perf_counter()
        if name == 0:
            checked.wait(10)  # the first job holds the queue until the positions are read (no race with a slow machine)
        time.sleep(0.05)
        with lock:
            spans.append((name, start, time.perf_counter()))
        return name

    jobs = [w.submit(f"job{i}", slow, i) for i in range(4)]
    assert jobs[3].position >= 2  # waiting behind others
    checked.set()
    assert [j.wait(10) for j in jobs] == [0, 1, 2, 3]
    assert [name for name, _, _ in spans] == [0, 1, 2, 3]
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert start >= end  # never two at once
    assert all(j.state == DONE for j in jobs)
    assert w.status()["state"] == "idle"
    w.close()


def test_generator_jobs_stream_items_and_return_a_result():
    w = Worker()

    def gen(ctx):
        for i in range(3):
            ctx.progress(i / 3, f"part {i}")
            yield i
        return "ok"

    job = w.submit("gen", gen)
    items = list(job.stream(timeout=10))
    assert [x for x in items if isinstance(x, int)] == [0, 1, 2]
    assert [x.message for x in items if isinstance(x, Progress)] == ["part 0", "part 1", "part 2"]
    assert job.result == "ok"
    w.close()


def test_no_pair_is_a_clear_error():
    w = Worker()
    job = w.generate("hello", MethodSpec("ar"), Settings())
    with pytest.raises(UserError, match="no model pair"):
        job.wait(10)
    w.close()


def done_steps(worker) -> int:
    """Steps the running job has completed (the worker notes each StepEvent as it is emitted)."""
    return worker.status()["step"] or 0


def test_stop_mid_run_ends_between_steps(worker):
    holder = {}

    def plan():  # called on the worker thread before each step: stop while step 4 is about to run
        if done_steps(worker) == 3:
            holder["job"].stop()
        return None

    job = holder["job"] = worker.generate("hello world", MethodSpec("chain", depth=3), LONG, plan=plan)
    seen = steps(job)
    assert seen[-1].done and seen[-1].finish_reason == "stopped" and not seen[-1].nodes
    assert seen[-2].step == 4 and seen[-1].total_steps == 4  # the running step finished, no other began
    assert job.state == STOPPED


def test_stop_while_queued_never_starts(worker):
    gate = threading.Event()
    blocker = worker.submit("block", lambda ctx: gate.wait(10))
    queued = worker.generate("hello", MethodSpec("ar"), Settings(max_new_tokens=5))
    assert worker.stop(queued.id)
    gate.set()
    blocker.wait(10)
    queued.wait(10)
    assert queued.state == STOPPED and queued.started_at is None
    assert list(queued.stream(timeout=5)) == []


def test_failed_job_then_good_job(worker):
    def boom(ctx):
        raise RuntimeError("kaboom")

    bad = worker.submit("boom", boom)
    with pytest.raises(RuntimeError, match="kaboom"):
        list(bad.stream(timeout=10))
    assert bad.state == FAILED
    empty = worker.generate("   ", MethodSpec("ar"), Settings())
    with pytest.raises(UserError, match="empty"):
        empty.wait(10)
    assert worker.status()["last_error"].startswith("generate")   # the header says what failed last
    def until_stopped(ctx):
        while not ctx.should_stop():
            time.sleep(0.01)

    stopped = worker.submit("stopped", until_stopped)
    assert wait_for(lambda: stopped.started_at is not None)
    stopped.stop()
    stopped.wait(10)
    assert stopped.state == STOPPED and worker.status()["last_error"], "a stopped job says nothing of its health"
    good = steps(worker.generate("hello", MethodSpec("specinfer", budget=7, depth=3),
                                 Settings(max_new_tokens=12, ignore_eos=True)))
    assert good[-1].done and good[-1].total_tokens == 12
    # ... until a later job has gone through: the header no longer warns for good of a typo made once
    assert worker.status()["last_error"] is None


def test_bad_spec_is_refused_before_queueing(worker):
    with pytest.raises(UserError, match="budget"):
        worker.generate("hi", MethodSpec("sequoia", budget=0, depth=4), Settings())
    with pytest.raises(UserError, match="method"):
        worker.generate("hi", MethodSpec("nonsense"), Settings())


def test_two_clients_at_once_second_waits_both_finish(worker):
    results = {}
    jobs = {}

    def client(name, method):
        job = worker.generate("the quick brown fox", method, Settings(max_new_tokens=30, ignore_eos=True))
        jobs[name] = job
        results[name] = steps(job)

    a = threading.Thread(target=client, args=("a", MethodSpec("chain", depth=4)))
    a.start()
    while "a" not in jobs:
        time.sleep(0.001)
    b = threading.Thread(target=client, args=("b", MethodSpec("ar")))
    b.start()
    a.join(60)
    b.join(60)
    assert results["a"][-1].total_tokens == 30 and results["b"][-1].total_tokens == 30
    assert results["a"][-1].text == results["b"][-1].text  # greedy: same text whatever the method
    assert jobs["b"].started_at >= jobs["a"].finished_at  # the second waited for the first


def test_replan_reaches_a_running_job(worker):
    small, big = Tree.chain(3), Tree.from_branching([3, 1, 1, 1])
    holder = {}

    def plan():  # what the UI's slider does: from the third step on, a new tree
        done = done_steps(worker)
        if done == 4:
            holder["job"].stop()
        return big if done >= 2 else None

    job = holder["job"] = worker.generate("hello world", MethodSpec("chain", depth=3), LONG, plan=plan)
    shapes = [tuple(e.tree_parents) for e in steps(job) if e.nodes]
    assert shapes == [small.parents] * 2 + [big.parents] * 3


def test_plan_measures_when_needed_and_quick_plan_says_so(worker):
    settings = Settings(temperature=0.9, top_p=0.95)
    spec = MethodSpec("sequoia", budget=10, depth=4)
    with pytest.raises(NeedsMeasurement):
        worker.quick_plan(spec, settings, allow_nearest=False)
    job = worker.plan(spec, settings)
    items = list(job.stream(timeout=120))
    assert any(isinstance(x, Progress) and "measuring" in x.message for x in items)
    result = job.result
    assert result.tree.size == 10 and result.tree.depth <= 4 and result.exact
    again = worker.quick_plan(spec, settings)
    assert again.tree == result.tree and "cache file" in again.acceptance_note
    near = worker.quick_plan(spec, Settings(temperature=0.8, top_p=0.95))
    assert not near.exact and "nearest" in near.acceptance_note and near.tree.size == 10


def test_generate_emits_its_plan_first(worker):
    job = worker.generate("hello", MethodSpec("sequoia", budget=8, depth=4), Settings(max_new_tokens=6))
    items = [x for x in job.stream(timeout=120) if not isinstance(x, Progress)]
    assert isinstance(items[0], Note) and items[0].kind == "plan"
    assert items[0].data.tree.size == 8
    assert isinstance(items[-1], StepEvent) and items[-1].done


def test_failed_load_keeps_the_loaded_pair(worker, tmp_path):
    before = worker.pair
    job = worker.load(str(tmp_path / "missing"), str(tmp_path / "missing"), "cpu", "float32")
    with pytest.raises(UserError):
        job.wait(30)
    assert worker.pair is before
    assert worker.status()["pair"]["target"] == before.target_name


def test_a_load_stopped_before_its_models_load_keeps_the_loaded_pair(worker, monkeypatch):
    """The Models tab's Stop beside Load pair: a load stopped while its tokenizers load ends as
    the target's stage starts, before the old pair is dropped; the old pair stays in use."""
    from engine import models
    before, real, last_error = worker.pair, models._load_tokenizer, worker.last_error

    def stopped_meanwhile(source):
        worker.current.stop()   # the load job: Stop pressed while the tokenizers load
        return real(source)

    monkeypatch.setattr(models, "_load_tokenizer", stopped_meanwhile)
    draft, target = tiny_pair_dirs("llama")
    job = worker.load(str(draft), str(target), "cpu", "float32")
    assert job.wait(120) is None and job.state == STOPPED and job.stopped_with == KEPT_THE_PAIR
    assert worker.pair is before and not worker.loading and worker.last_error == last_error
    monkeypatch.undo()
    assert steps(worker.generate("hello", MethodSpec("chain", depth=2), Settings(max_new_tokens=4)))[-1].done


@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_load_stopped_while_a_model_loads_frees_it_and_says_nothing_is_loaded(monkeypatch, role):
    """Stopped while the target loads (the old pair already dropped to make room), the load ends as
    the draft's stage starts; stopped while the draft, the last model, loads, it ends at the mask
    probe: no pair is loaded, nothing keeps the models it had loaded alive, and a pair loads again."""
    import weakref
    from engine import models
    real, loaded = models._load_model, []

    def stopped_while_it_loads(source, device, dtype, placement, loading, *args, **kwargs):
        model, kernels = real(source, device, dtype, placement, loading, *args, **kwargs)
        loaded.append(weakref.ref(model))
        if loading == role:
            w.current.stop()
        return model, kernels

    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_on_load=False)
    try:
        w.load(str(draft), str(target), "cpu", "float32").wait(120)
        monkeypatch.setattr(models, "_load_model", stopped_while_it_loads)
        job = w.load(str(draft), str(target), "cpu", "float32")
        assert job.wait(120) is None and job.state == STOPPED and job.stopped_with == DROPPED_THE_PAIR
        assert w.pair is None and not w.loading and len(loaded) == {"target": 1, "draft": 2}[role]
        assert [ref() for ref in loaded] == [None] * len(loaded)
        monkeypatch.undo()
        w.load(str(draft), str(target), "cpu", "float32").wait(120)   # and a pair loads again
        assert w.pair is not None
    finally:
        w.close()


def test_a_load_that_fails_after_its_models_loaded_does_not_keep_them(monkeypatch):
    """A failed job keeps its error (the page holds the job till the next load); the models a load
    had loaded before failing (here: the tree-mask probe refuses the target) must not stay alive
    in that error's frames."""
    import weakref
    from engine import models
    real, loaded = models._load_model, []

    def recorded(*args, **kwargs):
        model, kernels = real(*args, **kwargs)
        loaded.append(weakref.ref(model))
        return model, kernels

    def refused(model, name):   # as probe_tree_mask refuses: from an error deeper down, `from None`
        def tree_forward(m):
            raise RuntimeError("logits off")

        try:
            tree_forward(model)
        except RuntimeError:
            raise UserError(f"{name} ignores custom 4-D attention masks (a test's stand-in)") from None

    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_on_load=False)
    try:
        monkeypatch.setattr(models, "_load_model", recorded)
        monkeypatch.setattr(models, "probe_tree_mask", refused)
        # PyTorch's own kernels: the probe runs once both models are loaded (the fast path probes
        # each model as it packs it)
        job = w.load(str(draft), str(target), "cpu", "float32", cpu_kernels="default")
        with pytest.raises(UserError, match="ignores custom 4-D attention masks"):
            job.wait(120)
        assert job.state == FAILED and len(loaded) == 2 and [ref() for ref in loaded] == [None, None]
    finally:
        w.close()


def test_a_load_stopped_while_profiling_leaves_the_new_pair_loaded_unprofiled(tmp_path, monkeypatch):
    """A Stop during the first load's device profile ends the load with the new pair in use and no
    profile cached (the Models tab says so: the first hardware-aware plan times the device)."""
    from engine import profiler
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    real = profiler.profile_device

    def stopped_meanwhile(pair, **kwargs):
        w.current.stop()
        return real(pair, **kwargs)

    monkeypatch.setattr(profiler, "profile_device", stopped_meanwhile)
    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_budget=4)
    try:
        job = w.load(str(draft), str(target), "cpu", "float32")
        assert job.wait(120) is None and job.state == STOPPED and job.stopped_with == UNPROFILED
        assert w.pair is not None and profiler.cached_profile(w.pair) is None and not w.loading
    finally:
        w.close()


def test_measure_and_cached_acceptance_keep_top_k_apart(worker):
    """A vector measured with top-k is stored under its own key and found only with that top-k
    (the Planner tab's Measure button and its chart pass the Live tab's top-k)."""
    plain = worker.measure(0.9, 1.0).wait(300)
    assert plain.top_k == 0 and worker.cached_acceptance(0.9, 1.0) is not None
    assert worker.cached_acceptance(0.9, 1.0, top_k=3) is None
    cut = worker.measure(0.9, 1.0, top_k=3).wait(300)
    assert cut.top_k == 3 and cut.source != plain.source
    assert worker.cached_acceptance(0.9, 1.0, top_k=3).probabilities == cut.probabilities


def test_a_first_load_profiles_the_device_with_few_rounds(tmp_path, monkeypatch):
    """The first load's profile is short even on a noisy machine: a few timed rounds at most
    (real runs correct it), and it is cached so the next load does not profile again, unless the
    cached one was timed to fewer sizes than the page plans with."""
    from engine import jobs, profiler
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    calls, real = [], profiler.profile_device

    def recording(pair, **kwargs):
        calls.append(kwargs)
        return real(pair, **kwargs)

    monkeypatch.setattr(profiler, "profile_device", recording)
    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_budget=4)
    try:
        w.load(str(draft), str(target), "cpu", "float32").wait(120)
        w.load(str(draft), str(target), "cpu", "float32").wait(120)
        assert len(calls) == 1
        # a narrower profile in the cache (as `python -m engine profile --max-budget 2` writes) is
        # timed again to the page's budget on the next load, and then kept
        profiler.save_profile(w.pair, profiler.profile_device(w.pair, max_budget=2, repeats=1, max_repeats=1,
                                                              prefix_tokens=8))
        w.load(str(draft), str(target), "cpu", "float32").wait(120)
        w.load(str(draft), str(target), "cpu", "float32").wait(120)
        covered = max(profiler.cached_profile(w.pair).target_seconds)
    finally:
        w.close()
    assert calls[0]["repeats"] <= calls[0]["max_repeats"] == jobs.FIRST_LOAD_MAX_ROUNDS < profiler.MAX_REPEATS
    assert [c["max_budget"] for c in calls] == [4, 2, 4] and covered == 4


def test_race_lanes_step_in_turn_and_match_their_own_runs(worker):
    """The Race interleaves its lanes step by step (the lane furthest behind steps next); each
    lane's text is the one its method gives on its own, at T=0 autoregressive's."""
    from engine.jobs import LaneEvent
    settings = Settings(max_new_tokens=24, ignore_eos=True)
    specs = [("autoregressive", MethodSpec("ar")), ("chain", MethodSpec("chain", depth=4))]
    job = worker.race("hello world", specs, settings, learn=False)
    items = list(job.stream(timeout=120))
    notes = [x.kind for x in items if isinstance(x, Note)]
    assert notes == ["race", "together"]
    # the header shows the last progress line: past the warm-up it says the lanes are timed
    before_lanes = items[:next(i for i, x in enumerate(items) if isinstance(x, LaneEvent))]
    last_progress = [x for x in before_lanes if isinstance(x, Progress)][-1]
    assert "timing 2 lanes together" in last_progress.message, last_progress
    lanes = [x.lane for x in items if isinstance(x, LaneEvent)]
    first_chain, last_ar = lanes.index("chain"), len(lanes) - 1 - lanes[::-1].index("autoregressive")
    assert lanes[0] == "autoregressive" and first_chain == 1 and last_ar > first_chain
    summaries = {s["lane"]: s for s in job.result}
    assert summaries["chain"]["token_ids"] == summaries["autoregressive"]["token_ids"]
    alone = steps(worker.generate("hello world", MethodSpec("chain", depth=4), settings, learn=False))
    assert alone[-1].token_ids == summaries["chain"]["token_ids"]


def test_a_race_stopped_in_its_warm_up_warms_and_prefills_no_other_lane(worker):
    """A Stop during the first lane's warm-up ended that warm-up only: the other lanes' warm-ups
    and then every lane's prefill still ran (58 s on the embedded pair) before the race said stopped."""
    from engine.jobs import LaneEvent
    specs = [("autoregressive", MethodSpec("ar")), ("chain", MethodSpec("chain", depth=3)),
             ("sequoia", MethodSpec("sequoia", budget=6, depth=3))]
    job = worker.race("hello world", specs, Settings(max_new_tokens=16, ignore_eos=True), warmup_tokens=8,
                      learn=False)
    items = []
    for item in job.stream(timeout=120):
        items.append(item)
        if isinstance(item, Progress) and "warm-up" in item.message:
            job.stop()
    warmups = [x.message for x in items if isinstance(x, Progress) and "warm-up" in x.message]
    assert warmups == ["race warm-up (untimed): autoregressive"], warmups
    finals = [x.event for x in items if isinstance(x, LaneEvent)]
    assert len(finals) == 3 and all(e.done and e.finish_reason == "stopped" and e.total_steps == 0
                                    and e.prefill_seconds == 0 for e in finals), finals
    assert job.state == STOPPED   # it read "done": a race's result is its lanes, not one run's last event


def test_app_runs_stay_out_of_the_observed_costs_and_cli_runs_record_theirs(worker, capsys, monkeypatch):
    """A Race's lanes and a Live run are slowed (unevenly) by the page drawing them on the same
    cores: their seconds must not bend the cost curve later plans read. The CLI's runs are
    recorded (engine/commands/generate.py) when other programs left them the CPUs, which this
    test's neighbours (the suite's other workers) do not: that share is pinned to none here."""
    from engine import observed, profiler
    from engine.cli import main
    monkeypatch.setattr(observed.OthersWatch, "share", lambda self: 0.0)
    pair = worker._pair
    key = profiler.profile_key(pair)
    before = observed.load(key).steps
    settings = Settings(max_new_tokens=16, ignore_eos=True)
    specs = [("autoregressive", MethodSpec("ar")), ("chain", MethodSpec("chain", depth=3))]
    list(worker.race("hello world", specs, settings, learn=False).stream(timeout=120))
    steps(worker.generate("hello world", MethodSpec("chain", depth=3), settings, learn=False))
    assert observed.load(key).steps == before
    target = pair.target.name_or_path
    assert main(["generate", "--draft", pair.draft.name_or_path, "--target", target, "--device", "cpu",
                 "--dtype", "float32", "--method", "chain", "--depth", "3", "--max-new-tokens", "16",
                 "--ignore-eos", "--no-learn", "--prompt", "hello world"]) == 0
    capsys.readouterr()
    assert observed.load(key).steps > before


def test_a_race_remembers_its_prompt_once_and_a_live_run_then_starts_from_it(worker):
    """A Race's lanes answer the prompt once: one run in the prompt's memory, whatever the lanes
    (engine/prompt_memory.py); a Live run of the same prompt then learns from it and adds its own."""
    import json
    from engine import prompt_memory
    from engine.models import encode_prompt

    def runs_remembered(prompt):
        digest = prompt_memory.digest(encode_prompt(worker._pair, prompt, False))
        found = [json.loads(p.read_text())["prompts"].get(digest)
                 for p in prompt_memory.path_for("x").parent.glob("*.json")]
        return sum(e["runs"] for e in found if e)

    settings = Settings(max_new_tokens=16, ignore_eos=True)
    prompt = "a race to remember"
    specs = [("chain 3", MethodSpec("chain", depth=3)), ("chain 4", MethodSpec("chain", depth=4))]
    list(worker.race(prompt, specs, settings, chat=False, learn=True).stream(timeout=120))
    assert runs_remembered(prompt) == 1
    items = list(worker.generate(prompt, MethodSpec("chain", depth=3), settings, chat=False,
                                 learn=True).stream(timeout=120))
    states = [x.data for x in items if isinstance(x, Note) and x.kind == "learning"]
    assert states and states[0]["remembered"]["runs"] == 1
    assert runs_remembered(prompt) == 2 and runs_remembered("a prompt no test runs") == 0
    steps(worker.generate(prompt, MethodSpec("chain", depth=3), settings, chat=False, learn=False))
    assert runs_remembered(prompt) == 2   # learning off keeps nothing


def test_a_greedy_race_stores_its_answer_once_in_the_settings_store(worker):
    """At T = 0 a race's lanes give one greedy answer: two identical chain lanes add to the
    settings' learned store what one Live run of that chain adds, as one run (they were stored
    once per lane, so a raced prompt weighed as many runs as the race had lanes)."""
    import json
    from engine import learning

    def stored() -> tuple[list[float], int]:
        files = list((learning.learned_path("x").parent).glob("*.json"))
        total, runs = [], 0
        for path in files:
            ev = learning.Evidence.from_dict(json.loads(path.read_text()))
            assert ev.nodes < learning.STORED_CAP / 2, "a capped store would scale what this test adds"
            total = [a + b for a, b in zip(total + [0.0] * len(ev.trials), ev.trials + [0.0] * len(total))]
            runs += ev.runs
        return total, runs

    def added(before, after) -> tuple[list[float], int]:
        width = max(len(before[0]), len(after[0]))
        pad = lambda xs: xs + [0.0] * (width - len(xs))   # noqa: E731
        return [a - b for a, b in zip(pad(after[0]), pad(before[0]))], after[1] - before[1]

    settings = Settings(max_new_tokens=16, ignore_eos=True)
    prompt = "one answer, two lanes"
    chain = MethodSpec("chain", depth=3)
    before = stored()
    list(worker.generate(prompt, chain, settings, chat=False, learn=True).stream(timeout=120))
    one_run = added(before, stored())
    assert one_run[1] == 1 and one_run[0][0] > 0
    before = stored()
    list(worker.race(prompt, [("a", chain), ("b", chain)], settings, chat=False, learn=True).stream(timeout=120))
    assert added(before, stored()) == one_run


def test_one_answer_keeps_per_rank_the_lane_that_tried_it_most():
    from engine.learning import Evidence, one_answer
    chain = Evidence([10.0], [7.0], 10.0, 1)
    wide = Evidence([8.0, 3.0, 1.0], [6.0, 1.0, 0.0], 8.0, 1)
    both = one_answer([chain, wide])
    assert (both.trials, both.accepts, both.nodes, both.runs) == ([10.0, 3.0, 1.0], [7.0, 1.0, 0.0], 10.0, 1)
    assert one_answer([]).nodes == 0


def test_profiling_now_is_true_only_while_the_device_is_timed():
    """The Live and Planner tabs say "being profiled now" instead of sending the user to a button."""
    import threading
    from engine.worker import Worker
    w = Worker(profile_on_load=False)
    try:
        assert not w.profiling_now()
        inside, release = threading.Event(), threading.Event()
        job = w.submit("profile device", lambda ctx: inside.set() or release.wait(30))
        assert inside.wait(30) and w.profiling_now()
        release.set()
        job.wait(30)
        other = w.submit("generate", lambda ctx: w.profiling_now())
        assert other.wait(30) is False
    finally:
        w.close()
