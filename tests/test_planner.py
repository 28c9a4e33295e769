"""The tree DP against brute force, the worked example, hardware-aware choice and the plan CLI."""
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.errors import UserError
from engine.planner import PlanTable, choose_shape
from engine.tree import Tree

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = [0.6, 0.2, 0.1]


@lru_cache(maxsize=None)
def ordered_trees(n: int) -> tuple:
    """Every ordered (plane) tree with n nodes, as nested tuples of children."""
    return tuple(tuple(f) for f in forests(n - 1))


@lru_cache(maxsize=None)
def forests(k: int) -> tuple:
    """Every ordered sequence of trees with k nodes in total."""
    if k == 0:
        return ((),)
    out = []
    for first in range(1, k + 1):
        for t in ordered_trees(first):
            for rest in forests(k - first):
                out.append((t,) + rest)
    return tuple(out)


def value_and_depth(t, acc) -> tuple[float, int]:
    total, depth = 1.0, 1
    for rank, child in enumerate(t, start=1):
        v, d = value_and_depth(child, acc)
        total += (acc[rank - 1] if rank <= len(acc) else 0.0) * v
        depth = max(depth, d + 1)
    return total, depth


def brute_force(acc, max_n) -> dict:
    """{(n, d): best F over all ordered trees with n nodes and at most d levels}."""
    best = {}
    for n in range(1, max_n + 1):
        scored = [value_and_depth(t, acc) for t in ordered_trees(n)]
        for d in range(1, max_n + 1):
            vals = [v for v, depth in scored if depth <= d]
            best[n, d] = max(vals) if vals else -np.inf
    return best


def test_enumeration_counts_catalan():
    assert [len(ordered_trees(n)) for n in range(1, 9)] == [1, 1, 2, 5, 14, 42, 132, 429]


ACCEPTANCES = [
    EXAMPLE,
    [0.3],  # W = 1: every wider tree needs zero-value ranks
    [0.5, 0.5],
    [0.0, 0.4, 0.1],  # a zero rank before positive ones
    [0.9, 0.05, 0.02, 0.01],
    *[list(np.random.default_rng(s).dirichlet(np.ones(w + 1))[:w]) for s, w in [(1, 2), (2, 5), (3, 7), (4, 3)]],
]


@pytest.mark.parametrize("acc", ACCEPTANCES)
def test_dp_matches_exhaustive_enumeration(acc):
    table = PlanTable.build(acc, 8, 8)
    best = brute_force(acc, 8)
    for n in range(1, 9):
        for d in range(1, 9):
            want = best[n, d]
            if n > 1 and d < 2:
                assert table.G[n, d] == -np.inf
                with pytest.raises(UserError):
                    table.tree(n, d)
                continue
            assert table.expected(n, d) == pytest.approx(want, abs=1e-12)
            tree = table.tree(n, d)
            assert tree.size == n and tree.depth <= d
            assert tree.expected_tokens(acc) == pytest.approx(want, abs=1e-12)


def test_worked_example_table_and_shape():
    table = PlanTable.build(EXAMPLE, 6, 5)
    doc = {2: [1.6, 1.6, 1.6, 1.6], 3: [1.8, 1.96, 1.96, 1.96], 4: [1.9, 2.16, 2.176, 2.176],
           5: [None, 2.28, 2.376, 2.376], 6: [None, 2.4, 2.496, 2.5056]}
    for n, row in doc.items():
        for d, want in zip(range(2, 6), row):
            # "–" in the doc: more than W=3 root children are needed; extra p=0 leaves keep it feasible
            assert table.expected(n, d) == pytest.approx(1.9 if want is None else want, abs=1e-12)
    tree = table.tree(6, 5)
    # rank-1 chain of four under the root + one rank-2 leaf on the root
    assert tree.parents == (-1, 0, 0, 1, 3, 4)
    assert tree.rank[2] == 2 and tree.children[2] == ()
    assert tree.expected_tokens(EXAMPLE) == pytest.approx(2.5056)
    assert Tree.chain(6).expected_tokens(EXAMPLE) == pytest.approx(2.38336)


