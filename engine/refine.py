"""Measuring interpolated settings for real, in the background (issue 15, item 3).

A plan at settings with no measured acceptance vector starts at once from one interpolated between
measured settings (engine/interpolation.py), or outside them from the nearest measured one,
labelled so. The worker remembers those settings and,
while it has nothing else to do, measures them by replay (engine/replay.py) on the shipped
measurement prompts (assets/measurement-prompts.json: code and prose), one prompt per background
unit. When every prompt is in, the code, prose and pooled vectors go into the acceptance cache,
as `python -m engine measure --replay --by-domain` would write them; later plans at those
settings read the measured vector (with its positions) instead of the interpolated one.

Rules:
- Only settings that a plan actually used an interpolated (or nearest) vector for; at most
  MAX_WANTED are remembered (the least recently planned is dropped), the most recently planned is measured first
  (typing T = 0.5 and then top-p 0.9 passes through T = 0.5 / top-p 1, which a helper saw measured
  for minutes before the settings in use), and settings measured meanwhile by other means are skipped.
  Settings a page's quick plan (a control moved) noted and the next quick plan of the same sampler
  left within PASSING_SECONDS, with nothing measured yet, are forgotten: a value passed on the way
  to another (typing T = 0.35 plans T = 0.3 first) queued a whole 24-prompt measurement of its own.
  Settings a run or a race planned for are kept (a race's lanes plan one after another).
- A unit starts only after IDLE_SECONDS with no job and no quick plan (a slider move); it takes
  ~12 s on the embedded pair here. Any job submitted while a unit runs stops it at its next
  decoding step, forward or replayed position: the background delays a user's job by at most one
  of those, and never runs beside one, so timings stay honest. The answer the unit had decoded so
  far is kept (replay.AnswerSoFar) and the prompt's next unit continues it: a unit begun afresh
  each time never finished under steady use (a helper saw "prompt 1/24" for 20 minutes, runs
  every few tens of seconds on a loaded machine); its forwards and replays, a few seconds, are
  done again.
- A unit that fails drops its settings (logged); nothing else changes.
- Off with Worker(refine_in_background=False) or `python app.py --no-background-refine`.
Exactness is untouched: a vector only decides which trees later steps use (ALGORITHM.md §7)."""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from engine import profiler
from engine.domains import pooled_vector
from engine.prompts import MEASUREMENT_PROMPTS, prompt_set

log = logging.getLogger(__name__)

IDLE_SECONDS = 10.0      # idle time before a background unit starts
MAX_WANTED = 4           # settings remembered at most
PASSING_SECONDS = 3.0    # settings left sooner than this after their plan were passed on the way
TOKENS_PER_PROMPT = 96   # answer tokens replayed per prompt (32 prompts: ~3,070 positions)
WIDTH = 16               # ranks measured, as the shipped vectors


@dataclass
class Wanted:
    """Settings to measure, and the per-prompt vectors measured so far."""
    key: str
    temperature: float
    top_p: float
    top_k: int
    sampler: str
    done: dict = field(default_factory=dict)  # prompt index -> AcceptanceVector of that prompt
    answers: dict = field(default_factory=dict)   # prompt index -> replay.AnswerSoFar (a stopped unit's answer)
    planned_at: float = field(default_factory=time.monotonic)   # when a plan last used these settings
    passing: bool = True   # only quick plans (controls moving) used them so far: they may have been passed

    def label(self) -> str:
        return f"T={self.temperature:g}, top-p={self.top_p:g}" + (f", top-k={self.top_k}" if self.top_k else "")


def _prompts():
    return [p for p in prompt_set(MEASUREMENT_PROMPTS) if p.kind in ("code", "prose")]


def _key(pair, temperature: float, top_p: float, top_k: int, sampler: str) -> str:
    return profiler.acceptance_key(pair, sampler, temperature, top_p, WIDTH, top_k, "")


