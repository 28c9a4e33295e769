"""Robustness of the app (issue 7), launched in-process on a tiny pair and driven like a script would:
bad input through the Gradio API, load, disconnects, and what the app may read and write.

Every bad request must be answered with a clear message and change nothing: the pair stays
loaded, and the next good request still gives exactly the CLI's output for the same settings
(greedy Sequoia equals the target's own greedy text). Also the "Check this pair" button (issue 9),
device-map loading from the page (issue 8) and the plan line filled in once a pair finishes loading."""
from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.app_server import launch
from tests.robustness.served import ROOT, gen_args, raw_call, still_exact, wait_for
from tests.tiny import save_pair, tiny_pair_dirs

pytest.importorskip("gradio")
import httpx  # noqa: E402  (a gradio dependency)
from gradio_client import Client, handle_file  # noqa: E402

from app.state import load_prompts  # noqa: E402

# The page's own events (app.live.PAGE_WIRING) are off the API page, so the client does not fill
# in their trailing inputs: top-k, prompt, max new tokens, as the page's first plan sends them (the
# prompt box opens on the first example)
PAGE_DEFAULTS = (0, load_prompts()[0]["prompt"], 64)

# ================================================================== bad input
BAD_GENERATE = [
    ("empty prompt", dict(prompt=""), "prompt is empty"),
    ("whitespace prompt", dict(prompt="  \n\t  "), "prompt is empty"),
    ("max new tokens 0", dict(max_new_tokens=0), r"Max new tokens must be at least 1 \(got 0\)"),
    ("max new tokens negative", dict(max_new_tokens=-5), r"Max new tokens must be at least 1 \(got -5\)"),
    ("max new tokens huge", dict(max_new_tokens=10**9), r"Max new tokens must be at most 8192 \(got 1000000000\)"),
    ("max new tokens fraction", dict(max_new_tokens=2.5), "Max new tokens must be a whole number"),
    ("budget 0", dict(budget=0), r"Tree budget n .* must be at least 1 \(got 0\)"),
    ("budget above the maximum", dict(budget=129), r"Tree budget n .* must be at most 128 \(got 129\)"),
    ("budget not a number", dict(budget="lots"), "must be a number"),
    ("depth 0", dict(depth=0), "must be at least 1 "),
    ("depth above the maximum", dict(depth=17), "must be at most 16 "),
    ("temperature negative", dict(temperature=-0.5), r"Temperature .* must be at least 0 \(got -0.5\)"),
    ("temperature huge", dict(temperature=1e6), "must be at most 2 "),
    ("temperature too small to sample", dict(temperature=0.001), "too small to sample"),
    ("top-p 0", dict(top_p=0), "must be at least 0.05 "),
    ("top-p above 1", dict(top_p=1.5), "must be at most 1 "),
    ("seed not a number", dict(seed="abc"), "Seed must be a number"),
    ("seed not an integer", dict(seed=1.5), "Seed must be a whole number"),
    ("seed negative", dict(seed=-3), r"Seed must be at least 0 \(got -3\)"),
    # the page's box stops at 2^53 - 1 (a browser's numbers are doubles); the engine's own bound is 2^63
    ("seed too large", dict(seed=2**70), r"Seed must be at most 9007199254740991 \(got 1.18059e\+21\)"),
    ("budget emptied", dict(budget=None), r"Tree budget n .* is empty: type a value"),
    ("temperature emptied", dict(temperature=None), r"Temperature .* is empty: type a value"),
    ("max new tokens emptied", dict(max_new_tokens=None), "Max new tokens is empty: type a value"),
    ("seed emptied", dict(seed=None), "Seed is empty: type a value"),
    ("unknown method", dict(method="beam"), "beam"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("changes,message", [c[1:] for c in BAD_GENERATE], ids=[c[0] for c in BAD_GENERATE])
def test_bad_generate_input_is_refused_before_the_worker(served, client, reference, jobs, changes, message):
    pair = served["ctx"].worker.pair
    with pytest.raises(Exception, match=message):
        client.predict(*gen_args(**changes), api_name="/generate")
    assert jobs == []  # refused on the way in: nothing queued, nothing run
    assert served["ctx"].worker.pair is pair
    still_exact(client, reference)


RAW_BAD = [("temperature NaN", dict(temperature=float("nan")), "Temperature .* must be a finite number"),
           ("temperature infinite", dict(temperature=float("inf")), "Temperature .* must be a finite number"),
           ("top-p NaN", dict(top_p=float("nan")), "Top-p must be a finite number"),
           ("budget NaN", dict(budget=float("nan")), "must be a finite number"),
           ("max new tokens infinite", dict(max_new_tokens=float("inf")), "Max new tokens must be a finite number"),
           ("seed NaN", dict(seed=float("nan")), "Seed must be a finite number")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("changes,message", [c[1:] for c in RAW_BAD], ids=[c[0] for c in RAW_BAD])
def test_nan_and_infinity_are_refused_by_name(served, client, reference, jobs, changes, message):
    event, error = raw_call(served["url"], "generate", gen_args(**changes))
    assert event == "error"
    assert error and re.search(message, error), error
    assert jobs == []
    still_exact(client, reference)


@pytest.mark.timeout(60)
def test_a_prompt_longer_than_the_context_is_the_engines_message(served, client, reference, jobs):
    limit = served["ctx"].worker.describe()["context_limit"]
    assert limit == 256
    updates = []
    job = client.submit(*gen_args(prompt="a" * 300), api_name="/generate")
    with pytest.raises(Exception, match=r"the prompt has 300 tokens but the models' context holds 256"):
        for update in job:
            updates.append(update)
        job.result()
    # the page's status line said it too, not only the pop-up
    assert any(isinstance(u[0], str) and "context holds 256" in u[0] for u in updates), [u[0] for u in updates]
    assert [j.state for j in jobs] == ["failed"]
    still_exact(client, reference)


@pytest.mark.timeout(60)
def test_depth_above_the_budget_keeps_sequoia_within_the_budget(client, reference):
    plan = client.predict("sequoia", 8, 12, False, 0, 1, api_name="/plan")[-1]
    assert plan["size"] <= 8 and plan["depth"] <= 8
    out = client.predict(*gen_args(budget=8, depth=12), api_name="/generate")[6]
    assert out["text"] == reference["text"]


@pytest.mark.timeout(30)
def test_chain_depth_above_the_budget_is_refused(client):
    for method in ("chain", "specinfer"):
        with pytest.raises(Exception, match="above the budget"):
            client.predict(method, 8, 12, False, 0, 1, api_name="/plan")


# ------------------------------------------------------------------ tree files
class Payload:
    """Unpickling this creates `marker` (open(marker, "w")): code a tree file must never run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.timeout(90)
def test_bad_tree_files_are_refused_and_the_imported_tree_stays(served, client, reference, tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"parents": [-1, 0, 0, 1]}))
    client.predict(handle_file(str(good)), api_name="/import_tree")

    marker = tmp_path / "PWNED"
    zipped = tmp_path / "evil.pt"
    torch.save({"Successors": [[1], []], "size": 2, "x": Payload(marker)}, zipped)
    legacy = tmp_path / "evil-legacy.pt"
    legacy.write_bytes(pickle.dumps({"Successors": [[1], []], "x": Payload(marker)}))
    cases = {
        "not-json.json": ("{ not json", "not valid JSON"),
        "cycle.json": (json.dumps({"parents": [-1, 2, 1]}), "cycle"),
        "no-root.json": (json.dumps({"parents": [0, 0]}), "exactly one root"),
        "too-big.json": (json.dumps({"parents": [-1] + [0] * 1024}), "at most 1024"),
        "empty.json": ("", "empty"),
        "corrupt.pt": (b"PK\x03\x04 this is not a torch archive", "could not be read"),
        "evil.pt": (zipped.read_bytes(), "refused: .*nothing in it was run"),
        "evil-legacy.pt": (legacy.read_bytes(), "refused: .*nothing in it was run"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / "upload" / name
        path.parent.mkdir(exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        with pytest.raises(Exception, match=message):
            client.predict(handle_file(str(path)), api_name="/import_tree")
        assert not marker.exists(), f"{name}: pickled code ran"
        plan = client.predict("tree", 8, 4, False, 0, 1, api_name="/plan")[-1]
        assert plan["parents"] == [-1, 0, 0, 1], name  # the tree imported before is still the one in use

    # the payloads were real: plain unpickling would have run them
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(Payload(proof))).close()
    assert proof.exists()
    still_exact(client, reference)


# ------------------------------------------------------------------ loading pairs
@pytest.mark.timeout(120)
def test_bad_pairs_leave_the_loaded_pair_in_use(served, client, reference, tmp_path):
    worker = served["ctx"].worker
    pair = worker.pair
    with pytest.raises(Exception, match="neither a local folder nor a model in the local Hugging Face cache"):
        client.predict("no-such-org/no-such-model-7b", served["target"], "cpu", "float32", api_name="/load_models")
    assert worker.pair is pair
    other_draft, _ = save_pair(tmp_path, chars="xyz0123")
    with pytest.raises(Exception, match="tokenizers differ"):
        client.predict(str(other_draft), served["target"], "cpu", "float32", api_name="/load_models")
    assert worker.pair is pair and worker.describe()["draft"] == served["draft"]
    with pytest.raises(Exception, match="give both a draft and a target"):
        client.predict("  ", served["target"], "cpu", "float32", api_name="/load_models")
    with pytest.raises(Exception, match="unknown device"):
        client.predict(served["draft"], served["target"], "tpu", "float32", api_name="/load_models")
    assert worker.pair is pair
    still_exact(client, reference)


@pytest.mark.timeout(60)
def test_placement_fields_are_checked_before_anything_is_read_or_written(served, client, reference, jobs, tmp_path,
                                                                         monkeypatch):
    from engine import models
    opened = []
    original = models.parse_device_map
    monkeypatch.setattr(models, "parse_device_map", lambda v: opened.append(v) or original(v))
    map_file = tmp_path / "map.json"
    map_file.write_text(json.dumps({"": "cpu"}))
    outside = tmp_path / "offload-outside"
    d, t = served["draft"], served["target"]
    cases = [
        # a map file named by a request, or an unknown name: the dropdown's choices (or the handler) refuse it
        ((str(map_file), "none", "", ""), "not in the list of choices|device map must be one of"),
        (("none", "everywhere", "", ""), "not in the list of choices|device map must be one of"),
        (("auto", "none", "", str(outside)), "must be inside the cache directory"),
        (("auto", "none", "", "../../escape"), "must be inside the cache directory"),
        (("auto", "none", "tpu=3GiB", ""), "unknown device 'tpu'"),
        (("auto", "none", "cpu=abc", ""), "a size: bytes"),   # unloaded the pair, then failed in accelerate
        (("none", "none", "cpu=1GiB", ""), "need a device map"),
    ]
    for (target_map, draft_map, max_memory, offload), message in cases:
        with pytest.raises(Exception, match=message):
            client.predict(d, t, "cpu", "float32", target_map, draft_map, max_memory, offload,
                           api_name="/load_models")
    assert jobs == [] and opened == []
    assert not outside.exists()
    still_exact(client, reference)


@pytest.mark.timeout(120)
def test_device_map_load_shows_where_the_target_went_and_stays_exact(served, client, reference):
    from engine.paths import cache_dir
    d, t = served["draft"], served["target"]
    try:
        # a few KB of CPU memory pushes nearly every layer of the target to disk, in the cache directory
        out = client.predict(d, t, "cpu", "float32", "auto", "none", "cpu=100KB", "offload-test",
                             api_name="/load_models")
        where = out[-1]["target_device_map"]
        assert where and where.get("disk", 0) > 0, where
        assert "placed by its device map" in out[0] and "disk:" in out[0]
        assert "disk:" in out[1]  # the pair table says it too
        assert (cache_dir().resolve() / "offload" / "offload-test").is_dir()
        still_exact(client, reference)
    finally:
        back = client.predict(d, t, "cpu", "float32", api_name="/load_models")[-1]
        assert back["target_device_map"] is None


# ================================================================== load
@pytest.mark.timeout(120)
def test_three_clients_at_once_all_finish_one_job_at_a_time(served, reference, jobs):
    results, errors = {}, []

    def stream(name):
        try:
            job = Client(served["url"], verbose=False).submit(*gen_args(), api_name="/generate")
            steps = [u[6]["step"] for u in job if isinstance(u[6], dict) and "step" in u[6]]
            results[name] = (job.result()[6], steps)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{name}: {exc!r}")

    def predict():
        try:
            results["third"] = (Client(served["url"], verbose=False).predict(*gen_args(method="chain"),
                                                                                api_name="/generate")[6], None)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"third: {exc!r}")

    threads = [threading.Thread(target=stream, args=(n,)) for n in ("a", "b")] + [threading.Thread(target=predict)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(100)
    assert not errors, errors
    assert set(results) == {"a", "b", "third"}
    for name, (final, steps) in results.items():
        assert final["done"] and final["text"] == reference["text"], name
        if steps is not None:
            assert steps and steps[-1] == final["total_steps"]  # streamed step by step
    runs = sorted((j for j in jobs if j.name == "generate"), key=lambda j: j.started_at)
    assert len(runs) == 3 and all(j.state == "done" for j in runs)
    for before, after in zip(runs, runs[1:]):
        assert after.started_at >= before.finished_at  # never two on the models at once


@pytest.mark.timeout(180)
def test_fifty_requests_at_once_are_run_or_told_the_queue_is_full(served, client, reference, jobs):
    from app.ui import QUEUE_SIZE
    clients = [Client(served["url"], verbose=False) for _ in range(5)]
    done, full, other = [], [], []
    lock = threading.Lock()

    def one(i):
        try:
            out = clients[i % len(clients)].predict(*gen_args(max_new_tokens=4, method="ar"), api_name="/generate")
            with lock:
                done.append(out[6])
        except Exception as exc:  # noqa: BLE001
            with lock:
                (full if "queue is full" in str(exc).lower() else other).append(repr(exc))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(150)
    assert not other, other[:3]
    assert len(done) + len(full) == 50  # every request was answered: run, or told why not
    assert done and full, f"{len(done)} run, {len(full)} turned away: the queue limit (max_size "
    f"{QUEUE_SIZE}) is not in force"
    assert all(d["done"] and d["total_tokens"] == 4 for d in done)
    assert len([j for j in jobs if j.name == "generate"]) == len(done)  # refused ones never reached the worker
    assert still_exact(client, reference) < 10


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["cancel", "drop the connection"])
def test_a_client_that_goes_away_stops_its_job_and_frees_the_worker(served, client, reference, jobs, how):
    worker = served["ctx"].worker
    long_run = gen_args(method="ar", max_new_tokens=240)
    if how == "cancel":
        job = client.submit(*long_run, api_name="/generate")
        wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        time.sleep(0.2)
        job.cancel()
    else:
        base = served["url"].rstrip("/")
        r = httpx.post(f"{base}/gradio_api/call/generate", content=json.dumps({"data": long_run}),
                       headers={"content-type": "application/json"}, timeout=30)
        with httpx.stream("GET", f"{base}/gradio_api/call/generate/{r.json()['event_id']}", timeout=30) as s:
            for i, _ in enumerate(s.iter_lines()):
                if i > 8 and any(j.state == "running" for j in jobs):
                    break  # leaving the block closes the connection mid-stream
    run = next(j for j in jobs if j.name == "generate")
    run.wait(10)
    assert run.state == "stopped" and run.result.finish_reason == "stopped"
    assert run.result.total_tokens < 240
    assert worker.current is None or worker.current is not run
    assert still_exact(client, reference) < 5  # the next request starts at once


# ================================================================== the check button (issue 9)
@pytest.mark.timeout(120)
def test_check_this_pair_shows_the_estimate_then_a_verdict(served, client):
    job = client.submit("quick", api_name="/check")
    statuses = [u[0] for u in job]
    status, verdict, summary, text, report = job.result()
    assert any("estimated time" in s for s in statuses), statuses  # the estimate came before the work
    assert report["verdict"] == "PASS", text
    assert 'data-verdict="PASS"' in verdict and "PASS" in verdict
    assert summary.startswith("**PASS")
    assert "greedy:" in text and "sampling:" in text and "structure:" in text
    assert report["config"]["methods"] == ["sequoia"] and "Checked in" in status


@pytest.mark.timeout(120)
def test_the_check_can_be_stopped(served, client, jobs):
    job = client.submit("full", api_name="/check")
    deadline = time.monotonic() + 60
    for update in job:
        if "estimated time" in (update[0] or "") or time.monotonic() > deadline:
            break
    assert "stopping" in client.predict(api_name="/stop_check")
    status, verdict, summary, text, report = job.result()
    assert report["verdict"] == "STOPPED" and 'data-verdict="STOPPED"' in verdict
    assert status.startswith("Stopped after") and " in all." in summary, (status, summary)   # was "Checked in 41 s"
    checks = [j for j in jobs if j.name == "check pair"]
    assert len(checks) == 1 and checks[0].done
    with pytest.raises(Exception, match="not in the list of choices"):
        client.predict("thorough", api_name="/check")


# ================================================================== the plan line after a late load
@pytest.mark.timeout(120)
def test_the_plan_line_is_filled_in_when_the_pair_finishes_loading(monkeypatch):
    """The page opened while the pair loads (here: its load waits behind another job) says so and
    plans once it is ready; with no load underway it says to load one; the plan line is taken down
    when the pair is gone (a load stopped after dropping it), and back once a pair loads again."""
    from app.live import NO_PAIR
    from engine import models
    draft, target = tiny_pair_dirs("llama")
    demo, ctx, url = launch(draft, target, load=False)
    try:
        page = Client(url, verbose=False)
        plan_args = ("ar", 8, 4, False, 0, 1)
        first = page.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")   # no pair, no load
        assert first[2] == NO_PAIR and "No pair loaded" in first[6]
        release = threading.Event()
        ctx.worker.submit("a job ahead", lambda job_ctx: release.wait(60))
        load = ctx.worker.load(str(draft), str(target), "cpu", "float32")   # waits behind it
        first = page.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")   # the page opens: no pair yet
        assert "still loading" in first[2] and "Loading the model pair" in first[6]
        # and before that reply the page's status line does not say Ready either
        config = httpx.get(f"{url.rstrip('/')}/config").json()
        shown = [c["props"].get("value") for c in config["components"]
                 if c.get("props", {}).get("elem_id") == "sq-live-status"]
        assert shown and "Ready" not in shown[0], shown
        # an example picked (or the prompt box left) meanwhile raises nothing and keeps that message
        page.predict(*plan_args, 0, "Tell me a story", 64, api_name="/plan_on_prompt")
        release.set()
        load.wait(120)
        header, plan_line, _tree, status, _acc, plan, info, memory = page.predict(*plan_args, api_name="/status")
        assert "Plan:" in plan_line and "autoregressive" in plan_line, plan_line
        assert plan["size"] == 1 and isinstance(status, str) and status.startswith("Ready."), status
        assert str(target) in info and "model weights" in memory  # the Models tab follows too
        assert str(target) in header
        real = models._load_model

        def stopped_as_the_target_loads(*args, **kwargs):
            ctx.worker.current.stop()
            return real(*args, **kwargs)

        monkeypatch.setattr(models, "_load_model", stopped_as_the_target_loads)
        ctx.worker.load(str(draft), str(target), "cpu", "float32").wait(120)
        assert ctx.worker.pair is None
        header, plan_line, tree, status, _acc, plan, info, memory = page.predict(*plan_args, api_name="/status")
        assert "No plan yet." in plan_line and plan == {} and status == NO_PAIR and "No pair loaded." in info
        assert "The tree appears after the first plan" in json.dumps(tree), tree   # the old plan's tree is gone
        assert page.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")[2] == NO_PAIR   # a page opened now
        assert page.predict("sequoia", 8, 4, False, 0, 1, api_name="/planner")[0] == NO_PAIR   # not "yet"
        # a page opened while a load waits says it is loading; that load stopped, it says there is none
        release = threading.Event()
        ctx.worker.submit("a job ahead", lambda job_ctx: release.wait(60))
        waiting_load = ctx.worker.load(str(draft), str(target), "cpu", "float32")
        other = Client(url, verbose=False)
        assert "still loading" in other.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")[2]
        assert "still loading" in other.predict("sequoia", 8, 4, False, 0, 1, api_name="/planner")[0]
        waiting_load.stop()
        release.set()
        assert waiting_load.wait(60) is None and ctx.worker.pair is None
        _header, plan_line, _tree, status, _acc, _plan, info, _memory = other.predict(*plan_args, api_name="/status")
        assert status == NO_PAIR and "No pair loaded." in info, (status, info)
        monkeypatch.undo()
        ctx.worker.load(str(draft), str(target), "cpu", "float32").wait(120)
        header, plan_line, _tree, status, _acc, plan, info, memory = page.predict(*plan_args, api_name="/status")
        assert "Plan:" in plan_line and plan["size"] == 1 and status.startswith("Ready."), (plan_line, status)
    finally:
        demo.close()
        ctx.worker.close()


@pytest.mark.timeout(60)
def test_the_header_tick_does_not_refuse_a_bad_field_every_second(served, jobs):
    """A field holding a bad value (max new tokens -5 or 2.5, a budget typed past its slider) is
    refused once per edit and per Generate; the header's tick, every second, must neither raise
    (it did: one error pop-up a second) nor stop updating the header. A plan the tick makes with
    such a value says why in the status line."""
    # past a slider's end too (the engine's own limits are wider: budget 256, temperature 20)
    for bad, field in [(dict(max_new=-5), "max new tokens"), (dict(max_new=2.5), "max new tokens"),
                       (dict(max_new=None), "max new tokens"), (dict(budget=200), "budget"),
                       (dict(temperature=5), "temperature"), (dict(top_k=300), "top-k")]:
        values = {"budget": 8, "max_new": 64, "temperature": 0, "top_k": 0, **bad}
        page = Client(served["url"], verbose=False)   # a new page: the tick plans for it once
        args = ("sequoia", values["budget"], 4, False, values["temperature"], 1, values["top_k"], "hello",
                values["max_new"])
        header, plan_line, _tree, status, *_ = page.predict(*args, api_name="/status")
        assert str(served["target"]) in header, header
        assert isinstance(status, str) and field in status.lower(), (bad, status)
        header, plan_line, _tree, status, *_ = page.predict(*args, api_name="/status")   # later ticks
        assert str(served["target"]) in header and not isinstance(status, str), (bad, status)
    assert jobs == []


@pytest.mark.timeout(180)
def test_a_plan_for_a_newly_loaded_pair_outlived_by_a_run_leaves_the_runs_plan_alone(monkeypatch):
    """The header timer plans for a pair that finished loading after the page opened; a run
    started and ended meanwhile must keep its plan on the page (the timer wrote "No plan yet."
    and an empty plan over it)."""
    draft, target = tiny_pair_dirs("llama")
    demo, ctx, url = launch(draft, target, load=False)
    try:
        page = Client(url, verbose=False)
        plan_args = ("sequoia", 7, 4, False, 0, 1)
        page.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")  # the page opens: no pair yet
        ctx.worker.load(str(draft), str(target), "cpu", "float32").wait(120)
        sess = ctx.sessions._items[page.session_hash]
        original, asked, before, outlived = ctx.worker.quick_plan, threading.Event(), sess.job, []

        def slow(*args, **kwargs):   # the timer's plan, finished only once a whole run went by
            asked.set()
            outlived.append(wait_for(lambda: sess.job not in (None, before) and sess.job.done, 90))
            return original(*args, **kwargs)

        monkeypatch.setattr(ctx.worker, "quick_plan", slow)
        timer = page.submit(*plan_args, api_name="/status")
        assert asked.wait(30)
        monkeypatch.setattr(ctx.worker, "quick_plan", original)
        page.predict(*gen_args(method="sequoia", max_new_tokens=8), api_name="/generate")
        assert sess.plan is not None and sess.plan.spec.budget == 8
        _header, plan_line, *_ = timer.result(timeout=90)
        assert outlived == [True]   # the plan was asked for before the run and ended after it
        assert "No plan yet" not in str(plan_line or ""), plan_line
        assert sess.plan.spec.budget == 8
    finally:
        demo.close()
        ctx.worker.close()


@pytest.mark.timeout(180)
def test_the_plan_line_follows_a_device_profile_replaced_after_the_page_planned(tmp_path, monkeypatch):
    """A profile timed again (in the background when the cached one was noisy: engine/reprofile.py,
    or from the Planner tab or the CLI) reaches the page's plan line at the next header tick;
    before it, and after it, the tick leaves the plan alone."""
    from dataclasses import replace

    from engine import profiler
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))  # this test's own profile
    draft, target = tiny_pair_dirs("llama")
    demo, ctx, url = launch(draft, target)
    try:
        from engine.planning import MethodSpec
        from engine.settings import Settings
        ctx.worker.plan(MethodSpec("sequoia-auto", 16, 6), Settings()).wait(120)  # the acceptance vector
        page = Client(url, verbose=False)
        plan_args = ("sequoia", 16, 6, True, 0, 1)   # hardware-aware: the plan reads the profile
        page.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")
        sess = ctx.sessions._items[page.session_hash]
        before = sess.plan
        assert before is not None and sess.plan_profile == ctx.worker.profile_stamp() is not None
        untouched = page.predict(*plan_args, api_name="/status")[1]
        assert not isinstance(untouched, str), untouched   # nothing changed: the plan line is skipped
        prof = ctx.worker.cached_profile()
        flat = {n: prof.target_seconds[1] for n in prof.target_seconds}   # verifying n tokens costs as 1
        time.sleep(0.01)  # a new modification time
        profiler.save_profile(ctx.worker.pair, replace(prof, target_seconds=flat, quality={},
                                                       measured_at="timed again"))
        header, plan_line, *_ = page.predict(*plan_args, api_name="/status")
        assert isinstance(plan_line, str) and "Plan:" in plan_line, plan_line
        assert sess.plan is not before and sess.plan_profile == ctx.worker.profile_stamp()
        assert page.predict(*plan_args, api_name="/status")[1] == untouched   # once only
        # a run that failed before its first step keeps its message: only the plan line follows
        with pytest.raises(Exception, match="context holds"):
            page.predict(*gen_args(prompt="a" * 300), api_name="/generate")
        time.sleep(0.01)
        profiler.save_profile(ctx.worker.pair, replace(prof, measured_at="timed again twice"))
        _header, plan_line, tree, status, *_ = page.predict(*plan_args, api_name="/status")
        assert isinstance(plan_line, str) and "Plan:" in plan_line, plan_line
        left = ({"__type__": "update"}, {"props": {"__type__": "update"}, "__type__": "update"})  # a skipped output
        assert status in left and tree in left, (status, str(tree)[:200])   # both left as they were
    finally:
        demo.close()
        ctx.worker.close()


@pytest.mark.timeout(60)
def test_a_planner_redraw_for_a_closed_page_does_not_bring_its_session_back(served, client):
    """The Planner redraw a new profile triggers may arrive after its page closed (its session
    dropped): it changes nothing and makes no session, which no page would ever plan for (one such
    session made two browser tests wait in vain for every session's first plan)."""
    sessions = served["ctx"].sessions
    client.predict("sequoia", 8, 4, False, 0, 1, *PAGE_DEFAULTS, api_name="/first_plan")   # the page opens
    assert client.session_hash in sessions._items
    # an open page's redraw draws (Gradio passes it the page's request: it did not to a *args handler)
    drawn = client.predict("sequoia", 8, 4, False, 0, 1, 0, "def f(x):", 64, api_name="/planner_on_new_profile")
    assert isinstance(drawn[0], str) and drawn[0], str(drawn)[:300]
    sessions._items.pop(client.session_hash)                               # ... and closes
    out = client.predict("sequoia", 8, 4, False, 0, 1, 0, "def f(x):", 64, api_name="/planner_on_new_profile")
    assert client.session_hash not in sessions._items
    assert all(isinstance(v, dict) and v.get("__type__") == "update" for v in out), str(out)[:300]


@pytest.mark.timeout(180)
def test_a_page_that_planned_before_the_first_profile_says_ready_once_it_is_cached(tmp_path, monkeypatch):
    """A first start: the page opened while the device was being profiled, and its hardware-aware
    plan said it needs a profile; once the profile is cached the header's tick plans, and the
    status line no longer says a profile is needed (seen in Chromium on a fresh cache)."""
    from engine.planning import MethodSpec
    from engine.settings import Settings
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    draft, target = tiny_pair_dirs("llama")
    demo, ctx, url = launch(draft, target)
    try:
        ctx.worker.plan(MethodSpec("sequoia-auto", 16, 6), Settings()).wait(120)  # the acceptance vector
        path = Path(ctx.worker.cached_profile().source)
        hidden = path.with_suffix(".away")
        path.rename(hidden)   # as while the first load still profiles
        page = Client(url, verbose=False)
        plan_args = ("sequoia", 16, 6, True, 0, 1)
        first = page.predict(*plan_args, *PAGE_DEFAULTS, api_name="/first_plan")
        assert "needs a device profile" in first[2], first[2]
        hidden.rename(path)   # the profile is cached
        _header, plan_line, _tree, status, *_ = page.predict(*plan_args, api_name="/status")
        assert isinstance(plan_line, str) and "Plan:" in plan_line, plan_line
        assert isinstance(status, str) and status.startswith("Ready."), status
    finally:
        demo.close()
        ctx.worker.close()


# ================================================================== safety
def _app_main():
    spec = importlib.util.spec_from_file_location("sequoia_app_main", ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_port_follows_gradios_variable_unless_given(monkeypatch, capsys):
    """app.py passed --port 7860 whatever GRADIO_SERVER_PORT said (a helper's server on 7871 was not)."""
    main = _app_main()
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    assert main.parse_args([]).port == 7860
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7871")
    assert main.parse_args([]).port == 7871 and main.parse_args(["--port", "7000"]).port == 7000
    monkeypatch.setenv("GRADIO_SERVER_PORT", "seventy")
    with pytest.raises(SystemExit):
        main.parse_args([])
    assert "GRADIO_SERVER_PORT must be a port number (got 'seventy')" in capsys.readouterr().err
    assert main.parse_args(["--port=7000"]).port == 7000 and main.parse_args(["--po", "7001"]).port == 7001
    monkeypatch.setenv("GRADIO_SERVER_PORT", "70000")
    with pytest.raises(SystemExit):
        main.parse_args([])
    assert "GRADIO_SERVER_PORT must be between 1 and 65535 (got 70000)" in capsys.readouterr().err


def test_the_app_binds_to_this_machine_and_never_shares_by_default(monkeypatch):
    main = _app_main()
    args = main.parse_args([])
    assert args.host == "127.0.0.1" and args.share is False
    launched = {}

    class FakeDemo:
        def launch(self, **kwargs):
            launched.update(kwargs)

    class FakeWorker:
        closed = False

        def close(self):
            FakeWorker.closed = True

    class FakeCtx:
        worker = FakeWorker()

    monkeypatch.setattr(main, "build", lambda a: (FakeDemo(), FakeCtx()))
    assert main.main([]) == 0
    assert launched["server_name"] == "127.0.0.1" and launched["share"] is False and FakeWorker.closed
    flags = main.parse_args(["--target-device-map", "auto", "--max-memory", "cpu=1GiB", "--offload-folder", "/x"])
    assert (flags.target_device_map, flags.max_memory, flags.offload_folder) == ("auto", "cpu=1GiB", "/x")


@pytest.mark.timeout(60)
def test_a_file_not_uploaded_is_never_opened(served, client, monkeypatch, tmp_path):
    from app import planner_tab
    read = []
    original = planner_tab.read_tree_file
    monkeypatch.setattr(planner_tab, "read_tree_file", lambda p: read.append(p) or original(p))
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"parents": [-1, 0]}))
    for forged in ({"path": str(secret), "meta": {"_type": "gradio.FileData"}},
                   {"path": "/etc/hostname", "meta": {"_type": "gradio.FileData"}}):
        event, _ = raw_call(served["url"], "import_tree", [forged])
        assert event == "error"
    assert read == []
    good = tmp_path / "up.json"
    good.write_text(json.dumps({"parents": [-1, 0, 0]}))
    client.predict(handle_file(str(good)), api_name="/import_tree")
    assert len(read) == 1 and Path(read[0]).name == "up.json" and Path(read[0]) != good  # Gradio's own copy


@pytest.mark.timeout(60)
def test_the_page_writes_only_to_the_cache_and_temp_folders(served, client, tmp_path):
    from app import planner_tab
    from engine.paths import cache_dir
    before = set(os.listdir(ROOT)), set(os.listdir(os.getcwd()))
    # the export goes to the app's own temp folder: no request names a path to write
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    params = info["/planner"]["parameters"]  # the prompt is text to classify as code or prose, never a path
    assert {p["component"] for p in params if p["label"] != "Prompt"} <= {"Dropdown", "Slider", "Checkbox", "Number"}
    assert [p["component"] for p in params if p["label"] == "Prompt"] == ["Textbox"]
    # measured first, so the tab has a plan to export whichever tests ran before in this worker
    client.predict("sequoia", 8, 4, False, 0.5, 1, api_name="/measure")
    vectors = list((cache_dir() / "acceptance").glob("*.json"))
    assert vectors  # measurements are cached under the cache directory
    client.predict("sequoia", 8, 4, False, 0.5, 1, api_name="/planner")
    exported = list(planner_tab.EXPORT_DIR.glob("*.json"))
    assert exported and Path(tempfile.gettempdir()).resolve() in planner_tab.EXPORT_DIR.resolve().parents
    assert (set(os.listdir(ROOT)), set(os.listdir(os.getcwd()))) == before


@pytest.mark.timeout(120)
def test_command_line_placement_reaches_the_load_and_the_page(tmp_path):
    from app import models_tab
    main = _app_main()
    draft, target = tiny_pair_dirs("llama")
    outside = tmp_path / "offload-from-the-command-line"  # not in the cache: allowed because the owner typed it
    args = main.parse_args(["--draft", str(draft), "--target", str(target), "--device", "cpu", "--dtype", "float32",
                            "--target-device-map", "auto", "--max-memory", "cpu=100KB",
                            "--offload-folder", str(outside)])
    demo, ctx = main.build(args)
    try:
        deadline = time.monotonic() + 90
        while ctx.worker.pair is None and time.monotonic() < deadline:
            assert ctx.worker.last_error is None, ctx.worker.last_error
            time.sleep(0.1)
        assert "disk" in ctx.worker.describe()["target_device_map"] and outside.is_dir()
        fields = {b.elem_id: getattr(b, "value", None) for b in demo.blocks.values() if getattr(b, "elem_id", None)}
        assert fields["sq-target-map"] == "auto" and fields["sq-max-memory"] == "cpu=100KB"
        assert fields["sq-offload"] == str(outside) and fields["sq-draft-map"] == "none"
        assert models_tab.offload_folder(str(outside), trusted=str(outside)) == str(outside)
        with pytest.raises(models_tab.UserError, match="inside the cache directory"):
            models_tab.offload_folder(str(tmp_path / "elsewhere"), trusted=str(outside))
    finally:
        ctx.worker.close()


@pytest.mark.timeout(120)
def test_the_plan_shown_is_the_newest_asked_for_not_the_last_to_finish(served, client, monkeypatch):
    """Plans of one page run side by side (leaving the prompt box, then picking an example); a slow
    older one must not replace a newer one's plan when it finishes after it."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    worker = served["ctx"].worker
    original, newer_done, asked = worker.quick_plan, threading.Event(), threading.Event()

    def slow_for_budget_7(spec, *args, **kwargs):
        if spec.budget == 7:
            asked.set()
            newer_done.wait(60)
        return original(spec, *args, **kwargs)

    monkeypatch.setattr(worker, "quick_plan", slow_for_budget_7)
    older = client.submit("sequoia", 7, 4, False, 0, 1, 0, "def f(x):", 64, api_name="/plan")
    assert asked.wait(30)
    client.predict("sequoia", 6, 4, False, 0, 1, 0, "def f(x):", 64, api_name="/plan")
    sess = served["ctx"].sessions._items[client.session_hash]
    assert sess.plan.spec.budget == 6
    newer_done.set()
    older.result(timeout=60)
    assert sess.plan.spec.budget == 6, "an older plan that finished last replaced the newer one"


@pytest.mark.timeout(120)
def test_a_page_load_plan_outlived_by_a_whole_run_leaves_the_runs_plan_alone(served, client, jobs, monkeypatch):
    """A run may start and end while the page's first plan is computed: by then the session is no
    longer running, so only the count of runs started tells that the plan is older than the run.
    The plan shown must stay the run's (it was replaced by the page's)."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    worker = served["ctx"].worker
    sess = served["ctx"].sessions._items[client.session_hash]
    original, asked, before, outlived = worker.quick_plan, threading.Event(), sess.job, []

    def slow(*args, **kwargs):   # the page's plan, finished only once a whole run went by
        asked.set()
        outlived.append(wait_for(lambda: sess.job not in (None, before) and sess.job.done, 60))
        return original(*args, **kwargs)

    monkeypatch.setattr(worker, "quick_plan", slow)
    page = client.submit("sequoia", 7, 4, False, 0, 1, *PAGE_DEFAULTS, api_name="/first_plan")   # budget 7, the run's is 8
    assert asked.wait(30)
    monkeypatch.setattr(worker, "quick_plan", original)
    client.predict(*gen_args(method="sequoia", max_new_tokens=8), api_name="/generate")
    assert sess.plan is not None and sess.plan.spec.budget == 8
    out = page.result(timeout=60)
    assert outlived == [True]   # the plan was asked for before the run and ended after it
    assert sess.plan.spec.budget == 8, "the page's late plan replaced the run's"
    assert "Plan:" not in str(out[0] or ""), out[0]


@pytest.mark.timeout(90)
def test_a_page_load_plan_that_ends_during_a_run_leaves_the_runs_plan_alone(served, client, jobs):
    """A page opened as the pair loaded may finish its first plan after Generate was pressed: it
    must not replace the running job's plan (it did: the plan line then showed the page's T=0 plan)."""
    client.predict("sequoia", 8, 4, False, 0.5, 1, api_name="/measure")   # a plan from caches exists at T=0.5
    job = client.submit(*gen_args(method="ar", max_new_tokens=240), api_name="/generate")
    try:
        wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        out = client.predict("sequoia", 8, 4, False, 0.5, 1, *PAGE_DEFAULTS, api_name="/first_plan")
        plan_md, plan_json = out[0], out[3]
        assert not (isinstance(plan_json, dict) and plan_json.get("method")), plan_json
        assert "Plan:" not in str(plan_md or "")
    finally:
        job.cancel()


@pytest.mark.timeout(90)
def test_a_re_plan_asked_for_before_generate_does_not_reach_the_run(served, client, jobs, monkeypatch):
    """Leaving the max-new-tokens box re-plans with the page's values of that moment; if Generate is
    pressed while that plan is computed, the plan must not reach the run (it did: in Chromium, a T=1
    run ended showing the T=0 plan of an edit made just before, and was sent its tree). Leaving the
    prompt box while a run goes shows nothing and raises nothing (its empty update was an error)."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    worker = served["ctx"].worker
    original, asked = worker.quick_plan, threading.Event()

    def slow(*args, **kwargs):   # the re-plan's plan, finished only once the run is going
        asked.set()
        wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        return original(*args, **kwargs)

    monkeypatch.setattr(worker, "quick_plan", slow)
    # budget 7 (the run's is 8): a plan for other values than the run's
    replan = client.submit("sequoia", 7, 4, False, 0, 1, 0, "def f(x):", 200, api_name="/plan_on_max_new")
    assert asked.wait(30)
    monkeypatch.setattr(worker, "quick_plan", original)
    sess = served["ctx"].sessions._items[client.session_hash]
    published = sess.live[0]
    run = client.submit(*gen_args(method="sequoia", max_new_tokens=8000), api_name="/generate")   # stopped below
    try:
        wait_for(lambda: sess.running, 30)
        replan.result(timeout=60)
        assert sess.live[0] == published   # nothing sent to the running job
        assert sess.plan is None or sess.plan.spec.budget == 8
        client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 200, api_name="/plan_on_prompt")
        assert sess.running and sess.live[0] == published
        assert sess.plan is None or sess.plan.spec.budget == 8
    finally:
        run.cancel()


@pytest.mark.timeout(120)
def test_a_control_changed_during_a_run_re_plans_once_the_run_ends(served, client, jobs):
    """Picking an example while a run goes leaves the run's plan alone (it answers its own prompt);
    once the run ends, the shown plan follows the example, as a pick after the run would (it kept
    the run's plan until another control moved). Only once, and only after such a change."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    sess = served["ctx"].sessions._items[client.session_hash]
    after_run = ("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 64)   # budget 7, the run's is 8
    client.predict(*gen_args(method="sequoia", max_new_tokens=8), api_name="/generate")
    client.predict(*after_run, api_name="/plan_after_run")
    assert sess.plan.spec.budget == 8, "a run without a control changed during it was re-planned after it"
    run = client.submit(*gen_args(method="sequoia", max_new_tokens=8000), api_name="/generate")   # stopped below
    try:
        assert wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        client.predict(*after_run, api_name="/plan_on_example")
        assert sess.plan.spec.budget == 8   # the running job keeps its own plan
        client.predict(api_name="/stop")
        assert wait_for(lambda: not sess.running, 30)
    finally:
        run.cancel()
    out = client.predict(*after_run, api_name="/plan_after_run")
    assert sess.plan.spec.budget == 7, "the plan shown after the run is not the changed controls'"
    assert "Plan:" in str(out[0]) and "n=7" in str(out[0]), out
    assert out[1] == out[2] == {"__type__": "update"}, out   # no new value: the run's last tree and status stay
    client.predict("sequoia", 6, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan_after_run")
    assert sess.plan.spec.budget == 7   # once


@pytest.mark.timeout(120)
def test_a_run_with_learning_on_re_plans_the_plan_line_once_it_ends(served, client, jobs):
    """What a learning run stores (evidence, the prompt's memory) changes the next run's plan: the
    plan line still showed the plan from before the run (n=8, "none learned yet") while the run had
    moved to 6 nodes, until another control moved. Once, after each such run."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    sess = served["ctx"].sessions._items[client.session_hash]
    client.predict(*gen_args(method="sequoia", max_new_tokens=8, learn=True), api_name="/generate")
    client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan_after_run")
    assert sess.plan.spec.budget == 7, "the plan line was not redrawn after a learning run"
    client.predict("sequoia", 6, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan_after_run")
    assert sess.plan.spec.budget == 7   # once


@pytest.mark.timeout(120)
def test_a_live_control_changed_during_a_race_re_plans_the_live_plan_once_it_ends(served, client, jobs):
    """The same after a race: the learning switch flipped while it runs re-plans the Live plan at its
    end, and the Live tab's last run stays on screen (a race does not touch it)."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    sess = served["ctx"].sessions._items[client.session_hash]
    client.predict(*gen_args(method="sequoia", max_new_tokens=8), api_name="/generate")   # a Live run on screen
    client.predict("sequoia", 8, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan")
    race = client.submit("def g(y):", ["ar"], 8, 4, 0, 1, 8000, 0, 0, api_name="/race")   # stopped below
    try:
        assert wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        client.predict(False, api_name="/set_learn")
        client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan_on_learn")
        assert sess.plan.spec.budget == 8
        client.predict(api_name="/stop_race")
        assert wait_for(lambda: not sess.running, 30)
    finally:
        race.cancel()
    out = client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan_after_race")
    assert sess.plan.spec.budget == 7, "the Live plan shown after the race is not the changed controls'"
    assert out[1] == out[2] == {"__type__": "update"}, out   # the Live run's tree and status stay


@pytest.mark.timeout(120)
def test_a_tabs_stop_leaves_another_tabs_run_going(served, client, jobs):
    """Each tab's Stop stops only its own tab's jobs: the Live and Planner Stops pressed during a
    race leave it running (the Live Stop stopped it before) and say where the race's Stop is; the
    Race tab's Stop then stops it."""
    race = client.submit("def g(y):", ["ar"], 8, 4, 0, 1, 8000, 0, 0, api_name="/race")   # stopped below
    try:
        assert wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        running = next(j for j in jobs if j.name == "race")
        for other_stop in ("/stop", "/stop_measuring", "/stop_profiling"):
            reply = client.predict(api_name=other_stop)
            reply = reply[0] if isinstance(reply, tuple) else reply   # the Planner's: (its two captions)
            assert "Race tab" in reply and not running.stop_requested, (other_stop, reply)
        assert running.state == "running"
        assert "stopping" in client.predict(api_name="/stop_race")
        assert running.stop_requested and wait_for(lambda: running.done, 30)
        out = race.result(timeout=30)   # it said "✓ Race finished." for a stopped race
        assert (out[0] == "■ Race stopped.") == any(lane["finish_reason"] == "stopped" for lane in out[-1]["lanes"])
    finally:
        race.cancel()


@pytest.mark.timeout(120)
def test_a_page_opened_during_a_race_gets_its_plan_once_the_race_ends(served, client, jobs):
    """The page's first plan says nothing while a race runs (Start race pressed as the page
    loaded); the race shows no plan of its own, so the plan line said "No plan yet." until a
    control moved. It is planned once the race ends."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # plans then come from caches
    sess = served["ctx"].sessions._items[client.session_hash]
    race = client.submit("def g(y):", ["ar"], 8, 4, 0, 1, 8000, 0, 0, api_name="/race")   # stopped below
    try:
        assert wait_for(lambda: any(j.state == "running" for j in jobs), 30)
        out = client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/first_plan")
        assert "Plan:" not in str(out[0] or "") and sess.plan is None
        client.predict(api_name="/stop_race")
        assert wait_for(lambda: not sess.running, 30)
    finally:
        race.cancel()
    out = client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 64, api_name="/plan_after_race")
    assert "Plan:" in str(out[0]) and sess.plan is not None and sess.plan.spec.budget == 7, out


@pytest.mark.timeout(120)
def test_a_run_waiting_for_the_model_is_taken_back_by_its_tabs_stop(served, client, jobs):
    """Start race and Measure pressed while the page's Live run goes wait in Gradio's queue (one
    model group). Their tabs' Stops take them back: each says it was stopped before it started,
    neither reaches the worker, and the Live run goes on (it ran them once it ended, before)."""
    from app import waiting
    ctx = served["ctx"]
    run = client.submit(*gen_args(max_new_tokens=8000, method="ar"), api_name="/generate")   # stopped below
    try:
        assert wait_for(lambda: any(j.name == "generate" and j.state == "running" for j in jobs), 30)
        live = next(j for j in jobs if j.name == "generate")
        race = client.submit("def g(y):", ["ar"], 8, 4, 0, 1, 8, 0, 0, api_name="/race")
        measure = client.submit("sequoia", 8, 4, False, 0.5, 1, api_name="/measure")
        queued = lambda: waiting.waiting(ctx.sessions.blocks, client.session_hash,   # noqa: E731
                                         ctx.run_events["race"] | ctx.run_events["planner"])
        assert wait_for(lambda: len(queued()) == 2, 30)
        assert client.predict(api_name="/stop_race") == "■ The race waiting for the model will not start."
        # (said in the measurement's caption, the first of the Planner Stop's two)
        assert client.predict(api_name="/stop_measuring")[0] == ("■ The measurement waiting for the model will "
                                                                  "not start.")
        assert live.state == "running" and not live.stop_requested
        assert client.predict(api_name="/stop").startswith("■ stopping")   # after the current step, or before the first
        assert "Stop took it back" in race.result(timeout=60)[0]
        assert "Stop took it back" in str(measure.result(timeout=60))
    finally:
        run.cancel()
    assert [j.name for j in jobs] == ["generate"] and wait_for(lambda: live.done, 30)
    # a race asked for now runs (the marks were used up)
    out = client.predict("def g(y):", ["ar"], 8, 4, 0, 1, 4, 0, 0, api_name="/race")
    assert out[0] == "✓ Race finished." and [j.name for j in jobs] == ["generate", "race"]


@pytest.mark.timeout(120)
def test_a_pair_load_can_be_stopped_and_leaves_the_loaded_pair_in_use(served, client, reference, jobs,
                                                                      monkeypatch):
    """The Stop beside Load pair: pressed while the tokenizers load, the load ends before the
    models load, says the pair in use is still the old one, and decoding on it stays exact."""
    from app.models_tab import STOPPING_LOAD
    from engine import models
    ctx, real, replies = served["ctx"], models._load_tokenizer, []
    pair = ctx.worker.pair

    def stop_pressed_meanwhile(source):
        if not replies:
            assert wait_for(lambda: getattr(ctx.sessions._items.get(client.session_hash), "load_job", None), 10)
            replies.append(client.predict(api_name="/stop_load"))
        return real(source)

    monkeypatch.setattr(models, "_load_tokenizer", stop_pressed_meanwhile)
    out = client.predict(served["draft"], served["target"], "cpu", "float32", api_name="/load_models")
    assert replies == [STOPPING_LOAD]
    assert out[0] == (f"■ Load stopped before the models loaded. The pair in use is `{served['draft']}` → "
                      f"`{served['target']}`."), out[0]
    assert [(j.name, j.state) for j in jobs] == [("load models", "stopped")] and ctx.worker.pair is pair
    assert client.predict(api_name="/stop_load") == "Nothing is running in this tab."
    monkeypatch.undo()
    still_exact(client, reference)


@pytest.mark.timeout(120)
def test_a_load_through_the_page_frees_the_pair_in_use_before_the_new_target_loads(served, client, reference,
                                                                                   monkeypatch):
    """The old pair is dropped to make room for the new one: nothing of the page (its handler, its
    plans, the header) may keep it alive meanwhile, or both pairs sit in memory at once."""
    import gc
    import weakref
    from engine import models
    ctx, real, freed = served["ctx"], models._load_model, []
    client.predict(*gen_args(max_new_tokens=4), api_name="/generate")   # the page has planned and run on it
    old = weakref.ref(ctx.worker.pair)

    def target_loading(source, device, dtype, placement=None, role="target", *args, **kwargs):
        if role == "target":
            gc.collect()
            freed.append(old() is None)
        return real(source, device, dtype, placement, role, *args, **kwargs)

    monkeypatch.setattr(models, "_load_model", target_loading)
    loaded = client.predict(served["draft"], served["target"], "cpu", "float32", api_name="/load_models")
    assert loaded[0].startswith("✓ Loaded") and freed == [True]
    monkeypatch.undo()
    still_exact(client, reference)


@pytest.mark.timeout(120)
def test_a_pair_load_waiting_for_the_model_is_taken_back_by_its_stop(served, client, jobs):
    """Load pair pressed while the page's Live run goes waits in Gradio's queue (one model group);
    the Stop beside it takes it back: it never reaches the worker, and the Live run goes on."""
    from app import waiting
    ctx = served["ctx"]
    pair = ctx.worker.pair
    run = client.submit(*gen_args(max_new_tokens=8000, method="ar"), api_name="/generate")   # stopped below
    try:
        assert wait_for(lambda: any(j.name == "generate" and j.state == "running" for j in jobs), 30)
        live = next(j for j in jobs if j.name == "generate")
        load = client.submit(served["draft"], served["target"], "cpu", "float32", api_name="/load_models")
        assert wait_for(lambda: len(waiting.waiting(ctx.sessions.blocks, client.session_hash,
                                                    ctx.run_events["load"])) == 1, 30)
        assert client.predict(api_name="/stop_load") == "■ The load waiting for the model will not start."
        assert live.state == "running" and not live.stop_requested
        assert client.predict(api_name="/stop").startswith("■ stopping")   # after the current step, or before the first
        assert "Stop took it back" in load.result(timeout=60)[0]
    finally:
        run.cancel()
    assert [j.name for j in jobs] == ["generate"] and ctx.worker.pair is pair


@pytest.mark.timeout(120)
def test_a_stop_landing_as_a_run_starts_stops_it(served, client, jobs, monkeypatch):
    """A Stop that lands after a run's handler has looked for a take-back but before its job is
    stored finds nothing to stop and only marks the event: the handler looks once more when its
    job is stored, and stops it (here the Stop lands while the race is being handed to the worker)."""
    worker = served["ctx"].worker
    hand_over, replies = worker.race, []

    def race_with_a_stop_meanwhile(*args, **kwargs):
        job = hand_over(*args, **kwargs)
        replies.append(client.predict(api_name="/stop_race"))   # the handler has not stored the job yet
        return job

    monkeypatch.setattr(worker, "race", race_with_a_stop_meanwhile)
    out = client.predict("def g(y):", ["ar"], 8, 4, 0, 1, 8000, 0, 0, api_name="/race")
    race = next(j for j in jobs if j.name == "race")
    assert replies == ["Nothing is running in this tab."] and race.stop_requested   # (the reply cannot know)
    # stopped as it ran, or (the worker slow to take it) before it started
    assert out[0] == "■ Race stopped." and [lane["finish_reason"] for lane in out[-1]["lanes"]] in (["stopped"], [])


@pytest.mark.timeout(120)
def test_an_edit_planned_after_a_run_leaves_the_run_on_screen(served, client, jobs):
    """Leaving the max-new-tokens or prompt box re-plans; Generate's click is what leaves it, so
    that plan often lands after a short run. It must update the plan line only: the run's last tree
    and its "Done" status line stay (they were replaced by the plan's, in Chromium and in CI)."""
    client.predict("sequoia", 8, 4, False, 0, 1, api_name="/measure")   # re-plans then come from caches
    sess = served["ctx"].sessions._items[client.session_hash]
    client.predict(*gen_args(method="sequoia", max_new_tokens=8), api_name="/generate")
    assert not sess.running
    for endpoint in ("/plan_on_max_new", "/plan_on_prompt"):
        out = client.predict("sequoia", 7, 4, False, 0, 1, 0, "def g(y):", 24, api_name=endpoint)
        assert sess.plan.spec.budget == 7, endpoint   # the plan follows the edit
        assert "n=7" in str(out[0]), out
        assert out[1] == out[2] == {"__type__": "update"}, (endpoint, out)   # tree and status: no new value
