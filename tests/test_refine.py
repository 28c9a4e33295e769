"""Background measurement of the settings a plan had to interpolate a vector for (engine/refine.py)."""
import threading
import time

import pytest

from engine import profiler, refine
from engine.planning import MethodSpec
from engine.prompts import Prompt
from engine.settings import Settings
from engine.worker import DONE, Worker
from tests.robustness.served import wait_for
from tests.tiny import tiny_pair_dirs

SPEC = MethodSpec("sequoia", budget=8, depth=4)
BETWEEN = Settings(temperature=0.75)  # between the two measured temperatures below: interpolated


def _vec(pair, T, probs):
    return profiler.AcceptanceVector(probs, 1 - sum(probs), 100, [0.01] * len(probs), pair.draft_name,
                                     pair.target_name, "sequoia", T, 1.0, len(probs), 3, "2026", source=f"m{T}")


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A worker on a tiny pair whose private cache holds vectors measured at T = 0.5 and 1.0;
    background units measure two short prompts after 0.2 s idle."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    monkeypatch.setattr(refine, "IDLE_SECONDS", 0.2)
    monkeypatch.setattr(refine, "TOKENS_PER_PROMPT", 8)
    monkeypatch.setattr(refine, "_prompts", lambda: [Prompt("c", "code", "def f(x): return x"),
                                                     Prompt("p", "prose", "a tree of tokens grows")])
    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_on_load=False)
    w.load(str(draft), str(target), "cpu", "float32").wait(120)
    for T, probs in ((0.5, [0.6, 0.2]), (1.0, [0.4, 0.2])):
        profiler.save_acceptance(w.pair, _vec(w.pair, T, probs))
    yield w
    w.close()


def test_settings_planned_from_an_interpolated_vector_are_measured_while_idle(worker):
    first = worker.quick_plan(SPEC, BETWEEN)
    assert "INTERPOLATED" in first.acceptance_note
    assert wait_for(lambda: worker.cached_acceptance(0.75) is not None, 60)
    pooled = worker.cached_acceptance(0.75)
    code = profiler.cached_acceptance(worker.pair, 0.75, domain="code")
    prose = profiler.cached_acceptance(worker.pair, 0.75, domain="prose")
    assert code.method == prose.method == pooled.method == "replay"
    assert pooled.positions == code.positions + prose.positions > 0 and pooled.prompts == 2
    assert pooled.temperature == 0.75 and pooled.sampler == "sequoia"
    again = worker.quick_plan(SPEC, BETWEEN)
    assert again.exact and "INTERPOLATED" not in again.acceptance_note and "measured over" in again.acceptance_note
    assert wait_for(lambda: not worker.refiner.pending() and worker.current is None, 60)
    assert worker.status()["state"] == "idle"


def test_a_submitted_job_stops_a_background_unit_and_goes_first(worker, monkeypatch):
    started, calls, order = threading.Event(), [], []

    def slow_replay(pair, prompts, T, top_p, sampler, width, tokens_per_prompt, seed, top_k, domain, should_stop,
                    answers):
        calls.append(seed)
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(calls) == 1:  # the first unit runs until stopped
            if should_stop():
                order.append("unit stopped")
                raise profiler.Stopped("measurement stopped")
            time.sleep(0.01)
        vec = _vec(pair, T, [0.5, 0.2] + [0.0] * (width - 2))  # as wide as asked: the cache key has the width
        vec.domain, vec.method = domain, "replay"
        return vec

    monkeypatch.setattr("engine.replay.replay_acceptance", slow_replay)
    worker.quick_plan(SPEC, BETWEEN)
    assert started.wait(30)
    status = worker.status()  # the unit shows, but the worker counts as idle
    assert status["state"] == "idle" and "background" in status["message"] and "T=0.75" in status["message"]
    job = worker.submit("user job", lambda ctx: order.append("user job") or 7)
    assert job.wait(30) == 7 and job.state == DONE
    assert order[:2] == ["unit stopped", "user job"]
    # the stopped prompt is measured again later, and the settings complete
    assert wait_for(lambda: worker.cached_acceptance(0.75) is not None, 60)
    assert calls[:2] == [0, 0] and sorted(set(calls)) == [0, 1]


