"""The page: header (pair, plan, status) and the Live, Race, Planner and Models tabs.

Every event has an api_name, so gradio_client can do whatever the page does. Model work runs
in one Gradio concurrency group ("model", one at a time) on top of the worker's own queue."""
from __future__ import annotations

import functools
import logging
import math
import weakref

import gradio as gr

from app import live, models_tab, planner_tab, race, render
from app.errors import page_error
from app.state import AppContext

log = logging.getLogger(__name__)
STATUS_EVERY = 1.0  # seconds between header status refreshes
QUEUE_SIZE = 16     # events waiting beyond this are answered "queue full"


def build(ctx: AppContext, defaults: dict | None = None) -> gr.Blocks:
    defaults = defaults or {}
    with gr.Blocks(title="Sequoia Live", fill_width=True) as demo:
        with gr.Column(elem_classes="sq-top"):
            header = gr.HTML(render.pair_line(ctx.worker.describe(), ctx.worker.status()),
                             label="Header (pair, device, worker state)", show_label=False, elem_id="sq-header")
            plan = gr.HTML(render.plan_line(None), label="Plan line", show_label=False, elem_id="sq-plan")
        with gr.Tabs(elem_id="sq-tabs"):
            with gr.Tab("Live", id="live", elem_id="sq-tab-live"):
                live_parts = live.build(ctx, {"plan": plan})
            with gr.Tab("Race", id="race", elem_id="sq-tab-race"):
                race_parts = race.build(ctx)
            with gr.Tab("Planner", id="planner", elem_id="sq-tab-planner") as planner_tab_block:
                live_parts["planner_tab"] = planner_tab_block
                planner_parts = planner_tab.build(ctx, live_parts)
            with gr.Tab("Models", id="models", elem_id="sq-tab-models"):
                models_parts = models_tab.build(ctx, defaults, sampling_controls=[live_parts, race_parts])

        plan_fn, plan_inputs, plan_outputs = live_parts["first_plan"]
        # Live controls changed during a race re-plan the Live plan once it ends, as after a Live run
        after_fn, after_inputs, after_outputs = live_parts["plan_after_run"]
        live.after_run(race_parts["run_event"], after_fn, after_inputs, after_outputs, "plan_after_race",
                       show_progress="hidden", concurrency_limit=None, **live.PAGE_WIRING)
        pair_info, pair_memory = models_parts["info"], models_parts["memory"]

        def pair_now() -> dict:
            """Header and the Models tab's pair and memory lines as they are now (the page was built
            before the pair finished loading)."""
            mem, info = models_parts["show_memory"]()
            return {header: render.pair_line(ctx.worker.describe(), ctx.worker.status()), pair_info: info,
                    pair_memory: mem}

        def first_plan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
                       request: gr.Request = None):
            """The page's first plan; remembers which pair, and which device profile, it was made
            for (see status)."""
            pair, stamp = ctx.worker.pair, ctx.worker.profile_stamp()
            out = plan_fn(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request)
            if pair is not None:
                planned_for(ctx.sessions.get(request), pair, stamp)
            else:   # it said the pair is loading (or that none is): status follows up when that changes
                ctx.sessions.get(request).plan_pair = _no_pair
            return out

        def planned_for(sess, pair, stamp) -> None:
            """This page's header planned (or said why it could not) for this pair and this device
            profile (its stamp taken before planning): status plans again once either changes."""
            sess.plan_pair, sess.plan_profile = weakref.ref(pair), stamp

        def page_open(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
                      request: gr.Request = None):
            return {**first_plan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request), **pair_now()}

        def status(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
                   request: gr.Request = None):
            """Header every second; and once a (new) pair is ready, its description in the Models
            tab and the plan this page would use with it (the page may have opened while the pair
            was loading, or another pair was loaded since); the plan too once the device profile
            it rests on was replaced (timed again in the background: engine/reprofile.py, or by
            the Planner tab or the CLI)."""
            out = {header: render.pair_line(ctx.worker.describe(), ctx.worker.status())}
            underway = ctx.worker.load_underway   # before the pair: a load ending between the two reads
            pair, sess = ctx.worker.pair, ctx.sessions.get(request)   # then leaves a pair, never neither
            seen = getattr(sess, "plan_pair", None)
            new_pair = seen is None or seen() is not pair
            stamp = ctx.worker.profile_stamp()
            if pair is None and not underway and seen is not None:
                # the pair this page planned for is gone (a load stopped or failed after dropping
                # it to make room), or the load it waited for ended with none: its plan line and
                # "still loading" must not stay up
                sess.plan_pair = None
                out.update(pair_now())
                out[plan_md], out[plan_json] = render.plan_line(None), {}
                if not sess.live_run_on_screen():   # a run's own tree and last line stay
                    out[live_parts["status"]] = live.NO_PAIR
                    out[live_parts["tree"]] = live.no_tree_yet()
                out[profile_shown] = repr((None, None))   # the Planner tab's charts go too
                return out
            if pair is None or ctx.worker.loading or (not new_pair and sess.plan_profile == stamp):
                return out
            if new_pair:
                out.update(pair_now())
            # plan once the run is over (the run shows its own plan meanwhile), and once this page's
            # side jobs are done (a measuring plan's result would be dropped for this one's ticket)
            if sess.running or sess.jobs_going():
                return out
            had_run = sess.live_run_on_screen()
            # the tick reads the fields raw (preprocess=False): their bounds are checked here, as an
            # edit of the field would check them, and a bad one is said once in the status line
            values = (method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v)
            try:
                for block, value in zip(plan_inputs, values):
                    if isinstance(block, (gr.Number, gr.Slider)):
                        _refuse_bad_number(block, value)
            except gr.Error as exc:
                planned_for(sess, pair, stamp)
                planned = {live_parts["status"]: f"! {exc.message} — no plan for the new pair or profile yet"}
            else:
                try:
                    planned = first_plan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v,
                                         max_new_v, request)
                except Exception:  # noqa: BLE001 - a page sending odd values must not break the header
                    log.exception("planning for the newly loaded pair failed")
                    planned_for(sess, pair, stamp)
                    return out
            if not planned or sess.running:
                return out   # a run started meanwhile (first_plan says nothing then): its own plan stays
            if plan_md not in planned:
                planned[plan_md], planned[plan_json] = render.plan_line(None), {}
            # the Planner tab redraws once per new pair or profile (profile_shown's change event)
            planned[profile_shown] = repr((id(pair), sess.plan_profile))
            if had_run:  # keep the run's tree and status on screen (its replay still works)
                planned = {k: v for k, v in planned.items() if k in (plan_md, plan_json, profile_shown)}
            else:  # the status line may still say why there was no plan (the pair was loading, or
                # had no device profile yet: a first start's page opened meanwhile)
                planned.setdefault(live_parts["status"], live.READY)
            out.update(planned)
            return out

        plan_md, plan_json = live_parts["plan_md"], live_parts["plan_json"]
        # which pair and device profile the header last planned with; a change redraws the Planner
        # tab (its profile chart and caption, the speedups), which otherwise waits for a tab select
        profile_shown = gr.State(None)
        timer = gr.Timer(STATUS_EVERY)
        # preprocess=False: the tick must not check the page's fields every second. A bad value (max
        # new tokens -5) raised an error pop-up per tick, for as long as the field held it; the
        # user's edit and Generate report it once each, and a plan the tick makes checks the raw
        # values itself (status above) and says what is wrong in the status line
        timer.tick(status, plan_inputs, [header, *plan_outputs, pair_info, pair_memory, profile_shown],
                   api_name="status", show_progress="hidden", concurrency_limit=None, preprocess=False)
        planner_fn, planner_inputs, planner_outputs = planner_parts["refresh"]

        def planner_on_new_profile(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v=0, prompt_v=None,
                                   max_new_v=64, request: gr.Request = None):
            """The Planner tab redrawn for a new pair or profile; not for a page closed meanwhile
            (its session would come back, with no page left to plan for it). The parameters are
            named: Gradio passes the request only to a parameter it can see."""
            if not ctx.sessions.known(request):
                return {planner_outputs[0]: gr.skip()}
            return planner_fn(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v,
                              request=request)

        waiting_lines_again, planner_captions = planner_parts["waiting_lines_again"]
        profile_shown.change(planner_on_new_profile, planner_inputs, planner_outputs,
                             api_name="planner_on_new_profile", show_progress="hidden", concurrency_limit=None,
                             **live.PAGE_WIRING).then(
            waiting_lines_again, None, planner_captions, show_progress="hidden", concurrency_limit=None,
            **live.PAGE_WIRING)
        demo.load(page_open, plan_inputs, [*plan_outputs, header, pair_info, pair_memory], api_name="first_plan",
                  show_progress="hidden", concurrency_limit=None, **live.PAGE_WIRING)
        demo.unload(ctx.sessions.drop)
    guard_numbers()
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    return demo


