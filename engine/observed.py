"""Step costs observed in real runs, correcting the device profile the planner uses.

A profile is measured once; a machine's speed is not fixed (one profile taken while something
else ran used to make the planner choose plain decoding until the user re-profiled by hand).
Every CLI decoding run (`python -m engine generate`; not the app's Live and Race runs, whose page
draws on the same cores: engine/jobs.py) therefore records what its steps cost - the target's verify seconds by tree
size, the draft's seconds against what the profile predicted for that tree, and the rest of the
step - and `corrected` blends these into the profile:

- t(n) at a tree size with at least MIN_SAMPLES observations: their median; the other profiled
  sizes are scaled by the median observed / profiled ratio, so the curve stays at one load level;
- the draft curve: scaled by the median ratio observed / profiled;
- per-step overhead (greedy and sampling kept apart): the median observed.

Only the most recent KEEP values per entry are kept, so the correction follows the machine.
The first step of a run is skipped (one-off allocation costs). A run during which other
programs used more than MAX_OTHERS_SHARE of the CPUs (OthersWatch) is not recorded: its steps
say what sharing the cores cost, not what the device costs (a few CLI runs beside a browser and
a test suite once put t(6) at 3 s against 0.37 profiled, and the app's plans fell to plain
decoding). Stored next to the profile cache (cache_dir()/observed-cli/<profile key>.json),
written atomically."""
from __future__ import annotations

import copy
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field

from engine.paths import cache_dir, locked, write_atomic

KEEP = 64
MIN_SAMPLES = 3
MAX_OTHERS_SHARE = 0.15   # of all the CPUs' time, used by other programs during a run, at most


def _our_cpus() -> set[int]:
    """The CPUs this process may run on (a container's cpuset, taskset), else every one."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _busy_seconds(cpus: set[int]) -> float | None:
    """CPU seconds these CPUs have spent busy since boot, from /proc/stat's per-CPU lines (user,
    nice, system, irq, softirq and steal: a hypervisor's other guests slow a run as much as this
    machine's other programs); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
        total = 0
        for fields in lines:
            if int(fields[0][3:]) in cpus:
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
                total += user + nice + system + irq + softirq + steal
    except (OSError, ValueError, IndexError):
        return None
    return total / os.sysconf("SC_CLK_TCK") if lines else None


class OthersWatch:
    """How much of this process's CPUs other programs used between its start and `share()`: their
    busy time (/proc/stat) less this process's own (all its threads), over the wall time times
    the CPUs. None where /proc/stat cannot be read (the run is then recorded as before)."""

    def __init__(self):
        self.cpus = _our_cpus()
        self.wall, self.busy, self.own = time.perf_counter(), _busy_seconds(self.cpus), time.process_time()

    def share(self) -> float | None:
        busy, wall = _busy_seconds(self.cpus), time.perf_counter() - self.wall
        if busy is None or self.busy is None or wall <= 0:
            return None
        others = (busy - self.busy) - (time.process_time() - self.own)
        return max(0.0, others / (wall * len(self.cpus)))


@dataclass
class Observations:
    target: dict[str, list[float]] = field(default_factory=dict)   # tree size -> verify seconds
    # "greedy" | "sampling" -> values: at T > 0 the draft's and the walk's sampling maths are in them
    draft_ratio: dict[str, list[float]] = field(default_factory=dict)  # observed / profiled draft seconds
    other: dict[str, list[float]] = field(default_factory=dict)        # the rest of each step

    def add(self, n: int, verify: float, draft_ratio: float | None, other: float, sampling: bool) -> None:
        mode = "sampling" if sampling else "greedy"
        _push(self.target.setdefault(str(n), []), verify)
        if draft_ratio is not None:
            _push(self.draft_ratio.setdefault(mode, []), draft_ratio)
        _push(self.other.setdefault(mode, []), other)

    @property
    def steps(self) -> int:
        """The steps whose costs are held: the latest KEEP per tree size (not every step ever seen)."""
        return sum(len(v) for v in self.target.values())

    def summary(self, prof) -> dict:
        """Profiled vs observed, for the Planner tab and the bench JSON."""
        rows = []
        for key in sorted(self.target, key=int):
            values = self.target[key]
            profiled = prof.target_seconds.get(int(key)) if prof is not None else None
            rows.append({"n": int(key), "observed_seconds": statistics.median(values), "samples": len(values),
                         "profiled_seconds": profiled})
        return {"target": rows, "steps": self.steps,
                "draft_scale": {k: statistics.median(v) for k, v in self.draft_ratio.items() if v},
                "overhead": {k: statistics.median(v) for k, v in self.other.items() if v}}


