"""The Planner tab's Stop: one Stop for the tab's measurement and profile, pressed from either of
its two buttons (one beside Measure, one beside Profile), whose reply lands in the caption of the
run it stopped or took back. With one caption for every reply, the Stop beside Profile said
"stopping…" under Measure, out of sight of the profile it stopped, and the line put back after
the reply (Session.line_after_stop) could be a profile's written under Measure."""
from __future__ import annotations

import gradio as gr

from app import waiting
from app.live import LIGHT, PAGE_WIRING, stop_reply, take_back_waiting

TAB = "planner"


def wire_planner_stop(ctx, buttons: dict, captions: dict, runs: dict) -> None:
    """`buttons`: {api name: Stop button}; `captions`: {"measurement": the acceptance caption,
    "profile": the profile caption}; `runs`: {run name: the event that starts it}. Each button's event takes both
    captions and writes one: a script calling it gets (acceptance caption, profile caption), the
    one not written as an unchanged update."""
    ctx.run_events[TAB] = waiting.event_ids(runs)
    shown = list(captions.values())
    first = next(iter(captions.values()))

    def stop(acceptance_shown=None, profile_shown=None, request: gr.Request = None):
        sess = ctx.sessions.get(request)
        took_back = take_back_waiting(ctx, request, TAB)
        stopped = sess.stop_tab(TAB)
        reply = stop_reply(stopped, TAB, took_back)
        if stopped == TAB:   # its run goes (or has ended and not shown its last line yet)
            return {captions[sess.planner_run]: reply}
        if took_back:
            return {captions[took_back[0]]: reply}
        if acceptance_shown or profile_shown:   # a page: the captions show the vector and profile
            gr.Info(reply)
            return {first: gr.skip()}
        return {first: reply}   # a script (it sends no captions): the reply is what it asked for

    def line_after_stop(request: gr.Request):
        sess = ctx.sessions.get(request)
        ended = sess.line_after_stop(TAB)
        return {first: gr.skip()} if ended is None else {captions[sess.planner_run]: ended}

    for api_name, button in buttons.items():
        button.click(stop, shown, shown, api_name=api_name, show_progress="hidden", **LIGHT).then(
            line_after_stop, None, shown, api_name=f"line_after_{api_name}", show_progress="hidden",
            **PAGE_WIRING, **LIGHT)
