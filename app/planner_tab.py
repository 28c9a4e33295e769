"""Planner tab: the measurements behind a plan (acceptance vector, device profile), the DP
table G(n, d), the predicted speedup, the chosen tree, and tree export/import."""
from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr

from app import plots, render, waiting
from app.errors import page_error
from app.live import (LIGHT, PAGE_WIRING, PROFILING_NOW, TAKEN_BACK, failure_message, model_run, no_pair_text,
                      progress_text, stop_if_taken_back, taken_back, waiting_line)
from app.planner_stop import wire_planner_stop
from app.state import METHOD_LABELS, AppContext, read_tree_file, settings_from, spec_from
from engine import export as tree_export
from engine import interpolation
from engine import profiler
from engine import planning
from engine.errors import UserError
from engine.jobs import Progress, ProfileKept
from engine.models import servable_name
from engine.planning import NeedsMeasurement, table_for
from engine.tree import TreeError
from engine.wording import tree_shape

EXPORT_DIR = Path(tempfile.mkdtemp(prefix="sequoia-live-export-"))
# session -> {"format", "stem", "cannot": {format: why}} of its download
_EXPORT_CHOICE: OrderedDict[str, dict] = OrderedDict()


def write_exports(tree, stem: str, meta: dict, draft: str | None = None,
                  target: str | None = None) -> tuple[dict, dict]:
    """(format -> file, format -> why not): the tree in every export format side by side in
    EXPORT_DIR, so switching formats is a lookup. A format that cannot express the tree (a root-only
    tree for vllm/medusa) is left out, with the reason the export button shows."""
    files, cannot = {}, {}
    for fmt in tree_export.FORMATS:
        options = {"draft": draft, "target": target} if fmt == "vllm" else {}
        try:
            data = tree_export.export_tree(tree, fmt, **options)
        except TreeError as exc:
            cannot[fmt] = str(exc)
            continue
        if fmt == "json":  # the app's JSON also says where the tree came from
            data = json.dumps({**tree.to_dict(), **meta}, indent=1)
        path = files[fmt] = EXPORT_DIR / (stem + tree_export.SUFFIX[fmt])
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return files, cannot


def _no_choice() -> dict:
    """A session's download before any tree: json, nothing written."""
    return {"format": "json", "stem": None, "cannot": {}}


def _export_choice(request) -> dict:
    key = getattr(request, "session_hash", None) or "default"
    choice = _EXPORT_CHOICE.pop(key, None) or _no_choice()
    _EXPORT_CHOICE[key] = choice
    while len(_EXPORT_CHOICE) > 256:  # bounded: old sessions' choices are forgotten
        _EXPORT_CHOICE.popitem(last=False)
    return choice


def _export_path(choice: dict) -> str | None:
    if not choice["stem"]:
        return None
    path = EXPORT_DIR / (choice["stem"] + tree_export.SUFFIX[choice["format"]])
    return str(path) if path.exists() else None


EXPORT_LABEL = "Export the chosen tree"
# how long after a Measure or Profile press a Planner redraw leaves that caption alone: it covers the
# press's field check and Gradio queueing the run (after which the queue says so), well under a second;
# short, since a press the field check refuses is never queued and its caption must follow new values
PRESS_SECONDS = 2.0


def captions_in_use(ctx: AppContext, request, caption_of: dict) -> dict:
    """What a redraw writes in the captions (`caption_of`: {"measurement" | "profile": caption}) of
    this page's Measure and Profile that were just pressed, wait in Gradio's queue or run now,
    instead of the vector's or the profile's words (written over "… waiting: the model is busy", as
    if nothing had been pressed): a run that waits, its waiting line again; one that runs or was just
    pressed, nothing (its own line stays)."""
    sess = ctx.sessions.get(request)
    now = time.monotonic()
    out = {caption_of[name]: gr.skip() for name, at in sess.planner_pressed.items()
           if now - at < PRESS_SECONDS and name in caption_of}
    names, blocks = ctx.run_events.get("planner") or {}, ctx.sessions.blocks
    if blocks is None or not names:
        return out
    key = getattr(request, "session_hash", None)
    for fn in waiting.started(blocks, key, names).values():
        out[caption_of[names[fn]]] = gr.skip()
    for event_id, fn in waiting.waiting(blocks, key, names).items():
        taken_back = event_id in sess.taken_back   # (its Stop's reply says it will not start)
        out[caption_of[names[fn]]] = gr.skip() if taken_back else waiting_line(ctx.worker.status())
    return out