def test_a_failing_unit_drops_its_settings_and_leaves_the_worker_alone(worker, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("engine.replay.replay_acceptance", broken)
    worker.quick_plan(SPEC, BETWEEN)
    assert wait_for(lambda: not worker.refiner.pending(), 60)
    assert worker.cached_acceptance(0.75) is None and worker.last_error is None
    job = worker.generate("hello", SPEC, Settings(temperature=0.75, max_new_tokens=4))
    job.wait(60)
    assert job.state == DONE


def test_switched_off_nothing_is_remembered_or_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    monkeypatch.setattr(refine, "IDLE_SECONDS", 0.05)
    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_on_load=False, refine_in_background=False)
    try:
        w.load(str(draft), str(target), "cpu", "float32").wait(120)
        for T, probs in ((0.5, [0.6, 0.2]), (1.0, [0.4, 0.2])):
            profiler.save_acceptance(w.pair, _vec(w.pair, T, probs))
        assert "INTERPOLATED" in w.quick_plan(SPEC, BETWEEN).acceptance_note
        time.sleep(0.5)
        assert w.refiner is None and w.cached_acceptance(0.75) is None
    finally:
        w.close()


def test_refiner_remembers_each_setting_once_and_at_most_a_few(worker):
    refiner, pair = refine.Refiner(), worker.pair
    assert refiner.want(pair, Settings(temperature=0.6), "sequoia")
    assert not refiner.want(pair, Settings(temperature=0.6), "sequoia")
    for i in range(refine.MAX_WANTED + 2):
        stayed(refiner)
        refiner.want(pair, Settings(temperature=0.61 + i / 100), "sequoia")
    kept = refiner.pending()
    assert len(kept) == refine.MAX_WANTED and kept[-1].temperature == pytest.approx(0.61 + (refine.MAX_WANTED + 1) / 100)


def test_the_most_recently_planned_settings_are_measured_first(worker):
    """Typing T = 0.5 then top-p 0.9 plans T = 0.5 / top-p 1 on the way: the background measured
    that setting (the oldest) first, for minutes, while the settings in use waited."""
    refiner, pair = refine.Refiner(), worker.pair
    passed, meant = Settings(temperature=0.55), Settings(temperature=0.55, top_p=0.9)
    refiner.want(pair, passed, "sequoia")
    stayed(refiner)
    refiner.want(pair, meant, "sequoia")
    assert refiner._next(pair).top_p == 0.9
    stayed(refiner)
    refiner.want(pair, passed, "sequoia")   # planned again: it goes first now, still remembered once
    assert refiner._next(pair).top_p == 1.0 and len(refiner.pending()) == 2


def stayed(refiner) -> None:
    """As if the most recently planned settings had stayed longer than a value passed on the way."""
    refiner.pending()[-1].planned_at -= refine.PASSING_SECONDS + 1


def test_a_value_passed_on_the_way_is_not_measured(worker):
    """Typing T = 0.35 plans T = 0.3 first: it queued a 24-prompt measurement of its own. Settings
    left within PASSING_SECONDS of their plan are forgotten; settings that stayed, or whose
    measurement began, are kept."""
    refiner, pair = refine.Refiner(), worker.pair
    refiner.want(pair, Settings(temperature=0.3), "sequoia", passing=True)
    refiner.want(pair, Settings(temperature=0.35), "sequoia", passing=True)
    assert [w.temperature for w in refiner.pending()] == [0.35]
    stayed(refiner)
    refiner.want(pair, Settings(temperature=0.45), "sequoia", passing=True)
    refiner.pending()[-1].done[0] = "a prompt measured"   # its measurement began
    refiner.want(pair, Settings(temperature=0.5), "sequoia", passing=True)
    assert [w.temperature for w in refiner.pending()] == [0.35, 0.45, 0.5]
    # what a run or race planned for stays, however soon the next plan comes (a race's lanes
    # plan one after another, samplers alternating; a slider moved just after Generate)
    refiner = refine.Refiner()
    refiner.want(pair, Settings(temperature=0.6), "sequoia")
    refiner.want(pair, Settings(temperature=0.6), "specinfer")
    refiner.want(pair, Settings(temperature=0.6), "sequoia")
    refiner.want(pair, Settings(temperature=0.65), "sequoia", passing=True)
    assert sorted((w.temperature, w.sampler) for w in refiner.pending()) == [
        (0.6, "sequoia"), (0.6, "specinfer"), (0.65, "sequoia")]
    # a quick plan of another sampler (the Planner's Sequoia beside a Live SpecInfer) leaves it too
    refiner.want(pair, Settings(temperature=0.7), "specinfer", passing=True)
    assert (0.65, "sequoia") in [(w.temperature, w.sampler) for w in refiner.pending()]