def _push(values: list[float], value: float) -> None:
    values.append(float(value))
    del values[:-KEEP]


def _path(key: str):
    # "observed-cli": the stores in "observed" also held the app's Live runs, whose page inflated
    # the draft's seconds 1.8-2.8x (engine/jobs.py generate_job); they are left unread
    return cache_dir() / "observed-cli" / f"{key}.json"


def load(key: str) -> Observations:
    try:
        return Observations(**json.loads(_path(key).read_text()))
    except (OSError, ValueError, TypeError):
        return Observations()


def save(key: str, obs: Observations) -> None:
    path = _path(key)
    write_atomic(path, json.dumps(asdict(obs)))


def record_run(key: str, prof, events, sampling: bool) -> Observations:
    """Add a finished run's steps (StepEvents, in order) to the observations stored under `key`;
    runs recording at once (threads, or CLI processes) wait for each other (paths.locked)."""
    with locked(_path(key)):
        obs = load(key)
        add_events(obs, prof, events, sampling)
        save(key, obs)
        return obs


def add_events(obs: Observations, prof, events, sampling: bool) -> Observations:
    """Add a finished run's steps to `obs` in memory (the bench keeps its own, see engine/bench.py)."""
    from engine.planner import CostCurve
    from engine.tree import Tree
    draft_curve = CostCurve(prof.draft_seconds, "draft_seconds") if prof is not None else None
    for event in events:
        if event.step <= 1 or not event.nodes:
            continue  # the first step pays one-off costs; final events carry no step
        tree = Tree(tuple(event.tree_parents))
        ratio = None
        if draft_curve is not None and tree.size > 1:
            profiled = sum(draft_curve(w) for w in tree.expanding_widths if w > 0)
            ratio = event.draft_seconds / profiled if profiled > 0 else None
        obs.add(tree.size, event.verify_seconds, ratio, event.other_seconds, sampling)
    return obs


def corrected(prof, obs: Observations, sampling: bool):
    """A copy of the profile with what runs observed blended in (see the module docstring);
    the profile itself when nothing was observed."""
    if prof is None or obs.steps == 0:
        return prof
    out = copy.deepcopy(prof)
    seen = {int(k): statistics.median(v) for k, v in obs.target.items() if len(v) >= MIN_SAMPLES}
    ratios = [seen[n] / prof.target_seconds[n] for n in seen if prof.target_seconds.get(n)]
    if ratios:
        # sizes no run observed move to the observed level, so one curve never mixes a quiet
        # profile with observations made under other load (that would fake a flat t(n))
        level = statistics.median(ratios)
        out.target_seconds = {n: t * level for n, t in prof.target_seconds.items()}
    out.target_seconds.update(seen)
    mode = "sampling" if sampling else "greedy"
    ratios, other = obs.draft_ratio.get(mode, []), obs.other.get(mode, [])
    if len(ratios) >= MIN_SAMPLES and len(other) >= MIN_SAMPLES:
        scale = statistics.median(ratios)
        out.draft_seconds = {w: s * scale for w, s in prof.draft_seconds.items()}
        out.overhead_seconds = statistics.median(other)
        if sampling:  # the observed draft and overhead seconds already hold the sampling maths
            out.sampling_seconds = {}
    out.source = f"{prof.source} + {obs.steps} observed steps"
    return out
