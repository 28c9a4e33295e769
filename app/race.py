"""Race tab: one prompt, seed and settings through several methods, interleaved step by step."""
from __future__ import annotations

import time

import gradio as gr

from app import plots, render
from app.errors import page_error
from app.live import (EMPTY_RACE_PROMPT, LIGHT, PAGE_WIRING, TAKEN_BACK, failure_message, model_run, progress_text,
                      stop_if_taken_back, taken_back, wire_stop)
from app.state import MAX_PAGE_SEED, RACE_CHOICES, RACE_LABELS, AppContext, settings_from, spec_from
from engine.errors import UserError
from engine.models import prompt_is_blank
from engine.planning import MethodSpec
from engine.settings import MAX_NEW_TOKENS
from engine.tree import TreeError
from engine.jobs import LaneEvent, Note, Progress
from engine.wording import plural

# at most 2 page updates per second while racing, and the chart at most every CHART_INTERVAL s: each
# update is drawn in the browser, and on a small CPU that drawing competes with the very decoding
# the race times (a Plotly figure is the costly part: bench/live_browser_cost.py)
UPDATE_INTERVAL = 0.5
# a race stopped before every lane took this many steps says its speeds are mostly noise (one
# step of a 2-level chain read 0.50x of plain decoding beside 1.65x over a whole race)
FEW_STEPS = 8
CHART_INTERVAL = 2.0

FAIRNESS = (
    "**How the race is run.** All methods get the same prompt, seed and settings. They run **together, one "
    "step at a time**, in the single model worker: the method furthest behind (the smallest share of its tokens "
    "generated) takes the next step, so every method's steps spread over the same seconds and a machine whose "
    "speed drifts slows them all alike. Never two steps on the device at once, and no other job runs on the "
    "models meanwhile (other requests wait in the queue). Planning, any acceptance/profile measurement and a short "
    "**untimed warm-up** of every method happen before the first timed run. Each method starts from fresh "
    "caches; its time is the engine's decoding time (draft + verify + bookkeeping, measured with device "
    "synchronisation), the prompt's prefill excluded and reported apart. SpecInfer uses k = ⌊(n−1)/(d−1)⌋ chains "
    "of d levels so it gets no more nodes than Sequoia; hardware-aware Sequoia treats n and d as upper bounds, "
    "and plans for the race's own prompt and settings (its tree can differ from the Live tab's).")


def lane_color(lane: str, k: int) -> str:
    """A method's colour, the same in every race (by its place among the race's methods, not among
    the lanes picked: with Chain and SpecInfer left out, Sequoia took Chain's colour)."""
    labels = [label for label, _ in RACE_CHOICES]
    place = labels.index(lane) if lane in labels else k
    return plots.LANE_COLORS[place % len(plots.LANE_COLORS)]


def _lane_text(ev) -> str:
    """A lane's text, the token that ended its answer (<|im_end|>) shown muted apart, as the Live
    text shows it."""
    eos = render.eos_part(ev) if ev.done else ""
    if not eos:
        return render.esc(ev.text)
    return (render.esc(ev.text[: len(ev.text) - len(eos)])
            + f'<span class="sq-eos" title="the end-of-answer token">{render.esc(eos)}</span>')


def _lane_html(order, lanes, ended: str | None = None, unfinished: str = " · running…") -> str:
    """The lanes' texts and stats; `ended`: what a lane with no step says once the race has ended
    (it read "waiting" after a race that failed); `unfinished`: what a lane whose last step was not
    its last says (" · failed" once the race failed)."""
    if not order:
        return ('<div class="sq-lanes"><span class="sq-placeholder">Press <b>Start race</b>: each method\'s text '
                'appears here as it is generated, with its tokens, steps and speed.</span></div>')
    rows = []
    for k, lane in enumerate(order):
        info = lanes.get(lane, {})
        color = lane_color(lane, k)
        ev = info.get("last")
        if ev is None:
            body = f'<span class="sq-placeholder">{render.esc(ended or "waiting")}</span>'
            stats = ""
        elif _stopped_before_a_step(ev):
            body = '<span class="sq-placeholder">stopped before its first step</span>'
            stats = "stopped"
        else:
            body = _lane_text(ev)
            ending = unfinished if not ev.done else " · stopped" if ev.finish_reason == "stopped" else " · done"
            stats = (f"{plural(ev.total_tokens, 'token')} · {plural(ev.total_steps, 'step')} · "
                     f"{ev.tokens_per_step:.2f} tok/step · {ev.tokens_per_second:.2f} tok/s" + ending)
        label = render.esc(info.get("label") or lane)
        rows.append(f'<div class="sq-lane"><div class="sq-lane-head"><span class="sq-dot" style="background:{color}">'
                    f'</span><b>{label}</b><span class="sq-lane-stats">{stats}</span></div>'
                    f'<div class="sq-lane-text">{body}</div></div>')
    return '<div class="sq-lanes">' + "".join(rows) + "</div>"


