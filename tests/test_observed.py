"""Step costs observed in real runs correct the device profile (engine/observed.py): a profile
taken while something else ran stops steering plans once runs have measured the truth."""
from types import SimpleNamespace

import pytest

from engine import observed, planning
from engine.profiler import DeviceProfile
from engine.tree import Tree


def profile(target, draft, overhead=0.001):
    return DeviceProfile(dict(target), dict(draft), overhead, 128, 3, "d", "t", "cpu", "float32",
                         source="test profile")


def step(n_tree: Tree, step_no: int, verify: float, draft: float, other: float = 0.001):
    return SimpleNamespace(step=step_no, nodes=[object()] * n_tree.size, tree_parents=list(n_tree.parents),
                           verify_seconds=verify, draft_seconds=draft, other_seconds=other)


def test_observed_costs_replace_profiled_points_after_enough_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    prof = profile({1: 0.1, 4: 0.4, 8: 0.8}, {1: 0.05, 4: 0.05})  # as if profiled under load
    tree = Tree.from_branching([2, 1, 0, 0])  # 4 nodes, expanding widths [1, 1]
    events = [step(tree, 1, 5.0, 5.0)]  # the first step pays one-off costs: ignored
    events += [step(tree, i, 0.11 + 0.001 * i, 0.02) for i in range(2, 7)]
    obs = observed.record_run("key", prof, events, sampling=False)
    assert obs.steps == 5 and len(obs.target["4"]) == 5
    fixed = observed.corrected(prof, observed.load("key"), sampling=False)
    assert fixed.target_seconds[4] == pytest.approx(0.114)  # the median observed, not 0.4
    # nothing observed at n = 1 or 8: the profiled values move to the observed level (x 0.114 / 0.4)
    assert fixed.target_seconds[1] == pytest.approx(0.1 * 0.114 / 0.4)
    assert fixed.target_seconds[8] == pytest.approx(0.8 * 0.114 / 0.4)
    assert fixed.draft_seconds[1] == pytest.approx(0.05 * 0.02 / 0.10)  # scaled by observed / profiled
    assert prof.target_seconds[4] == 0.4 and "observed steps" in fixed.source  # the profile itself untouched
    # greedy and sampling overheads are kept apart: nothing observed at T > 0 yet
    assert observed.corrected(prof, observed.load("key"), sampling=True).draft_seconds == prof.draft_seconds


def test_observations_made_under_other_load_never_mix_with_the_profile(tmp_path, monkeypatch):
    """Runs slowed by something else (say a browser drawing on the same cores) observed t(1) at
    3x the profile; the unobserved t(2) must not stay at its quiet value, or t(2)/t(1) would look
    three times cheaper than it is."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    prof = profile({1: 0.1, 2: 0.105, 4: 0.11, 8: 0.16}, {1: 0.03})
    observed.record_run("slow", prof, [step(Tree((-1,)), i, 0.3, 0.0) for i in range(2, 6)], sampling=False)
    fixed = observed.corrected(prof, observed.load("slow"), sampling=False)
    assert fixed.target_seconds[2] / fixed.target_seconds[1] == pytest.approx(1.05)


def test_too_few_observations_change_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    prof = profile({1: 0.1, 4: 0.4}, {1: 0.05})
    tree = Tree.from_branching([3, 0, 0, 0])
    observed.record_run("k2", prof, [step(tree, i, 0.1, 0.01) for i in (2, 3)], sampling=False)
    fixed = observed.corrected(prof, observed.load("k2"), sampling=False)
    assert fixed.target_seconds == prof.target_seconds and fixed.draft_seconds == prof.draft_seconds


def test_only_the_most_recent_observations_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    prof = profile({1: 0.1}, {1: 0.05})
    root = Tree((-1,))
    observed.record_run("k3", prof, [step(root, i, 1.0, 0.0) for i in range(2, 100)], sampling=False)
    observed.record_run("k3", prof, [step(root, i, 0.2, 0.0) for i in range(2, 2 + observed.KEEP)], sampling=False)
    assert observed.corrected(prof, observed.load("k3"), False).target_seconds[1] == pytest.approx(0.2)


def test_a_profile_taken_under_load_stops_steering_the_plan(tmp_path, monkeypatch):
    """Profiled while another job ran, t(n > 1) looked expensive and the hardware-aware plan fell
    back to plain decoding; after runs observe flat t(n), the plan grows again."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    acceptance = [0.7, 0.15, 0.05]
    busy = profile({1: 0.1, 2: 0.3, 4: 0.6, 8: 1.2}, {1: 0.03, 2: 0.03, 4: 0.04, 8: 0.05})
    assert planning.hardware_aware(acceptance, busy, 8, 4).n == 1
    events = []
    # as a race would: plain decoding (n = 1) and trees of 2, 4 and 8 nodes, all on the quiet machine
    for tree in (Tree((-1,)), Tree.chain(2), Tree.from_branching([2, 1, 0, 0]),
                 Tree.from_branching([3, 2, 1, 0, 0, 1, 0, 0])):
        events += [step(tree, i, 0.1 + 0.003 * tree.size, 0.03 * (tree.depth - 1)) for i in range(2, 6)]
    observed.record_run("busy", busy, events, sampling=False)
    fixed = observed.corrected(busy, observed.load("busy"), sampling=False)
    assert planning.hardware_aware(acceptance, fixed, 8, 4).n > 1


