"""`python -m engine generate`: one prompt through one method, text or JSON out."""
from __future__ import annotations

import argparse
import logging
import sys

from engine import methods, observed, profiler
from engine.commands.common import (add_pair_args, add_sampling_args, flags_given, load_tree_file, pair_from_args,
                                    print_json, settings_from_args)
from engine.decoding import Decoder, make_generator
from engine.errors import UserError
from engine.models import encode_prompt, prompt_is_blank
from engine.planning import MAX_BUDGET, MethodSpec, Replanner, build_plan, check_shape
from engine.wording import plural

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("generate", help="generate text with one decoding method")
    add_pair_args(p)
    p.add_argument("--prompt", required=True, help="the text to continue (wrapped in the chat template, see --chat)")
    p.add_argument("--method", choices=methods.METHOD_NAMES, default="sequoia",
                   help="ar (plain decoding), chain, specinfer or sequoia (a DP tree; the default)")
    p.add_argument("--budget", type=int, default=None,
                   help="Sequoia tree size in nodes, the root included (default 16); for chain, specinfer "
                        "and --tree an upper bound their tree must fit")
    p.add_argument("--depth", type=int, default=None,
                   help="tree levels counting the root (chain/specinfer default 5, Sequoia default 8)")
    p.add_argument("--width", type=int, default=None, help="SpecInfer: independent chains under the root (default 4)")
    p.add_argument("--tree", default=None,
                   help="Sequoia: a tree file: tree JSON, an original growmap .pt, or a vllm or medusa export")
    p.add_argument("--auto", action="store_true",
                   help="Sequoia, hardware-aware (the app's default): the planner picks n <= --budget and "
                        "d <= --depth from this device's profile (timed first if none is cached)")
    add_sampling_args(p)
    p.add_argument("--num-samples", type=int, default=1, help="independent samples from the same prompt")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--learn", action=argparse.BooleanOptionalAction, default=True,
                   help="learn the acceptance vector from this run: re-plan Sequoia trees between steps and "
                        "store the evidence for later runs (exact either way; see README, Learning)")
    p.set_defaults(func=run)


SEQUOIA_BUDGET = 16   # nodes of a Sequoia tree when --budget is not given
SPECINFER_WIDTH = 4   # SpecInfer's chains when --width is not given


def spec_from_args(args) -> MethodSpec:
    depth = args.depth
    if args.auto and args.method != "sequoia":
        raise UserError(f"--auto plans Sequoia trees; it does not apply to --method {args.method}")
    # options of another method are refused, not ignored (a chain ran with --tree FILE unread)
    if args.tree and args.method != "sequoia":
        raise UserError(f"--tree runs the given tree with Sequoia's verification; it does not apply to "
                        f"--method {args.method}")
    if args.width is not None and args.method != "specinfer":
        raise UserError(f"--width sets SpecInfer's chains; it does not apply to --method {args.method}")
    if args.method == "ar":
        given = flags_given(args, {"budget": None, "depth": None})
        if given:
            raise UserError(f"{' and '.join(given)} shape{'s' if len(given) == 1 else ''} a draft tree; "
                            "autoregressive decoding (--method ar) drafts none")
        return MethodSpec("ar", 1, 1)
    if args.method in ("chain", "specinfer"):
        depth = 5 if depth is None else depth
        width = 1 if args.method == "chain" else SPECINFER_WIDTH if args.width is None else args.width
        methods.specinfer(width, depth)  # validates width and depth with the usual messages
        size = 1 + width * (depth - 1)
        if size > MAX_BUDGET:   # named as the tree's size: no budget of the user's is exceeded
            raise UserError(f"{args.method} of depth {depth}" + (f" and width {width}" if width > 1 else "")
                            + f" has {size} nodes, more than the {MAX_BUDGET} a planned tree may have")
        spec = MethodSpec(args.method, size if args.budget is None else args.budget, depth,
                          width=width if args.method == "specinfer" else None)
        spec.check()   # a tree larger than --budget is refused as the app refuses it: before the pair loads
        return spec
    if args.tree:
        if args.auto:
            raise UserError("--auto plans the tree itself: leave out --tree")
        if depth is not None:
            raise UserError("--tree runs the tree as it is: leave out --depth (--budget, if given, is an "
                            "upper bound its size must fit)")
        tree = load_tree_file(args.tree)
        if args.budget is not None and tree.size > args.budget:
            raise UserError(f"the tree in {args.tree} has {tree.size} nodes, more than --budget {args.budget}")
        return MethodSpec("tree", tree=tree)
    budget, depth = (SEQUOIA_BUDGET if args.budget is None else args.budget), (8 if depth is None else depth)
    check_shape(budget, depth, bounds=args.auto)
    return MethodSpec("sequoia-auto" if args.auto else "sequoia", budget, depth)


