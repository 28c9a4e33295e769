"""`python -m engine check`: does speculative decoding on this pair reproduce the target exactly?

Greedy equality with transformers' generate(), chi-square tests of sampled tokens against the
target's exact distribution, and structural checks (tree-mask probes, tokenizer, dtype/device, KV
commit). Prints the time estimate first, progress on stderr, then the report (or one JSON object
with --json). Exit status: 0 PASS (warnings included), 1 FAIL, 2 bad input."""
from __future__ import annotations

import argparse
import sys
import time

from engine import check
from engine.commands.common import add_pair_args, pair_from_args, print_json, read_prompts
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("check", help="check that speculative decoding on a pair is lossless",
                       description="Greedy equality, sampled-distribution tests and structural checks for a "
                                   "draft/target pair. Prints a time estimate before it starts.")
    add_pair_args(p)
    p.add_argument("--prompts", default=None,
                   help="prompts file, one per line (\\n = newline); default: the first --num-prompts example prompts")
    # default None: given beside --prompts it is refused (it was ignored), however it is spelt
    p.add_argument("--num-prompts", type=int, default=None,
                   help=f"example prompts used when --prompts is not given (default {check.CheckConfig.num_prompts})")
    p.add_argument("--samples", type=int, default=None,
                   help="speculative samples per method and sampling setting (default: auto, as many as fit "
                        f"--sample-budget seconds, between {check.MIN_AUTO_SAMPLES} and {check.MAX_AUTO_SAMPLES})")
    p.add_argument("--sample-budget", type=float, default=check.CheckConfig.sample_budget_seconds,
                   help="seconds the sampling part aims at when --samples is not given")
    p.add_argument("--methods", default=",".join(check.DEFAULT_METHODS),
                   help=f"comma-separated, from {','.join(check.CHECK_METHOD_NAMES)}")
    p.add_argument("--greedy-tokens", type=int, default=check.CheckConfig.greedy_tokens,
                   help="tokens generated per prompt and method in the greedy check")
    p.add_argument("--prefixes", type=int, default=check.CheckConfig.prefixes,
                   help="prefixes the sampling check draws from")
    p.add_argument("--alpha", type=float, default=check.ALPHA, help="a sampling test fails when p < alpha")
    p.add_argument("--sections", default=",".join(check.SECTIONS),
                   help=f"comma-separated parts to run, from {','.join(check.SECTIONS)}")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled draws (default 0)")
    p.add_argument("--top-k", type=int, default=0,
                   help="also apply top-k (after temperature, before top-p, as generate() does) in every sampling "
                        "setting, in decoding and in the reference; 0 = off")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap prompts in the tokenizer's chat template (default: on when it has one)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=run)


def config_from_args(args) -> check.CheckConfig:
    sections = tuple(x.strip() for x in args.sections.split(",") if x.strip())
    if args.prompts and args.num_prompts is not None:
        raise UserError("--num-prompts picks example prompts; with --prompts the check uses every prompt of the "
                        "file: give one of them")
    num_prompts = check.CheckConfig.num_prompts if args.num_prompts is None else args.num_prompts
    config = check.CheckConfig(prompts=read_prompts(args.prompts) if args.prompts else None,
                               num_prompts=num_prompts, chat=args.chat, methods=check.parse_methods(args.methods),
                               sections=sections, greedy_tokens=args.greedy_tokens, samples=args.samples,
                               sample_budget_seconds=args.sample_budget, prefixes=args.prefixes, alpha=args.alpha,
                               seed=args.seed)
    if getattr(args, "top_k", 0):
        config.sampling_settings = tuple((t, p, args.top_k) for t, p in config.sampling_settings)
    config.validate()
    return config


class _Printer:
    """Progress on stderr: the estimate and phase changes always, the rest at most every 2 s."""

    def __init__(self):
        self.last = 0.0

    def __call__(self, fraction: float, message: str) -> None:
        now = time.perf_counter()
        important = fraction in (0.0, 1.0) or message.startswith("estimated")
        if important or now - self.last >= 2.0:
            self.last = now
            print(f"[{fraction * 100:3.0f}%] {message}", file=sys.stderr, flush=True)


def run(args) -> int:
    config = config_from_args(args)  # refuse bad flags before loading models
    pair = pair_from_args(args)
    report = check.run_check(pair, config, progress=_Printer())
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.text())
    return 1 if report.verdict == "FAIL" else 0