def test_g_monotone_and_shape():
    acc = list(np.random.default_rng(7).dirichlet(np.ones(9))[:8])
    table = PlanTable.build(acc, 40, 7)
    G = table.G
    assert G.shape == (41, 8)
    assert np.all(G[0] == -np.inf) and np.all(G[:, 0] == -np.inf)
    assert G[1, 1] == 1 and np.all(G[2:, 1] == -np.inf)
    fin = G[1:, 2:]
    assert np.all(np.diff(fin, axis=0) >= -1e-12)  # more nodes never hurt
    assert np.all(np.diff(fin, axis=1) >= -1e-12)  # more levels never hurt


def test_rebuilt_trees_exact_size_and_value():
    acc = [0.5, 0.2, 0.1]
    table = PlanTable.build(acc, 64, 6)
    for n in range(1, 65):
        for d in range(2, 7):
            tree = table.tree(n, d)
            assert tree.size == n and tree.depth <= d
            assert tree.expected_tokens(acc) == pytest.approx(table.expected(n, d), abs=1e-9)
            assert tree.expanding_widths == table.expanding_widths(n, d)


def test_narrow_acceptance_depth_two_still_gives_n_nodes():
    table = PlanTable.build([0.6, 0.2, 0.1], 20, 2)
    tree = table.tree(20, 2)
    assert tree.level_widths == [1, 19]
    assert table.expected(20, 2) == pytest.approx(1.9)


def test_deterministic_ties():
    # equal ranks make many trees tie; the rule: fewest root children, then the earliest ranks
    # take the nodes. Two builds must agree exactly.
    acc = [0.25, 0.25, 0.25, 0.25]
    a, b = PlanTable.build(acc, 30, 6), PlanTable.build(acc, 30, 6)
    for n in range(1, 31):
        for d in range(2, 7):
            assert a.tree(n, d) == b.tree(n, d)
    # p2 = p1^2: a 3-chain and a 2-star both score exactly 1.75; fewest root children wins
    t = PlanTable.build([0.5, 0.25], 3, 3)
    assert t.expected(3, 3) == 1.75 and t.tree(3, 3).parents == (-1, 0, 1)
    # all-zero acceptance: every tree ties at 1; fewest root children -> a chain
    z = PlanTable.build([0.0], 5, 5)
    assert z.tree(5, 5) == Tree.chain(5) and z.expected(5, 5) == 1


def test_table_lookups_and_validation():
    table = PlanTable.build(EXAMPLE, 10, 20)  # depth beyond the budget is fine
    assert table.expected(10, 20) == table.expected(10, 10)
    small = PlanTable.build(EXAMPLE, 10, 3)
    assert small.expected(2, 9) == small.expected(2, 3)  # 2 nodes never need more than 2 levels
    for bad in [lambda: small.expected(11, 3), lambda: small.expected(8, 9), lambda: small.tree(3, 1),
                lambda: small.tree(0, 2)]:
        with pytest.raises(UserError):
            bad()
    for acc, n, d in [([], 4, 4), ([0.5, float("nan")], 4, 4), ([1.2], 4, 4), ([-0.1], 4, 4),
                      ([0.7, 0.4], 4, 4), ([0.01] * 65, 4, 4), (EXAMPLE, 0, 4), (EXAMPLE, 4, 0),
                      (["a"], 4, 4), (EXAMPLE, 2000, 4), (EXAMPLE, 2.5, 4)]:
        with pytest.raises(UserError):
            PlanTable.build(acc, n, d)
    PlanTable.build([0.5, 0.5 + 5e-7], 4, 4)  # sum within 1 + 1e-6 is accepted


def test_choice_flat_target_picks_largest_tree():
    acc = [0.7, 0.15, 0.05]
    table = PlanTable.build(acc, 32, 8)
    choice = choose_shape(table, {1: 0.1, 64: 0.1}, {1: 1e-6}, 0.0)
    assert choice.n == 32 and choice.tree.size == 32
    assert choice.predicted_tokens_per_step == pytest.approx(table.expected(32, choice.d))
    assert choice.predicted_speedup > 1
    assert choice.grid.tokens_per_second.shape == (32, 8)
    assert choice.grid.speedup[0, 0] == pytest.approx(1.0)  # n=1: autoregressive


