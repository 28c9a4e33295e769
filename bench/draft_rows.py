"""Would a draft that switches kernels by row count let trees beat chains? Measured, then planned:

    .venv/bin/python bench/draft_rows.py [--repeats 7] [--json FILE]

On some CPUs the NF4 draft's kernel (a GEMV, engine/nf4.py) costs more per extra row than the
int8 draft's (fbgemm's GEMM), so a draft that ran narrow levels on NF4 and wide levels on int8
would make wide levels cheaper. This measures, in one run and interleaved round by round
(profiler._time_in_rounds), the target's forward t(n) and both drafts' forward over n rows (a
star after a 128-token prefix, as the device profile does), then asks the project's own planner
(table_for + choose_shape) for the hardware-aware tree and the best chain under four draft
curves: NF4 only, int8 only, their pointwise minimum (the switching draft, before the cost of
holding both), and a bound no draft reaches: every level as cheap as the NF4 draft's one-row
forward, whatever its width. With the measured t(n), that bound shows what any draft change
could give trees over chains on this machine. The acceptance vectors are the shipped ones for
the NF4 draft (pooled, code, prose; T=0 and T=0.7). Only meaningful on a quiet machine; the load
is printed."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import profiler  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.planner import choose_shape  # noqa: E402
from engine.planning import predict, table_for  # noqa: E402
from engine.tree import Tree  # noqa: E402

ROWS = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16)
MAX_BUDGET, MAX_DEPTH = 32, 12
SETTINGS = [(0.0, ""), (0.0, "code"), (0.0, "prose"), (0.7, ""), (0.7, "code"), (0.7, "prose")]


def measure(models: dict, repeats: int) -> dict:
    """{name: {rows: median seconds}} for every model, all timed in the same interleaved rounds."""
    prefix = list(range(1000, 1128))
    timers = {}
    for name, model in models.items():
        cache = profiler.prefilled_cache(model, prefix)
        for n in ROWS:
            timers[(name, n)] = profiler._forward_timer(model, cache, len(prefix), n, time.perf_counter)
    times = profiler._time_in_rounds(timers, repeats, lambda: False, max_repeats=repeats)
    out = {name: {} for name in models}
    for (name, n), t in times.items():
        out[name][n] = statistics.median(t)
    return out


def tree_and_chain(acceptance, target_seconds: dict, draft_seconds: dict, overhead: float) -> dict:
    """The hardware-aware (n, d) and the best chain under these cost curves, with their predicted
    speedups over plain decoding."""
    table = table_for(tuple(acceptance), MAX_BUDGET, MAX_DEPTH, shared=False)
    best = choose_shape(table, target_seconds, draft_seconds, overhead, budgets=range(1, MAX_BUDGET + 1),
                        depths=range(1, MAX_DEPTH + 1))
    costs = SimpleNamespace(target_seconds=target_seconds, draft_seconds=draft_seconds, overhead_seconds=overhead)
    # real chains (the DP's best d-node tree of depth d need not be one once a1^(d-1) < a2)
    chains = {d: predict(Tree.chain(d), acceptance, costs).speedup for d in range(2, MAX_DEPTH + 1)}
    depth = max(chains, key=chains.get)
    return {"n": best.n, "d": best.d, "widths": best.tree.level_widths, "speedup": best.predicted_speedup,
            "best_chain_depth": depth, "best_chain_speedup": chains[depth]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    load_before = os.getloadavg()
    nf4 = load_pair("default", "default", device="cpu", cpu_kernels="fast", draft_weights="nf4")
    int8_draft = load_pair("default", "default", device="cpu", cpu_kernels="fast", draft_weights="int8").draft
    seconds = measure({"target": nf4.target, "nf4": nf4.draft, "int8": int8_draft}, args.repeats)
    curves = {"nf4": seconds["nf4"], "int8": seconds["int8"],
              "switching (min)": {n: min(seconds["nf4"][n], seconds["int8"][n]) for n in ROWS},
              "flat (bound)": {n: seconds["nf4"][1] for n in ROWS}}
    print("rows          " + " ".join(f"{n:>7}" for n in ROWS))
    for name, curve in seconds.items():
        print(f"{name:13} " + " ".join(f"{curve[n] * 1e3:6.1f}m" for n in ROWS))
    cached = profiler.cached_profile(nf4)  # the per-step overhead only: every forward is timed above
    overhead = cached.overhead_seconds if cached is not None else 0.0
    plans = []
    for temperature, domain in SETTINGS:
        vec = profiler.cached_acceptance(nf4, temperature, domain=domain)
        if vec is None:
            continue
        for name, curve in curves.items():
            row = {"temperature": temperature, "domain": domain or "pooled", "draft": name,
                   **tree_and_chain(vec.probabilities, seconds["target"], curve, overhead)}
            plans.append(row)
            print(f"T={temperature:g} {row['domain']:6} {name:16} hardware-aware n={row['n']} d={row['d']} "
                  f"widths {row['widths']} {row['speedup']:.2f}x; best chain d={row['best_chain_depth']} "
                  f"{row['best_chain_speedup']:.2f}x; tree/chain {row['speedup'] / row['best_chain_speedup']:.3f}")
    out = {"seconds": {k: {str(n): v for n, v in c.items()} for k, c in seconds.items()}, "plans": plans,
           "overhead_seconds": overhead, "repeats": args.repeats, "machine": profiler.machine_description("cpu"),
           "kernels": {"nf4": nf4.cpu_kernels["draft"], "target": nf4.cpu_kernels["target"]},
           "load_average_before": load_before, "load_average_after": os.getloadavg(),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"load average before {tuple(round(x, 2) for x in load_before)}, after "
          f"{tuple(round(x, 2) for x in os.getloadavg())}")
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
