"""What drawing a Live run in a browser costs the run, by how often the acceptance chart is sent:

    .venv/bin/python bench/live_browser_cost.py --intervals 0.5 2.0 --rounds 4

Serves the app on the embedded pair in this process, opens the Live tab in headless Debian
Chromium on the same machine, switches learning off (the same tree every run) and runs the first
example prompt for 64 tokens, greedy, with the page's hardware-aware plan. Each round runs it once
through the API with no browser drawing it (the page stays open, idle), then once per interval in
the page, the intervals interleaved (app.live.ACC_INTERVAL is read at every step, so it is set
between runs). For each page run: the tokens/s the page reports, the CPU seconds Chromium's
processes and this process spent, and the page's main-thread task and script seconds (Chrome's
Performance metrics). With --race: the Race tab's default race instead, the intervals being
those of its chart. Only meaningful on a quiet machine: the load average is printed."""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chromium import browsers  # noqa: E402

STATUS = "document.querySelector('#sq-live-status').innerText"
# how often the waits below read the page: Playwright's default reads it every animation frame,
# which alone cost Chromium's main thread ~0.1 s per run (its profile's innerText), a cost no user has
POLL_MS = 500


def chromium_cpu() -> float:
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        try:
            if "chrom" in (proc.info["name"] or ""):
                t = proc.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


def own_cpu() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def page_metrics(cdp) -> dict:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def race_rounds(page, cdp, intervals, rounds) -> None:
    """The Race tab's default race, the chart sent every `interval` s (app.race.CHART_INTERVAL; lanes
    and table every app.race.UPDATE_INTERVAL), intervals interleaved; each lane's tokens/s as its
    lane shows it (one decimal) and over autoregressive's, and what the browser spent."""
    from app import race
    page.get_by_role("tab", name="Race").click()
    page.wait_for_selector("#sq-race-start")
    status = "document.querySelector('#sq-race-status').innerText"
    for r in range(rounds):
        for interval in intervals:
            race.CHART_INTERVAL = interval
            before, c0, s0 = page_metrics(cdp), chromium_cpu(), own_cpu()
            page.click("#sq-race-start")
            page.wait_for_function(f"!{status}.includes('Race finished')", polling=POLL_MS)
            page.wait_for_function(f"{status}.includes('Race finished') || {status}.includes('✗') "
                                   f"|| {status}.includes('stopped')", timeout=900_000, polling=POLL_MS)
            c1, s1, after = chromium_cpu(), own_cpu(), page_metrics(cdp)
            labels = page.locator("#sq-lanes .sq-lane-head b").all_inner_texts()
            stats = page.locator("#sq-lanes .sq-lane-stats").all_inner_texts()
            tps = {label: float(re.search(r"([\d.]+) tok/s(?!tep)", st).group(1)) for label, st in zip(labels, stats)}
            ar = next((v for k, v in tps.items() if k.lower().startswith("autoregressive")), None)
            print(f"round {r + 1}, race chart every {interval:g} s: "
                  + ", ".join(f"{k} {v:.1f} tok/s" + (f" ({v / ar:.2f}x)" if ar else "") for k, v in tps.items())
                  + f"; Chromium CPU {c1 - c0:.1f} s, app process CPU {s1 - s0:.1f} s; page main thread tasks "
                    f"{after['TaskDuration'] - before['TaskDuration']:.2f} s", flush=True)


