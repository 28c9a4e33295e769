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
from engine.planner import PlanTable, parse_acceptance
from engine.tree import Tree
from engine.wording import plural, tree_shape

TIME_DP_DEFAULTS = (256, 16, 32)  # budget, depth, width used by --time-dp when not given


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="optimal Sequoia tree for an acceptance vector",
                              description="Solve the Sequoia tree DP for an acceptance vector: one given with "
                                          "--acceptance (no models), or a model pair's measured one (--temperature, "
                                          "--auto: the device's profile picks budget and depth).")
    p.add_argument("--acceptance", help="comma-separated P(rank 1), P(rank 2), ... e.g. 0.6,0.2,0.1")
    p.add_argument("--budget", type=int, help="tree nodes, root included (needed, except with --auto or --time-dp); "
                                              "at most 256 for a pair's plan (what generate runs), 1024 for "
                                              "--acceptance's (maths only)")
    p.add_argument("--depth", type=int, help="max levels, root included (needed, except with --auto: 16, "
                                             "or --time-dp); at most 32 for a pair's plan, any for --acceptance's")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_plan_pair_args(p.add_argument_group("model pair (when --acceptance is not given)"))
    p.add_argument("--time-dp", action="store_true",
                   help="time building the DP table (defaults: budget 256, depth 16, a synthetic "
                        "32-rank vector used for timing only)")
    p.set_defaults(func=run)


