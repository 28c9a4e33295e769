"""`python -m engine export`: a planned (or given) tree in another engine's format.

The tree comes from the same inputs as `plan` (an acceptance vector with --budget/--depth, or a
model pair at a temperature, or --auto), or from a file with --tree; engine/export.py does the
conversion. Only --tree and --acceptance runs are model-free.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine import export
from engine.errors import UserError
from engine.tree import Tree


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a planned tree for vLLM, Medusa-style engines or Sequoia",
                              description="Write the planned tree (or --tree FILE) as json, vllm, medusa or growmap.")
    p.add_argument("--format", required=True, choices=export.FORMATS, help="output format")
    p.add_argument("--tree", default=None, metavar="FILE",
                   help="convert this tree instead of planning: tree JSON, growmap .pt, vllm or medusa JSON")
    p.add_argument("--out", default=None, metavar="FILE", help="write here (needed for growmap: it is binary)")
    # the plan command's inputs, under the same names, so its helpers read them unchanged
    p.add_argument("--acceptance", help="comma-separated P(rank 1), P(rank 2), ... e.g. 0.6,0.2,0.1")
    p.add_argument("--budget", type=int, help="tree nodes, root included")
    p.add_argument("--depth", type=int, help="max levels, root included")
    g = p.add_argument_group("model pair (when neither --acceptance nor --tree is given; as in `plan`)")
    g.add_argument("--draft", default=None, help="draft model (default: the embedded pair); also the vLLM draft id")
    g.add_argument("--target", default=None, help="target model (default: the embedded pair); also what vLLM serves")
    g.add_argument("--device", default="auto")
    g.add_argument("--dtype", default="auto")
    g.add_argument("--target-device-map", default=None)
    g.add_argument("--draft-device-map", default=None)
    g.add_argument("--max-memory", default=None)
    g.add_argument("--offload-folder", default=None)
    g.add_argument("--temperature", type=float, default=None, help="use the pair's vector measured at this temperature")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--prompts", default=None, help="prompts file for measuring the vector if not cached")
    g.add_argument("--auto", action="store_true", help="hardware-aware budget and depth from this device's profile")
    g.add_argument("--max-budget", type=int, default=128, help="--auto searches budgets up to this")
    v = p.add_argument_group("vllm format")
    v.add_argument("--method", default="draft_model", choices=export.VLLM_METHODS,
                   help="vLLM speculation method written to speculative_config")
    v.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs vLLM shards the target over")
    p.set_defaults(func=run)


def tree_from_args(args) -> tuple[Tree, str | None, str | None]:
    """The tree, and the draft and target ids when known (for the vllm format)."""
    from engine.commands import plan
    from engine.models import DEFAULT

    draft, target = (None if x in (None, DEFAULT) else x for x in (args.draft, args.target))
    if args.tree:
        if args.acceptance or args.temperature is not None or args.auto or (args.budget, args.depth) != (None, None):
            raise UserError("give either --tree FILE or plan options (--acceptance/--budget/--depth/"
                            "--temperature/--auto), not both")
        try:
            data = Path(args.tree).read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read --tree {args.tree}: {exc.strerror}") from None
        return export.import_tree(data), draft, target
    if plan.uses_pair(args):
        return _pair_tree(args)
    acceptance = plan.acceptance_from_args(args)
    budget, depth = plan._budget_depth(args)
    return Tree(tuple(plan.plan_result(acceptance, budget, depth)["parents"])), draft, target


def _pair_tree(args) -> tuple[Tree, str, str]:
    """The tree `plan` would print for these pair options (the same library calls)."""
    from engine.commands import plan
    from engine.commands.common import read_prompts
    from engine.models import DEFAULT, load_pair
    from engine.planning import auto_plan, dp_plan  # what `plan` calls: the same tree
    from engine.settings import Settings

    settings = Settings(temperature=0.0 if args.temperature is None else args.temperature, top_p=args.top_p)
    prompts = read_prompts(args.prompts) if args.prompts else None
    if not args.auto:
        plan._budget_depth(args)
    pair = load_pair(args.draft or DEFAULT, args.target or DEFAULT, device=args.device, dtype=args.dtype,
                     target_device_map=args.target_device_map, draft_device_map=args.draft_device_map,
                     max_memory=args.max_memory, offload_folder=args.offload_folder)
    if args.auto:
        result = auto_plan(pair, settings, max_budget=args.max_budget, max_depth=args.depth or 16, prompts=prompts)
    else:
        result = dp_plan(pair, settings, args.budget, args.depth, prompts=prompts)
    return result.tree, pair.draft_name, pair.target_name


def run(args: argparse.Namespace) -> int:
    if args.format == "growmap" and not args.out:
        raise UserError("growmap is a binary .pt file: give --out FILE.pt")
    tree, draft, target = tree_from_args(args)
    options = {}
    if args.format == "vllm":
        options = dict(method=args.method, draft=draft, target=target, tensor_parallel_size=args.tensor_parallel_size)
    data = export.export_tree(tree, args.format, **options)
    if args.format == "vllm":
        for note in export.vllm_notes(tree, args.method):
            print(f"note: {note}", file=sys.stderr)
    if args.out:
        try:
            Path(args.out).write_bytes(data if isinstance(data, bytes) else (data + "\n").encode())
        except OSError as exc:
            raise UserError(f"cannot write --out {args.out}: {exc.strerror}") from None
        print(f"wrote {args.format} tree ({tree.size} nodes, {tree.depth} levels) to {args.out}", file=sys.stderr)
    else:
        print(data)
    return 0