def test_choice_steep_target_picks_small_tree():
    acc = [0.7, 0.15, 0.05]
    table = PlanTable.build(acc, 32, 8)
    choice = choose_shape(table, {1: 0.1, 2: 0.2, 32: 3.2}, {1: 0.001, 32: 0.03}, 0.01)
    assert choice.n <= 3
    tps = choice.grid.tokens_per_second
    assert choice.predicted_tokens_per_second == pytest.approx(np.nanmax(tps))
    # the reported numbers are consistent with each other
    assert choice.predicted_tokens_per_second == pytest.approx(
        choice.predicted_tokens_per_step / choice.predicted_seconds_per_step)
    assert choice.predicted_speedup == pytest.approx(choice.predicted_tokens_per_second * (0.1 + 0.01))
    json.dumps(choice.grid.to_dict())  # heatmap data is JSON-ready (None where impossible)


def test_choice_step_cost_counts_draft_levels():
    table = PlanTable.build([0.6, 0.2, 0.1], 6, 5)
    choice = choose_shape(table, {1: 1.0}, {1: 0.5, 3: 1.5}, 0.25, budgets=[6], depths=[5])
    # tree (6, 5): expanding widths [1, 1, 1, 1, 0] -> 4 draft forwards of width 1
    assert choice.predicted_seconds_per_step == pytest.approx(1.0 + 4 * 0.5 + 0.25)
    # interpolation between points and linear extrapolation beyond the last one
    choice = choose_shape(table, {1: 1.0, 3: 2.0}, {1: 0.0}, 0.0, budgets=[2, 5], depths=[2])
    assert choice.grid.seconds_per_step[0, 0] == pytest.approx(1.5)
    assert choice.grid.seconds_per_step[1, 0] == pytest.approx(3.0)
    with pytest.raises(UserError):
        choose_shape(table, {}, {1: 0.1}, 0.0)
    with pytest.raises(UserError):
        choose_shape(table, {1: 0.1}, {1: 0.1}, 0.0, budgets=[4], depths=[1])


def cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", "plan", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_cli_json():
    proc = cli("--acceptance", "0.6,0.2,0.1", "--budget", "6", "--depth", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["expected_tokens"] == pytest.approx(2.5056)
    assert obj["parents"] == [-1, 0, 0, 1, 3, 4]
    assert obj["depth"] == 5 and obj["budget"] == 6 and obj["levels"] == [1, 2, 1, 1, 1]
    assert obj["acceptance"] == [0.6, 0.2, 0.1]
    assert Tree.from_parents(obj["parents"]).expected_tokens(obj["acceptance"]) == pytest.approx(obj["expected_tokens"])


def test_cli_text_and_timing(capsys):
    from engine.cli import main  # in-process: a subprocess costs ~1.5 s of imports each
    assert main(["plan", "--acceptance", "0.6,0.2,0.1", "--budget", "6", "--depth", "5"]) == 0
    out = capsys.readouterr().out
    assert "2.5056" in out and "root" in out and "[1, 2, 1, 1, 1]" in out
    assert main(["plan", "--time-dp", "--budget", "32", "--depth", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dp_seconds_best"] > 0


BAD_INPUTS = [
    ["--acceptance", "0.6,0.2", "--budget", "0", "--depth", "3"],
    ["--acceptance", "0.6,0.2", "--budget", "4", "--depth", "0"],
    ["--acceptance", "0.6,0.2", "--budget", "4", "--depth", "1"],
    ["--acceptance", "0.6,zz", "--budget", "4", "--depth", "3"],
    ["--acceptance", "0.8,0.8", "--budget", "4", "--depth", "3"],
    ["--acceptance", "0.6", "--budget", "4"],
    ["--budget", "4", "--depth", "3"],
]


@pytest.mark.parametrize("args", BAD_INPUTS)
def test_cli_bad_input_in_process(args, capsys):
    from engine.cli import main
    assert main(["plan", *args, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_cli_bad_input_subprocess():
    proc = cli(*BAD_INPUTS[0], "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "budget" in err[0]


def test_a_cost_measured_below_a_narrower_forward_is_read_as_noise():
    """t(n) is read as its running maximum: a forward over more tokens never counts as cheaper
    than one over fewer (a noisy point would otherwise pull the plan to its width)."""
    from engine.planner import CostCurve
    curve = CostCurve({1: 0.10, 4: 0.14, 5: 0.15, 6: 0.12, 8: 0.20}, "target_seconds")
    assert [curve(n) for n in (1, 4, 5, 6)] == [0.10, 0.14, 0.15, 0.15]
    assert curve(7) == pytest.approx(0.175) and curve(8) == 0.20 and curve(10) == pytest.approx(0.25)


def test_a_table_sized_to_the_ask_gives_the_shared_tables_trees():
    """Learning re-plans from a new posterior every step with a table only as big as the spec
    (planning.table_for(shared=False)): its trees and hardware-aware choices must be those of the
    shared MAX_BUDGET table, or a re-planned step would get another tree than the plan promised."""
    from engine import planning
    from engine.profiler import DeviceProfile
    rng = np.random.default_rng(7)
    prof = DeviceProfile({1: 0.10, 2: 0.11, 4: 0.12, 8: 0.16, 16: 0.26, 32: 0.45},
                         {1: 0.02, 2: 0.025, 4: 0.03, 8: 0.045, 16: 0.08}, 0.002, 128, 3, "d", "t", "cpu",
                         "float32", source="test profile")
    for trial in range(12):
        width = int(rng.choice([2, 4, 16]))
        acc = np.sort(rng.dirichlet(np.ones(width + 1) * rng.uniform(0.2, 2.0)))[::-1][:width]
        acc = list(np.round(acc, 2) if trial % 3 == 0 else acc)  # rounded: ties between ranks
        shared = planning.table_for(acc)
        for n, d in ((1, 1), (2, 2), (5, 3), (8, 8), (16, 6), (20, 5), (32, 12)):
            assert planning.table_for(acc, n, d, shared=False).tree(n, d).parents == shared.tree(n, d).parents
        for budget, depth in ((32, 8), (16, 16)):
            small = planning.hardware_aware(acc, prof, budget, depth, True, shared=False)
            assert small.tree.parents == planning.hardware_aware(acc, prof, budget, depth, True).tree.parents


def test_learning_re_plans_never_build_the_shared_table(monkeypatch):
    """The shared table (MAX_BUDGET nodes) costs ~165 ms to build and a posterior is new at every
    step: a re-plan must build only what the spec needs."""
    from engine import planning
    from engine.planner import PlanTable
    sizes = []
    original = PlanTable.build.__func__

    def build(cls, acc, n, d):
        sizes.append((n, d))
        return original(cls, acc, n, d)
    monkeypatch.setattr(PlanTable, "build", classmethod(build))
    spec = planning.MethodSpec("sequoia", 10, 5)
    for step in range(3):
        planning.plan_from_vector(spec, [0.5 - step / 100, 0.2, 0.1], shared=False)
    assert sizes == [(10, 5)] * 3
    result = SimpleNamespace(method=SimpleNamespace(tree=Tree.from_branching([2, 0, 0]), uses_draft=True), spec=spec,
                             profile=None)
    replan = planning.Replanner(None, result, SimpleNamespace(greedy=True), learn=False)
    replan.learner = SimpleNamespace(run=SimpleNamespace(nodes=3), has_evidence=True, should_replan=lambda: True,
                                     posterior=[0.4, 0.2, 0.1], planned_with=None)
    sizes.clear()
    assert replan().size == 10 and sizes == [(10, 5)]


def test_an_acceptance_list_with_an_empty_entry_is_refused_not_shifted():
    """`plan --acceptance 0.6,,0.1` dropped the empty entry and planned with 0.1 as rank 2's
    probability; `--acceptance ""` said to give --acceptance."""
    from engine.errors import UserError
    from engine.planner import parse_acceptance
    for text in ("0.6,,0.1", "", "0.6,0.2,"):
        with pytest.raises(UserError, match="comma-separated numbers"):
            parse_acceptance(text)
    assert parse_acceptance(" 0.6, 0.2 ,0.1") == pytest.approx([0.6, 0.2, 0.1])


def test_hardware_aware_depth_is_a_bound_so_depth_one_plans_the_root_alone():
    """The page's depth 1 with hardware-aware on was refused as "a tree with more than one node
    needs depth >= 2", though budget and depth are upper bounds there and budget 1 planned."""
    from engine import planning
    planning.MethodSpec("sequoia-auto", 8, 1).check()
    with pytest.raises(UserError, match="depth >= 2"):
        planning.MethodSpec("sequoia", 8, 1).check()
    choice = planning.hardware_aware([0.6, 0.2, 0.1], SimpleNamespace(
        target_seconds={1: 0.01, 8: 0.012}, draft_seconds={1: 0.002, 8: 0.003}, overhead_seconds=0.001), 8, 1)
    assert (choice.n, choice.tree.size) == (1, 1)