def test_replay_stops_inside_a_prompt(worker):
    """A stop asked for mid-answer ends the measurement at the next decoding step, not after the prompt."""
    from engine.replay import replay_acceptance
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(profiler.Stopped):
        replay_acceptance(worker.pair, ["a tree of tokens"], 0.75, tokens_per_prompt=64, should_stop=should_stop)
    assert 3 < len(asked) < 10


def test_a_stopped_answer_is_kept_and_continued_not_begun_again(worker, monkeypatch):
    """A stop mid-answer kept nothing: the prompt's next unit decoded its answer from the start, so
    under steady use (a job every few tens of seconds on a loaded machine) a helper saw the
    background at "prompt 1/24" for 20 minutes. The answer decoded so far is kept and continued."""
    from engine import replay
    from engine.replay import AnswerSoFar, replay_acceptance
    decoded = []   # (tokens the decoder was given, new tokens asked for) per decoding
    real = replay.generate_ids

    def counting(pair, ids, method, settings, **kwargs):
        decoded.append((len(ids), settings.max_new_tokens))
        return real(pair, ids, method, settings, **kwargs)
    monkeypatch.setattr(replay, "generate_ids", counting)
    so_far, asked = AnswerSoFar(), []

    def stop_mid_answer():
        asked.append(1)
        return len(asked) > 6

    with pytest.raises(profiler.Stopped):
        replay_acceptance(worker.pair, ["a tree of tokens"], 0.75, tokens_per_prompt=24, should_stop=stop_mid_answer,
                          answers=[so_far])
    kept = list(so_far.tokens)
    assert 0 < len(kept) < 24 and not so_far.complete and so_far.resumes == 1 and so_far.seconds > 0
    vec = replay_acceptance(worker.pair, ["a tree of tokens"], 0.75, tokens_per_prompt=24, answers=[so_far])
    assert vec.seconds > so_far.seconds   # its time counts the stopped try's decoding too
    assert so_far.complete and so_far.tokens[:len(kept)] == kept
    prompt_tokens, first_ask = decoded[0]
    assert first_ask == 24 and decoded[1] == (prompt_tokens + len(kept), 24 - len(kept))   # continued, not begun again
    assert vec.positions == len(so_far.tokens)
    # the background keeps it between units: a stopped unit's prompt continues its answer
    wanted = refine.Wanted("k", 0.75, 1.0, 0, "sequoia")
    monkeypatch.setattr(refine.Refiner, "_next", lambda self, pair: wanted)
    seen = []

    def fake(*args, answers, **kwargs):
        seen.append(answers[0])
        answers[0].tokens.append(1)
        raise profiler.Stopped("a job came")
    monkeypatch.setattr("engine.replay.replay_acceptance", fake)
    lines = []
    for _ in range(2):
        with pytest.raises(profiler.Stopped):
            refine.Refiner().run_unit(worker.pair, lambda: False, lambda f, m: lines.append(m))
    assert seen[0] is seen[1] and seen[1].tokens == [1, 1]
    assert "its answer continued from 1 of" in lines[1] and "continued" not in lines[0]


def test_app_flag_turns_the_background_off(monkeypatch):
    """`python app.py --no-background-refine` builds its page around a worker without a refiner."""
    import importlib.util
    from pathlib import Path

    import app as app_package
    spec = importlib.util.spec_from_file_location("sequoia_app_main", Path(__file__).resolve().parents[1] / "app.py")
    main = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(main)
    assert main.parse_args([]).background_refine is True
    args = main.parse_args(["--no-background-refine"])
    seen = {}

    def create_app(*a, worker=None, **k):
        seen["worker"] = worker
        return None, None

    monkeypatch.setattr(app_package, "create_app", create_app)
    main.build(args)
    try:
        assert seen["worker"] is not None and seen["worker"].refiner is None and seen["worker"].reprofiler is None
    finally:
        seen["worker"].close()
    main.build(main.parse_args([]))
    assert seen["worker"] is None  # create_app makes the default worker: background on