def _chart(series, lanes, ended: str | None = None):
    """The race chart, its lines named and coloured as the lanes name and colour their methods;
    `ended`: what it says once the race has ended with no step (it drew empty 0-1 axes)."""
    # (a lane a Stop ended in its warm-up or prefill still has its last point, 0 tokens at 0 s)
    if ended and not any(tokens for points in series.values() for _, tokens in points):
        return plots.empty_figure(ended, plots.race_height(len(series)))
    return plots.race_figure(series, labels={lane: info.get("label") for lane, info in lanes.items()},
                             colors={lane: lane_color(lane, k) for k, lane in enumerate(series)})


def _stopped_before_a_step(ev) -> bool:
    """A lane a Stop ended before it made a step: it has no speed to show or compare."""
    return ev.done and ev.finish_reason == "stopped" and not ev.total_steps


def _speedup(ev, ar) -> float | None:
    """A lane's tokens/s over the autoregressive lane's; None where either has no speed."""
    if ar is None or ar.tokens_per_second <= 0 or _stopped_before_a_step(ev):
        return None
    return ev.tokens_per_second / ar.tokens_per_second


def _partial(ev) -> bool:
    """Whether a lane's text so far is only a prefix of its whole text: still going, or stopped."""
    return not ev.done or ev.finish_reason == "stopped"


def _agrees_with_ar(ev, ar) -> bool | None:
    """At T = 0 every lane must produce the autoregressive text. Where either lane is partial
    (_partial), on what both generated, and a partial lane may not run past where the other ended on
    its own (its EOS, max new tokens or the context: both lanes share those). None when that leaves
    nothing to compare (stopped before a token)."""
    if not (_partial(ev) or _partial(ar)):
        return ev.token_ids == ar.token_ids
    if (not _partial(ar) and len(ev.token_ids) > len(ar.token_ids)) or (
            not _partial(ev) and len(ar.token_ids) > len(ev.token_ids)):
        return False
    n = min(len(ev.token_ids), len(ar.token_ids))
    return ev.token_ids[:n] == ar.token_ids[:n] if n else None


def _same_text_cell(ev, ar) -> str:
    same = _agrees_with_ar(ev, ar)
    if same is None:
        return "— (stopped before a token)" if "stopped" in (ev.finish_reason, ar.finish_reason) else (
            "— (nothing to compare yet)")
    if not same:
        return "✗ differs"
    if not (_partial(ev) or _partial(ar)):
        return "✓ identical"
    return "✓ same so far (stopped)" if "stopped" in (ev.finish_reason, ar.finish_reason) else "✓ same so far"


def _table(order, lanes, greedy: bool):
    ar = lanes.get(RACE_LABELS["ar"], {}).get("last")
    # predicted beside observed: each lane's plan is made for the race's own prompt and settings
    headers = ["method", "tokens", "steps", "tokens/step", "predicted tokens/step", "tokens/s", "speedup vs AR",
               "prefill s"]
    if greedy:
        headers.append("same text as AR")
    rows = []
    for lane in order:
        info = lanes.get(lane, {})
        ev = info.get("last")
        if ev is None:
            continue
        speedup = _speedup(ev, ar) if ar is not None and ar.done else None
        speed = "—" if speedup is None else f"{speedup:.2f}×"
        # as text: the table showed 1.0 as "1", and one decimal made 1.1 and 1.1 tok/s read as 0.94×
        unstarted = _stopped_before_a_step(ev)
        expected = info.get("expected")
        row = [info.get("label") or lane, ev.total_tokens, ev.total_steps,
               "—" if unstarted else f"{ev.tokens_per_step:.2f}", "—" if expected is None else f"{expected:.2f}",
               "—" if unstarted else f"{ev.tokens_per_second:.2f}",
               speed, "—" if unstarted and not ev.prefill_seconds else f"{ev.prefill_seconds:.3f}"]
        if greedy:
            row.append("—" if ar is None or not ar.done else _same_text_cell(ev, ar))
        rows.append(row)
    return {"headers": headers, "data": rows}


