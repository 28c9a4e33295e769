"""What the worker's jobs do, run on the worker thread, and the items their streams carry.

Each job body takes a JobContext (engine/worker.py: the pair, emit/progress, the stop flag) and
may be a generator: what it yields goes to the job's reader, what it returns is the job's result."""
from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import Any

from engine import profiler
from engine.learning import store_answers
from engine.planning import MAX_BUDGET, MethodSpec, Replanner, build_plan, learner_for, profile_budget
from engine.prompts import default_prompts
from engine.settings import Settings
from engine.wording import plural

log = logging.getLogger(__name__)

FIRST_LOAD_MAX_ROUNDS = 4  # timed rounds of the first load's device profile at most (3 at least;
#                            ~3 s each here: 6 left the first start at the 2-minute edge)


# ---------------------------------------------------------------- stream items
@dataclass
class Progress:
    fraction: float | None
    message: str


@dataclass
class Note:
    """Something a job wants its reader to know that is not a step: a plan, a lane starting, ..."""
    kind: str
    data: Any = None


@dataclass
class LaneEvent:
    """One StepEvent of one method in a race."""
    lane: str
    event: Any  # StepEvent


# ---------------------------------------------------------------- job bodies (run on the worker thread)
# a Stop ends a load as one of these stages starts; the last one comes once both models are loaded
LOAD_STOPS_AT = ("tokenizers", "target", "draft", "probe")
# what a stopped load left in place (Job.stopped_with; the Models tab says it)
KEPT_THE_PAIR, DROPPED_THE_PAIR, UNPROFILED = "kept the pair in use", "dropped the pair in use", "not profiled"


def load_job(ctx, draft, target, device, dtype, **placement):
    """Load a pair; a Stop ends it as its next stage starts (LOAD_STOPS_AT: a download or a
    conversion under way finishes first, and what it wrote is kept for the next load), or while
    the device is profiled. Its job's `stopped_with` then says what it left: KEPT_THE_PAIR (no
    model had started loading: the pair in use, if any, stays), DROPPED_THE_PAIR (the pair in use
    was dropped to make room: none is loaded), UNPROFILED (the new pair is loaded, not profiled)."""
    from engine.models import load_pair
    worker = ctx.worker
    worker.loading = True
    dropped = {"done": False, "pair": False}

    def progress(stage, fraction, message):
        if stage in LOAD_STOPS_AT and ctx.should_stop():
            ctx.job.stopped_with = DROPPED_THE_PAIR if dropped["pair"] else KEPT_THE_PAIR
            raise profiler.Stopped("load stopped")
        # the tokenizers are checked before the models load: only then drop the old pair, so a
        # typo or a mismatched pair leaves the loaded one in place
        if stage in ("target", "draft") and not dropped["done"]:
            dropped.update(done=True, pair=worker._pair is not None)
            worker._pair = None
            gc.collect()
        ctx.progress(fraction, message)

    stopped = False
    try:
        pair = load_pair(draft, target, device=device, dtype=dtype, progress=progress, **placement)
        worker._pair = pair   # before `loading` clears: the page never sees neither
    except profiler.Stopped:
        stopped = True   # raised again below, once this traceback (which holds the loaded models) is gone
    finally:
        worker.loading = False
    if stopped:   # models loaded before the Stop are unreferenced now: free them (and their heap)
        from engine.worker import release_device_memory
        release_device_memory()
        raise profiler.Stopped("load stopped")
    worker.last_error = None
    budget = profile_budget(pair, worker.profile_budget)
    # a profile timed to fewer sizes (a CLI `profile --max-budget 8` writes the same cache entry)
    # would leave the page's plans on t(n) extrapolated past its last size: time it again
    if worker.profile_on_load and not profiler.covers(profiler.cached_profile(pair), budget):
        # hardware-aware plans need t(n) of this device: measure it once, now, rather than on
        # the first Generate (cached per pair, device, dtype, placement and CPU kernels)
        ctx.progress(0.95, f"profiling this device once (t(n) up to n = {budget}; cached)")
        # few rounds even on a noisy machine: CLI runs correct it (engine/observed.py), and on a
        # machine whose speed drifts more rounds do not narrow the spread (up to 15 took 48 s here)
        ctx.job.stopped_with = UNPROFILED   # if a Stop ends the profile
        prof = profiler.profile_device(pair, max_budget=budget, max_width=min(budget, 16), repeats=3,
                                       max_repeats=FIRST_LOAD_MAX_ROUNDS, progress=ctx.progress,
                                       should_stop=ctx.should_stop)
        prof.source = str(profiler.save_profile(pair, prof))
    return pair.describe()