def live_rounds(page, cdp, ctx, args) -> None:
    """The Live run through the API, then in the page once per acceptance-chart interval
    (app.live.ACC_INTERVAL), each round; tokens/s and what the browser spent."""
    from gradio_client import Client
    from app import live
    page.locator("#sq-learn input").click()
    page.locator("#sq-max-new input").fill(str(args.max_new_tokens))
    page.wait_for_timeout(1000)
    rows = {i: [] for i in args.intervals}
    client = Client(f"http://127.0.0.1:{args.port}/", verbose=False)
    api = []
    for r in range(args.rounds):
        # the same run through the API, no browser drawing it (the page stays open, idle)
        job = client.submit(ctx.prompts[0]["prompt"], "sequoia", ctx.default_budget, ctx.default_depth, True,
                            0, 1, args.max_new_tokens, 0, 0, False, api_name="/generate")
        last = job.result()[6]
        api.append(last["tokens_per_second"])
        print(f"round {r + 1}, through the API: {api[-1]:.1f} tok/s ({last['label']})", flush=True)
        for interval in args.intervals:
            live.ACC_INTERVAL = interval
            before, c0, s0 = page_metrics(cdp), chromium_cpu(), own_cpu()
            page.click("#sq-generate")
            page.wait_for_function(f"!{STATUS}.includes('Done')", polling=POLL_MS)
            page.wait_for_function(f"{STATUS}.includes('Done') || {STATUS}.includes('✗')", polling=POLL_MS)
            c1, s1, after = chromium_cpu(), own_cpu(), page_metrics(cdp)
            status = page.locator("#sq-live-status").inner_text()
            found = re.search(r"([\d.]+) tokens/s with (.+?)\. Drag", status)
            if not found:
                raise SystemExit(f"the run did not finish: {status}")
            tps = float(found.group(1))
            rows[interval].append(tps)
            print(f"round {r + 1}, chart every {interval:g} s: {tps:.1f} tok/s ({found.group(2)}); "
                  f"Chromium CPU {c1 - c0:.1f} s, app process CPU {s1 - s0:.1f} s; page main thread "
                  f"tasks {after['TaskDuration'] - before['TaskDuration']:.2f} s, "
                  f"script {after['ScriptDuration'] - before['ScriptDuration']:.2f} s", flush=True)
    print(f"load average after {os.getloadavg()}")
    print(f"through the API: mean {sum(api) / len(api):.2f} tok/s over {len(api)} runs")
    base = args.intervals[0]
    for interval in args.intervals:
        mean = sum(rows[interval]) / len(rows[interval])
        ratio = mean / (sum(rows[base]) / len(rows[base]))
        print(f"chart every {interval:g} s: mean {mean:.2f} tok/s over {len(rows[interval])} runs "
              f"({ratio:.2f}x every {base:g} s)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--intervals", type=float, nargs="+", default=[0.5, 2.0],
                   help="seconds between acceptance-chart updates to compare")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--port", type=int, default=7871)
    p.add_argument("--race", action="store_true",
                   help="time the Race tab's default race instead, the intervals being the race chart's")
    args = p.parse_args()

    from app import create_app, launch_options
    from engine.profiler import machine_description
    from engine.worker import Worker
    # no background measuring or profiling beside the timed runs
    demo, ctx = create_app("default", "default", "cpu", worker=Worker(refine_in_background=False))
    demo.launch(server_name="127.0.0.1", server_port=args.port, prevent_thread_lock=True, quiet=True,
                **launch_options())
    while ctx.worker.pair is None or ctx.worker.loading:
        if ctx.worker.last_error is not None:
            raise SystemExit(f"the pair did not load: {ctx.worker.last_error}")
        time.sleep(1)
    print(f"processor: {machine_description('cpu')['processor']}, {os.cpu_count()} cores; "
          f"load average before {os.getloadavg()}", flush=True)
    try:
        with browsers(1, timeout_ms=600_000) as (page,):
            page.set_viewport_size({"width": 1400, "height": 1000})
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.goto(f"http://127.0.0.1:{args.port}/")
            page.wait_for_selector("#sq-generate")
            page.wait_for_function("document.querySelector('#sq-plan').innerText.includes('Plan:')", timeout=600_000)
            if args.race:
                race_rounds(page, cdp, args.intervals, args.rounds)
                print(f"load average after {os.getloadavg()}")
            else:
                live_rounds(page, cdp, ctx, args)
    finally:
        demo.close()
        ctx.worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