def _export_for(request, stem: str | None, cannot: dict | None = None):
    """The session's download button set to the tree written as `stem` (None: no tree, so a
    format picked now must not fetch the last tree's file), its format kept."""
    choice = _export_choice(request)
    choice["stem"], choice["cannot"] = stem, cannot or {}
    return _export_button(choice)


def _export_button(choice: dict):
    """The download button for the chosen tree in the chosen format; greyed, saying why, where
    there is no tree yet or the format cannot express it (a click on a button with no file did
    nothing and said nothing: vllm and medusa with a root-only tree)."""
    path = _export_path(choice)
    if path is not None:
        return gr.update(value=path, label=EXPORT_LABEL, interactive=True)
    why = choice.get("cannot", {}).get(choice["format"]) if choice["stem"] else None
    label = (f"{EXPORT_LABEL} (no tree yet)" if not choice["stem"] else
             f"Not as {choice['format']}: {why}" if why else f"{EXPORT_LABEL} (its {choice['format']} file is gone: "
                                                             "plan again)")
    return gr.update(value=None, label=label, interactive=False)


def build(ctx: AppContext, live: dict) -> dict:
    gr.Markdown("Uses the **Live** tab's temperature, top-p, top-k, budget, depth, hardware-aware toggle and prompt (its "
                "kind, code or prose, picks the acceptance vector where the two differ). Every number "
                "here is measured on the loaded pair and device, or read from the named cache file.",
                elem_classes="sq-note-block")
    info = gr.Markdown("", label="Planner summary", show_label=False, elem_id="sq-planner-info")
    with gr.Row(equal_height=False):
        with gr.Column():
            acc_chart = gr.Plot(label="Acceptance vector chart", show_label=False, elem_id="sq-planner-acc")
            acc_caption = gr.Markdown("", label="Acceptance caption", show_label=False, elem_id="sq-acc-caption")
            with gr.Row():
                measure = gr.Button("Measure on this pair", elem_id="sq-measure",
                                    scale=3)
                stop = gr.Button("Stop", variant="stop", elem_id="sq-planner-stop", scale=1, min_width=80)
        with gr.Column():
            heat = gr.Plot(label="G(n, d) heatmap", show_label=False, elem_id="sq-heatmap")
    with gr.Row(equal_height=False):
        with gr.Column():
            prof_chart = gr.Plot(label="Device profile chart", show_label=False, elem_id="sq-profile")
            prof_caption = gr.Markdown("", label="Profile caption", show_label=False)
            with gr.Row():
                profile = gr.Button("Profile this device", elem_id="sq-profile-btn", scale=3)
                # the tab's Stop again (the one beside Measure was scrolled away with Profile in
                # view): both stop whatever the tab runs, alike (app/planner_stop.py)
                profile_stop = gr.Button("Stop", variant="stop", elem_id="sq-profile-stop", scale=1, min_width=80)
        with gr.Column():
            speed = gr.Plot(label="Predicted speedup chart", show_label=False, elem_id="sq-speedup")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2):
            chosen = gr.Plot(label="Chosen tree figure", show_label=False, elem_id="sq-chosen")
        with gr.Column(scale=1):
            export_format = gr.Dropdown(list(tree_export.FORMATS), value="json", label="Export format",
                                        info="json: this app · vllm: speculative_config · medusa: path list · "
                                             "growmap: original Sequoia .pt", elem_id="sq-export-format")
            export = gr.DownloadButton(EXPORT_LABEL, value=None, elem_id="sq-export")
            # a short label: a long one ran under the file box's clear button once a file was chosen
            upload = gr.File(label="Import a tree (json, vllm, medusa or growmap .pt)",
                             file_types=[".json", ".pt"], type="filepath", elem_id="sq-import")
            import_status = gr.Markdown("", label="Import status", show_label=False)
            with gr.Accordion("Plan (raw, what the API returns)", open=False):
                planner_json = gr.JSON(label="Plan (raw)")

    # the prompt too: it picks the code or prose acceptance vector, as in the Live tab's plan, which
    # this tab redraws (and writes to the header): without it the header switched to the pooled plan
    settings_inputs = [live["method"], live["budget"], live["depth"], live["hardware"], live["temperature"],
                       live["top_p"], live["top_k"], live["prompt"], live["max_new"]]   # as a Live run would plan
    header_plan = live["plan_md"]
    outputs = [info, acc_chart, acc_caption, heat, prof_chart, prof_caption, speed, chosen, export, planner_json,
               header_plan]

    def _mark(result, spec) -> tuple[int, int] | None:
        """Where the charts mark the plan: the hardware-aware choice, an imported tree's own size
        and depth (its spec's budget and depth are defaults: the mark sat at n=16, d=8; none when
        it lies outside the charts' grid), else the budget and depth asked for."""
        if result is not None and result.choice is not None:
            return result.choice.n, result.choice.d
        if spec.kind == "tree":
            n, d = spec.tree.size, spec.tree.depth
            return (n, d) if n <= ctx.max_budget and d <= ctx.max_depth else None
        return spec.budget, spec.depth

    def _missing_words(no_profile: bool, no_vector: bool, profiling: bool) -> str:
        """What a chart waits for, and the button that gives it (or that it is being measured)."""
        profile = ("a device profile (being measured now: the header shows how far)" if profiling
                   else "a device profile (“Profile this device”)")
        words = (["an acceptance vector (“Measure on this pair”)"] if no_vector else []) + (
            [profile] if no_profile else [])
        return " and ".join(words)

    def view(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v=0, prompt_v=None, max_new_v=64,
             request: gr.Request | None = None) -> dict:
        sess = ctx.sessions.get(request)
        # values no plan can have: the Live tab says so too (its plan line and a toast); here the
        # last plan must not stay up, nor its tree stay exportable
        try:
            # max new tokens: whether an answer's rest is planned for, with a prompt's memory (engine/learning.py)
            settings = settings_from(temp_v, top_p_v, max_new_v, top_k=top_k_v)
        except (UserError, TreeError) as exc:
            return no_plan_view(str(exc), request)
        try:
            spec, no_spec = spec_from(method_v if method_v in ("sequoia", "tree") else "sequoia", budget_v, depth_v,
                                      hw_v, sess), None
        except (UserError, TreeError) as exc:   # (the settings' vector is still drawn)
            spec, no_spec = None, str(exc)
        out = {}
        worker = ctx.worker
        if worker.pair is None:
            msg = no_pair_text(worker, "This tab draws its plan once the pair is ready.")
            empty = plots.empty_figure(msg, 260)
            return {info: msg, acc_chart: empty, acc_caption: "", heat: empty, prof_chart: empty, prof_caption: "",
                    speed: empty, chosen: empty, export: _export_button(_no_choice()),
                    planner_json: {}}
        T, top_p = settings.temperature, settings.top_p
        here = planning.settings_words(T, top_p, settings.top_k)   # vectors are kept per top-k too
        vec = worker.cached_acceptance(T, top_p, top_k=settings.top_k)
        prof = worker.cached_profile()
        profiling = prof is None and worker.profiling_now()   # asked once: every caption says the same
        # ---- acceptance vector
        if vec is not None:
            out[acc_chart] = plots.acceptance_figure(vec.probabilities, ci=vec.ci95, height=280,
                                                     title=f"Acceptance vector at {here}")
            out[acc_caption] = (f"**{vec.positions} positions** measured over {vec.prompts} prompts "
                                f"({vec.sampler} sampler, width {vec.width}) in {vec.seconds:.1f} s on "
                                f"{vec.measured_at} · P(no child accepted) = {vec.none:.3f} · "
                                f"`{render.short_path(vec.source)}` · {render.interval_words(vec)}")
        else:
            out[acc_chart] = plots.empty_figure(f"No acceptance vector measured at {here}", 280)
            out[acc_caption] = "Not measured for these settings yet: press **Measure on this pair**."
        if no_spec is not None:
            return {**out, **no_plan_view(no_spec, request, keep_vector=True)}
        # ---- plan (exact vector, or the nearest one, said so)
        try:
            result = worker.quick_plan(spec, settings, allow_nearest=True, learn=getattr(sess, "learn", True),
                                       prompt=prompt_v)
        except NeedsMeasurement as need:
            result, missing = None, need.what
            out[info] = PROFILING_NOW if missing == "profile" and profiling else f"{need}."
        except (UserError, TreeError) as exc:   # values no plan can have (depth 1 for a DP tree)
            return {**out, **no_plan_view(str(exc), request, keep_vector=True)}
        else:
            missing = None
        plan_vec = result.acceptance if result is not None else None
        # what the tree was planned from: plan_vec, or for a prompt run before its memory's posterior;
        # with no plan (no device profile yet) G(n, d) still comes from the measured vector
        planned = result.planning_probabilities if result is not None else (
            vec.probabilities if vec is not None else None)
        if vec is None and plan_vec is not None:  # interpolated (or nearest), said so
            out[acc_chart] = plots.acceptance_figure(plan_vec.probabilities, ci=plan_vec.ci95, height=280,
                                                     planned_name="not measured here: " + (
                                                         "interpolated" if interpolation.is_interpolated(
                                                             result.base_acceptance) else "nearest"),
                                                     title=f"Acceptance at {here} (NOT measured)")
            out[acc_caption] = render.short_paths_in(result.acceptance_note)
            if worker.refiner is not None and interpolation.is_interpolated(result.measured_acceptance):
                out[acc_caption] += (" · being measured for real in the background while the engine is idle "
                                     "(any run goes first); plans use it once done")
        elif plan_vec is not None and vec is not None and plan_vec.domain != vec.domain:
            # the prompt's kind picked its own vector (engine/domains.py): show the one the plan uses
            out[acc_chart] = plots.acceptance_figure(plan_vec.probabilities, ci=plan_vec.ci95, height=280,
                                                     title=f"Acceptance vector at {here}: "
                                                           f"{plan_vec.domain} prompts (the Live prompt's kind)")
            out[acc_caption] = f"{render.short_paths_in(result.acceptance_note)} · {render.interval_words(plan_vec)}"
        if result is not None and plan_vec is not None:
            out[acc_caption] = (out.get(acc_caption, "") + f" · **the current plan is backed by "
                                f"{result.backing_positions} positions** ({render.backing_detail(result)})")
        if planned is not None:
            table = table_for(planned, ctx.max_budget, ctx.max_depth)
            out[heat] = plots.heatmap_figure(table.G, ctx.max_budget, ctx.max_depth,
                                             _mark(result, spec) if result is not None else None,   # nothing chosen yet
                                             imported_tokens=result.expected_tokens if spec.kind == "tree" else None)
        else:
            out[heat] = plots.empty_figure(
                f"G(n, d) is drawn with the plan, which needs {_missing_words(True, False, profiling)}"
                if missing == "profile" else f"G(n, d) needs {_missing_words(False, True, profiling)}", 300)
        # ---- device profile and predicted speedup
        out.update(profile_part(prof, profiling))
        if prof is not None and planned is not None:
            # the profile the plan used: observed step costs blended in, sampling maths at T > 0
            used = result.profile if result is not None and result.profile is not None else prof
            choice = planning.hardware_aware(planned, used, ctx.max_budget, ctx.max_depth,
                                             not settings.greedy)
            imported = spec.kind == "tree" and result is not None
            out[speed] = plots.speedup_figure(choice.grid, _mark(result, spec), measured_up_to=max(used.target_seconds),
                                              imported_speedup=result.predicted_speedup if imported else None,
                                              imported=imported,
                                              depth_cap=spec.depth if spec.kind in ("sequoia", "sequoia-auto") else None)
        else:
            waits_for = _missing_words(prof is None, planned is None, profiling)
            out[speed] = plots.empty_figure(f"Predicted speedup needs {waits_for}", 280)
        # ---- chosen tree and export
        if result is not None:
            t = result.tree
            out[chosen] = plots.plan_figure(t, planned,
                                            title=f"Chosen tree: {result.method.label}", height=420)
            digest = hashlib.sha1(json.dumps(t.parents).encode()).hexdigest()[:8]
            stem = f"sequoia-tree-n{t.size}-d{t.depth}-{digest}"
            pair = worker.pair
            _, cannot = write_exports(t, stem, {"label": result.method.label,
                                                "expected_tokens": result.expected_tokens,   # no local paths
                                                "acceptance_note": render.short_paths_in(result.acceptance_note)},
                                      draft=servable_name(pair, "draft"), target=servable_name(pair, "target"))
            out[export] = _export_for(request, stem, cannot)
            out[planner_json] = result.summary()
            # "the running job uses it" only for a Live run of this kind (a race keeps its planned trees)
            out[info] = render.plan_line(result, sess.running and sess.run_info.get("kind") == spec.kind)
            if method_v in ("sequoia", "tree"):   # the header shows the plan the next Live run uses
                out[header_plan] = out[info]
            else:
                out[info] = (f"The Live method is {METHOD_LABELS.get(method_v, method_v)}; this tab shows the "
                             f"Sequoia plan for the same settings.\n\n{out[info]}")
        else:
            waits_for = _missing_words(missing == "profile", missing != "profile", profiling)
            out[chosen] = plots.empty_figure(f"No tree until the plan has {waits_for}", 420)
            out[export] = _export_for(request, None)
            out[planner_json] = {}
        return out

    def profile_part(prof, profiling: bool) -> dict:
        """The device profile's chart and caption: the device's, whatever the Live values."""
        if prof is None:
            return {prof_chart: plots.empty_figure("The device is being profiled now: the header shows how far"
                                                   if profiling else
                                                   "No device profile yet: press “Profile this device”", 280),
                    prof_caption: "Not profiled yet on this device and dtype."}
        worker = ctx.worker
        seen = worker.observed_costs()
        t1 = prof.target_seconds.get(1)
        d1 = prof.draft_seconds.get(1)
        ratio = f"draft/target cost for one token: {d1 / t1:.2f}" if t1 and d1 else ""
        return {prof_chart: plots.profile_figure(prof, observed=seen),
                prof_caption: (f"{ratio} · overhead {prof.overhead_seconds * 1e3:.1f} ms/step · "
                               f"{prof.device}, {prof.dtype}, measured {prof.measured_at} · "
                               f"`{render.short_path(prof.source)}`"
                               + render.profile_quality(prof, seen, worker.profile_timed_again()))}

    def no_plan_view(message: str, request, keep_vector: bool = False) -> dict:
        """The tab where the Live values allow no plan: it said so only in a toast and kept the last
        plan, its charts and its export (a helper exported the n=4 tree beside "No plan").
        `keep_vector`: the settings were fine, so the acceptance chart drawn for them stays. The
        device profile is drawn as ever (a Profile ending meanwhile, or a new pair, shows)."""
        empty = plots.empty_figure("No plan for these values", 300)
        worker = ctx.worker
        prof = worker.cached_profile() if worker.pair is not None else None
        out = {info: render.no_plan_line(message), heat: empty, speed: empty, chosen: empty,
               export: _export_for(request, None), planner_json: {},
               **profile_part(prof, prof is None and worker.profiling_now())}
        if not keep_vector:
            out.update({acc_chart: empty, acc_caption: ""})
        return out

    caption_of = {"measurement": acc_caption, "profile": prof_caption}

    def refresh(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v=0, prompt_v=None, max_new_v=64,
                request: gr.Request = None):
        """The tab redrawn; dropped when a newer redraw was asked for meanwhile (the newest wins)."""
        sess = ctx.sessions.get(request)
        ticket = sess.planner_views.ask()
        out = view(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request)
        if sess.planner_views.superseded(ticket):
            return {info: gr.skip()}
        return {**out, **captions_in_use(ctx, request, caption_of)}

    def waiting_lines_again(request: gr.Request = None):
        """Chained after every redraw, once its output has landed: a redraw checked Gradio's queue
        before its figures were made and sent, so a Measure or Profile pressed meanwhile had its
        waiting line written over with the vector's or profile's words until the next redraw."""
        return {acc_caption: gr.skip(), **captions_in_use(ctx, request, caption_of)}

    def pressed(name: str):
        def note_press(request: gr.Request = None):
            ctx.sessions.get(request).planner_pressed[name] = time.monotonic()
        return note_press

    def run_measure(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v=0, prompt_v=None, max_new_v=64,
                    request: gr.Request = None):
        if taken_back(ctx, request, "planner"):
            yield {acc_caption: TAKEN_BACK}
            return
        ctx.sessions.get(request).planner_run = "measurement"
        try:
            settings = settings_from(temp_v, top_p_v, top_k=top_k_v)
            job = ctx.sessions.get(request).aux = ctx.worker.measure(settings.temperature, settings.top_p, force=True,
                                                                     top_k=settings.top_k)
        except UserError as exc:
            raise page_error(str(exc)) from None
        stop_if_taken_back(ctx, request, "planner", job)
        yield from _follow(job, acc_caption, "measuring acceptance", ctx.sessions.get(request))
        yield ended_view(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request,
                         measured=job.result if job.state == "done" else None,
                         stopped="Measuring" if job.state == "stopped" else None)

    def run_profile(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v=0, prompt_v=None, max_new_v=64,
                    request: gr.Request = None):
        if taken_back(ctx, request, "planner"):
            yield {prof_caption: TAKEN_BACK}
            return
        ctx.sessions.get(request).planner_run = "profile"
        job = ctx.sessions.get(request).aux = ctx.worker.profile(force=True)
        stop_if_taken_back(ctx, request, "planner", job)
        yield from _follow(job, prof_caption, "profiling", ctx.sessions.get(request))
        yield ended_view(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request,
                         profiled=job.result if job.state == "done" else None,
                         stopped="Profiling" if job.state == "stopped" else None)

    def ended_view(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request,
                   measured=None, profiled=None, stopped=None) -> dict:
        """The view once a measurement ended; its caption under the Stop button is recorded first
        (Session.line_after_stop). `measured`: the vector a Measure just made, said first (the chart
        shows the prompt kind's vector where code and prose differ: the measurement showed nowhere);
        `profiled`: a Profile's result, said first where its noisy timing left the clean one in place.
        `stopped`: "Measuring" or "Profiling" where a Stop ended it; its caption says so (it went
        back to the old vector's or profile's words, as if nothing had been asked)."""
        sess = ctx.sessions.get(request)
        try:
            out = view(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v, request)
        except BaseException:
            sess.run_ended("planner", "")
            raise
        if measured is not None and acc_caption in out:
            hidden = profiler.shipped_hidden_by(ctx.worker.pair, measured) if ctx.worker.pair else None
            out[acc_caption] = render.measured_words(measured, out[acc_caption], hidden) + out[acc_caption]
        if isinstance(profiled, ProfileKept) and prof_caption in out:
            out[prof_caption] = render.kept_profile_words(profiled.noisy, profiled.kept) + out[prof_caption]
        caption = {"Measuring": acc_caption, "Profiling": prof_caption}.get(stopped)
        if caption in out:
            out[caption] = f"■ **{stopped} stopped**: nothing new was saved; what follows is from before. " + out[caption]
        sess.run_ended("planner", out.get(caption_of[sess.planner_run], ""))   # the caption its Stop replies in
        return out

    def import_tree(path, request: gr.Request):
        sess = ctx.sessions.get(request)
        if not path:
            yield {import_status: "No file."}
            return
        try:
            tree = read_tree_file(path)
        except (UserError, TreeError) as exc:
            kept = (f" The tree imported before ({sess.imported.size} nodes) stays in use." if sess.imported
                    else "")
            # said in the tab (the line of the import before stayed up, as if this one had worked),
            # then raised: a script calling /import_tree gets the error. The box is emptied for the
            # next file (it kept the refused one, as if it were the tree in use)
            yield {import_status: f"✗ Import of **{render.esc(Path(path).name)}** failed: {render.esc(str(exc))}.{kept}",
                   upload: None}
            raise page_error(f"import failed: {exc}") from None
        sess.imported, sess.imported_name = tree, Path(path).name
        shape = tree_shape(tree)
        # (said as what the import did; a later redraw says whether the Live method still uses it)
        yield {import_status: f"Imported **{render.esc(Path(path).name)}**: {shape} (widths {tree.level_widths}), "
                               "and set the Live tab's method to *Imported tree*.",
                chosen: plots.plan_figure(tree, None, title=f"Imported tree: {shape}"),
                live["method"]: "tree",
                planner_json: {"imported": Path(path).name, **tree.to_dict(), "levels": tree.level_widths}}

    refresh_event = dict(show_progress="hidden", **LIGHT)
    tab = live["planner_tab"]
    captions = [acc_caption, prof_caption]
    again = dict(show_progress="hidden", **PAGE_WIRING, **LIGHT)   # (chained after each redraw)
    def import_line_now(method_v, request: gr.Request = None):
        """The line under the Import box, as the Live method now stands (import_line)."""
        return import_line(ctx.sessions.get(request), method_v)

    selected = tab.select(refresh, settings_inputs, outputs, api_name="planner", **refresh_event)
    selected.then(waiting_lines_again, None, captions, **again)
    selected.then(import_line_now, live["method"], import_status, api_name="import_line", show_progress="hidden",
                  **LIGHT)
    # pressed while another job holds the model (a race, another page's run), each caption says so:
    # the button only greyed, with nothing said until that job ended
    measured = model_run(measure, run_measure, settings_inputs, outputs, "measure", show_progress="minimal",
                         show_progress_on=[acc_caption], waiting_line_in=acc_caption, worker=ctx.worker)
    profiled = model_run(profile, run_profile, settings_inputs, outputs, "profile", show_progress="minimal",
                         show_progress_on=[prof_caption], waiting_line_in=prof_caption, worker=ctx.worker)
    for button, name in ((measure, "measurement"), (profile, "profile")):
        button.click(pressed(name), None, None, api_name=f"{name}_pressed", show_progress="hidden", **PAGE_WIRING,
                     **LIGHT)

    def choose_export_format(fmt_v, request: gr.Request):
        if fmt_v not in tree_export.FORMATS:
            raise page_error(f"unknown export format {fmt_v!r}")
        choice = _export_choice(request)
        choice["format"] = fmt_v
        return _export_button(choice)

    export_format.change(choose_export_format, export_format, export, api_name="export_format",
                         show_progress="hidden", **LIGHT)

    wire_planner_stop(ctx, {"stop_measuring": stop, "stop_profiling": profile_stop}, caption_of,
                      runs={"measurement": measured, "profile": profiled})
    imported = upload.upload(import_tree, upload, [import_status, chosen, live["method"], upload, planner_json],
                             api_name="import_tree", show_progress="hidden", **LIGHT)
    if "replan_when_idle" in live:   # a second import leaves the method as it was: no change event re-plans
        fn, inputs, plan_outputs = live["replan_when_idle"]
        imported.success(fn, inputs, plan_outputs, api_name="plan_on_import", show_progress="hidden",
                         trigger_mode="always_last", **PAGE_WIRING, **LIGHT)
    # the tab itself follows the import (its plan line, heatmap and speedup marks stayed on the
    # Sequoia plan until the tab was selected again)
    # always_last: a second import while the first one's redraw still ran was dropped by the
    # page (Gradio's default "once"), and the tab kept showing the first tree
    imported.success(refresh, settings_inputs, outputs, api_name="planner_on_import", trigger_mode="always_last",
                     **PAGE_WIRING, **refresh_event).then(waiting_lines_again, None, captions, **again)
    return {"refresh": (refresh, settings_inputs, outputs), "waiting_lines_again": (waiting_lines_again, captions)}


def import_line(sess, method: str) -> str:
    """The line under the Import box at a redraw: the tree this page imported, and whether the Live
    tab's method uses it (it kept saying "set the Live tab's method to Imported tree" beside a
    Sequoia plan once the method was changed back)."""
    tree = sess.imported
    if tree is None:
        return ""
    what = (f"**{render.esc(sess.imported_name or 'the imported tree')}** "
            f"({tree_shape(tree)})")
    if method == "tree":
        return f"Imported {what}: the Live tab's method is *Imported tree*, the plan shown here."
    return f"Imported {what} is kept: pick *Imported tree* as the Live tab's method to use it."


def _follow(job, caption, what: str, sess):
    """Stream a measuring job's progress into one caption; raise its error as a page message."""
    sess.run_going("planner")
    try:
        for item in job.stream():
            if isinstance(item, Progress):
                yield {caption: progress_text(item)}
    except GeneratorExit:   # the page went away: no last line will be shown
        sess.run_ended("planner", "")
        raise
    except Exception as exc:  # noqa: BLE001
        message = failure_message(exc, what)
        yield {caption: sess.run_ended("planner", f"✗ {message}")}
        raise page_error(message) from None
    if job.state == "stopped":
        yield {caption: f"{what} stopped"}
