"""A noisy cached device profile is timed again while the worker is idle and the machine quiet
(engine/reprofile.py)."""
import threading
import time
from dataclasses import replace

import pytest

from engine import profiler, refine, reprofile
from engine.worker import DONE, Worker
from tests.robustness.served import wait_for
from tests.tiny import tiny_pair_dirs


def _with_spread(prof, spread: float):
    return replace(prof, quality={**prof.quality, "worst_spread": spread, "noisy": spread > profiler.NOISY_SPREAD},
                   measured_at=f"seeded {spread}")


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A worker on a tiny pair whose private cache holds a noisy profile (4 sizes each, repeats
    spread 900 %); the idle wait is 0.2 s, and the machine counts as busy until the test sets
    worker.quiet (after its own patches: a try must not start before them, however slow the
    machine is to reach the test)."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    monkeypatch.setattr(refine, "IDLE_SECONDS", 0.2)
    monkeypatch.setattr(reprofile, "RECHECK_SECONDS", 0.1)
    quiet = threading.Event()
    monkeypatch.setattr(reprofile, "machine_quiet", quiet.is_set)
    draft, target = tiny_pair_dirs("llama")
    w = Worker(profile_on_load=False, refine_in_background=False, background_profile=True)
    w.load(str(draft), str(target), "cpu", "float32").wait(120)

    def seed(ctx):  # a job, as the first load's profile is: the worker looks for background work after it
        noisy = _with_spread(profiler.profile_device(ctx.pair, max_budget=4, max_width=4, repeats=1, max_repeats=1),
                             9.0)
        profiler.save_profile(ctx.pair, noisy)
        return noisy
    w.seeded = w.submit("seed profile", seed).wait(120)
    w.quiet = quiet
    yield w
    w.close()


def _spy(monkeypatch, result_spread, first_until_stopped=False):
    """profile_device replaced: records its calls; returns the seeded profile with `result_spread`,
    the first call (first_until_stopped) waiting for its should_stop and raising Stopped as the
    real one does."""
    calls = []

    def fake(pair, max_budget, max_width=None, prefix_tokens=None, repeats=None, progress=None, should_stop=None,
             **kw):   # (the Planner's Profile gives only max_budget, progress and should_stop)
        calls.append({"max_budget": max_budget, "max_width": max_width, "prefix_tokens": prefix_tokens,
                      "repeats": repeats})
        if progress:
            progress(0.5, "profiling forwards: 1 rounds timed")
        if first_until_stopped and len(calls) == 1:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if should_stop():
                    raise profiler.Stopped("profiling stopped")
                time.sleep(0.01)
        return _with_spread(profiler.cached_profile(pair), result_spread)

    monkeypatch.setattr(profiler, "profile_device", fake)
    return calls


def test_a_noisy_cached_profile_is_timed_again_over_the_same_sizes_and_replaced(worker):
    worker.quiet.set()
    assert wait_for(lambda: profiler.cached_profile(worker.pair).measured_at != worker.seeded.measured_at, 60)
    new = profiler.cached_profile(worker.pair)
    assert sorted(new.target_seconds) == sorted(worker.seeded.target_seconds) == [1, 2, 3, 4]
    assert sorted(new.draft_seconds) == [1, 2, 3, 4] and new.prefix_tokens == worker.seeded.prefix_tokens
    assert new.quality["worst_spread"] < 9.0 and new.quality["load_average_before"] is not None
    assert wait_for(lambda: worker.current is None, 60)
    assert worker.status()["state"] == "idle" and worker.last_error is None


