"""The background engine: one thread owns the model pair and runs one job at a time.

Callers (the Gradio app, tests, scripts) never touch a model: they `submit` a job and read its
stream of items (StepEvent, Progress, Note, LaneEvent) until it ends.

    worker = Worker()
    worker.load("default", "default").wait()
    job = worker.generate("Write a haiku", MethodSpec("sequoia", budget=32, depth=8), Settings())
    for item in job.stream():          # blocks; raises the job's error at the end if it failed
        ...
    job.stop()                         # ends the job between two steps (or before it starts)

Rules:
- Jobs run in submission order on the worker thread, never two at once, so timings are honest.
- Stop is a flag checked between steps; a stopped decode ends with a StepEvent whose
  finish_reason is "stopped"; a stopped measurement ends the job in state "stopped".
- A failing job records its error (UserError/TreeError: a message for the user; anything else:
  an internal error with a traceback in the log) and the worker goes on with the next job.
- While the worker is idle it may run background units (engine/reprofile.py: timing the device
  again when its cached profile is noisy and the machine is quiet; engine/refine.py: measuring
  settings a plan had to interpolate a vector for, or take the nearest one); a submitted job
  stops the running unit at its next step and starts after it, never beside it. status() shows a unit but says "idle".
- Quick lookups that read caches only (`quick_plan`, `cached_acceptance`, `cached_profile`,
  `describe`) run on the caller's thread and never call a model.
"""
from __future__ import annotations

import gc
import itertools
import logging
import queue
import threading
import time
import traceback
from typing import Any, Callable, Iterator

from engine import jobs, observed, profiler, refine, reprofile
from engine.errors import UserError
from engine.jobs import LaneEvent, Progress
from engine.planning import PROFILE_BUDGET, MethodSpec, PlanResult, build_plan
from engine.settings import Settings
from engine.tree import Tree, TreeError
from engine.wording import plural

log = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, FAILED, STOPPED = "queued", "running", "done", "failed", "stopped"
_END = object()
_WAKE = object()  # put on the queue to make the loop look again (background work arrived)
PROFILE_JOB = "profile device"   # a Profile's job (profiling_now looks for it)
LOAD_JOB = "load models"   # the name a pair load's job goes by (the app keys its job table, app/state.JOB_KINDS, by name)