def method_from_args(args, pair, settings, learn: bool = False, prompt_ids: list[int] | None = None,
                     spec: MethodSpec | None = None):
    """(method, plan): the method to run and its PlanResult (the DP plan measures the acceptance
    vector first when none is cached, or, with learn, starts from an interpolated one, and from
    what earlier runs of `prompt_ids` observed; the prompt's domain picks the code or prose vector
    where they differ). `spec`: spec_from_args(args) when the caller has it already."""
    plan = build_plan(pair, spec or spec_from_args(args), settings, measure=True, learn=learn,
                      prompt=getattr(args, "prompt", None), prompt_ids=prompt_ids)
    return plan.method, plan


def record_costs(pair, events, settings, others_share: float | None = None) -> None:
    """What the steps cost goes into the observations that correct the device profile
    (engine/observed.py). Only the CLI's runs: nothing else runs in its process, unlike the
    app's Live and Race runs, whose page renders on the same cores (engine/jobs.py); and only
    runs that other programs left the CPUs to (`others_share`: observed.OthersWatch)."""
    if others_share is not None and others_share > observed.MAX_OTHERS_SHARE:
        log.info("step costs not recorded: other programs used %.0f %% of the CPUs during the run",
                 100 * others_share)
        return
    try:
        observed.record_run(profiler.profile_key(pair), profiler.cached_profile(pair), events, not settings.greedy)
    except OSError as exc:  # a read-only cache must not fail the run
        log.warning("could not record observed step costs: %s", exc)


def summary_line(label: str, last, sample: int | None = None) -> str:
    """One run's summary on stderr (each sample its own: the first one's read as the whole run's)."""
    which = f"sample {sample + 1}, " if sample is not None else ""
    return (f"[{which}{label}: {plural(last.total_tokens, 'token')} in {plural(last.total_steps, 'step')}, "
            f"{last.tokens_per_step:.2f} tokens/step, {last.tokens_per_second:.1f} tokens/s, "
            f"finished by {last.finish_reason}]")


def run(args) -> int:
    if args.num_samples < 1:
        raise UserError(f"--num-samples must be at least 1 (got {args.num_samples})")
    settings = settings_from_args(args)
    # what needs no models is refused before the pair's half a minute of loading
    spec = spec_from_args(args)
    if prompt_is_blank(args.prompt):
        raise UserError("the prompt is empty: give --prompt the text to continue")
    pair = pair_from_args(args)
    prompt_ids = encode_prompt(pair, args.prompt, args.chat)
    method, plan = method_from_args(args, pair, settings, learn=args.learn, prompt_ids=prompt_ids, spec=spec)
    log.info("method %s, tree %d nodes / %d levels", method.label, method.tree.size, method.tree.depth)
    generator = make_generator(pair.device, settings.seed)
    samples, first_events = [], None
    for i in range(args.num_samples):
        replan = Replanner(pair, plan, settings, learn=args.learn, prompt_ids=prompt_ids)
        events, others = [], observed.OthersWatch()
        decoder = Decoder(pair, method, settings, generator=generator, plan=replan)
        for event in decoder.run(prompt_ids, progress=lambda fraction, message: log.info("%s", message)):
            replan.observe(event)  # between steps: the next tree depends on finished steps only
            events.append(event)
        replan.finish()
        record_costs(pair, events, settings, others.share())
        samples.append(events[-1].token_ids)
        if first_events is None:
            first_events = events
        if not args.json:
            answer = events[-1].answer
            print(answer if args.num_samples == 1 else f"--- sample {i + 1}\n{answer}")
            print(summary_line(method.label, events[-1], i if args.num_samples > 1 else None), file=sys.stderr)
    last = first_events[-1]
    if args.json:
        out = {"method": method.name, "label": method.label, "tree": list(method.tree.parents),
               "token_ids": last.token_ids, "text": last.text, "answer": last.answer,
               "finish_reason": last.finish_reason,
               "steps": [{"tokens": len(e.new_token_ids), "accepted_ranks": e.accepted_ranks,
                          "draft_seconds": e.draft_seconds, "verify_seconds": e.verify_seconds,
                          "other_seconds": e.other_seconds} for e in first_events if e.nodes],
               "tokens_per_step": last.tokens_per_step, "tokens_per_second": last.tokens_per_second,
               "seconds": last.total_seconds, "prefill_seconds": last.prefill_seconds,
               "prompt_tokens": len(prompt_ids), "learn": bool(args.learn),
               "distinct_trees": len({tuple(e.tree_parents) for e in first_events if e.nodes})}
        if args.num_samples > 1:
            out["samples"] = samples
        if args.auto:   # the bounds the planner chose within (the tree above is its choice)
            out["auto_bounds"] = {"budget": SEQUOIA_BUDGET if args.budget is None else args.budget,
                                  "depth": 8 if args.depth is None else args.depth}
        print_json(out)
    return 0