def check_job(ctx, config):
    from engine.check import run_check
    return run_check(ctx.pair, config, progress=ctx.progress, should_stop=ctx.should_stop)


def _measuring(ctx) -> dict:
    """build_plan's arguments for the app's jobs that plan (a Live plan, a run, a race): they plan
    as the page did (Worker.quick_plan), learning on or off, from an interpolated or nearest vector,
    measuring only what has no stand-in (with learning off a run at a setting the page had
    interpolated measured it first, 2 minutes here, then ran another tree than the page showed)."""
    w = ctx.worker
    return {"measure": True, "interpolate_first": True, "progress": ctx.progress, "should_stop": ctx.should_stop,
            "prompts": w.measure_prompts, "tokens_per_prompt": w.measure_tokens,
            "profile_budget": profile_budget(ctx.pair, w.profile_budget)}


def plan_job(ctx, spec: MethodSpec, settings: Settings, learn: bool = False, prompt: str | None = None,
             prompt_ids: list[int] | None = None):
    """The Live tab's plan when quick_plan found a measurement missing: measures only that (a
    hardware-aware plan with no device profile yet profiles the device, and takes an interpolated
    or nearest vector as a run would, instead of also measuring acceptance for minutes)."""
    result = build_plan(ctx.pair, spec, settings, learn=learn, prompt=prompt, prompt_ids=prompt_ids,
                        **_measuring(ctx))
    ctx.worker.note_plan(result, settings)
    return result


def generate_job(ctx, prompt, spec: MethodSpec, settings: Settings, chat, plan, learn: bool = True):
    """`plan` (zero-arg, between steps) may return a Tree, or an object with .tree and .spec (a
    PlanResult: its spec becomes the one learning re-plans with). With `learn`, each step's
    censored outcomes update the run's posterior and DP specs are re-planned from it between
    steps; the run's evidence is stored at the end (engine/learning.py).

    Its step costs are not recorded as observed costs (engine/observed.py; `python -m engine
    generate` records its own): the page renders every step in this process while the next step
    runs, and the browser draws on the same cores. Measured on a 2-core CPU
    (bench/live-observed/): Live runs saw the draft at 1.8x (page through the API) and 2.8x (in
    Chromium) its profiled seconds and the verify at 1.15-1.5x, and plans corrected by them chose
    2-level trees that lost the Race to the 4-level chain. Learning keeps the evidence (which
    tokens were accepted does not depend on timing)."""
    from engine.decoding import Decoder
    from engine.models import encode_prompt
    pair = ctx.pair
    ids = encode_prompt(pair, prompt, chat)
    result = build_plan(pair, spec, settings, learn=learn, prompt=prompt, prompt_ids=ids, **_measuring(ctx))
    ctx.worker.note_plan(result, settings)
    yield Note("plan", result)
    method = result.method
    replan = Replanner(pair, result, settings, user=plan, learn=learn, prompt_ids=ids)
    events = []
    for event in Decoder(pair, method, settings, plan=replan).run(ids, should_stop=ctx.should_stop,
                                                                  progress=ctx.progress):
        events.append(event)
        replan.observe(event)
        if replan.learner is not None and event.nodes:  # before the event: the page draws both at once
            yield Note("learning", replan.state())
        yield event
    replan.finish()
    return events[-1] if events else None


def _lane_progress(ctx, lane: str):
    """A lane's prefill progress (long prompts only), named after the lane."""
    return lambda fraction, message: ctx.progress(None, f"{lane}: {message}")


