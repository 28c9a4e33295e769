"""Choose K for the pruned draft head (FR-Spec) by measurement, on the embedded pair:

    .venv/bin/python bench/draft_head.py [--tokens 64] [--ks 8192,16384,32768,49152,0]

For each K: the share of the target's own greedy tokens (on every prompt of assets/prompts.json)
that lie inside the draft head's K tokens - a token outside can never be drafted, so this bounds
what the pruning can cost in acceptance - and the draft's one-token and 4-token forward times
(median of 9, 128-token prefix). K = 0 is the full head. Prints one table and one JSON line; the
machine's load is printed with it (timings are only meaningful on a quiet machine).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import cpu_kernels, methods, profiler  # noqa: E402
from engine.decoding import generate_ids  # noqa: E402
from engine.models import encode_prompt, load_pair  # noqa: E402
from engine.prompts import asset_prompts  # noqa: E402
from engine.settings import Settings  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--ks", default="8192,16384,32768,49152,0")
    args = p.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    load_before = os.getloadavg()
    pair = load_pair("default", "default", device="cpu", cpu_kernels="fast", draft_head_tokens=0)
    greedy: list[int] = []
    for prompt in asset_prompts():
        ids = encode_prompt(pair, prompt.text)
        out, _ = generate_ids(pair, ids, methods.autoregressive(), Settings(max_new_tokens=args.tokens))
        greedy += out
    rows = []
    prefix = [(31 * i + 11) % pair.vocab_size for i in range(128)]
    for k in ks:
        draft = load_pair("default", "default", device="cpu", cpu_kernels="fast", draft_head_tokens=k).draft \
            if k else pair.draft
        head = draft.get_output_embeddings()
        kept = set(head.keep.tolist()) if isinstance(head, cpu_kernels.PrunedHead) else None
        covered = sum(t in kept for t in greedy) / len(greedy) if kept is not None else 1.0
        times = {n: profiler._time_forward(draft, prefix, n, 9, time.perf_counter, lambda: False) for n in (1, 4)}
        rows.append({"k": k or pair.vocab_size, "full": not k, "target_tokens_covered": covered,
                     "draft_1_ms": times[1] * 1e3, "draft_4_ms": times[4] * 1e3})
        print(f"K={rows[-1]['k']:>6}  covered {covered * 100:6.2f} %  draft(1) {times[1] * 1e3:6.1f} ms  "
              f"draft(4) {times[4] * 1e3:6.1f} ms", flush=True)
        del draft
    print(json.dumps({"greedy_tokens": len(greedy), "prompts": len(asset_prompts()), "rows": rows,
                      "load_average_before": load_before, "load_average_after": os.getloadavg(),
                      "median_draft_1_ms": statistics.median(r["draft_1_ms"] for r in rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