# ---------------------------------------------------------------- jobs
class Job:
    _ids = itertools.count(1)

    def __init__(self, worker: "Worker", name: str, fn: Callable, args: tuple, kwargs: dict):
        self.id = next(Job._ids)
        self.name, self.worker = name, worker
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self.state = QUEUED
        self.error: BaseException | None = None
        self.result: Any = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.background = False  # a unit of background measurement (engine/refine.py): any job stops it
        self.stopped_with: str | None = None   # what a stopped job left in place, where it says (a load)
        self._items: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._finished = threading.Event()

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.name} {self.state}>"

    # ---- control
    def stop(self) -> None:
        """Ask the job to end between two steps; a job still queued never starts."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    @property
    def position(self) -> int:
        """Jobs that will run before this one starts (0 when running or finished)."""
        return self.worker._position(self)

    # ---- reading
    def stream(self, timeout: float | None = None) -> Iterator[Any]:
        """Every item the job emits, in order, until it ends; then raises its error if it failed.
        Only one reader per job. `timeout` bounds each wait (queue.Empty -> TimeoutError)."""
        while True:
            try:
                item = self._items.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"job {self.id} ({self.name}) sent nothing for {timeout} s") from None
            if item is _END:
                break
            yield item
        if self.state == FAILED and self.error is not None:
            raise self.error

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the job ends (items are left unread); its result, or its error raised."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"job {self.id} ({self.name}) still {self.state} after {timeout} s")
        if self.state == FAILED and self.error is not None:
            raise self.error
        return self.result

    # ---- worker side
    def _emit(self, item: Any) -> None:
        self._items.put(item)

    def _finish(self, state: str, error: BaseException | None = None, result: Any = None) -> None:
        self.state, self.error, self.result = state, error, result
        self.finished_at = time.time()
        self._finished.set()   # first: a reader whose stream just ended sees the job done
        self._items.put(_END)


class JobContext:
    """What a job function gets: the pair, a way to emit items and progress, the stop flag."""

    def __init__(self, worker: "Worker", job: Job):
        self.worker, self.job = worker, job

    @property
    def pair(self):
        pair = self.worker._pair
        if pair is None:
            raise UserError("no model pair is loaded: load one in the Models tab (or wait for loading to finish)")
        return pair

    def emit(self, item: Any) -> None:
        self.job._emit(item)
        self.worker._note_item(self.job, item)

    def progress(self, fraction: float | None, message: str) -> None:
        self.emit(Progress(fraction, message))

    def should_stop(self) -> bool:
        return self.job._stop.is_set()


class Worker:
    """One thread, one model pair, one job at a time."""

    def __init__(self, name: str = "sequoia-worker", measure_prompts: list[str] | None = None,
                 measure_tokens: int = 48, profile_budget: int = PROFILE_BUDGET, profile_on_load: bool = True,
                 refine_in_background: bool = True, background_profile: bool = False):
        # how acceptance vectors and device profiles are measured when a job needs one
        # (None = the engine's default prompts, assets/prompts.json)
        self.measure_prompts, self.measure_tokens, self.profile_budget = measure_prompts, measure_tokens, profile_budget
        self.profile_on_load = profile_on_load  # a first load profiles the device (hardware-aware plans need it)
        # settings planned from an interpolated vector are measured while idle (engine/refine.py)
        self.refiner = refine.Refiner() if refine_in_background else None
        # a noisy cached device profile is timed again while idle and quiet (engine/reprofile.py);
        # off unless asked for (the app asks): a test's worker must not start timing on its own
        self.reprofiler = reprofile.Reprofiler() if background_profile else None
        self._last_user_activity = time.monotonic()  # background units wait for IDLE_SECONDS after it
        self._pair = None
        self._queue: queue.Queue = queue.Queue()
        self._pending: list[Job] = []
        self._lock = threading.Lock()
        self._current: Job | None = None
        self._activity = {"message": "idle", "fraction": None, "step": None}
        self.last_error: str | None = None
        self.loading = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # ---- submitting
    def submit(self, name: str, fn: Callable, *args, **kwargs) -> Job:
        """Queue fn(ctx, *args, **kwargs). fn may return a value or be a generator: each item it
        yields is emitted, and its return value becomes the job's result."""
        if self._closed:
            raise UserError("the worker is shut down")
        job = Job(self, name, fn, args, kwargs)
        self._last_user_activity = time.monotonic()
        with self._lock:
            self._pending.append(job)
            background = self._current if self._current is not None and self._current.background else None
        self._queue.put(job)
        if background is not None:  # the user's job goes first: the unit ends at its next step
            background.stop()
        return job

    def note_plan(self, result, settings: Settings, passing: bool = False) -> None:
        """A plan was made: if it used an interpolated or nearest vector (none measured at its
        settings), measure its settings while idle. `passing`: a page's quick plan (a control
        moved), which the next one may show was only passed on the way (refine.Refiner.want)."""
        pair = self._pair
        if (self.refiner is not None and pair is not None and result is not None
                and result.measured_acceptance is not None and not result.exact):
            if self.refiner.want(pair, settings, result.method.sampler, passing=passing):
                self._queue.put(_WAKE)  # the loop may be waiting with no timeout

    def _running_then_queued(self) -> list[Job]:
        with self._lock:
            return ([self._current] if self._current else []) + list(self._pending)

    def stop(self, job_id: int | None = None) -> bool:
        """Stop one job by id (queued or running), or the running one; True if one was found."""
        for job in self._running_then_queued():
            if job_id is None or job.id == job_id:
                job.stop()
                return True
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Stop everything, end the thread and drop the models."""
        self._closed = True
        for job in self._running_then_queued():
            job.stop()
        self._queue.put(None)
        self._thread.join(timeout)
        self._pair = None
        gc.collect()

    # ---- looking (no queue, no model calls)
    @property
    def pair(self):
        return self._pair

    @property
    def current(self) -> Job | None:
        return self._current

    @property
    def load_underway(self) -> bool:
        """A pair load runs, or waits in the queue (and was not stopped): the pair is coming."""
        return self.loading or any(job.name == LOAD_JOB and not job.stop_requested
                                   for job in self._running_then_queued())

    def describe(self) -> dict | None:
        pair = self._pair
        return pair.describe() if pair is not None else None

    def status(self) -> dict:
        with self._lock:
            cur, queued = self._current, len(self._pending)
            act = dict(self._activity)
        if cur is not None and cur.background:  # shown, but the worker counts as idle: any job goes first
            return {"pair": self.describe(), "job": None, "job_id": None, "state": "idle",
                    "message": f"idle · {act['message']}", "fraction": None, "step": None, "queued": queued,
                    "loading": self.load_underway, "last_error": self.last_error,
                    "background": act["message"]}
        return {"pair": self.describe(), "job": cur.name if cur else None, "job_id": cur.id if cur else None,
                "state": "busy" if cur else "idle", "message": act["message"] if cur else "idle",
                "fraction": act["fraction"] if cur else None, "step": act["step"] if cur else None,
                "queued": queued, "loading": self.load_underway, "last_error": self.last_error}

    def profiling_now(self) -> bool:
        """Whether the device is being timed right now (a load's first profile, or a Profile job)."""
        with self._lock:
            cur = self._current
        return cur is not None and not cur.background and cur.name in (LOAD_JOB, PROFILE_JOB)

    def memory(self) -> dict:
        out = {}
        try:
            import psutil
            out["process_rss_bytes"] = psutil.Process().memory_info().rss
            vm = psutil.virtual_memory()
            out["system_available_bytes"], out["system_total_bytes"] = vm.available, vm.total
        except ImportError:  # pragma: no cover - psutil is in requirements
            pass
        pair = self._pair
        if pair is not None and pair.device.type == "cuda":
            import torch
            out["cuda_allocated_bytes"] = torch.cuda.memory_allocated(pair.device)
            out["cuda_reserved_bytes"] = torch.cuda.memory_reserved(pair.device)
            out["cuda_total_bytes"] = torch.cuda.get_device_properties(pair.device).total_memory
        if pair is not None:
            out["parameter_bytes"] = pair.model_bytes()
        return out

    def cached_acceptance(self, temperature: float, top_p: float = 1.0, sampler: str = "sequoia", top_k: int = 0):
        pair = self._pair
        return (profiler.cached_acceptance(pair, temperature, top_p, sampler, top_k=top_k)
                if pair is not None else None)

    def profile_timed_again(self) -> bool:
        """Whether the cached profile is noisy and will be timed again while idle (engine/reprofile.py)."""
        return self.reprofiler is not None and self.reprofiler.ready_in(self._pair) is not None

    def profile_stamp(self):
        """profiler.profile_stamp of the loaded pair (None without a pair or a profile)."""
        pair = self._pair
        return profiler.profile_stamp(pair) if pair is not None else None

    def cached_profile(self):
        pair = self._pair
        return profiler.cached_profile(pair) if pair is not None else None

    def observed_costs(self) -> dict | None:
        """Profiled vs observed step costs of the loaded pair (engine/observed.py), or None."""
        pair = self._pair
        if pair is None:
            return None
        return observed.load(profiler.profile_key(pair)).summary(profiler.cached_profile(pair))

    def quick_plan(self, spec: MethodSpec, settings: Settings, allow_nearest: bool = True,
                   learn: bool = True, prompt: str | None = None) -> PlanResult:
        """A plan from caches only (never measures, never calls a model). Raises
        NeedsMeasurement when a vector or profile is missing (and no nearest vector may stand in).
        `prompt` (the Live prompt): its domain's vector, and with `learn` what its earlier runs
        observed, as a run of it would plan (chat template as a run's default)."""
        pair = self._pair
        if pair is None:
            raise UserError("no model pair is loaded yet")
        self._last_user_activity = time.monotonic()  # someone is moving sliders: no background unit yet
        result = build_plan(pair, spec, settings, measure=False, allow_nearest=allow_nearest, learn=learn,
                            prompt=prompt, prompt_ids=_prompt_ids(pair, prompt) if learn else None)
        self.note_plan(result, settings, passing=True)
        return result

    # ---- the jobs the app uses
    def load(self, draft: str = "default", target: str = "default", device: str | None = None,
             dtype: str | None = None, *, target_device_map=None, draft_device_map=None, max_memory=None,
             offload_folder=None, cpu_kernels: str | None = None, draft_weights: str | None = None) -> Job:
        """Load a pair (see engine.models.load_pair for the device-map and CPU-kernel arguments).
        Result: describe()."""
        placement = {"target_device_map": target_device_map, "draft_device_map": draft_device_map,
                     "max_memory": max_memory, "offload_folder": offload_folder, "cpu_kernels": cpu_kernels,
                     "draft_weights": draft_weights}
        return self.submit(LOAD_JOB, jobs.load_job, draft, target, device, dtype,
                           **{k: v for k, v in placement.items() if v})

    def check(self, config=None) -> Job:
        """The losslessness self-check (engine.check.run_check) on the loaded pair. Stream: Progress
        (the first message after the timing carries the time estimate). Result: CheckReport (its
        verdict is STOPPED when the job was stopped)."""
        if config is not None:
            config.validate()
        return self.submit("check pair", jobs.check_job, config)

    def generate(self, prompt: str, spec: MethodSpec, settings: Settings, chat: bool | None = None,
                 plan: Callable[[], Tree | None] | None = None, learn: bool = True) -> Job:
        """Stream: Progress while planning/measuring, Note('plan', PlanResult), then StepEvents
        (with learn, each preceded by Note('learning', {prior, observed, posterior, ...})).
        `plan` (zero-arg, called between steps) may return a new tree (or a PlanResult) for the
        next step, or None to keep the current one. `learn`: engine/learning.py."""
        spec.check()
        return self.submit("generate", jobs.generate_job, prompt, spec, settings, chat, plan, learn)

    def race(self, prompt: str, specs: list[tuple[str, MethodSpec]], settings: Settings,
             chat: bool | None = None, warmup_tokens: int = 2, learn: bool = True) -> Job:
        """Stream: Progress while planning, Note('race', [(lane, PlanResult)]), Note('together', lanes),
        then the lanes' LaneEvents interleaved step by step (engine/interleave.py). Result: list of
        per-lane summaries."""
        if not specs:
            raise UserError("pick at least one method for the race")
        for _, spec in specs:
            spec.check()
        return self.submit("race", jobs.race_job, prompt, list(specs), settings, chat, warmup_tokens, learn)

    def measure(self, temperature: float, top_p: float = 1.0, sampler: str = "sequoia",
                prompts: list[str] | None = None, force: bool = False, top_k: int = 0) -> Job:
        """Acceptance vector for these settings (cached one unless force). Result: AcceptanceVector."""
        Settings(temperature=temperature, top_p=top_p, top_k=top_k)  # validates
        return self.submit("measure acceptance", jobs.measure_job, temperature, top_p, sampler, prompts, force,
                           top_k)

    def profile(self, max_budget: int | None = None, force: bool = False) -> Job:
        """Device profile t(n) (cached one unless force). Result: DeviceProfile, or jobs.ProfileKept
        where the new timing was noisy and the clean cached profile stayed."""
        return self.submit(PROFILE_JOB, jobs.profile_job, max_budget or self.profile_budget, force)

    def plan(self, spec: MethodSpec, settings: Settings, learn: bool = False, prompt: str | None = None) -> Job:
        """Plan with measurements if needed (progress streamed), as quick_plan would plan once they
        are in: `learn` and `prompt` as there. Result: PlanResult."""
        spec.check()
        ids = _prompt_ids(self._pair, prompt) if learn and self._pair is not None else None
        return self.submit("plan", jobs.plan_job, spec, settings, learn, prompt, ids)

    # ---- internals
    def _position(self, job: Job) -> int:
        """A background unit running now is not counted: it stops at its next step for any job (a
        run read "1 job ahead" while nothing but the background measurement was there)."""
        with self._lock:
            if job in self._pending:
                return self._pending.index(job) + (1 if self._current and not self._current.background else 0)
        return 0

    def _note_item(self, job: Job, item: Any) -> None:
        with self._lock:
            if isinstance(item, Progress):
                self._activity.update(message=item.message, fraction=item.fraction)
            else:
                ev = item.event if isinstance(item, LaneEvent) else item
                if hasattr(ev, "step") and hasattr(ev, "total_tokens"):
                    lane = f"{item.lane}: " if isinstance(item, LaneEvent) else ""
                    tokens = plural(ev.total_tokens, 'token')
                    self._activity.update(message=f"{job.name} — {lane}step {ev.step}, {tokens}",
                                          fraction=None, step=ev.step)

    def _background_waits(self) -> list[tuple[float, Any]]:
        """(seconds until it may start, task) for each background task with work for this pair;
        the device profile first (every hardware-aware plan reads it), though its try also waits
        for a quiet machine, which the refiner's units, while any are pending, do not leave."""
        if self._closed:
            return []
        waits = []
        if self.reprofiler is not None:
            wait = self.reprofiler.ready_in(self._pair)   # never raises: the loop must not die on a bad file
            if wait is not None:
                waits.append((wait, self.reprofiler))
        if self.refiner is not None and self.refiner.has_work(self._pair):
            waits.append((0.0, self.refiner))
        return waits

    def _idle_wait(self) -> float | None:
        """How long to wait for a job before a background unit runs (None: no background work)."""
        waits = self._background_waits()
        if not waits:
            return None
        idle_left = refine.IDLE_SECONDS - (time.monotonic() - self._last_user_activity)
        return max(0.0, idle_left, min(wait for wait, _ in waits))

    def _loop(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=self._idle_wait())
            except queue.Empty:  # idle long enough (unless a slider moved meanwhile): one background unit
                wait = self._idle_wait()
                if wait is None or wait > 0:
                    continue
                task = next((task for wait, task in self._background_waits() if wait <= 0), None)
                if task is None:  # its work went meanwhile (another process replaced the profile)
                    continue
                job = Job(self, task.job_name, jobs.background_job, (task,), {})
                job.background = True
                with self._lock:
                    if self._pending:  # a job arrived just now: it goes first (submit() checks under this lock)
                        continue
                    self._current = job
                    # until its first progress line says more: which task (the header showed "starting")
                    what = task.job_name.replace(" (background)", "")
                    self._activity = {"message": f"background: {what}, starting", "fraction": None, "step": None}
                self._execute(job)
                continue
            if job is None:
                return
            if job is _WAKE:
                continue
            with self._lock:
                if job in self._pending:
                    self._pending.remove(job)
                if job._stop.is_set():  # stopped while queued: never starts
                    job._finish(STOPPED)
                    continue
                self._current = job
                self._activity = {"message": f"{job.name}: starting", "fraction": None, "step": None}
            self._execute(job)

    def _execute(self, job: Job) -> None:
        """Run one job on this thread (the worker's current job is set) and record how it ended."""
        job.state, job.started_at = RUNNING, time.time()
        try:
            self._run(job)
        except BaseException as exc:  # noqa: BLE001 - the worker must survive any job
            if isinstance(exc, profiler.Stopped):
                job._finish(STOPPED)
            else:
                if not isinstance(exc, (UserError, TreeError)):
                    log.error("job %s (%s) failed:\n%s", job.id, job.name, traceback.format_exc())
                self.last_error = f"{job.name}: {exc}"
                # the job keeps its error for its reader; its frames' locals (a load's half-loaded
                # models, say) must not stay alive with it
                _clear_frames(exc)
                release_device_memory()  # e.g. after an out-of-memory error
                job._finish(FAILED, exc)
        finally:
            with self._lock:
                self._current = None
                self._activity = {"message": "idle", "fraction": None, "step": None}
            if not job.background:
                self._last_user_activity = time.monotonic()

    def _run(self, job: Job) -> None:
        ctx = JobContext(self, job)
        out = job._fn(ctx, *job._args, **job._kwargs)
        result = None
        if hasattr(out, "__next__"):
            while True:
                try:
                    item = next(out)
                except StopIteration as stop:
                    result = stop.value
                    break
                ctx.emit(item)
        else:
            result = out
        stopped = job._stop.is_set() and _ended_by_the_stop(result)
        if not stopped and not job.background:
            self.last_error = None   # the header's warning is about the worker now, not for good
        job._finish(STOPPED if stopped else DONE, result=result)   # (after it: a waiter reads the new state)


def _prompt_ids(pair, prompt: str | None) -> list[int] | None:
    """The Live prompt's tokens as a run would encode them, or None (no prompt, or one that does
    not encode: the run itself says why)."""
    from engine.models import encode_prompt, prompt_is_blank
    if prompt_is_blank(prompt):
        return None
    try:
        return encode_prompt(pair, prompt)
    except Exception:  # noqa: BLE001 - a plan without the prompt's memory beats no plan
        log.warning("could not encode the prompt for its memory", exc_info=True)
        return None


def _clear_frames(exc: BaseException) -> None:
    """Clear the locals of every frame of `exc`'s traceback and of the exceptions it was raised
    from or during (`raise ... from None` keeps __context__ and its frames)."""
    seen, chained = set(), [exc]
    while chained:
        exc = chained.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        chained += [exc.__cause__, exc.__context__]


def release_device_memory() -> None:
    """Free what a failed or stopped job left unreferenced, and hand the heap back to the OS."""
    from engine.cpu_kernels import release_freed_memory
    gc.collect()
    release_freed_memory()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _ended_by_the_stop(result) -> bool:
    """Whether a job whose Stop was asked for ended because of it: no result, a run whose last event
    the Stop ended, or a race (its lanes' summaries) with a lane the Stop ended or none at all."""
    if result is None:
        return True
    if isinstance(result, list):
        return not result or any(isinstance(lane, dict) and lane.get("finish_reason") == "stopped" for lane in result)
    return getattr(result, "finish_reason", None) == "stopped"


__all__ = ["Worker", "Job", "JobContext", "QUEUED", "RUNNING", "DONE", "FAILED", "STOPPED"]