class Refiner:
    """The settings waiting for a background measurement; thread-safe (plans note settings on
    the worker thread and on callers' threads)."""

    job_name = "refine acceptance (background)"

    def __init__(self):
        self._wanted: OrderedDict[str, Wanted] = OrderedDict()
        self._lock = threading.Lock()

    def want(self, pair, settings, sampler: str, passing: bool = False) -> bool:
        """Remember these settings (a plan used an interpolated or nearest vector for them) as the
        most recently planned; True if new. `passing`: a quick plan (a control moved); it forgets
        the settings the last quick plan of this sampler noted if they were left within
        PASSING_SECONDS and nothing of them is measured yet (passed on the way here)."""
        key = _key(pair, settings.temperature, settings.top_p, settings.top_k, sampler)
        now = time.monotonic()
        with self._lock:
            last = next(reversed(self._wanted.values()), None)
            if (passing and last is not None and last.key != key and last.passing and last.sampler == sampler
                    and not last.done and now - last.planned_at < PASSING_SECONDS):
                del self._wanted[last.key]
            if key in self._wanted:
                wanted = self._wanted[key]
                self._wanted.move_to_end(key)   # planned again: it goes first (its prompts done stay)
                wanted.planned_at, wanted.passing = now, wanted.passing and passing
                return False
            self._wanted[key] = Wanted(key, float(settings.temperature), float(settings.top_p),
                                       int(settings.top_k), sampler, planned_at=now, passing=passing)
            while len(self._wanted) > MAX_WANTED:
                self._wanted.popitem(last=False)
        return True

    def pending(self) -> list[Wanted]:
        with self._lock:
            return list(self._wanted.values())

    def drop(self, key: str) -> None:
        with self._lock:
            self._wanted.pop(key, None)

    def _next(self, pair) -> Wanted | None:
        """The most recently planned wanted settings of this pair that still have no measured vector."""
        for wanted in reversed(self.pending()):
            if wanted.key != _key(pair, wanted.temperature, wanted.top_p, wanted.top_k, wanted.sampler):
                self.drop(wanted.key)  # noted for another pair (or other kernels)
            elif profiler.cached_acceptance(pair, wanted.temperature, wanted.top_p, wanted.sampler,
                                            top_k=wanted.top_k) is not None:
                self.drop(wanted.key)  # measured meanwhile (the Planner tab, the CLI)
            else:
                return wanted
        return None

    def has_work(self, pair) -> bool:
        return pair is not None and bool(self.pending())

    def run_unit(self, pair, should_stop, progress=None) -> list | None:
        """Measure one prompt of the most recently planned wanted settings. Returns the vectors saved when that
        completed the settings, else None. Raises profiler.Stopped when stopped."""
        from engine.replay import AnswerSoFar, replay_acceptance
        wanted = self._next(pair)
        if wanted is None:
            return None
        prompts = _prompts()
        index = next(i for i in range(len(prompts)) if i not in wanted.done)
        prompt = prompts[index]
        so_far = wanted.answers.setdefault(index, AnswerSoFar())
        if progress:  # the status line shows it (engine/worker.py)
            going_on = (f", its answer continued from {len(so_far.tokens)} of {TOKENS_PER_PROMPT} tokens"
                        if so_far.tokens else "")
            progress(None, f"background: measuring acceptance at {wanted.label()} for later plans "
                           f"(prompt {len(wanted.done) + 1}/{len(prompts)}{going_on}; any job goes first)")
        try:
            vec = replay_acceptance(pair, [prompt.text], wanted.temperature, wanted.top_p, wanted.sampler, WIDTH,
                                    tokens_per_prompt=TOKENS_PER_PROMPT, seed=index, top_k=wanted.top_k,
                                    domain=prompt.kind, should_stop=should_stop, answers=[so_far])
        except profiler.Stopped:
            raise
        except Exception as exc:  # noqa: BLE001 - the background must never disturb the user's work
            log.warning("background acceptance measurement at %s dropped: %s", wanted.label(), exc)
            self.drop(wanted.key)
            return None
        wanted.done[index] = vec
        wanted.answers.pop(index, None)
        log.info("background acceptance at %s: prompt %d/%d measured (%d positions, %.1f s)", wanted.label(),
                 len(wanted.done), len(prompts), vec.positions, vec.seconds)
        if len(wanted.done) < len(prompts):
            return None
        self.drop(wanted.key)
        return _save(pair, [wanted.done[i] for i in range(len(prompts))])


def _save(pair, per_prompt: list) -> list:
    """Per-prompt vectors -> the code, prose and pooled vectors, written to the acceptance cache."""
    saved = []
    for domain in ("code", "prose"):
        parts = [v for v in per_prompt if v.domain == domain]
        if parts:
            saved.append(pooled_vector(parts, domain))
    saved.append(pooled_vector(per_prompt))
    for vec in saved:
        vec.source = str(profiler.save_acceptance(pair, vec))
    return saved
