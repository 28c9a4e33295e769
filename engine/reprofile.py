"""Profiling the device again, in the background, when its cached profile is noisy.

A device profile is timed once per pair and cached, and every hardware-aware plan reads it. One
timed while something else ran (a benchmark, a browser drawing a run, a first load still paging
weights in) is flagged noisy (engine/profiler.py: a size's repeats spread over NOISY_SPREAD), and
without this it would steer plans for good after the noise is gone: the app's own runs do not
correct it (engine/observed.py records CLI runs only). So while the worker is idle and the
machine is quiet, it times the device again, over the same sizes, and keeps whichever profile's
repeats agree better.

Rules:
- Only a cached profile flagged noisy, at most MAX_TRIES completed tries per profile per process;
  not one timed with the page cache dropped before each forward (the offload benchmark's: that
  needs root and means something else). The try times the same sizes, prefix and repeats.
- A try starts only after the worker's idle wait (engine/refine.py IDLE_SECONDS) and when the
  1-minute load average is at most QUIET_LOAD_PER_CORE per core (our own idle threads included);
  otherwise it looks again after RECHECK_SECONDS. So it waits for pending background acceptance
  measurements (engine/refine.py), which keep the cores busy, and for other programs. The new
  profile records the load it saw.
- A cached profile that cannot be read counts as none (logged once): the worker's loop reads it
  between jobs and must never fail on it.
- Any job submitted during a try stops it at its next timed forward (profiler.Stopped); the try
  is not counted and the cached profile stays. A try that fails is logged and counted.
- The new profile replaces the cached one only if its worst spread is smaller.
- Off with Worker(background_profile=False) (the default for a bare Worker; the app turns it on)
  or `python app.py --no-background-refine`.
Exactness is untouched: a profile only decides which trees are planned."""
from __future__ import annotations

import logging
import os
import time

from engine import profiler

log = logging.getLogger(__name__)

MAX_TRIES = 2               # completed background profiles per cached profile and process
QUIET_LOAD_PER_CORE = 0.5   # 1-minute load average per core at most for a try to start
RECHECK_SECONDS = 30.0      # how long to wait after finding the machine busy


def machine_quiet() -> bool:
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average (not Unix): the idle wait alone decides
        return True
    return load <= QUIET_LOAD_PER_CORE * (os.cpu_count() or 1)


def spread_of(prof) -> float:
    return float((prof.quality or {}).get("worst_spread", 0.0))


class Reprofiler:
    """The worker's background task for a noisy cached profile (see the module's rules). Runs on
    the worker thread; ready_in is also read from the page's threads (it changes nothing)."""

    job_name = "re-profile the device (background)"

    def __init__(self):
        self._tries: dict[str, int] = {}
        self._not_before = 0.0
        self._unreadable: set[str] = set()   # profile files already logged as unreadable
        self._read: dict[str, tuple] = {}    # key -> (file stamp, profile read then): read once per write

    def _noisy(self, pair):
        """The cached profile if it is noisy and still has tries left, else None."""
        if pair is None:
            return None
        try:
            key = profiler.profile_key(pair)
            if self._tries.get(key, 0) >= MAX_TRIES:
                return None
            prof = self._cached(pair, key)
        except Exception as exc:  # noqa: BLE001 - a damaged or foreign file: nothing to time again
            if str(exc) not in self._unreadable:
                self._unreadable.add(str(exc))
                log.warning("background profile: the cached profile cannot be read (%s)", exc)
            return None
        if prof is None or not prof.noisy or (prof.machine or {}).get("page_cache"):
            return None
        return prof

    def _cached(self, pair, key):
        """The cached profile, parsed again only when its file changed: the worker's loop and
        every Planner refresh ask between jobs, and the file changes once per profiling."""
        stamp = profiler.profile_stamp(pair)
        seen = self._read.get(key)
        if seen is not None and seen[0] == stamp:
            if isinstance(seen[1], Exception):   # a damaged file, already logged: not parsed again
                raise seen[1]
            return seen[1]
        try:
            prof = profiler.cached_profile(pair)
        except Exception as exc:  # noqa: BLE001 - reported by _noisy
            self._read[key] = (stamp, exc)
            raise
        self._read[key] = (stamp, prof)
        return prof

    def ready_in(self, pair) -> float | None:
        """Seconds until a try may start (None: nothing to do for this pair)."""
        if self._noisy(pair) is None:
            return None
        return max(0.0, self._not_before - time.monotonic())

    def run_unit(self, pair, should_stop, progress=None):
        """One try. Returns the new profile if it replaced the cached one, else None. Raises
        profiler.Stopped when a job stopped it."""
        old = self._noisy(pair)
        if old is None:
            return None
        if not machine_quiet():
            self._not_before = time.monotonic() + RECHECK_SECONDS
            return None
        key = profiler.profile_key(pair)
        what = (f"background: profiling this device again (the cached profile is noisy: repeats spread "
                f"{spread_of(old) * 100:.0f} %; any job goes first)")
        try:
            new = profiler.profile_device(
                pair, max_budget=max(old.target_seconds), max_width=max(old.draft_seconds),
                prefix_tokens=old.prefix_tokens, repeats=old.repeats,
                progress=(lambda fraction, message: progress(None, f"{what} · {message}")) if progress else None,
                should_stop=should_stop)
        except profiler.Stopped:
            raise
        except Exception as exc:  # noqa: BLE001 - the background must never disturb the user's work
            log.warning("background profile dropped: %s", exc)
            self._tries[key] = self._tries.get(key, 0) + 1
            return None
        self._tries[key] = self._tries.get(key, 0) + 1
        if spread_of(new) >= spread_of(old):
            log.info("background profile kept the cached one (repeats spread %.0f %% now, %.0f %% cached)",
                     spread_of(new) * 100, spread_of(old) * 100)
            return None
        new.source = str(profiler.save_profile(pair, new))
        log.info("background profile replaced a noisy one: repeats spread %.0f %% -> %.0f %%, load %s",
                 spread_of(old) * 100, spread_of(new) * 100, (new.quality or {}).get("load_average_before"))
        return new