def build(ctx: AppContext) -> dict:
    prompts = ctx.prompts
    gr.Markdown(FAIRNESS, elem_classes="sq-note-block")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2):
            prompt = gr.Textbox(label="Prompt", lines=3, value=prompts[1]["prompt"] if len(prompts) > 1 else
                                (prompts[0]["prompt"] if prompts else ""), elem_id="sq-race-prompt")
            methods = gr.CheckboxGroup(RACE_CHOICES, value=[v for _, v in RACE_CHOICES], label="Methods",
                                       elem_id="sq-race-methods")
        with gr.Column(scale=2, elem_classes="sq-sliders"):   # assets/page.js guards their number boxes
            with gr.Row():
                budget = gr.Slider(1, ctx.max_budget, value=ctx.default_budget, step=1, label="Budget n")
                # depth 1 is the root alone, what the autoregressive lane runs: a drafting lane needs 2
                depth = gr.Slider(2, ctx.max_depth, value=ctx.default_depth, step=1, label="Depth d")
            with gr.Row():
                temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                top_k = gr.Slider(0, 200, value=0, step=1, label="Top-k (0 = off; applied after temperature, before top-p)")
                top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
            with gr.Row():
                max_new = gr.Number(value=64, precision=0, minimum=1, maximum=MAX_NEW_TOKENS, label="Max new tokens")
                seed = gr.Number(value=0, precision=0, minimum=0, maximum=MAX_PAGE_SEED, label="Seed",
                                 elem_id="sq-race-seed")
            with gr.Row():
                start = gr.Button("Start race", variant="primary", elem_id="sq-race-start")
                stop = gr.Button("Stop", variant="stop", elem_id="sq-race-stop")
    status = gr.Markdown("", label="Race status", show_label=False, elem_id="sq-race-status")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            lanes_html = gr.HTML(_lane_html([], {}), label="Race lanes (HTML)", show_label=False, elem_id="sq-lanes")
        with gr.Column(scale=2):
            chart = gr.Plot(plots.empty_figure("Tokens over time, one line per method",
                                               height=plots.race_height(len(RACE_CHOICES))),
                            label="Tokens over time chart", show_label=False, elem_id="sq-race-chart")
    # the columns a race fills in (an empty Dataframe would show the headers 1, 2, 3)
    table = gr.Dataframe(value=_table([], {}, greedy=True), label="Result", interactive=False, wrap=True,
                         column_widths=["26%"], elem_id="sq-race-table")   # long method names wrap
    verdict = gr.Markdown("", label="Race verdict", show_label=False, elem_id="sq-race-verdict")
    with gr.Accordion("Raw data (what the API returns)", open=False):
        race_json = gr.JSON(label="Race")

    def race(prompt_v, methods_v, budget_v, depth_v, temp_v, top_p_v, max_new_v, seed_v, top_k_v,
             request: gr.Request):
        sess = ctx.sessions.get(request)
        if taken_back(ctx, request, "race"):
            yield {status: TAKEN_BACK}
            return
        try:
            if prompt_is_blank(prompt_v):
                raise UserError(EMPTY_RACE_PROMPT)
            settings, specs = lanes_checked(prompt_v, methods_v, budget_v, depth_v, temp_v, top_p_v, max_new_v,
                                            seed_v, top_k_v)
            sess.refuse_if_running()
            job = ctx.worker.race(prompt_v, specs, settings)
        except (UserError, TreeError) as exc:
            raise page_error(str(exc)) from None
        sess.job = job
        sess.plan_after_run = True   # the race's lanes store what they observed: the Live plan may move
        stop_if_taken_back(ctx, request, "race", job)
        sess.run_info["kind"] = "race"  # re-plans do not reach a race
        sess.run_going("race")
        order = [lane for lane, _ in specs]
        lanes: dict[str, dict] = {lane: {} for lane in order}
        series: dict[str, list] = {lane: [] for lane in order}
        last_push = last_chart = 0.0
        greedy = settings.greedy
        try:   # from the first yield: a page that goes away there stops the race too
            yield {status: "… waiting for the model worker…" if job.position else "… planning…",
                   lanes_html: _lane_html(order, lanes), table: _table(order, lanes, greedy), verdict: "",
                   chart: _chart(series, lanes), race_json: None}   # not the last race's data
            together = shown = None   # the line while the lanes are timed; the status line shown last
            for item in job.stream():
                going = not job.stop_requested   # after a Stop its "stopping…" stays until the last line
                if isinstance(item, Progress):
                    if going:
                        shown = progress_text(item)
                        yield {status: shown}
                elif isinstance(item, Note) and item.kind == "race":
                    for lane, result in item.data:
                        lanes[lane]["label"] = result.method.label
                        lanes[lane]["expected"] = result.expected_tokens
                    shown = "… untimed warm-up…"
                    # the chart's legend names the lanes' trees from now on, as the lanes do (it kept
                    # the checkbox labels, "Chain", until the first step: then "chain d=4")
                    yield {lanes_html: _lane_html(order, lanes), status: shown, chart: _chart(series, lanes)}
                elif isinstance(item, Note) and item.kind == "together":
                    together = (f"● timing all {len(order)} methods together, one step at a time "
                                "(the one furthest behind steps next; each reads the prompt before its first)")
                    shown = together
                    yield {status: shown}
                elif isinstance(item, LaneEvent):
                    ev = item.event
                    lanes[item.lane]["last"] = ev
                    series[item.lane].append((ev.total_seconds, ev.total_tokens))
                    now = time.monotonic()
                    if now - last_push >= UPDATE_INTERVAL or ev.done:
                        last_push = now
                        out = {lanes_html: _lane_html(order, lanes), table: _table(order, lanes, greedy)}
                        if going and together and shown != together:   # a lane's prompt reading said how far it got
                            out[status] = shown = together
                        if now - last_chart >= CHART_INTERVAL or ev.done:
                            last_chart = now
                            out[chart] = _chart(series, lanes)
                        yield out
        except GeneratorExit:   # the page went away: no last line will be shown
            sess.run_ended("race", "")
            raise
        except Exception as exc:  # noqa: BLE001
            message = failure_message(exc, "race")
            yield {status: sess.run_ended("race", f"✗ {message}"),
                   lanes_html: _lane_html(order, lanes, ended="did not run: the race failed", unfinished=" · failed"),
                   chart: _chart(series, lanes, ended="The race failed before any step")}
            raise page_error(message) from None
        finally:  # also when the page went away or the event was cancelled (GeneratorExit)
            if not job.done:
                job.stop()
        summary = _summary(order, lanes, greedy)
        # a Stop ends every lane with finish reason "stopped" (each lane's last event is done then too)
        done_all = all(lanes[lane].get("last") is not None and not _partial(lanes[lane]["last"]) for lane in order)
        stopped = job.state == "stopped" or not done_all
        yield {status: sess.run_ended("race", "■ Race stopped." if stopped else "✓ Race finished."),
               lanes_html: _lane_html(order, lanes, ended="stopped before its first step"),
               chart: _chart(series, lanes, ended="Stopped before any lane's first step"),
               table: _table(order, lanes, greedy), verdict: summary["verdict"], race_json: summary}

    def control_moved(request: gr.Request):
        """A race control changed while this page's race goes: the lanes keep their planned trees
        and settings (a fair race), so say where the change lands (nothing said it)."""
        sess = ctx.sessions.get(request)
        if sess.running and not sess.submitting and getattr(sess.job, "name", None) == "race":
            gr.Info("The race goes on as it started (its lanes keep their trees and settings): "
                    "this change applies to the next race.")

    # sliders once released, number boxes once left (their input fires at every key)
    changes = [slider.release for slider in (budget, depth, temperature, top_k, top_p)]
    for changed in changes + [max_new.blur, seed.blur, methods.input]:
        changed(control_moved, None, None, show_progress="hidden", trigger_mode="always_last", **PAGE_WIRING, **LIGHT)

    inputs = [prompt, methods, budget, depth, temperature, top_p, max_new, seed, top_k]
    run_event = model_run(start, race, inputs, [status, lanes_html, chart, table, verdict, race_json], "race",
                          prompt_at=0, empty_prompt=EMPTY_RACE_PROMPT, check=lanes_checked, waiting_line_in=status,
                          worker=ctx.worker,
                          show_progress="minimal", show_progress_on=[status])
    wire_stop(ctx, stop, "race", status, api_name="stop_race", runs={"race": run_event})
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p, "run_event": run_event}


