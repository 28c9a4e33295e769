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
- Quick lookups that read caches only (`quick_plan`, `cached_acceptance`, `cached_profile`,
  `describe`) run on the caller's thread and never call a model.
"""
from __future__ import annotations

import gc
import itertools
import json
import logging
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from engine import methods as methods_mod
from engine import planner, profiler
from engine.errors import UserError
from engine.paths import cache_dir
from engine.plans import MAX_BUDGET, TABLE_DEPTH, check_shape, table_for  # noqa: F401
from engine.settings import Settings
from engine.tree import Tree, TreeError

log = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, FAILED, STOPPED = "queued", "running", "done", "failed", "stopped"
_END = object()

METHOD_KINDS = ("ar", "chain", "specinfer", "sequoia", "sequoia-auto", "tree")
PROFILE_BUDGET = 128  # largest tree the device profile times (bigger ones are extrapolated)


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


# ---------------------------------------------------------------- methods and plans
@dataclass(frozen=True)
class MethodSpec:
    """What the user asked for; turned into a Method (and maybe a plan) on the worker.

    kind: ar | chain | specinfer | sequoia (DP for budget/depth) | sequoia-auto (hardware-aware,
    budget/depth are upper bounds) | tree (a given tree, e.g. imported).
    SpecInfer's width defaults to the most chains of `depth` levels that fit in `budget` nodes."""
    kind: str
    budget: int = 16
    depth: int = 8
    width: int | None = None
    tree: Tree | None = None

    def check(self) -> None:
        if self.kind not in METHOD_KINDS:
            raise UserError(f"unknown method '{self.kind}' (use one of {', '.join(METHOD_KINDS)})")
        if self.kind == "tree":
            if self.tree is None:
                raise UserError("no tree given: import a tree JSON or growmap first")
            return
        if self.kind != "ar":
            check_shape(self.budget, self.depth)
        if self.kind in ("chain", "specinfer") and self.depth < 2:
            raise UserError(f"{self.kind} needs depth >= 2 (the root is level 1)")
        if self.kind in ("chain", "specinfer"):
            nodes = 1 + self.specinfer_width * (self.depth - 1) if self.kind == "specinfer" else self.depth
            if nodes > self.budget:
                raise UserError(f"{self.kind} with depth {self.depth} needs {nodes} nodes, above the budget of "
                                f"{self.budget}; lower the depth or raise the budget")

    @property
    def specinfer_width(self) -> int:
        if self.width is not None:
            return self.width
        return max(1, (self.budget - 1) // max(1, self.depth - 1))


@dataclass
class PlanResult:
    spec: MethodSpec
    method: Any                       # engine.methods.Method
    expected_tokens: float | None     # F(tree) under the acceptance vector, when one applies
    acceptance: Any = None            # profiler.AcceptanceVector used (or None)
    acceptance_note: str = ""         # where the vector came from, said in words
    exact: bool = True                # the vector is for exactly these settings
    profile: Any = None               # profiler.DeviceProfile (or None)
    choice: Any = None                # planner.Choice for hardware-aware plans
    predicted_speedup: float | None = None
    predicted_seconds_per_step: float | None = None

    @property
    def tree(self) -> Tree:
        return self.method.tree

    def summary(self) -> dict:
        t = self.tree
        out = {"method": self.method.name, "label": self.method.label, "budget": t.size, "size": t.size,
               "depth": t.depth, "levels": t.level_widths, "parents": list(t.parents),
               "expected_tokens": self.expected_tokens, "acceptance_note": self.acceptance_note,
               "exact_acceptance": self.exact, "predicted_speedup": self.predicted_speedup}
        if self.acceptance is not None:
            out.update(acceptance=list(self.acceptance.probabilities), acceptance_source=self.acceptance.source,
                       acceptance_positions=self.acceptance.positions,
                       acceptance_temperature=self.acceptance.temperature)
        if self.profile is not None:
            out["profile_source"] = self.profile.source
        if self.choice is not None:
            out.update(chosen_budget=self.choice.n, chosen_depth=self.choice.d)
        return out


class NeedsMeasurement(UserError):
    """quick_plan could not plan from caches alone: `what` is 'acceptance' or 'profile'."""

    def __init__(self, what: str, message: str):
        super().__init__(message)
        self.what = what


def _source_note(vec) -> str:
    return f"measured over {vec.positions} positions, cache file {vec.source}"


def measured_vectors(pair, sampler: str = "sequoia") -> list:
    """Every cached acceptance vector of this pair (user cache and shipped files), any settings."""
    out = []
    for folder in (cache_dir() / "acceptance", profiler.SHIPPED / "acceptance"):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            try:
                vec = profiler.AcceptanceVector(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if vec.draft == pair.draft_name and vec.target == pair.target_name:
                vec.source = str(path)
                out.append(vec)
    return out


def nearest_vector(pair, temperature: float, top_p: float, sampler: str = "sequoia"):
    """The measured vector closest in (temperature, top-p) with the same kind of sampler, or None.
    Greedy (T=0) vectors only stand in for T=0 and sampling ones only for T>0."""
    want = "greedy" if temperature == 0 else sampler
    cands = [v for v in measured_vectors(pair) if v.sampler == want]
    if not cands:
        return None
    return min(cands, key=lambda v: (abs(v.temperature - temperature) + abs(v.top_p - top_p), v.temperature))


def _predicted(tree: Tree, vec, prof) -> tuple[float | None, float | None, float | None]:
    """(expected tokens/step, seconds/step, speedup over autoregressive) from measurements only."""
    if tree.size == 1:
        expected = 1.0
    elif vec is None:
        return None, None, None
    else:
        expected = tree.expected_tokens(vec.probabilities)
    if prof is None:
        return expected, None, None
    target = planner.CostCurve(prof.target_seconds, "target_seconds")
    draft = planner.CostCurve(prof.draft_seconds, "draft_seconds")
    seconds = planner.step_seconds(tree.expanding_widths, target, draft, tree.size, prof.overhead_seconds)
    baseline = target(1) + prof.overhead_seconds
    return expected, seconds, (expected / seconds * baseline) if seconds > 0 else None


def build_plan(pair, spec: MethodSpec, settings: Settings, *, measure: bool, allow_nearest: bool = False,
               progress: Callable[[float | None, str], None] | None = None,
               should_stop: Callable[[], bool] = lambda: False, prompts: list[str] | None = None,
               tokens_per_prompt: int = 48, profile_budget: int = PROFILE_BUDGET) -> PlanResult:
    """Spec -> Method (+ the numbers that predict it). Measures only when `measure` is True;
    otherwise raises NeedsMeasurement. Pure cache reads when measure=False (no model calls)."""
    spec.check()
    kind = spec.kind
    if kind == "ar":
        method = methods_mod.autoregressive()
    elif kind == "chain":
        method = methods_mod.chain(spec.depth)
    elif kind == "specinfer":
        method = methods_mod.specinfer(spec.specinfer_width, spec.depth)
    elif kind == "tree":
        method = methods_mod.sequoia(spec.tree)
    else:
        method = None
    sampler = method.sampler if method is not None else "sequoia"
    T, top_p = settings.temperature, settings.top_p
    vec, exact, note = profiler.cached_acceptance(pair, T, top_p, sampler), True, ""
    needs_vec = kind in ("sequoia", "sequoia-auto")
    if vec is None and needs_vec:
        if measure:
            prog = (lambda f, m: progress(f, m)) if progress else None
            vec = profiler.acceptance_vector(pair, T, top_p, sampler, measure=True, progress=prog,
                                             should_stop=should_stop, prompts=prompts,
                                             tokens_per_prompt=tokens_per_prompt)
            note = f"measured just now over {vec.positions} positions (cached in {vec.source})"
        else:
            near = nearest_vector(pair, T, top_p, sampler) if allow_nearest else None
            if near is None:
                raise NeedsMeasurement("acceptance", f"no acceptance vector measured for this pair at T={T:g}, "
                                       f"top-p={top_p:g}: it must be measured first")
            vec, exact = near, False
            note = (f"no vector measured at T={T:g}, top-p={top_p:g}: using the nearest measured one "
                    f"(T={near.temperature:g}, top-p={near.top_p:g}; {near.positions} positions, {near.source})")
    elif vec is not None:
        note = _source_note(vec)
    elif kind == "ar":
        note = "autoregressive: one token per step, no acceptance vector needed"
    else:
        note = f"no acceptance vector measured for the {sampler} sampler at T={T:g}: no prediction"
    prof = profiler.cached_profile(pair)
    choice = None
    if kind == "sequoia-auto":
        if prof is None:
            if not measure:
                raise NeedsMeasurement("profile", "hardware-aware planning needs a device profile: "
                                       "profile this device first")
            prof = profiler.device_profile(pair, measure=True, max_budget=profile_budget,
                                           progress=progress, should_stop=should_stop)
        table = table_for(vec.probabilities, spec.budget, spec.depth)
        choice = planner.choose_shape(table, prof.target_seconds, prof.draft_seconds, prof.overhead_seconds,
                                      budgets=range(1, spec.budget + 1), depths=range(1, spec.depth + 1))
        method = methods_mod.sequoia(choice.tree, name="sequoia-auto")
    elif kind == "sequoia":
        table = table_for(vec.probabilities, spec.budget, spec.depth)
        method = methods_mod.sequoia(table.tree(spec.budget, spec.depth))
    expected, seconds, speedup = _predicted(method.tree, vec, prof)
    return PlanResult(spec, method, expected, vec, note, exact, prof, choice, speedup, seconds)


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
        self.submitted_at = time.time()
        self.started_at: float | None = None
        self.finished_at: float | None = None
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
        self._items.put(_END)
        self._finished.set()


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
                 measure_tokens: int = 48, profile_budget: int = PROFILE_BUDGET):
        # how acceptance vectors and device profiles are measured when a job needs one
        # (None = the engine's default prompts, assets/prompts.json)
        self.measure_prompts, self.measure_tokens, self.profile_budget = measure_prompts, measure_tokens, profile_budget
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
        with self._lock:
            self._pending.append(job)
        self._queue.put(job)
        return job

    def stop(self, job_id: int | None = None) -> bool:
        """Stop one job by id (queued or running), or the running one; True if one was found."""
        with self._lock:
            jobs = ([self._current] if self._current else []) + list(self._pending)
        for job in jobs:
            if job_id is None or job.id == job_id:
                job.stop()
                return True
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Stop everything, end the thread and drop the models."""
        self._closed = True
        with self._lock:
            jobs = ([self._current] if self._current else []) + list(self._pending)
        for job in jobs:
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

    def describe(self) -> dict | None:
        pair = self._pair
        return pair.describe() if pair is not None else None

    def status(self) -> dict:
        with self._lock:
            cur, queued = self._current, len(self._pending)
            act = dict(self._activity)
        return {"pair": self.describe(), "job": cur.name if cur else None, "job_id": cur.id if cur else None,
                "state": "busy" if cur else "idle", "message": act["message"] if cur else "idle",
                "fraction": act["fraction"] if cur else None, "step": act["step"] if cur else None,
                "queued": queued, "loading": self.loading, "last_error": self.last_error}

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
            out["parameter_bytes"] = sum(p.numel() * p.element_size()
                                         for m in (pair.draft, pair.target) for p in m.parameters())
        return out

    def cached_acceptance(self, temperature: float, top_p: float = 1.0, sampler: str = "sequoia"):
        pair = self._pair
        return profiler.cached_acceptance(pair, temperature, top_p, sampler) if pair is not None else None

    def cached_profile(self):
        pair = self._pair
        return profiler.cached_profile(pair) if pair is not None else None

    def quick_plan(self, spec: MethodSpec, settings: Settings, allow_nearest: bool = True) -> PlanResult:
        """A plan from caches only (never measures, never calls a model). Raises
        NeedsMeasurement when a vector or profile is missing (and no nearest vector may stand in)."""
        pair = self._pair
        if pair is None:
            raise UserError("no model pair is loaded yet")
        return build_plan(pair, spec, settings, measure=False, allow_nearest=allow_nearest)

    # ---- the jobs the app uses
    def load(self, draft: str = "default", target: str = "default", device: str | None = None,
             dtype: str | None = None, *, target_device_map=None, draft_device_map=None, max_memory=None,
             offload_folder=None) -> Job:
        """Load a pair (see engine.models.load_pair for the device-map arguments). Result: describe()."""
        placement = {"target_device_map": target_device_map, "draft_device_map": draft_device_map,
                     "max_memory": max_memory, "offload_folder": offload_folder}
        return self.submit("load models", _load_job, draft, target, device, dtype,
                           **{k: v for k, v in placement.items() if v})

    def check(self, config=None) -> Job:
        """The losslessness self-check (engine.check.run_check) on the loaded pair. Stream: Progress
        (the first message after the timing carries the time estimate). Result: CheckReport (its
        verdict is STOPPED when the job was stopped)."""
        if config is not None:
            config.validate()
        return self.submit("check pair", _check_job, config)

    def generate(self, prompt: str, spec: MethodSpec, settings: Settings, chat: bool | None = None,
                 plan: Callable[[], Tree | None] | None = None) -> Job:
        """Stream: Progress while planning/measuring, Note('plan', PlanResult), then StepEvents.
        `plan` (zero-arg, called between steps) may return a new tree for the next step, or None
        to keep the current one."""
        spec.check()
        return self.submit("generate", _generate_job, prompt, spec, settings, chat, plan)

    def race(self, prompt: str, specs: list[tuple[str, MethodSpec]], settings: Settings,
             chat: bool | None = None, warmup_tokens: int = 2) -> Job:
        """Stream: Progress while planning, Note('race', [(lane, PlanResult)]), then per method
        Note('lane', lane) and LaneEvents. Result: list of per-lane summaries."""
        if not specs:
            raise UserError("pick at least one method for the race")
        for _, spec in specs:
            spec.check()
        return self.submit("race", _race_job, prompt, list(specs), settings, chat, warmup_tokens)

    def measure(self, temperature: float, top_p: float = 1.0, sampler: str = "sequoia",
                prompts: list[str] | None = None, force: bool = False) -> Job:
        """Acceptance vector for these settings (cached one unless force). Result: AcceptanceVector."""
        Settings(temperature=temperature, top_p=top_p)  # validates
        return self.submit("measure acceptance", _measure_job, temperature, top_p, sampler, prompts, force)

    def profile(self, max_budget: int | None = None, force: bool = False) -> Job:
        """Device profile t(n) (cached one unless force). Result: DeviceProfile."""
        return self.submit("profile device", _profile_job, max_budget or self.profile_budget, force)

    def plan(self, spec: MethodSpec, settings: Settings) -> Job:
        """Plan with measurements if needed (progress streamed). Result: PlanResult."""
        spec.check()
        return self.submit("plan", _plan_job, spec, settings)

    # ---- internals
    def _position(self, job: Job) -> int:
        with self._lock:
            if job in self._pending:
                return self._pending.index(job) + (1 if self._current else 0)
        return 0

    def _note_item(self, job: Job, item: Any) -> None:
        with self._lock:
            if isinstance(item, Progress):
                self._activity.update(message=item.message, fraction=item.fraction)
            else:
                ev = item.event if isinstance(item, LaneEvent) else item
                if hasattr(ev, "step") and hasattr(ev, "total_tokens"):
                    lane = f"{item.lane}: " if isinstance(item, LaneEvent) else ""
                    self._activity.update(message=f"{job.name} — {lane}step {ev.step}, {ev.total_tokens} tokens",
                                          fraction=None, step=ev.step)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                if job in self._pending:
                    self._pending.remove(job)
                if job._stop.is_set():  # stopped while queued: never starts
                    job._finish(STOPPED)
                    continue
                self._current = job
                self._activity = {"message": f"{job.name}: starting", "fraction": None, "step": None}
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
                    _release_device_memory()  # e.g. after an out-of-memory error
                    job._finish(FAILED, exc)
            finally:
                with self._lock:
                    self._current = None
                    self._activity = {"message": "idle", "fraction": None, "step": None}

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
        stopped = job._stop.is_set() and (result is None or getattr(result, "finish_reason", None) == "stopped")
        job._finish(STOPPED if stopped else DONE, result=result)


def _release_device_memory() -> None:
    gc.collect()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort only
        pass


# ---------------------------------------------------------------- job bodies (run on the worker thread)
def _load_job(ctx: JobContext, draft, target, device, dtype, **placement):
    from engine.models import load_pair
    worker = ctx.worker
    worker.loading = True
    dropped = {"done": False}

    def progress(stage, fraction, message):
        # the tokenizers are checked before the models load: only then drop the old pair, so a
        # typo or a mismatched pair leaves the loaded one in place
        if stage in ("target", "draft") and not dropped["done"]:
            dropped["done"] = True
            worker._pair = None
            gc.collect()
        ctx.progress(fraction, message)

    try:
        pair = load_pair(draft, target, device=device, dtype=dtype, progress=progress, **placement)
    finally:
        worker.loading = False
    worker._pair = pair
    worker.last_error = None
    return pair.describe()


def _check_job(ctx: JobContext, config):
    from engine.check import run_check
    return run_check(ctx.pair, config, progress=ctx.progress, should_stop=ctx.should_stop)


def _measuring(ctx: JobContext) -> dict:
    w = ctx.worker
    return {"measure": True, "progress": ctx.progress, "should_stop": ctx.should_stop, "prompts": w.measure_prompts,
            "tokens_per_prompt": w.measure_tokens, "profile_budget": w.profile_budget}


def _plan_job(ctx: JobContext, spec: MethodSpec, settings: Settings):
    return build_plan(ctx.pair, spec, settings, **_measuring(ctx))


def _generate_job(ctx: JobContext, prompt, spec: MethodSpec, settings: Settings, chat, plan):
    from engine.decoding import Decoder
    from engine.models import encode_prompt
    pair = ctx.pair
    ids = encode_prompt(pair, prompt, chat)
    result = build_plan(pair, spec, settings, **_measuring(ctx))
    yield Note("plan", result)
    method = result.method
    current = {"tree": method.tree}

    def next_tree():
        if plan is not None and method.uses_draft:
            try:
                tree = plan()
            except Exception:  # noqa: BLE001 - a bad re-plan must not kill the run
                log.exception("re-plan callback failed; keeping the current tree")
                tree = None
            if tree is not None and tree.size >= 1:
                current["tree"] = tree
        return current["tree"]

    last = None
    for event in Decoder(pair, method, settings, plan=next_tree).run(ids, should_stop=ctx.should_stop):
        last = event
        yield event
    return last


def _race_job(ctx: JobContext, prompt, specs, settings: Settings, chat, warmup_tokens: int):
    from engine.decoding import Decoder
    from engine.models import encode_prompt
    pair = ctx.pair
    ids = encode_prompt(pair, prompt, chat)
    planned = []
    for i, (lane, spec) in enumerate(specs):
        ctx.progress(i / len(specs), f"planning {lane}")
        planned.append((lane, build_plan(pair, spec, settings, **_measuring(ctx))))
    yield Note("race", planned)
    if warmup_tokens > 0:  # untimed: first calls pay one-off allocation costs
        warm = Settings(temperature=settings.temperature, top_p=settings.top_p,
                        max_new_tokens=warmup_tokens, seed=settings.seed, ignore_eos=True)
        for lane, result in planned:
            ctx.progress(None, f"warm-up (untimed): {lane}")
            for _ in Decoder(pair, result.method, warm).run(ids, should_stop=ctx.should_stop):
                pass
    summaries = []
    for lane, result in planned:
        if ctx.should_stop():
            break
        yield Note("lane", lane)
        last = None
        for event in Decoder(pair, result.method, settings).run(ids, should_stop=ctx.should_stop):
            last = event
            yield LaneEvent(lane, event)
        if last is not None:
            summaries.append({"lane": lane, "label": result.method.label, "tokens": last.total_tokens,
                              "steps": last.total_steps, "seconds": last.total_seconds,
                              "prefill_seconds": last.prefill_seconds, "tokens_per_step": last.tokens_per_step,
                              "tokens_per_second": last.tokens_per_second, "text": last.text,
                              "token_ids": last.token_ids, "finish_reason": last.finish_reason,
                              "expected_tokens": result.expected_tokens})
    return summaries


def _measure_job(ctx: JobContext, temperature, top_p, sampler, prompts, force):
    pair = ctx.pair
    if not force:
        vec = profiler.cached_acceptance(pair, temperature, top_p, sampler)
        if vec is not None:
            return vec
    prompts = prompts or ctx.worker.measure_prompts
    if prompts is None:
        from engine.commands.common import default_prompts
        prompts = default_prompts()
    vec = profiler.measure_acceptance(pair, prompts, temperature, top_p, sampler,
                                      tokens_per_prompt=ctx.worker.measure_tokens, progress=ctx.progress,
                                      should_stop=ctx.should_stop)
    vec.source = str(profiler.save_acceptance(pair, vec))
    return vec


def _profile_job(ctx: JobContext, max_budget, force):
    pair = ctx.pair
    if not force:
        prof = profiler.cached_profile(pair)
        if prof is not None:
            return prof
    prof = profiler.profile_device(pair, max_budget=min(max_budget, MAX_BUDGET), progress=ctx.progress,
                                   should_stop=ctx.should_stop)
    prof.source = str(profiler.save_profile(pair, prof))
    return prof


__all__ = ["Worker", "Job", "JobContext", "MethodSpec", "PlanResult", "Progress", "Note", "LaneEvent",
           "NeedsMeasurement", "build_plan", "nearest_vector", "measured_vectors", "TABLE_DEPTH",
           "QUEUED", "RUNNING", "DONE", "FAILED", "STOPPED"]
