"""`python -m engine plan`: the optimal tree for an acceptance vector, a node budget and a depth.

Acceptance comes from `acceptance_from_args`; model-based modes (--draft/--target/--temperature,
--auto) are meant to plug in there and in `run` without touching the rest.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from engine.errors import UserError
from engine.planner import PlanTable, validate_acceptance
from engine.tree import Tree

TIME_DP_DEFAULTS = (256, 16, 32)  # budget, depth, width used by --time-dp when not given


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="optimal Sequoia tree for an acceptance vector",
                              description="Solve the Sequoia tree DP for a measured acceptance vector.")
    p.add_argument("--acceptance", help="comma-separated P(rank 1), P(rank 2), ... e.g. 0.6,0.2,0.1")
    p.add_argument("--budget", type=int, help="tree nodes, root included")
    p.add_argument("--depth", type=int, help="max levels, root included")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--time-dp", action="store_true",
                   help="time building the DP table (defaults: budget 256, depth 16, a synthetic "
                        "32-rank vector used for timing only)")
    p.set_defaults(func=run)


def parse_acceptance(text: str) -> list[float]:
    parts = [x.strip() for x in text.split(",") if x.strip()]
    try:
        values = [float(x) for x in parts]
    except ValueError:
        raise UserError(f"--acceptance must be comma-separated numbers, got {text!r}") from None
    return validate_acceptance(values).tolist()


def acceptance_from_args(args) -> list[float]:
    if getattr(args, "acceptance", None):
        return parse_acceptance(args.acceptance)
    raise UserError("give --acceptance or a model pair with --temperature")


def _budget_depth(args) -> tuple[int, int]:
    if args.budget is None or args.depth is None:
        raise UserError("give --budget (nodes, root included) and --depth (levels, root included)")
    if args.budget < 1:
        raise UserError(f"--budget must be at least 1 (got {args.budget})")
    if args.depth < 1:
        raise UserError(f"--depth must be at least 1 (got {args.depth})")
    if args.budget > 1 and args.depth < 2:
        raise UserError(f"a tree of {args.budget} nodes needs --depth of at least 2")
    return args.budget, args.depth


def plan_result(acceptance, budget: int, depth: int) -> dict:
    table = PlanTable.build(acceptance, budget, depth)
    tree = table.tree(budget, depth)
    return {"budget": budget, "max_depth": depth, "acceptance": list(acceptance),
            "expected_tokens": tree.expected_tokens(acceptance), "parents": list(tree.parents),
            "depth": tree.depth, "levels": tree.level_widths, "ranks": list(tree.rank)}


def draw(tree: Tree, acceptance, max_nodes: int = 64) -> str:
    """ASCII drawing: each node shows its rank and the probability that it is reached."""
    if tree.size > max_nodes:
        return f"(drawing skipped: {tree.size} nodes > {max_nodes})"
    reach = [1.0] * tree.size
    for i in range(1, tree.size):
        r = tree.rank[i]
        reach[i] = reach[tree.parents[i]] * (acceptance[r - 1] if r <= len(acceptance) else 0.0)
    lines = ["root"]

    def walk(v: int, prefix: str) -> None:
        kids = tree.children[v]
        for k, c in enumerate(kids):
            last = k == len(kids) - 1
            lines.append(f"{prefix}{'└─' if last else '├─'} r{tree.rank[c]}  reach {reach[c]:.4g}")
            walk(c, prefix + ("   " if last else "│  "))

    walk(0, "")
    return "\n".join(lines)


def time_dp(args) -> int:
    budget = args.budget if args.budget is not None else TIME_DP_DEFAULTS[0]
    depth = args.depth if args.depth is not None else TIME_DP_DEFAULTS[1]
    if args.acceptance:
        acceptance, source = parse_acceptance(args.acceptance), "given"
    else:  # a synthetic decreasing vector: only the DP's speed is measured, no plan is reported
        w = TIME_DP_DEFAULTS[2]
        acceptance, source = [0.5 * 0.8 ** k / w for k in range(w)], "synthetic (timing only)"
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        PlanTable.build(acceptance, budget, depth)
        runs.append(time.perf_counter() - start)
    result = {"budget": budget, "depth": depth, "width": len(acceptance), "acceptance_source": source,
              "dp_seconds_best": min(runs), "dp_seconds_median": statistics.median(runs), "runs": len(runs)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"DP table N={budget} D={depth} W={len(acceptance)} ({source}): "
              f"best {min(runs) * 1e3:.1f} ms, median {statistics.median(runs) * 1e3:.1f} ms over {len(runs)} builds")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.time_dp:
        return time_dp(args)
    acceptance = acceptance_from_args(args)
    budget, depth = _budget_depth(args)
    result = plan_result(acceptance, budget, depth)
    if args.json:
        print(json.dumps(result))
        return 0
    tree = Tree(tuple(result["parents"]))
    print(f"acceptance: {', '.join(f'{a:g}' for a in acceptance)}")
    print(f"budget {budget} nodes, at most {depth} levels -> tree with {tree.size} nodes, {tree.depth} levels")
    print(f"level widths: {result['levels']}")
    print(f"expected tokens per step: {result['expected_tokens']:.4f}")
    print(draw(tree, acceptance))
    return 0
