"""bench/draft_rows.py's planning half: the hardware-aware tree against the best chain, under cost
curves whose answer is known (the measuring half needs the embedded pair; its output is committed
as bench/draft-rows-xeon.txt)."""
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "draft_rows.py"
spec = importlib.util.spec_from_file_location("draft_rows", SCRIPT)
draft_rows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(draft_rows)

ACCEPTANCE = [0.78, 0.10, 0.04, 0.02]  # about the embedded pair's pooled T=0 vector


def test_a_flat_verifier_makes_wide_trees_beat_the_best_chain():
    flat = {1: 0.25, 16: 0.25, 32: 0.5}
    row = draft_rows.tree_and_chain(ACCEPTANCE, flat, {1: 0.05, 16: 0.05}, 0.0)
    assert row["n"] >= 12 and max(row["widths"]) >= 3, row
    assert row["speedup"] > 1.1 * row["best_chain_speedup"], row


def test_a_verifier_that_grows_per_row_leaves_the_chain_best():
    steep = {1: 0.25, 2: 0.375, 32: 0.25 + 31 * 0.125}  # every extra tree token costs half a forward
    row = draft_rows.tree_and_chain(ACCEPTANCE, steep, {1: 0.05, 16: 0.05}, 0.0)
    assert row["n"] > 1 and max(row["widths"]) == 1 and row["n"] == row["d"] == row["best_chain_depth"], row
    assert row["speedup"] == row["best_chain_speedup"]


def test_the_best_chain_is_a_chain_even_where_the_dp_would_branch():
    # rank 2 nearly as likely as rank 1: the DP's best 4-node tree of depth 4 branches, so the
    # "chain" must be built as one, not read off the DP's (d, d) entry
    costs = {1: 0.25, 4: 0.25, 5: 1.0, 32: 8.0}
    row = draft_rows.tree_and_chain([0.5, 0.45], costs, {1: 0.01, 16: 0.01}, 0.0)
    assert max(row["widths"]) >= 2, row
    assert row["speedup"] > 1.05 * row["best_chain_speedup"], row
