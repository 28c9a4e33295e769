"""Where a forward's time goes on this CPU: the weights' bytes against the memory bandwidth.

    .venv/bin/python bench/linear_bandwidth.py [--repeats 7] [--default-kernels] [--threads 1,2] [--json OUT]

On the embedded pair as loaded (fast CPU kernels; --default-kernels adds the float32 target of
`--cpu-kernels default`): every linear layer of each model (the packed float16 / int8 / NF4 ones
and the head) called once, in module order, with one row (and four), each with its own weights,
so nothing comes from the CPU's caches - the same bytes a one-token forward reads. Reported: the
linears' ms, their weight bytes, GB/s, and the whole one-token forward (tree-attention path, on
a 128-token prefix, as the device profile times it), so forward - linears is what is not reading
weights (norms, rotary, attention, the KV cache, Python). Beside them, what this machine streams:
the sum of a 0.5 GB float16 tensor and a copy of it. Medians of --repeats; only meaningful on a
quiet machine (the load average is printed). --threads times the linears at each of these torch
thread counts too (one core's bandwidth against all of them: a server CPU may stream far less
per core than the machine can)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import cpu_kernels, nf4, profiler  # noqa: E402
from engine.models import load_pair  # noqa: E402

BYTES_PER_WEIGHT = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


def weight_layers(model) -> list[tuple[str, torch.nn.Module, int]]:
    """(name, module, weight bytes) of every linear layer, in module order (the head last)."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, (cpu_kernels.PackedLinear, cpu_kernels.PrunedHead, nf4.Nf4Linear)):
            out.append((name, module, int(module.packed_bytes)))
        elif isinstance(module, torch.nn.Linear):
            out.append((name, module, module.weight.numel() * BYTES_PER_WEIGHT[module.weight.dtype]))
    return [x for x in out if not any(x[0].startswith(p + ".") for p, _, _ in out)]  # a pruned head's rows


def linears_row(label: str, model, rows: int, repeats: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    layers = weight_layers(model)
    inputs = [torch.randn(rows, m.in_features) for _, m, _ in layers]  # every kernel here takes float32 in

    def sweep():
        with torch.inference_mode():
            for (_, m, _), x in zip(layers, inputs):
                m(x)
    seconds = profiler.median_seconds(sweep, repeats)
    nbytes = sum(b for _, _, b in layers)
    return {"model": label, "rows": rows, "threads": threads, "linears": len(layers), "gb": nbytes / 1e9,
            "linears_ms": seconds * 1e3, "gb_per_s": nbytes / seconds / 1e9}


def forward_ms(model, repeats: int) -> float:
    prefix = [(31 * i + 11) % model.config.vocab_size for i in range(128)]
    with torch.inference_mode():
        return 1e3 * profiler._time_forward(model, prefix, 1, repeats, time.perf_counter, lambda: False)


def streaming(repeats: int) -> dict:
    a = torch.ones(256 * 1024 * 1024, dtype=torch.float16)  # 0.54 GB
    b = torch.empty_like(a)
    gb = a.numel() * 2 / 1e9
    return {"sum_gb_per_s": gb / profiler.median_seconds(lambda: a.sum(), repeats),
            "copy_gb_per_s": 2 * gb / profiler.median_seconds(lambda: b.copy_(a), repeats)}  # read + write


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--default-kernels", action="store_true", help="also the float32 target of --cpu-kernels default")
    p.add_argument("--threads", help="comma-separated torch thread counts to time the linears at "
                                     "(default: torch's own, here %(default)s)", default=str(torch.get_num_threads()))
    p.add_argument("--json", help="write the result here too")
    args = p.parse_args(argv)
    thread_counts = [int(t) for t in args.threads.split(",")]
    own_threads = torch.get_num_threads()
    load_before = os.getloadavg()
    result = {"machine": profiler.machine_description("cpu"), "threads": own_threads,
              "streaming": streaming(args.repeats), "rows": [], "forward_ms": {}}
    print(f"streams: float16 sum {result['streaming']['sum_gb_per_s']:.1f} GB/s, "
          f"copy {result['streaming']['copy_gb_per_s']:.1f} GB/s (read + write)")
    pair = load_pair("default", "default", device="cpu", cpu_kernels="fast")
    models = [("draft (fast)", pair.draft), ("target (fast)", pair.target)]
    if args.default_kernels:
        models.append(("target (default)", load_pair("default", "default", device="cpu",
                                                      cpu_kernels="default").target))
    for label, model in models:
        torch.set_num_threads(own_threads)
        result["forward_ms"][label] = forward_ms(model, args.repeats)
        for rows in (1, 4):
            for threads in thread_counts:
                r = linears_row(label, model, rows, args.repeats, threads)
                result["rows"].append(r)
                extra = (f"; whole one-token forward {result['forward_ms'][label]:.1f} ms"
                         if rows == 1 and threads == thread_counts[-1] else "")
                print(f"{label:17s} {rows} row{'s' if rows > 1 else ' '} {threads} thread{'s' if threads > 1 else ' '}: "
                      f"{r['linears']} linears, {r['gb']:.2f} GB in {r['linears_ms']:.1f} ms = {r['gb_per_s']:.1f} GB/s"
                      f"{extra}")
    torch.set_num_threads(own_threads)
    result["load_before"], result["load_after"] = load_before, os.getloadavg()
    print(f"load average before {load_before}, after {result['load_after']}")
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":  # load_pair may start worker processes (engine/embedded.py)
    main()
