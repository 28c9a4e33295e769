"""`python -m engine bench`: autoregressive, chains, SpecInfer and Sequoia side by side on the same
prompts and seeds; prints a table and the goals, writes JSON and a plot (engine/bench.py measures,
engine/bench_report.py shows).

Without flags: the embedded default pair, 2 code + 2 prose prompts of the bench's prompt set
(assets/heldout-prompts.json), 32 new tokens, T = 0 and 0.7, chains 3/5/7, SpecInfer 2x4 and 5x4,
Sequoia at 4/8/16/32 nodes (+ the SpecInfer node counts), and the hardware-aware Sequoia tree. The
README's committed run gives its flags."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine import bench, bench_report
from engine.commands.common import (add_pair_args, flags_given, pair_from_args, read_prompt_set, read_prompts,
                                    writable)
from engine.errors import UserError
from engine.prompts import Prompt
from engine.wording import plural


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark the decoding methods side by side",
                       description="Benchmark autoregressive, chain, SpecInfer and Sequoia decoding on the "
                                   "same prompts and seeds; print a table, write JSON and a plot.")
    add_pair_args(p)
    p.add_argument("--prompts", default=None,
                   help="text file, one prompt per line (\\n = newline); default: 2 code + 2 prose prompts "
                        "from assets/heldout-prompts.json")
    p.add_argument("--prompt-set", default=None, metavar="JSON",
                   help="a JSON prompt set (a list of {title, kind, prompt}, or {\"prompts\": [...]}); default "
                        "assets/heldout-prompts.json (prompts the shipped vectors were not measured on); "
                        "assets/prompts.json holds the app's examples")
    p.add_argument("--prompt-mix", default=None, metavar="code=N,prose=M",
                   help="how many of the prompt set's prompts of each kind, the first of each in file order "
                        "(default code=2,prose=2; with --prompt-set and no --prompt-mix: all of that set)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per prompt and method (default 32)")
    p.add_argument("--temperatures", default=None, help="comma-separated, 0 = greedy (default 0,0.7)")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None,
                   help="keep the k most likely tokens (transformers' top_k, after temperature, before top-p); 0 = off")
    p.add_argument("--budgets", default=None, help="Sequoia node budgets, root included (default 4,8,16,32)")
    p.add_argument("--max-depth", type=int, default=None,
                   help="depth bound (levels, root included) given to the DP; the DP picks the depth (default 16)")
    p.add_argument("--chain-depths", default=None,
                   help="chain depths, root included (default 3,5,7); none = no chain lanes")
    p.add_argument("--specinfer", default=None,
                   help="SpecInfer shapes KxD, e.g. 2x4,5x4 (default); none = no SpecInfer lanes")
    p.add_argument("--no-match-specinfer", action="store_true",
                   help="do not add Sequoia trees at the SpecInfer node counts")
    p.add_argument("--no-auto", action="store_true", help="skip the hardware-aware Sequoia tree (and the profile)")
    p.add_argument("--auto-max-budget", type=int, default=None, help="largest tree the hardware-aware choice may pick")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap prompts in the chat template (default: on when the tokenizer has one)")
    p.add_argument("--warmup-tokens", type=int, default=None, help="tokens of the uncounted warm-up run per method")
    p.add_argument("--acceptance-tokens", type=int, default=None,
                   help="tokens per prompt when an acceptance vector must be measured (default 32)")
    p.add_argument("--acceptance-prompts", choices=["assets", "bench"], default=None,
                   help="prompts for measuring acceptance: the bench prompts (default) or all example prompts")
    p.add_argument("--profile-repeats", type=int, default=None)
    p.add_argument("--compare-default-kernels", action="store_true",
                   help="CPU: also load the pair on --cpu-kernels default and time plain decoding there, "
                        "interleaved with the other methods (the fast path's gain, measured in the same run)")
    p.add_argument("--learn", action=argparse.BooleanOptionalAction, default=True,
                   help="store each run's acceptance outcomes as learned evidence (the trees under test stay "
                        "fixed; the JSON records config.learn)")
    p.add_argument("--learning-check", action="store_true",
                   help="after the other lanes, per temperature one learning run of the hardware-aware plan on "
                        "the first code and the first prose prompt: the prediction at the first step boundary "
                        "after --learning-check-after tokens against the rest of the run, the tree frozen there "
                        "(issue 15's goal; off by default)")
    p.add_argument("--learning-check-tokens", type=int, default=None, metavar="N",
                   help="with --learning-check: tokens generated after the boundary (default 256)")
    p.add_argument("--learning-check-after", type=int, default=None, metavar="K",
                   help="with --learning-check: the boundary in generated tokens (default 64, the goal's figure)")
    p.add_argument("--learning-check-prompts", type=int, default=None, metavar="N",
                   help="with --learning-check: runs per prompt kind, on the first N code and the first N prose "
                        "prompts (default 1; more give a rate rather than one answer's outcome)")
    p.add_argument("--learning-check-running", action="store_true",
                   help="with --learning-check: also run each prompt re-planning all along (a Live run) and compare "
                        "the rest's one-step-ahead predictions with what it observed")
    p.add_argument("--learning-check-repeat", action="store_true",
                   help="with --learning-check: also run each prompt a second time (another seed), remembering "
                        "what its first run observed (a repeated prompt; engine/prompt_memory.py)")
    p.add_argument("--learning-check-across-t", dest="learning_check_across", action="store_true",
                   help="with --learning-check and two or more temperatures: also run each prompt at the later "
                        "temperatures carrying what its run at the first observed, rescaled (a prompt run "
                        "again at another temperature; engine/prompt_memory.py)")
    p.add_argument("--fresh", action="store_true",
                   help="measure acceptance vectors and the device profile in this run even if cached")
    p.add_argument("--quick", action="store_true",
                   help="a seconds-long structural run for the tiny test pair (few tokens, small shapes)")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT", help="write the report as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="write the plot")
    p.set_defaults(func=run)


def _floats(text: str, name: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--{name} must be comma-separated numbers (got {text!r})") from None
    if not values:
        raise UserError(f"--{name} is empty")
    return values


def _ints(text: str, name: str, minimum: int = 1) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--{name} must be comma-separated whole numbers (got {text!r})") from None
    if not values:
        raise UserError(f"--{name} is empty")
    if min(values) < minimum:
        raise UserError(f"--{name} values must be at least {minimum} (got {min(values)})")
    return values


def _shapes(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for part in (x.strip().lower() for x in text.split(",") if x.strip()):
        try:
            k, d = (int(v) for v in part.split("x"))
        except ValueError:
            raise UserError(f"--specinfer shapes look like 2x4 (width x depth), got {part!r}") from None
        if k < 1 or d < 2:
            raise UserError(f"--specinfer {part}: width must be >= 1 and depth >= 2 (levels, root included)")
        out.append((k, d))
    return tuple(out)


def _none(text: str) -> bool:
    """`--chain-depths none` / `--specinfer none`: leave those lanes out (a bench of the Sequoia trees)."""
    return text.strip().lower() == "none"


def _mix(text: str, prompts: list[Prompt], source: str) -> dict[str, int]:
    """'code=2,prose=2' -> {'code': 2, 'prose': 2}, checked against the prompt set it picks from."""
    from collections import Counter
    have = Counter(p.kind for p in prompts)
    mix = {}
    for part in (x.strip() for x in text.split(",") if x.strip()):
        kind, _, count = part.partition("=")
        if kind not in have or not count.strip().isdigit() or int(count) < 1:
            raise UserError(f"--prompt-mix takes kind=count with kinds {', '.join(sorted(have))} and counts >= 1 "
                            f"(got {part!r})")
        if int(count) > have[kind]:
            raise UserError(f"--prompt-mix {part}: {source} has {have[kind]} {kind} prompts")
        mix[kind] = int(count)
    if not mix:
        raise UserError("--prompt-mix is empty")
    return mix


def config_from_args(args) -> bench.BenchConfig:
    if not getattr(args, "learning_check", False):   # a learning check's numbers without one: minutes of a
        given = flags_given(args, dict.fromkeys(("learning_check_tokens", "learning_check_after",   # default bench
                                                 "learning_check_prompts")))
        if given:
            raise UserError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} --learning-check")
    base = bench.BenchConfig(**bench.QUICK) if args.quick else bench.BenchConfig()
    changes = {}
    if args.temperatures is not None:
        changes["temperatures"] = _floats(args.temperatures, "temperatures")
    if args.budgets is not None:
        changes["budgets"] = _ints(args.budgets, "budgets")
    if args.chain_depths is not None:
        changes["chain_depths"] = () if _none(args.chain_depths) else _ints(args.chain_depths, "chain-depths", minimum=2)
    if args.specinfer is not None:
        changes["specinfer"] = () if _none(args.specinfer) else _shapes(args.specinfer)
    for flag, key in (("max_new_tokens", "max_new_tokens"), ("top_p", "top_p"), ("top_k", "top_k"), ("max_depth", "max_depth"),
                      ("auto_max_budget", "auto_max_budget"), ("seed", "seed"), ("warmup_tokens", "warmup_tokens"),
                      ("acceptance_tokens", "acceptance_tokens"), ("acceptance_prompts", "acceptance_prompts"),
                      ("profile_repeats", "profile_repeats"), ("learning_check_tokens", "learning_check_tokens"),
                      ("learning_check_after", "learning_check_after"),
                      ("learning_check_prompts", "learning_check_prompts")):
        if getattr(args, flag) is not None:
            changes[key] = getattr(args, flag)
    changes.update(match_specinfer=not args.no_match_specinfer, auto=not args.no_auto, ignore_eos=args.ignore_eos,
                   chat=args.chat, fresh=args.fresh, compare_default_kernels=args.compare_default_kernels,
                   learn=getattr(args, "learn", True), learning_check=getattr(args, "learning_check", False),
                   learning_check_running=getattr(args, "learning_check_running", False),
                   learning_check_repeat=getattr(args, "learning_check_repeat", False),
                   learning_check_across=getattr(args, "learning_check_across", False))
    config = bench.BenchConfig(**{**base.__dict__, **changes})
    _validate(config)
    return config


def _validate(c: bench.BenchConfig) -> None:
    from engine.settings import Settings
    for t in c.temperatures:
        Settings(temperature=t, top_p=c.top_p, top_k=c.top_k, max_new_tokens=c.max_new_tokens, seed=c.seed)
    if c.max_depth < 2:
        raise UserError(f"--max-depth must be at least 2 (got {c.max_depth})")
    if max(c.budgets) > 256 or c.auto_max_budget > 256:
        raise UserError("budgets are limited to 256 nodes")
    if c.auto_max_budget < 1:
        raise UserError(f"--auto-max-budget must be at least 1 (got {c.auto_max_budget})")
    if c.warmup_tokens < 0 or c.acceptance_tokens < 1 or c.profile_repeats < 1:
        raise UserError("--warmup-tokens must be >= 0, --acceptance-tokens and --profile-repeats >= 1")
    if c.learning_check_running and not c.learning_check:
        raise UserError("--learning-check-running needs --learning-check")
    if c.learning_check_repeat and not c.learning_check:
        raise UserError("--learning-check-repeat needs --learning-check")
    if c.learning_check_across and (not c.learning_check or len(c.temperatures) < 2):
        raise UserError("--learning-check-across-t needs --learning-check and at least two --temperatures")
    if c.learning_check_tokens < 1 or c.learning_check_after < 0 or c.learning_check_prompts < 1:
        raise UserError("--learning-check-tokens and --learning-check-prompts must be >= 1 and "
                        "--learning-check-after >= 0")


def bench_prompts(args) -> tuple[list[Prompt], str]:
    """The prompts to run and where they came from, as the report records it."""
    if args.prompts is not None:
        if args.prompt_set is not None or args.prompt_mix is not None:
            raise UserError("--prompts is a whole list: give it without --prompt-set and --prompt-mix")
        return bench.prompts_from_texts(read_prompts(args.prompts)), args.prompts
    source = args.prompt_set or _shown(bench.BENCH_PROMPTS)
    prompts = read_prompt_set(args.prompt_set or bench.BENCH_PROMPTS)
    if args.prompt_mix is not None:
        mix = _mix(args.prompt_mix, prompts, source)
    elif args.prompt_set is not None:
        return prompts, source
    else:
        mix = bench.QUICK_PROMPT_MIX if args.quick else bench.DEFAULT_PROMPT_MIX
    described = ",".join(f"{kind}={count}" for kind, count in mix.items())
    return bench.default_prompts(mix, prompts), f"{source}, {described}"


def _shown(path: Path) -> str:
    """A shipped file as the repository names it (assets/...)."""
    return str(path.relative_to(Path(__file__).resolve().parents[2]))


def run(args) -> int:
    config = config_from_args(args)
    writable(args.json_out, "--json")   # both before minutes of runs, not after them
    writable(args.plot, "--plot")
    prompts, prompt_source = bench_prompts(args)
    pair = pair_from_args(args)
    baseline = None
    if config.compare_default_kernels:
        if pair.cpu_kernels_mode != "fast":
            raise UserError("--compare-default-kernels compares the fast CPU path with the default one: "
                            "run it on a CPU with --cpu-kernels fast")
        args.cpu_kernels = "default"
        baseline = pair_from_args(args)  # a second copy of the models, on PyTorch's own kernels
    report = bench.run_bench(pair, prompts, config, baseline_pair=baseline)
    report["prompt_source"] = prompt_source
    print(f"{report['pair']['draft']} -> {report['pair']['target']}; {plural(len(prompts), 'prompt')}, "
          f"{config.max_new_tokens} new tokens each; {bench_report.format_machine(report)}")
    print(bench_report.format_table(report))
    costs_line = bench_report.format_observed_costs(report)
    if costs_line:
        print(costs_line)
    print()
    print(bench_report.format_goals(report))
    if report.get("learning_check"):
        from engine import bench_learning
        print()
        print(bench_learning.format_check(report["learning_check"]))
    if args.json_out:
        print(f"JSON: {bench_report.write_json(report, args.json_out)}", file=sys.stderr)
    if args.plot:
        print(f"plot: {bench_report.plot(report, args.plot)}", file=sys.stderr)
    return 0