def add_plan_pair_args(g) -> None:
    """The pair options of `plan` (also used by `export`, which plans the same way)."""
    from engine.commands.common import add_placement_args
    g.add_argument("--draft", default=None, help="draft model (default: the embedded pair)")
    g.add_argument("--target", default=None, help="target model (default: the embedded pair)")
    add_placement_args(g)
    g.add_argument("--temperature", type=float, default=None, help="use the pair's vector measured at this temperature")
    g.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (transformers' top_k, applied after temperature, before top-p); 0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1 = off)")
    g.add_argument("--prompts", default=None, help="prompts file for measuring the vector if not cached")
    g.add_argument("--for-prompt", default=None, metavar="TEXT",
                   help="plan for this prompt: its domain's (code/prose) vector where they differ (engine/domains.py)")
    g.add_argument("--auto", action="store_true",
                   help="hardware-aware: choose budget and depth from this device's measured profile")
    g.add_argument("--max-budget", type=int, default=MAX_BUDGET_DEFAULT,
                   help=f"--auto searches budgets up to this (default {MAX_BUDGET_DEFAULT})")


MAX_BUDGET_DEFAULT = 128
# the pair options and the defaults they have when not given: with --acceptance they would be
# ignored (a plan from a given vector reads no pair), so one given is refused
PAIR_ONLY = {"draft": None, "target": None, "temperature": None, "top_k": 0, "top_p": 1.0, "prompts": None,
             "for_prompt": None, "auto": False, "max_budget": MAX_BUDGET_DEFAULT, "device": "auto",
             "dtype": "auto", "target_device_map": None, "draft_device_map": None, "max_memory": None,
             "offload_folder": None, "cpu_kernels": "fast", "draft_weights": "auto", "draft_head_tokens": None}


def refuse_pair_options(args, mode: str, what_it_does: str, allowed: tuple[str, ...] = ()) -> None:
    """`mode` (--acceptance, --time-dp) reads no pair: a pair option given with it would be ignored,
    so it is refused by name. `allowed`: pair options the caller reads for something else."""
    from engine.commands.common import flags_given
    given = flags_given(args, {name: default for name, default in PAIR_ONLY.items() if name not in allowed})
    if given:
        raise UserError(f"{mode} {what_it_does}; {', '.join(given)} "
                        f"appl{'ies' if len(given) == 1 else 'y'} to a model pair's plan: leave "
                        f"{'it' if len(given) == 1 else 'them'} out, or leave out {mode}")


def acceptance_from_args(args, allowed: tuple[str, ...] = ()) -> list[float]:
    """The vector given with --acceptance; `allowed`: pair options the caller reads for something
    else (export's --draft and --target name the models a vLLM config serves)."""
    if getattr(args, "acceptance", None) is not None:
        refuse_pair_options(args, "--acceptance", "plans from the vector given", allowed)
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
    from engine.commands.common import check_flag
    from engine.tree import MAX_TREE_NODES
    # (they were ignored: the timing printed as if they had not been given)
    refuse_pair_options(args, "--time-dp", "times the DP on a given or synthetic vector")
    budget = args.budget if args.budget is not None else TIME_DP_DEFAULTS[0]
    depth = args.depth if args.depth is not None else TIME_DP_DEFAULTS[1]
    check_flag(budget, "--budget", 1, MAX_TREE_NODES, " nodes, the root included")   # by the flags' names,
    check_flag(depth, "--depth", 1)                                                   # as a plan says them
    if args.acceptance is not None:
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


def uses_pair(args) -> bool:
    return args.acceptance is None and (args.temperature is not None or args.auto or args.draft or args.target)


def check_pair_shape(args) -> None:
    """A pair's plan's budget and depth, by the flags' names: the planner's own check came after
    the load and named "budget" for --max-budget."""
    from engine.commands.common import check_flag
    from engine.planning import MAX_BUDGET, MAX_DEPTH
    if args.auto:
        check_flag(args.max_budget, "--max-budget", 1, MAX_BUDGET, " nodes, the root included")
        if args.budget is not None:
            raise UserError("--auto chooses the budget itself, up to --max-budget: leave out --budget")
    elif args.budget is None or args.depth is None:
        raise UserError("give --budget (nodes, root included) and --depth (levels, root included), or --auto")
    else:
        check_flag(args.budget, "--budget", 1, MAX_BUDGET, " nodes, the root included")
        if args.max_budget != MAX_BUDGET_DEFAULT:
            raise UserError("--max-budget bounds the search of --auto: give --auto, or leave it out")
    if args.depth is not None:
        check_flag(args.depth, "--depth", 1, MAX_DEPTH, " levels, the root included")
    # with --auto the depth is a bound: depth 1 plans the root alone (as the page and generate --auto)
    if not args.auto and args.budget > 1 and args.depth is not None and args.depth < 2:
        raise UserError("a tree with more than one node needs --depth of at least 2 (the root is level 1)")


def plan_with_pair(args):
    """(PlanResult, pair): the pair's acceptance vector (cached, or measured now), then DP or hardware-aware."""
    from engine.commands.common import pair_from_args, read_prompts
    from engine.models import DEFAULT
    from engine.planning import auto_plan, dp_plan
    from engine.settings import Settings

    settings = Settings(temperature=0.0 if args.temperature is None else args.temperature, top_p=args.top_p,
                        top_k=args.top_k)
    prompts = read_prompts(args.prompts) if args.prompts else None
    check_pair_shape(args)   # before the pair's half a minute of loading
    args.draft, args.target = args.draft or DEFAULT, args.target or DEFAULT
    pair = pair_from_args(args)
    if args.auto:
        return auto_plan(pair, settings, max_budget=args.max_budget, max_depth=args.depth or 16,
                         prompts=prompts, prompt=args.for_prompt), pair
    return dp_plan(pair, settings, args.budget, args.depth, prompts=prompts, prompt=args.for_prompt), pair


def run_with_pair(args) -> int:
    from engine.commands.common import print_json
    plan, pair = plan_with_pair(args)
    result = plan.summary()
    result.update(max_depth=args.depth, temperature=0.0 if args.temperature is None else args.temperature,
                  top_p=args.top_p, top_k=args.top_k)
    if plan.choice is not None:   # the bounds searched, then the choice in budget and max_depth
        result["auto_bounds"] = {"budget": args.max_budget, "depth": args.depth or 16}
        result.update(budget=plan.choice.n, max_depth=plan.choice.d,
                      predicted_tokens_per_step=plan.choice.predicted_tokens_per_step,
                      predicted_tokens_per_second=plan.choice.predicted_tokens_per_second,
                      predicted_seconds_per_step=plan.choice.predicted_seconds_per_step,
                      baseline_seconds_per_token=plan.choice.baseline_seconds_per_token)
    if args.json:
        print_json(result)
        return 0
    acc = plan.acceptance
    print(f"acceptance ({acc.sampler}, T={acc.temperature}, top-k={acc.top_k}, top-p={acc.top_p}, "
          f"{plan.domain or 'pooled'} vector): "
          f"{', '.join(f'{a:.3f}' for a in acc.probabilities[:8])}{' ...' if len(acc.probabilities) > 8 else ''}")
    print(f"  ({plan.acceptance_note})")   # where it came from: its file, positions, pooling
    if plan.choice is not None:
        c = plan.choice
        print(f"hardware-aware choice on {pair.device}: n={c.n}, d={c.d}; predicted {c.predicted_tokens_per_step:.2f} "
              f"tokens/step, {c.predicted_tokens_per_second:.2f} tokens/s, {c.predicted_speedup:.2f}x over autoregressive")
    print(f"tree: {tree_shape(plan.tree)}, widths {plan.tree.level_widths}; "
          f"expected tokens/step {plan.expected_tokens:.3f}")
    print(draw(plan.tree, acc.probabilities))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.time_dp:
        return time_dp(args)
    if uses_pair(args):
        return run_with_pair(args)
    acceptance = acceptance_from_args(args)
    budget, depth = _budget_depth(args)
    result = plan_result(acceptance, budget, depth)
    if args.json:
        print(json.dumps(result))
        return 0
    tree = Tree(tuple(result["parents"]))
    print(f"acceptance: {', '.join(f'{a:g}' for a in acceptance)}")
    print(f"budget {plural(budget, 'node')}, at most {plural(depth, 'level')} -> tree with "
          f"{tree_shape(tree)}")
    print(f"level widths: {result['levels']}")
    print(f"expected tokens per step: {result['expected_tokens']:.4f}")
    print(draw(tree, acceptance))
    return 0
