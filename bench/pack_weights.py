"""How long the fast CPU path takes to pack the embedded target's linears, with the float32 source
of fbgemm's float16 packing on ordinary pages or on huge pages (engine/huge_pages.py):

    .venv/bin/python bench/pack_weights.py [--rounds 2] [--json out.json]

Each round loads the target as stored (float16) and times engine.cpu_kernels.pack on it, the two
ways alternating (ordinary first in odd rounds, huge first in even ones). Also times packing the
output head alone on one thread both ways. Needs the converted default pair in the cache (run the
app once). Run it on a quiet machine: it reports the load average it saw."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from engine import cpu_kernels, huge_pages
    from engine.embedded import TARGET, ensure_default_pair
    from engine.profiler import load_average, machine_description

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    _, folder = ensure_default_pair()
    modes = {"ordinary pages": 1 << 62, "huge pages": huge_pages.MIN_BYTES}
    load_before = load_average()
    whole: dict[str, list[float]] = {m: [] for m in modes}
    head: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = list(modes) if r % 2 == 0 else list(modes)[::-1]
        for mode in order:
            huge_pages.MIN_BYTES = modes[mode]
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float16).eval()
            lm_head = model.get_output_embeddings()
            t0 = time.perf_counter()
            cpu_kernels.PackedLinear(lm_head, "fp16")
            head[mode].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            cpu_kernels.pack(model, "target")
            whole[mode].append(time.perf_counter() - t0)
            print(f"round {r + 1} {mode:15s}: head alone {head[mode][-1]:5.1f} s (one thread), "
                  f"whole target {whole[mode][-1]:5.1f} s ({torch.get_num_threads()} threads)", flush=True)
            del model
    huge_pages.MIN_BYTES = modes["huge pages"]
    out = {"machine": machine_description("cpu"), "model": TARGET.gguf_name, "rounds": args.rounds,
           "load_average_before": load_before, "load_average_after": load_average(),
           "transparent_hugepage": _thp_mode(),
           "median_seconds": {m: {"head_one_thread": round(statistics.median(head[m]), 2),
                                  "whole_target": round(statistics.median(whole[m]), 2)} for m in modes},
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _thp_mode() -> str | None:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return None


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