def test_the_try_shows_in_the_status_and_a_result_no_better_keeps_the_cached_profile(worker, monkeypatch):
    seen, before = [], []
    calls = _spy(monkeypatch, result_spread=9.5)
    spy = profiler.profile_device

    def first_look(*args, **kwargs):   # the header before the try's first progress line: which task
        before.append(worker.status()["message"])
        return spy(*args, **kwargs)
    monkeypatch.setattr(profiler, "profile_device", first_look)
    original = worker._note_item

    def note(job, item):
        original(job, item)
        if job.background:
            seen.append(worker.status())
    monkeypatch.setattr(worker, "_note_item", note)
    worker.quiet.set()
    assert wait_for(lambda: len(calls) >= reprofile.MAX_TRIES, 60)
    time.sleep(1.0)  # idle waits pass: no more tries once MAX_TRIES are done
    assert len(calls) == reprofile.MAX_TRIES and not worker.profile_timed_again()
    assert profiler.cached_profile(worker.pair).measured_at == worker.seeded.measured_at
    assert calls[0] == {"max_budget": 4, "max_width": 4, "prefix_tokens": worker.seeded.prefix_tokens, "repeats": 1}
    assert seen and seen[0]["state"] == "idle" and "profiling this device again" in seen[0]["message"]
    assert "900 %" in seen[0]["message"]
    assert before[0] == "idle · background: re-profile the device, starting", before


def test_a_quiet_profile_is_left_alone(worker, monkeypatch):
    calls = _spy(monkeypatch, result_spread=0.01)
    worker.submit("a quiet profile", lambda ctx: profiler.save_profile(ctx.pair, _with_spread(worker.seeded, 0.05)))
    time.sleep(0.1)
    worker.quiet.set()
    time.sleep(1.0)
    assert calls == []


def test_a_profile_pressed_beside_other_work_keeps_the_clean_cached_one(worker, monkeypatch):
    """A Profile pressed while the machine was busy timed a noisy profile (47 %) over a clean one
    (8 %) and moved the plan on noise: the clean one stays and the job says so, also where the new
    one timed more sizes (the Planner's reach 128, a first load's 32); a clean new timing replaces it."""
    from engine.jobs import ProfileKept
    clean = _with_spread(worker.seeded, 0.05)
    worker.submit("a clean profile", lambda ctx: profiler.save_profile(ctx.pair, clean)).wait(30)
    _spy(monkeypatch, result_spread=0.47)
    kept = worker.profile(force=True).wait(60)
    assert isinstance(kept, ProfileKept) and kept.noisy.quality["worst_spread"] == 0.47
    assert profiler.cached_profile(worker.pair).measured_at == clean.measured_at == kept.kept.measured_at
    _spy(monkeypatch, result_spread=0.02)
    replaced = worker.profile(force=True).wait(60)
    assert not isinstance(replaced, ProfileKept)
    assert profiler.cached_profile(worker.pair).quality["worst_spread"] == 0.02
    wider = _with_spread(replace(worker.seeded, target_seconds={**worker.seeded.target_seconds, 128: 1.0},
                                 draft_seconds={**worker.seeded.draft_seconds, 128: 1.0}), 0.47)
    assert profiler.clean_one_stays(profiler.cached_profile(worker.pair), wider)
    assert not profiler.clean_one_stays(worker.seeded, _with_spread(worker.seeded, 9.5))   # noisy both: newest


def test_a_busy_machine_postpones_the_try(worker, monkeypatch):
    calls = _spy(monkeypatch, result_spread=0.02)
    time.sleep(1.0)   # idle, but busy: looked at every RECHECK_SECONDS, never tried
    assert calls == [] and worker.profile_timed_again()
    worker.quiet.set()
    # the spy records a try as it starts: wait for the try's profile to be saved, not for its start
    assert wait_for(lambda: profiler.cached_profile(worker.pair).quality["worst_spread"] == 0.02, 60)
    assert len(calls) == 1


