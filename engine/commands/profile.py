"""`python -m engine profile`: time the target's tree verification t(n) and the draft's
forward cost per width on this device (ALGORITHM.md §4)."""
from __future__ import annotations

import json
import sys

from engine.commands import synthetic
from engine.commands.common import add_pair_args, check_flag, flags_given, pair_from_args, print_json, writable
from engine.errors import UserError
from engine.paths import write_atomic
from engine.profiler import cached_profile, drop_page_cache, profile_device, save_profile


def register(sub) -> None:
    p = sub.add_parser("profile", help="measure t(n) and draft cost on this device")
    add_pair_args(p)
    p.add_argument("--max-budget", type=int, default=64, help="largest tree (tokens) timed (default 64, at most 1024)")
    p.add_argument("--prefix", type=int, default=128, help="tokens of KV prefix under the tree (default 128)")
    p.add_argument("--repeats", type=int, default=5,
                   help="rounds timed per size (default 5; more are added while the timings disagree)")
    p.add_argument("--drop-page-cache", action="store_true",
                   help="before each timed target forward, drop Linux's page cache (root only), so weights "
                        "offloaded to disk are read from disk as if they did not fit in RAM; the profile is "
                        "cached for this placement like any other")
    p.add_argument("--json", action="store_true", help="print the profile as one JSON object")
    synthetic.add_args(p)  # --synthetic --draft-config SIZE --target-config SIZE --acceptance --out
    p.set_defaults(func=run)


def run(args) -> int:
    if args.synthetic:
        return synthetic.run(args)
    given = flags_given(args, dict.fromkeys(synthetic.SYNTHETIC_ONLY))
    if given:
        # a pair's own plans come from its measured acceptance: `python -m engine plan`
        raise UserError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --synthetic (random-weight "
                        "models); for a model pair, `python -m engine plan` plans from its measured acceptance")
    check_flag(args.max_budget, "--max-budget", 1, 1024)
    check_flag(args.prefix, "--prefix", 1)
    check_flag(args.repeats, "--repeats", 1)
    out = writable(args.out, "--out")
    pair = pair_from_args(args)
    try:
        replaced = cached_profile(pair)   # only to say what this profile replaces
    except (OSError, ValueError, KeyError, TypeError):   # an unreadable one: this profile rewrites it
        replaced = None
    before = drop_page_cache if args.drop_page_cache else None
    if before is not None:
        drop_page_cache()  # fails here, before any timing, where it is not allowed
    prof = profile_device(pair, max_budget=args.max_budget, prefix_tokens=args.prefix, repeats=args.repeats,
                          before_target_forward=before)
    prof.source = str(save_profile(pair, prof))
    if replaced is not None and max(replaced.target_seconds) > max(prof.target_seconds):
        # plans read the cached profile; the app times it again where a plan needs more sizes
        print(f"note: this profile (trees up to {max(prof.target_seconds)} nodes) replaced a cached one that "
              f"timed up to {max(replaced.target_seconds)}; plans past {max(prof.target_seconds)} nodes "
              "extrapolate t(n) until a larger one is timed (the app times one when it loads the pair)",
              file=sys.stderr)
    if out is not None:  # a copy to keep beside a benchmark; plans read the cached one
        try:
            write_atomic(out, json.dumps(prof.to_dict(), indent=1) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write --out {out}: {exc.strerror} (the profile is cached at "
                            f"{prof.source})") from None
    if args.json:
        print_json(prof.to_dict())
        return 0
    t1, d1 = prof.target_seconds[1], prof.draft_seconds[1]
    print(f"{pair.target_name} on {prof.device} ({prof.dtype}), prefix {prof.prefix_tokens} tokens, "
          f"median of {prof.repeats}; cached at {prof.source}" + (f", written to {out}" if out else ""))
    print("  n    target ms   t(n)/t(1)   draft ms (width n)")
    for n in sorted(prof.target_seconds):
        d = prof.draft_seconds.get(n)
        print(f"  {n:<4d} {prof.target_seconds[n] * 1e3:9.2f}   {prof.target_seconds[n] / t1:9.2f}   "
              f"{'' if d is None else f'{d * 1e3:9.2f}'}")
    print(f"  draft/target cost ratio c = {d1 / t1:.3f}; per-step overhead {prof.overhead_seconds * 1e3:.2f} ms")
    return 0