def _no_pair() -> None:
    """What a page's first plan made without a pair was made for (Session.plan_pair is a weak
    reference to the pair otherwise): nothing."""
    return None


def _shown(x: float) -> str:
    """A bound or value as typed: 8192 and 1000000, not 8192.0 and 1e+06 (1e+20 stays short)."""
    return str(int(x)) if float(x).is_integer() and abs(x) <= 2**53 else f"{x:g}"   # (2^53: a double's exact integers)


def _refuse_bad_number(block, payload) -> None:
    """A number field's value from a request: a finite number within the field's bounds, else a
    message naming the field (Gradio's own check lets NaN through, fails on strings with a bare
    TypeError and names no field)."""
    name = block.label or "a number field"
    if payload is None:   # an emptied box: every number field of the page needs a value
        raise page_error(f"{name} is empty: type a value")
    if isinstance(payload, bool) or not isinstance(payload, (int, float)):
        raise page_error(f"{name} must be a number (got {str(repr(payload))[:40]})")
    try:
        finite = math.isfinite(payload)
    except OverflowError:   # an integer too large for a float
        finite = False
    if not finite:
        raise page_error(f"{name} must be a finite number (got {str(payload)[:40]})")
    if getattr(block, "precision", None) == 0 and payload != int(payload):
        raise page_error(f"{name} must be a whole number (got {payload})")
    if block.minimum is not None and payload < block.minimum:
        raise page_error(f"{name} must be at least {_shown(block.minimum)} (got {_shown(payload)})")
    if block.maximum is not None and payload > block.maximum:
        raise page_error(f"{name} must be at most {_shown(block.maximum)} (got {_shown(payload)})")


def guard_numbers() -> None:
    """Every Number and Slider refuses NaN, infinities, non-numbers and out-of-bounds values by
    name. On the classes, not the page's instances: Gradio rebuilds a component from its class
    each time a handler updates its properties (the Replay slider's maximum, or any output a
    dict-yield leaves out), and an instance's guard was lost with it. Done once per process."""
    for cls in (gr.Number, gr.Slider):
        if getattr(cls.preprocess, "guarded", False):
            continue

        @functools.wraps(cls.preprocess)   # Gradio reads the signature and docstring
        def guarded(self, payload, _original=cls.preprocess):
            _refuse_bad_number(self, payload)
            return _original(self, payload)
        guarded.guarded = True
        cls.preprocess = guarded