def test_a_submitted_job_stops_the_try_and_the_cached_profile_stays(worker, monkeypatch):
    calls = _spy(monkeypatch, result_spread=9.5, first_until_stopped=True)
    worker.quiet.set()
    assert wait_for(lambda: calls and worker.current is not None and worker.current.background, 60)
    order = []
    job = worker.submit("user job", lambda ctx: order.append("user job") or 7)
    assert job.wait(30) == 7 and job.state == DONE
    assert profiler.cached_profile(worker.pair).measured_at == worker.seeded.measured_at
    assert order == ["user job"] and worker.last_error is None
    # a stopped try is not counted: it starts again once idle, then MAX_TRIES complete (no better)
    assert wait_for(lambda: len(calls) >= 1 + reprofile.MAX_TRIES, 60)
    time.sleep(1.0)
    assert len(calls) == 1 + reprofile.MAX_TRIES
    assert profiler.cached_profile(worker.pair).measured_at == worker.seeded.measured_at


def test_the_machine_counts_as_quiet_up_to_half_a_core_of_load_per_core(monkeypatch):
    monkeypatch.setattr(reprofile.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(reprofile.os, "getloadavg", lambda: (1.0, 3.0, 3.0))
    assert reprofile.machine_quiet()
    monkeypatch.setattr(reprofile.os, "getloadavg", lambda: (1.2, 0.1, 0.1))
    assert not reprofile.machine_quiet()


def test_the_planner_caption_says_a_noisy_profile_will_be_timed_again(worker):
    from app import render
    said = render.profile_quality(worker.seeded, None, timed_again=True)
    assert "**noisy** (repeats spread 900 %; timed again once the app is idle" in said
    assert "timed again" not in render.profile_quality(worker.seeded, None)
    assert "timed again" not in render.profile_quality(_with_spread(worker.seeded, 0.05), None, timed_again=True)


def test_a_failing_try_is_counted_and_the_worker_goes_on(worker, monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr(profiler, "profile_device", broken)
    worker.quiet.set()
    assert wait_for(lambda: len(calls) >= reprofile.MAX_TRIES, 60)
    time.sleep(1.0)
    assert len(calls) == reprofile.MAX_TRIES and worker.last_error is None
    assert worker.submit("user job", lambda ctx: 7).wait(30) == 7


@pytest.mark.parametrize("damage", ["{not json", '{"target_seconds": {"1": 0.1}}'])
def test_a_cached_profile_that_cannot_be_read_leaves_the_worker_running(worker, damage):
    """The worker's loop reads the cached profile between jobs: a damaged file must not end it."""
    path = profiler.cache_dir() / "profiles" / f"{profiler.profile_key(worker.pair)}.json"
    assert path.exists()
    worker.quiet.set()
    path.write_text(damage)
    for i in range(3):   # each job's end makes the loop read the file again
        assert worker.submit("user job", lambda ctx, i=i: i).wait(30) == i
    assert worker._thread.is_alive() and not worker.profile_timed_again()


def test_the_app_times_a_noisy_profile_again_and_a_bare_worker_does_not():
    from app import create_app
    demo, ctx = create_app(load=False)
    bare = Worker()
    try:
        assert ctx.worker.reprofiler is not None and bare.reprofiler is None
    finally:
        ctx.worker.close()
        bare.close()


def test_the_cached_profile_is_read_once_per_write(tmp_path, monkeypatch):
    """ready_in is asked on every pass of the worker's loop and every Planner refresh: the
    profile file is parsed again only after it was written again."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    from engine.models import load_pair
    draft, target = tiny_pair_dirs("llama")
    pair = load_pair(str(draft), str(target), "cpu", "float32")
    prof = profiler.profile_device(pair, max_budget=4, max_width=4, repeats=1, max_repeats=1)
    profiler.save_profile(pair, _with_spread(prof, 9.0))
    reads, real = [], profiler.cached_profile
    monkeypatch.setattr(profiler, "cached_profile", lambda p: reads.append(1) or real(p))
    background = reprofile.Reprofiler()
    assert all(background.ready_in(pair) is not None for _ in range(50)) and len(reads) == 1
    profiler.save_profile(pair, _with_spread(prof, 0.01))   # a quiet profile now: nothing to do
    assert background.ready_in(pair) is None and len(reads) == 2