def test_a_run_that_shared_the_cpus_with_other_programs_is_not_recorded(monkeypatch):
    """CLI runs beside a browser and a test suite (other programs using most of the CPUs) recorded
    t(6) at 3 s against 0.37 profiled, and the app's hardware-aware plans fell to n = 1: such a
    run's step costs are now left out, a run on CPUs left to it is recorded as before."""
    from engine.commands import generate
    recorded = []
    monkeypatch.setattr(observed, "record_run", lambda key, prof, events, sampling: recorded.append(events))
    monkeypatch.setattr(generate.profiler, "profile_key", lambda pair: "key")
    monkeypatch.setattr(generate.profiler, "cached_profile", lambda pair: None)
    events, greedy = [step(Tree.chain(3), 2, 0.1, 0.02)], SimpleNamespace(greedy=True)
    generate.record_costs(object(), events, greedy, others_share=0.6)
    assert recorded == []
    for share in (0.05, None):   # quiet, or no /proc/stat to tell
        generate.record_costs(object(), events, greedy, others_share=share)
    assert recorded == [events, events]


def test_the_others_watch_reads_the_busy_time_of_this_process_cpus():
    """/proc/stat's per-CPU lines are read for the CPUs this process may use: its own busy loop
    shows there (without loading every CPU, which would slow the suite's other workers' runs)."""
    cpus = observed._our_cpus()
    before = observed._busy_seconds(cpus)
    if before is None:
        pytest.skip("no /proc/stat here")
    own = observed.time.process_time()
    while observed.time.process_time() - own < 0.3:
        pass
    assert observed._busy_seconds(cpus) - before >= 0.2


def test_the_others_watch_leaves_out_this_process_own_cpu_time(monkeypatch):
    """Busy time of every CPU less this process's own (all its threads), over wall time times the
    CPUs: a run that kept both of 2 CPUs busy itself leaves others nothing."""
    clock = {"busy": 100.0, "own": 10.0, "wall": 0.0}
    monkeypatch.setattr(observed, "_busy_seconds", lambda cpus: clock["busy"])
    monkeypatch.setattr(observed.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(observed.time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(observed, "_our_cpus", lambda: {0, 1})
    watch = observed.OthersWatch()
    clock.update(busy=102.0, own=12.0, wall=1.0)     # 2 CPU-seconds busy in 1 s, all of them ours
    assert watch.share() == 0.0
    clock.update(busy=103.8, own=13.0, wall=2.0)     # 3.8 busy, 3.0 ours: 0.8 of 4 CPU-seconds
    assert watch.share() == pytest.approx(0.2)
