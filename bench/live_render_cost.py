"""What the Live page's handler computes per step, and what that does to decoding beside it:

    .venv/bin/python bench/live_render_cost.py

On the embedded pair (fast CPU kernels), one greedy run of Sequoia n=4 d=4 (a 4-level chain) on a
code prompt, 64 tokens; then, for each of its steps, the handler's pieces (app/live.py Run: step
data, text and metric cards, the tree figure and its JSON, the acceptance chart), median ms.
Then the same run decoded alone and decoded while another thread of this process renders those
pieces about every 0.3 s (the page's handler runs in the app's process, beside the decoder), two
rounds. Only meaningful on a quiet machine (the load average is printed)."""
from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.live import Run  # noqa: E402
from engine import methods  # noqa: E402
from engine.decoding import generate  # noqa: E402
from engine.models import encode_prompt, load_pair  # noqa: E402
from engine.settings import Settings  # noqa: E402
from engine.tree import Tree  # noqa: E402

PROMPT = ("Write a Python function that merges overlapping intervals given as a list of (start, end) tuples "
          "and returns them sorted.")


def main() -> None:
    print("load average before", os.getloadavg())
    pair = load_pair("default", "default", device="cpu", cpu_kernels="fast")
    ids = encode_prompt(pair, PROMPT)
    settings = Settings(max_new_tokens=64)
    method = methods.sequoia(Tree.from_branching([1, 1, 1, 0]))

    def decode():
        t0 = time.perf_counter()
        events = list(generate(pair, ids, method, settings))
        return events, time.perf_counter() - t0

    events, _ = decode()
    run = Run(settings)
    costs = {"step data": [], "text + metrics": [], "tree figure": [], "tree figure JSON": [], "acceptance chart": []}
    for ev in events:
        run.events.append(ev)
        t0 = time.perf_counter(); run.data(ev); costs["step data"].append(time.perf_counter() - t0)
        t0 = time.perf_counter(); run.text(); run.metrics(); costs["text + metrics"].append(time.perf_counter() - t0)
        if ev.nodes:
            t0 = time.perf_counter(); fig = run.tree_fig(ev); costs["tree figure"].append(time.perf_counter() - t0)
            t0 = time.perf_counter(); fig.to_json(); costs["tree figure JSON"].append(time.perf_counter() - t0)
        t0 = time.perf_counter(); run.acc_fig(); costs["acceptance chart"].append(time.perf_counter() - t0)
    print("per step, median ms:", ", ".join(f"{k} {statistics.median(v) * 1e3:.1f}" for k, v in costs.items()))
    for rnd in range(2):
        _, alone = decode()
        stop = threading.Event()

        def render_loop():
            while not stop.is_set():
                run.tree_fig(events[-2]).to_json()
                run.acc_fig()
                run.text()
                run.metrics()
                stop.wait(0.3)  # about one render per step

        thread = threading.Thread(target=render_loop)
        thread.start()
        _, beside = decode()
        stop.set()
        thread.join()
        print(f"round {rnd + 1}: decoding alone {alone:.1f} s, beside a render every ~0.3 s {beside:.1f} s "
              f"({beside / alone:.2f}x)")
    print("load average after", os.getloadavg())


if __name__ == "__main__":  # load_pair may start worker processes (engine/embedded.py)
    import argparse   # no options: --help shows what the script does instead of doing it
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