def lanes_checked(prompt_v, methods_v, budget_v, depth_v, temp_v, top_p_v, max_new_v, seed_v, top_k_v):
    """The race's settings and its lanes' specs from the page's values (the Start button's field
    check and the race itself read them alike)."""
    return settings_from(temp_v, top_p_v, max_new_v, seed_v, top_k_v), race_specs(methods_v, budget_v, depth_v)


def race_specs(methods_v, budget_v, depth_v) -> list[tuple[str, MethodSpec]]:
    """(lane name, spec) per picked method, in the page's order; UserError/TreeError for a pick
    or a budget and depth that some lane cannot run (said before anything is queued)."""
    if not methods_v:
        raise UserError("pick at least one method for the race")
    unknown = [m for m in methods_v if m not in RACE_LABELS]
    if unknown:
        raise UserError(f"unknown race method(s) {unknown} (use {', '.join(RACE_LABELS)})")
    return [(RACE_LABELS[m], spec_from("sequoia", budget_v, depth_v, True) if m == "sequoia-auto"
             else spec_from(m, budget_v, depth_v))
            for m in [v for _, v in RACE_CHOICES if v in methods_v]]


def _summary(order, lanes, greedy: bool) -> dict:
    ar = lanes.get(RACE_LABELS["ar"], {}).get("last")
    out = []
    for lane in order:
        ev = lanes[lane].get("last")
        if ev is None:
            continue
        out.append({"lane": lane, "label": lanes[lane].get("label"), "text": ev.text, "tokens": ev.total_tokens,
                    "steps": ev.total_steps, "tokens_per_step": ev.tokens_per_step,
                    "tokens_per_second": ev.tokens_per_second, "seconds": ev.total_seconds,
                    "prefill_seconds": ev.prefill_seconds, "finish_reason": ev.finish_reason,
                    "predicted_tokens_per_step": lanes[lane].get("expected"),
                    "speedup": _speedup(ev, ar),
                    # the greedy check only: sampled texts differ by design
                    "same_as_autoregressive": _agrees_with_ar(ev, ar) if greedy and ar is not None else None})
    identical = None
    verdict = ""
    stopped = any(x["finish_reason"] == "stopped" for x in out)
    compared = [x["same_as_autoregressive"] for x in out if x["same_as_autoregressive"] is not None]
    if greedy and ar is not None and not compared:
        verdict = ("■ **Stopped before there was text to compare** (the greedy check needs tokens from the "
                   "autoregressive lane and another).")
    elif greedy and ar is not None:
        identical = all(compared)
        if not identical:
            verdict = ("✗ **Greedy check failed:** some text differs from autoregressive"
                       + (" within what both generated" if stopped else "") + " — that is a bug.")
        elif stopped:
            unchecked = [x["label"] or x["lane"] for x in out if x["same_as_autoregressive"] is None]
            verdict = ("■ **Stopped early:** each method's text "
                       + ("that was compared " if unchecked else "")
                       + "matches the autoregressive text up to where the shorter of the two stopped (the greedy "
                         "check on what was generated)."
                       + (f" Not compared (no tokens before the Stop): {', '.join(unchecked)}." if unchecked else ""))
        else:
            verdict = "✓ **Greedy check passed:** every method produced exactly the autoregressive text."
    elif greedy:
        verdict = "Add autoregressive to the race to check that every greedy text is identical to it."
    else:
        verdict = ("Sampling (T > 0): the texts differ between methods by design; each is an exact sample "
                   "from the target's distribution.")
    fewest = min((x["steps"] for x in out if x["steps"]), default=None)   # of the lanes that took a step
    if stopped and fewest is not None and fewest < FEW_STEPS:
        verdict += (f" Speeds over as few as {plural(fewest, 'step')} say little: the first steps are mostly "
                    "timing noise.")
    if not greedy and any(x["predicted_tokens_per_step"] is None and x["lane"] == RACE_LABELS["specinfer"]
                          for x in out):
        verdict += (" SpecInfer's predicted tokens/step is — here: it draws its children with replacement, so "
                    "its prediction needs a vector of its own sampler, none measured at these settings "
                    "(`python -m engine measure --sampler specinfer` makes one).")
    return {"greedy": greedy, "identical": identical, "lanes": out, "verdict": verdict}