def race_job(ctx, prompt, specs, settings: Settings, chat, warmup_tokens: int, learn: bool = True):
    """Lanes keep their planned trees (a fair race); with `learn` the plans start from the learned
    vector and the lanes whose steps are evidence store them (engine/learning.py: at T = 0 as one
    answer, one run, since the lanes give the same text; sampled lanes as runs of their own); the
    first such lane also adds its opening and rest to the prompt's memory (engine/prompt_memory.py:
    the lanes answer one prompt once).

    The lanes' step costs are not recorded as observed costs (engine/observed.py): a browser
    drawing the race on the same cores lands on whichever lane steps while the page updates, so
    lanes of different tree sizes get unevenly inflated seconds (one Race measured the same tree
    at 8.0 and 6.6 tok/s in two lanes), which would bend the t(n) curve later plans read. Which
    tokens were accepted does not depend on timing, so learning keeps every lane's evidence."""
    from engine.decoding import Decoder
    from engine.interleave import Lane, run_together
    from engine.models import encode_prompt
    pair = ctx.pair
    ids = encode_prompt(pair, prompt, chat)
    planned = []
    for i, (lane, spec) in enumerate(specs):
        ctx.progress(i / len(specs), f"planning {lane}")
        planned.append((lane, build_plan(pair, spec, settings, learn=learn, prompt=prompt, prompt_ids=ids,
                                         **_measuring(ctx))))
        ctx.worker.note_plan(planned[-1][1], settings)
    yield Note("race", planned)
    if warmup_tokens > 0:  # untimed: first calls pay one-off allocation costs
        warm = Settings(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
                        max_new_tokens=warmup_tokens, seed=settings.seed, ignore_eos=True)
        for lane, result in planned:
            if ctx.should_stop():   # a Stop during one lane's warm-up ends them all, not just that one
                break
            ctx.progress(None, f"race warm-up (untimed): {lane}")
            for _ in Decoder(pair, result.method, warm).run(ids, should_stop=ctx.should_stop,
                                                            progress=_lane_progress(ctx, f"warm-up, {lane}")):
                pass
    # the lanes step in turn, the one furthest behind first (engine/interleave.py): a machine whose
    # speed drifts slows every lane alike instead of whichever ran in a slow minute
    lanes = [Lane(lane, Decoder(pair, result.method, settings).run(ids, should_stop=ctx.should_stop,
                                                                   progress=_lane_progress(ctx, lane)),
                  settings.max_new_tokens) for lane, result in planned]
    # the header shows the last progress line: it said "race warm-up (untimed)" all through the race
    ctx.progress(None, f"race: timing {plural(len(planned), 'lane')} together")
    yield Note("together", [lane for lane, _ in planned])
    for lane, event in run_together(lanes):
        yield LaneEvent(lane.name, event)
    summaries, learners = [], []
    for (lane, result), run in zip(planned, lanes):
        events = run.events
        if not events:
            continue
        # one answer is one run of the prompt: only the first learning lane adds to its memory
        learner = learner_for(pair, result, settings, prompt_ids=None if learners else ids) if learn else None
        if learner is not None:
            for event in events:
                learner.observe(event)
            learners.append(learner)
        last = events[-1]
        summaries.append({"lane": lane, "label": result.method.label, "tokens": last.total_tokens,
                          "steps": last.total_steps, "seconds": last.total_seconds,
                          "prefill_seconds": last.prefill_seconds, "tokens_per_step": last.tokens_per_step,
                          "tokens_per_second": last.tokens_per_second, "text": last.text,
                          "token_ids": last.token_ids, "finish_reason": last.finish_reason,
                          "expected_tokens": result.expected_tokens})
    store_answers(learners, settings.greedy)   # at T = 0 the lanes' one greedy answer, once
    return summaries


def measure_job(ctx, temperature, top_p, sampler, prompts, force, top_k: int = 0):
    pair = ctx.pair
    if not force:
        vec = profiler.cached_acceptance(pair, temperature, top_p, sampler, top_k=top_k)
        if vec is not None:
            return vec
    prompts = prompts or ctx.worker.measure_prompts
    if prompts is None:
        prompts = default_prompts()
    vec = profiler.measure_acceptance(pair, prompts, temperature, top_p, sampler,
                                      tokens_per_prompt=ctx.worker.measure_tokens, progress=ctx.progress,
                                      should_stop=ctx.should_stop, top_k=top_k)
    vec.source = str(profiler.save_acceptance(pair, vec))
    return vec


def background_job(ctx, task):
    """One background unit of `task`: engine/reprofile.py's Reprofiler (the device timed again) or
    engine/refine.py's Refiner (one prompt of the latest settings planned from an interpolated
    vector). Result: what the unit saved, else None."""
    return task.run_unit(ctx.pair, ctx.should_stop, ctx.progress)


@dataclass
class ProfileKept:
    """A profile job's result when its new timing was noisy and the clean cached profile stayed."""
    kept: profiler.DeviceProfile
    noisy: profiler.DeviceProfile


def profile_job(ctx, max_budget, force):
    pair = ctx.pair
    cached = profiler.cached_profile(pair)
    if cached is not None and not force:
        return cached
    prof = profiler.profile_device(pair, max_budget=min(max_budget, MAX_BUDGET), progress=ctx.progress,
                                   should_stop=ctx.should_stop)
    if cached is not None and profiler.clean_one_stays(cached, prof):
        log.info("profile timed while the machine was busy (repeats spread %.0f %%): the clean cached one stays",
                 prof.quality.get("worst_spread", 0) * 100)
        return ProfileKept(cached, prof)
    prof.source = str(profiler.save_profile(pair, prof))
    return prof
