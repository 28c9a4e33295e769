"""`python -m engine profile --synthetic`: the flags and the printout of a synthetic profile
(random-weight models of a given size, engine/synthetic.py) on this device."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from engine.commands.common import check_flag, flags_given, writable
from engine.errors import UserError
from engine.models import DEFAULT
from engine.planner import parse_acceptance
from engine.synthetic import PRESETS, plot_profile, synthetic_profile


DEFAULT_DRAFT, DEFAULT_TARGET = "68m", "7b"
SYNTHETIC_ONLY = ("acceptance", "draft_config", "target_config")  # flags only a synthetic profile reads


def add_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("synthetic profile (random-weight models of realistic sizes)")
    g.add_argument("--synthetic", action="store_true",
                   help="profile random-weight models built from --draft-config/--target-config instead of a pair")
    # defaults applied in run(), so that a pair's profile can tell these flags were given (and refuse them)
    g.add_argument("--draft-config", default=None, metavar="SIZE",
                   help="preset (" + ", ".join(PRESETS) + ") or config.json, optional :key=value overrides "
                        f"(default {DEFAULT_DRAFT})")
    g.add_argument("--target-config", default=None, metavar="SIZE",
                   help=f"as --draft-config (default {DEFAULT_TARGET})")
    g.add_argument("--acceptance", default=None,
                   help="comma-separated P(rank 1), P(rank 2), ...: also report the hardware-aware (n, d)")
    g.add_argument("--out", default=None, metavar="OUT.json",
                   help="where to write the profile as JSON: a synthetic one (a .png plot is written next "
                        "to it; default bench/profile-synthetic-<draft>-<target>-<device>.json) or a pair's "
                        "(a copy: plans read the one cached for the pair)")


def default_out(report: dict) -> Path:
    safe = lambda s: "".join(c if c.isalnum() or c in "-._" else "_" for c in s)  # noqa: E731
    dev = report["profile"]["device"].split(":")[0]
    root = Path(__file__).resolve().parents[2] / "bench"
    return root / f"profile-synthetic-{safe(report['draft_size'])}-{safe(report['target_size'])}-{dev}.json"


# a model pair's flags (and the page-cache drop, which times weights read from disk), which a
# synthetic profile of random-weight models does not read: refused, not ignored
PAIR_ONLY = {"draft": DEFAULT, "target": DEFAULT, "target_device_map": None, "draft_device_map": None,
             "max_memory": None, "offload_folder": None, "cpu_kernels": "fast", "draft_weights": "auto",
             "draft_head_tokens": None, "drop_page_cache": False}


def run(args) -> int:
    given = flags_given(args, PAIR_ONLY)
    if given:
        raise UserError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with a model pair's profile, "
                        "not --synthetic (random-weight models of --draft-config/--target-config sizes)")
    acceptance = None
    if args.acceptance is not None:
        acceptance = parse_acceptance(args.acceptance)
    check_flag(args.max_budget, "--max-budget", 1, 1024)
    check_flag(args.prefix, "--prefix", 1)
    check_flag(args.repeats, "--repeats", 1)
    out = writable(args.out, "--out")   # before minutes of timing, not after
    report = synthetic_profile(args.draft_config or DEFAULT_DRAFT, args.target_config or DEFAULT_TARGET,
                               args.device, args.dtype,
                               max_budget=args.max_budget, prefix_tokens=args.prefix, repeats=args.repeats,
                               acceptance=acceptance)
    out = out or default_out(report)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror}") from None
    png = plot_profile(report, out.with_suffix(".png"))
    if args.json:
        print(json.dumps(report))
        return 0
    prof = report["profile"]
    ts = {int(k): v for k, v in prof["target_seconds"].items()}
    ds = {int(k): v for k, v in prof["draft_seconds"].items()}
    print(f"synthetic {report['draft_size']} -> {report['target_size']} on {prof['device']} ({prof['dtype']}), "
          f"prefix {prof['prefix_tokens']} tokens, median of {prof['repeats']}")
    print("  n    target ms   t(n)/t(1)   draft ms (width n)")
    for n in sorted(ts):
        d = ds.get(n)
        print(f"  {n:<4d} {ts[n] * 1e3:9.2f}   {ts[n] / ts[1]:9.2f}   {'' if d is None else f'{d * 1e3:9.2f}'}")
    print(f"  draft/target cost ratio c = {report['draft_over_target']:.3f}; knee (t(n) <= 1.1 t(1)) at "
          f"n = {report['knee']}; per-step overhead {prof['overhead_seconds'] * 1e3:.2f} ms")
    if report.get("hardware_aware"):
        ha = report["hardware_aware"]
        print(f"  hardware-aware tree: n = {ha['n']}, depth {ha['tree_depth']}, predicted "
              f"{ha['predicted_tokens_per_step']:.2f} tokens/step, {ha['predicted_speedup']:.2f}x")
    print(f"written: {out} and {png}")
    if not math.isfinite(report["draft_over_target"]):
        return 1
    return 0
