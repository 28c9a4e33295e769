"""NF4 against int8 draft weights on the embedded pair, end to end:

    .venv/bin/python bench/draft_weights.py [--max-new-tokens 48] [--temperature 0] [--json FILE]

One target, two drafts (the same checkpoint packed as NF4 and as int8, engine/cpu_kernels.py).
On each prompt of assets/prompts.json (or the first --prompts of them), plain decoding and chains
of 3, 4 and 5 levels on either draft run as lanes interleaved step by step (engine/interleave.py),
so the machine's drift reaches every lane alike. Prints, per prompt and lane, tokens/s against
plain decoding, tokens/step and the draft's seconds per step, then the medians over prompts and one
JSON line (also written to --json). Only meaningful on a quiet machine; the load is printed."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import methods, profiler  # noqa: E402
from engine.decoding import generate  # noqa: E402
from engine.interleave import Lane, run_together  # noqa: E402
from engine.models import encode_prompt, load_pair  # noqa: E402
from engine.prompts import asset_prompts  # noqa: E402
from engine.settings import Settings  # noqa: E402

DEPTHS = (3, 4, 5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--prompts", type=int, default=0, help="only the first N prompts (0 = all)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    load_before = os.getloadavg()
    nf4 = load_pair("default", "default", device="cpu", cpu_kernels="fast", draft_weights="nf4")
    int8_draft = load_pair("default", "default", device="cpu", cpu_kernels="fast", draft_weights="int8")
    # one target for both: only the draft differs between the lanes
    int8 = dataclasses.replace(nf4, draft=int8_draft.draft,
                               cpu_kernels={**nf4.cpu_kernels, "draft": int8_draft.cpu_kernels["draft"]})
    del int8_draft
    specs = [("plain decoding", nf4, methods.autoregressive())]
    for d in DEPTHS:
        specs += [(f"chain d={d} nf4", nf4, methods.chain(d)), (f"chain d={d} int8", int8, methods.chain(d))]
    prompts = asset_prompts()[:args.prompts or None]
    rows = []
    for prompt in prompts:
        ids = encode_prompt(nf4, prompt.text)
        for pair in (nf4, int8):  # warm both drafts and the target on this prompt
            list(generate(pair, ids, methods.chain(2), Settings(max_new_tokens=4, temperature=args.temperature)))
        settings = Settings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=1)
        lanes = [Lane(name, generate(pair, ids, method, settings), args.max_new_tokens) for name, pair, method in specs]
        for _ in run_together(lanes):
            pass
        row = {"prompt": prompt.title, "kind": prompt.kind, "lanes": {}}
        for lane in lanes:
            last, steps = lane.events[-1], [e for e in lane.events if e.nodes]
            row["lanes"][lane.name] = {
                "tokens_per_second": last.total_tokens / last.total_seconds,
                "tokens_per_step": last.tokens_per_step,
                "draft_seconds_per_step": statistics.mean(e.draft_seconds for e in steps) if steps else 0.0,
                "text_equals_plain": last.token_ids == lanes[0].events[-1].token_ids}
        plain = row["lanes"]["plain decoding"]["tokens_per_second"]
        for lane in row["lanes"].values():
            lane["speedup"] = lane["tokens_per_second"] / plain
        rows.append(row)
        print(f"{prompt.kind:5} {prompt.title[:28]:28} plain {plain:5.2f} tok/s  " + "  ".join(
            f"{name.removeprefix('chain ')} {v['speedup']:.2f}x ({v['tokens_per_step']:.2f} t/step, "
            f"draft {v['draft_seconds_per_step'] * 1e3:.0f} ms)" for name, v in row["lanes"].items()
            if name != "plain decoding"), flush=True)
    medians = {name: statistics.median(r["lanes"][name]["speedup"] for r in rows) for name, *_ in specs}
    print("median speedup over prompts: " + ", ".join(f"{k} {v:.2f}x" for k, v in medians.items()))
    out = {"rows": rows, "median_speedup": medians, "max_new_tokens": args.max_new_tokens,
           "temperature": args.temperature, "kernels": {"nf4": nf4.cpu_kernels["draft"],
                                                        "int8": int8.cpu_kernels["draft"]},
           "machine": profiler.machine_description(nf4.device),
           "load_average_before": load_before, "load_average_after": os.getloadavg()}
    print(f"load average before {load_before}, after {out['load_average_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
