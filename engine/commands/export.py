"""`python -m engine export`: a planned (or given) tree in another engine's format.

The tree comes from the same inputs as `plan` (an acceptance vector with --budget/--depth, or a
model pair at a temperature, or --auto), or from a file with --tree; engine/export.py does the
conversion. Only --tree and --acceptance runs are model-free.
"""
from __future__ import annotations

import argparse
import sys

from engine import export
from engine.commands import plan
from engine.commands.common import load_tree_file
from engine.errors import UserError
from engine.tree import Tree
from engine.wording import tree_shape


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
    plan.add_plan_pair_args(p.add_argument_group("model pair (when neither --acceptance nor --tree is given; as in "
                                                  "`plan`; --draft is also the vLLM draft id)"))
    v = p.add_argument_group("vllm format")
    v.add_argument("--method", default=None, choices=export.VLLM_METHODS,
                   help="vLLM speculation method written to speculative_config (default draft_model)")
    v.add_argument("--tensor-parallel-size", type=int, default=None,
                   help="GPUs vLLM shards the target over (default 1)")
    p.set_defaults(func=run)


def tree_from_args(args) -> tuple[Tree, str | None, str | None]:
    """The tree, and the draft and target ids when known (for the vllm format)."""
    from engine.models import DEFAULT

    draft, target = (None if x in (None, DEFAULT) else x for x in (args.draft, args.target))
    if args.tree:   # (its options were checked with the others: check_options)
        return load_tree_file(args.tree), draft, target
    if plan.uses_pair(args):
        return _pair_tree(args)
    acceptance = plan.acceptance_from_args(args, allowed=("draft", "target"))
    budget, depth = plan._budget_depth(args)
    return Tree(tuple(plan.plan_result(acceptance, budget, depth)["parents"])), draft, target


def _refuse_plan_options(args) -> None:
    from engine.commands.common import flags_given
    planning = flags_given(args, {name: default for name, default in
                                  {"acceptance": None, "budget": None, "depth": None, **plan.PAIR_ONLY}.items()
                                  if name not in ("draft", "target")})
    if planning:   # --draft and --target name the models a vllm config serves
        raise UserError(f"give either --tree FILE or plan options ({', '.join(planning)}), not both")


def check_options(args) -> None:
    """Every refusal that needs no models and no plan, before --out's folder is made and before
    a plan that may load the pair and measure for minutes."""
    if args.format == "growmap" and not args.out:
        raise UserError("growmap is a binary .pt file: give --out FILE.pt")
    from engine.commands.common import flags_given
    vllm_only = flags_given(args, {"method": None, "tensor_parallel_size": None})
    if vllm_only and args.format != "vllm":
        raise UserError(f"{' and '.join(vllm_only)} go{'es' if len(vllm_only) == 1 else ''} into a vLLM config: "
                        f"give --format vllm, or leave {'it' if len(vllm_only) == 1 else 'them'} out")
    models = flags_given(args, {"draft": None, "target": None})
    if models and args.format != "vllm" and (args.tree or args.acceptance is not None):
        raise UserError(f"with {'--tree' if args.tree else '--acceptance'}, {' and '.join(models)} name"
                        f"{'s' if len(models) == 1 else ''} the models of a vLLM config: give --format vllm, "
                        f"or leave {'it' if len(models) == 1 else 'them'} out")
    if args.tree:
        _refuse_plan_options(args)
    elif plan.uses_pair(args):
        plan.check_pair_shape(args)
    else:
        plan.acceptance_from_args(args, allowed=("draft", "target"))
        plan._budget_depth(args)


def _pair_tree(args) -> tuple[Tree, str, str]:
    """The tree `plan` would print for these pair options (the same library calls)."""
    from engine.models import servable_name
    result, pair = plan.plan_with_pair(args)
    return result.tree, servable_name(pair, "draft"), servable_name(pair, "target")


def run(args: argparse.Namespace) -> int:
    from engine.commands.common import writable
    check_options(args)
    args.method = args.method or "draft_model"
    args.tensor_parallel_size = 1 if args.tensor_parallel_size is None else args.tensor_parallel_size
    out = writable(args.out, "--out")   # before a plan that may load the pair and measure
    tree, draft, target = tree_from_args(args)
    options = {}
    if args.format == "vllm":
        options = dict(method=args.method, draft=draft, target=target, tensor_parallel_size=args.tensor_parallel_size)
    data = export.export_tree(tree, args.format, **options)
    if args.format == "vllm":
        for note in export.vllm_notes(tree, args.method):
            print(f"note: {note}", file=sys.stderr)
    if out is not None:
        try:
            out.write_bytes(data if isinstance(data, bytes) else (data + "\n").encode())
        except OSError as exc:
            raise UserError(f"cannot write --out {args.out}: {exc.strerror}") from None
        print(f"wrote {args.format} tree ({tree_shape(tree)}) to {out}",
              file=sys.stderr)
    else:
        print(data)
    return 0