def test_slider_moves_postpone_the_background(worker, monkeypatch):
    """Quick plans (what a slider move asks for) count as activity: no unit starts while they come."""
    started = []

    def replay(*args, **kwargs):
        started.append(time.monotonic())
        raise profiler.Stopped("not needed")

    monkeypatch.setattr("engine.replay.replay_acceptance", replay)
    monkeypatch.setattr(refine, "IDLE_SECONDS", 1.0)  # moves come every ~0.1 s: room for a stall on a loaded machine
    until = time.monotonic() + 1.5
    while time.monotonic() < until:
        # Taken before the call: the worker marks activity as the plan begins, and a loaded machine
        # (CI runs the suite on every core) can take longer than the margin below to return a plan.
        last_move = time.monotonic()
        worker.quick_plan(SPEC, BETWEEN)
        time.sleep(0.1)
    assert not started
    assert wait_for(lambda: started, 60)
    assert started[0] - last_move >= 0.95


@pytest.mark.parametrize("learn", [False, True])
def test_a_run_plans_as_its_page_did_without_measuring_first_learning_on_or_off(worker, monkeypatch, learn):
    """The page planned T = 0.75 from an interpolated vector and said that tree is the next run's;
    with learning off, Generate (and a race) measured acceptance first (2 minutes on the embedded
    pair) and then ran another tree. Both now run the page's plan at once."""
    def no_measuring(*a, **k):
        raise AssertionError("a run measured acceptance before starting")

    monkeypatch.setattr(profiler, "measure_acceptance", no_measuring)
    monkeypatch.setattr(refine, "IDLE_SECONDS", 3600)   # no background unit in this test
    shown = worker.quick_plan(SPEC, BETWEEN, learn=learn)
    run = worker.generate("def f(x):", SPEC, Settings(temperature=0.75, max_new_tokens=4), learn=learn)
    plan = next(item for item in run.stream(60) if getattr(item, "kind", None) == "plan").data
    run.wait(60)
    assert "INTERPOLATED" in plan.acceptance_note and plan.method.tree.children == shown.method.tree.children
    race = worker.race("def f(x):", [("sequoia", SPEC)], Settings(temperature=0.75, max_new_tokens=4), learn=learn)
    race.wait(60)
    assert race.state == DONE


def test_settings_planned_from_the_nearest_vector_are_measured_later_too(worker, monkeypatch):
    """Outside the measured temperatures a plan takes the nearest vector; with runs no longer
    measuring first (learning off included), only the background can give those settings theirs."""
    monkeypatch.setattr(refine, "IDLE_SECONDS", 3600)
    plan = worker.quick_plan(SPEC, Settings(temperature=1.6))
    assert "nearest" in plan.acceptance_note and not plan.exact
    assert [w.temperature for w in worker.refiner.pending()] == [1.6]


def test_a_live_plan_missing_only_its_profile_profiles_without_measuring_acceptance(worker, monkeypatch):
    """A hardware-aware plan before the device is profiled, at settings the page interpolates:
    the plan job (what the Live tab submits) measured acceptance for minutes first, then planned
    from another vector than a run would."""
    def no_measuring(*a, **k):
        raise AssertionError("the plan job measured acceptance")

    monkeypatch.setattr(profiler, "measure_acceptance", no_measuring)
    monkeypatch.setattr(refine, "IDLE_SECONDS", 3600)
    auto = MethodSpec("sequoia-auto", budget=8, depth=4)
    with pytest.raises(Exception, match="device profile"):
        worker.quick_plan(auto, BETWEEN, learn=False)
    result = worker.plan(auto, BETWEEN, learn=False).wait(300)
    assert "INTERPOLATED" in result.acceptance_note and result.profile is not None
    assert worker.cached_profile() is not None
