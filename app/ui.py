"""The page: header (pair, plan, status) and the Live, Race, Planner and Models tabs.

Every event has an api_name, so gradio_client can do whatever the page does. Model work runs
in one Gradio concurrency group ("model", one at a time) on top of the worker's own queue."""
from __future__ import annotations

import gradio as gr

from app import live, models_tab, planner_tab, race, render
from app.state import AppContext

STATUS_EVERY = 1.0  # seconds between header status refreshes
QUEUE_SIZE = 16     # events waiting beyond this are answered "queue full"


def build(ctx: AppContext, defaults: dict | None = None) -> gr.Blocks:
    defaults = defaults or {}
    with gr.Blocks(title="Sequoia Live", fill_width=True) as demo:
        with gr.Column(elem_classes="sq-top"):
            header = gr.HTML(render.pair_line(ctx.worker.describe(), ctx.worker.status()), elem_id="sq-header")
            plan = gr.HTML(render.plan_line(None), elem_id="sq-plan")
        with gr.Tabs(elem_id="sq-tabs"):
            with gr.Tab("Live", id="live", elem_id="sq-tab-live"):
                live_parts = live.build(ctx, {"plan": plan})
            with gr.Tab("Race", id="race", elem_id="sq-tab-race"):
                race.build(ctx)
            with gr.Tab("Planner", id="planner", elem_id="sq-tab-planner") as planner_tab_block:
                live_parts["planner_tab"] = planner_tab_block
                planner_tab.build(ctx, live_parts)
            with gr.Tab("Models", id="models", elem_id="sq-tab-models"):
                models_tab.build(ctx, defaults)

        def status():
            return render.pair_line(ctx.worker.describe(), ctx.worker.status())

        timer = gr.Timer(STATUS_EVERY)
        timer.tick(status, None, header, api_name="status", show_progress="hidden", concurrency_limit=None)
        fn, inputs, outputs = live_parts["first_plan"]
        demo.load(fn, inputs, outputs, api_name="first_plan", show_progress="hidden", concurrency_limit=None)
        demo.unload(ctx.sessions.drop)
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    return demo
