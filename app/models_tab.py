"""Models tab: load a draft/target pair by Hugging Face id or local path (device, dtype, an
accelerate device map for big targets, memory), and check that decoding on it is lossless."""
from __future__ import annotations

import time
from pathlib import Path

import gradio as gr

from app import render, waiting
from app.errors import page_error
from app.live import (LIGHT, PAGE_WIRING, TAKEN_BACK, failure_message, model_run, progress_text,
                      stop_if_taken_back, stop_reply_with, take_back_waiting, taken_back, wire_stop)
from app.state import AppContext
from engine import jobs
from engine.check import CheckConfig
from engine.errors import UserError
from engine.models import parse_max_memory
from engine.paths import cache_dir
from engine.settings import MIN_TEMPERATURE
from engine.wording import plural
from engine.jobs import Progress

DEVICES = ["auto", "cpu", "cuda", "mps"]
DTYPES = ["auto", "float32", "bfloat16", "float16"]
NO_MAP = "none"
DEVICE_MAPS = [NO_MAP, "auto", "balanced", "sequential"]

# The button's two checks. "full" is the engine's default (what `python -m engine check` runs);
# "quick" keeps the three sections but checks one tree shape at one sampling setting on one prompt.
CHECK_MODES = [("Quick: Sequoia tree, greedy and T = 1, one prompt", "quick"),
               ("Full: the CLI's default check (Sequoia, SpecInfer, chain; greedy, T = 1 and T = 0.7 / top-p 0.9; "
                "two prompts)", "full")]
CHECK_MODE_NAMES = {value: label.split(":")[0].lower() + " check" for label, value in CHECK_MODES}
VERDICT_COLORS = {"PASS": "var(--sq-accepted, #16a34a)", "WARN": "var(--sq-bonus, #d97706)",
                  "FAIL": "var(--sq-rejected, #dc2626)", "STOPPED": "var(--sq-muted, #64748b)"}
VERDICT_WORDS = {"PASS": "lossless as far as this check can tell", "WARN": "passed, with warnings",
                 "FAIL": "NOT lossless on this pair", "STOPPED": "interrupted: partial report"}


def check_config(mode: str) -> CheckConfig:
    if mode == "full":
        return CheckConfig()
    if mode == "quick":
        return CheckConfig(num_prompts=1, methods=("sequoia",), sampling_settings=((1.0, 1.0),),
                           sample_budget_seconds=45.0)
    raise UserError(f"unknown check {mode!r} (use quick or full)")


# ---------------------------------------------------------------- rendering
def _placement_text(where: dict | None) -> str:
    return " · ".join(f"{render.esc(str(dev))}: {plural(n, 'module')}"
                      for dev, n in sorted(where.items(), key=lambda kv: str(kv[0])))


def _untied_words(roles: list[str]) -> str:
    """Why a count reads above the name's size: Qwen2.5 0.5B ties its head to its embedding (494M),
    the embedded pair's GGUF files store a head of their own (630.2M as loaded)."""
    if not roles:
        return ""
    if len(roles) == 1:
        heads = f"the {roles[0]}'s output head is a matrix of its own"
    else:
        heads = "both models' output heads are matrices of their own"
    return (f"Parameters as loaded: {heads}, not tied to the embedding, so each counts beside it "
            "(a model's name often gives its size with a tied head, counted once).\n\n")


def pair_markdown(info: dict | None, loading: bool = False) -> str:
    if info is None:
        return "Loading the model pair… (progress in the header)" if loading else "No pair loaded."
    text = (f"| | model | parameters |\n|---|---|---|\n"
            f"| draft | `{info['draft']}` | {render.human_count(info.get('draft_parameters'))} |\n"
            f"| target | `{info['target']}` | {render.human_count(info.get('target_parameters'))} |\n\n"
            + _untied_words(info.get("untied_heads") or [])
            + f"device **{info['device']}** · dtype **{info['dtype']}** · context {info.get('context_limit')} "
            f"tokens · vocabulary {info.get('vocab_size')}")
    kernels = info.get("kernels") or {}
    if info.get("cpu_kernels") == "fast":
        done = "; ".join(f"{role}: " + ", ".join(f"{k} ×{n}" for k, n in kernels.get(role, {}).get("linears", {}).items())
                         for role in ("target", "draft") if kernels.get(role, {}).get("linears"))
        text += f" · CPU kernels **fast** (linears packed once — {done})"
    for role in ("target", "draft"):
        where = info.get(f"{role}_device_map")
        if where:
            text += f"\n\n{role.capitalize()} placed by its device map — {_placement_text(where)}"
    rec = info.get("generation_defaults")
    if rec:
        text += f"\n\nThe target's generation config recommends: {recommended_text(rec)}"
    if info.get("eos_ids") is not None:
        text += f" · stops on EOS ids {', '.join(map(str, info['eos_ids'])) or 'none'}"
    return text


STOPPING_LOAD = "■ stopping the load as its next stage starts (a download or conversion under way finishes first)…"


def load_stopped_text(started: bool, stopped_with: str | None, now: dict | None) -> str:
    """What a stopped load says (`stopped_with`: engine/jobs.py load_job), with the pair in use now."""
    names = f"`{now['draft']}` → `{now['target']}`" if now else ""
    in_use = f"The pair in use is {names}." if now else "No pair is loaded."
    if not started:   # it waited behind another job (the app's first load, say)
        return f"■ Load stopped before it started. {in_use}"
    if stopped_with == jobs.UNPROFILED and now:
        return (f"■ Load stopped while timing the device: {names} is loaded, without a device profile (the first "
                "hardware-aware plan times the device).")
    if stopped_with == jobs.DROPPED_THE_PAIR:
        return ("■ Load stopped. No pair is loaded now (the one in use was unloaded to make room for the new one): "
                "load a pair again.")
    return f"■ Load stopped before the models loaded. {in_use}"


def recommended_text(rec: dict) -> str:
    mode = "sampling" if rec.get("do_sample") else "greedy decoding (do_sample off)"
    unset = [k for k in ("temperature", "top_k", "top_p") if k not in rec.get("set_by_checkpoint", [])]
    note = f" ({', '.join(unset)}: transformers' defaults)" if unset else ""
    return (f"**{mode}**, temperature **{rec['temperature']:g}**, top-k **{rec['top_k']}**, "
            f"top-p **{rec['top_p']:g}**{note}")


def recommended_values(rec: dict | None) -> tuple[float, int, float]:
    """(temperature, top_k, top_p) for the Live and Race controls: greedy when the checkpoint does not sample."""
    if not rec:
        raise UserError("no pair is loaded: load one first")
    if not rec.get("do_sample") or float(rec["temperature"]) < MIN_TEMPERATURE:
        return 0.0, 0, 1.0   # greedy: top-k and top-p would do nothing, so they are left off
    return (min(max(float(rec["temperature"]), 0.0), 2.0), min(max(int(rec["top_k"]), 0), 200),
            min(max(float(rec["top_p"]), 0.05), 1.0))


def memory_markdown(mem: dict) -> str:
    parts = []
    if "parameter_bytes" in mem:
        parts.append(f"model weights **{render.human_bytes(mem['parameter_bytes'])}**")
    if "process_rss_bytes" in mem:
        parts.append(f"this process **{render.human_bytes(mem['process_rss_bytes'])}** resident")
    if "system_available_bytes" in mem:
        parts.append(f"system {render.human_bytes(mem['system_available_bytes'])} free of "
                     f"{render.human_bytes(mem['system_total_bytes'])}")
    if "cuda_allocated_bytes" in mem:
        parts.append(f"GPU {render.human_bytes(mem['cuda_allocated_bytes'])} allocated, "
                     f"{render.human_bytes(mem['cuda_reserved_bytes'])} reserved of "
                     f"{render.human_bytes(mem['cuda_total_bytes'])}")
    return "Memory: " + " · ".join(parts) if parts else "Memory: —"


def verdict_html(verdict: str | None, headline: str = "") -> str:
    if verdict is None:
        return ('<div class="sq-verdict sq-verdict-none" style="color: var(--sq-muted, #64748b); '
                f'font-size: 0.9rem; padding: 6px 2px">{render.esc(headline or "No check run yet.")}</div>')
    color = VERDICT_COLORS.get(verdict, VERDICT_COLORS["STOPPED"])
    return (f'<div class="sq-verdict" data-verdict="{verdict}" style="display: flex; align-items: center; gap: 14px; '
            f'padding: 10px 12px; border: 2px solid {color}; border-radius: 10px; margin: 4px 0">'
            f'<span style="background: {color}; color: #fff; font-size: 1.8rem; font-weight: 800; '
            f'letter-spacing: 0.04em; padding: 4px 16px; border-radius: 8px; line-height: 1.2">{verdict}</span>'
            f'<span style="font-size: 1.05rem; font-weight: 600; color: {color}">'
            f'{render.esc(VERDICT_WORDS.get(verdict, ""))}</span>'
            f'<span style="margin-left: auto; font-size: 0.85rem; color: var(--sq-muted, #64748b)">'
            f'{render.esc(headline)}</span></div>')


def summary_markdown(report) -> str:
    lines = report.summary().splitlines()
    out = [f"**{lines[0]}**"] if lines else []
    out += [f"- {line}" if not line.startswith("- ") else line for line in lines[1:]]
    if report.estimate is not None:
        out.append(f"- estimated beforehand: {report.estimate.message().removeprefix('estimated time: ')}")
    return "\n".join(out)


def _elapsed(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# ---------------------------------------------------------------- paths and placement from the page
def offload_folder(value: str | None, trusted: str | None = None) -> str | None:
    """The offload folder typed on the page, kept inside the cache directory (the app writes
    nowhere else). A relative name goes under <cache>/offload/. `trusted`: the folder given with
    --offload-folder on the command line, allowed as it is."""
    text = (value or "").strip()
    if not text:
        return None
    if trusted and text == str(trusted).strip():
        return text
    root = cache_dir().expanduser().resolve()
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = root / "offload" / path
    path = path.resolve()
    if path != root and root not in path.parents:
        raise UserError(f"the offload folder must be inside the cache directory {root} (got {text}); "
                        "start the app with --offload-folder to use another place")
    return str(path)


def device_map_choice(value: str | None, trusted: str | None = None) -> str | None:
    """none/auto/balanced/sequential, or the map given on the command line (the page never opens a
    map file named by a request)."""
    text = (value or "").strip() or NO_MAP
    if trusted and text == str(trusted).strip():
        return text
    if text not in DEVICE_MAPS:
        raise UserError(f"device map must be one of {', '.join(DEVICE_MAPS)} (got {text!r}); a JSON map file "
                        "can be given on the command line (--target-device-map)")
    return None if text == NO_MAP else text


# ---------------------------------------------------------------- the tab
def build(ctx: AppContext, defaults: dict, sampling_controls: list[dict] | None = None) -> dict:
    gr.Markdown("Load any draft/target pair that shares one tokenizer: a Hugging Face id (from the local cache, or "
                "downloaded when the hub is reachable), a local folder, or `default` (the embedded Qwen2.5-Coder "
                "0.5B → 1.5B pair). The pair in use stays while the new one's names, device and tokenizers "
                "are checked; once its models start loading it is unloaded to make room, so a load that fails or "
                "is stopped after that leaves none loaded (the status line says which).",
                elem_classes="sq-note-block")
    with gr.Row():
        draft = gr.Textbox(label="Draft model (id or path)", value=defaults.get("draft", "default"),
                           elem_id="sq-draft")
        target = gr.Textbox(label="Target model (id or path)", value=defaults.get("target", "default"),
                            elem_id="sq-target")
    with gr.Row():
        device = gr.Dropdown(DEVICES, value=defaults.get("device") or "auto", label="Device", allow_custom_value=True,
                             elem_id="sq-device")
        dtype = gr.Dropdown(DTYPES, value=defaults.get("dtype") or "auto", label="Dtype", elem_id="sq-dtype")
        kernels = gr.Radio(["fast", "default"], value=defaults.get("cpu_kernels") or "fast", label="CPU kernels",
                           info="fast: linears packed once (target float16 weights, float32 maths; draft 4-bit or int8)",
                           elem_id="sq-cpu-kernels")
        draft_weights = gr.Radio(["auto", "nf4", "int8"], value=defaults.get("draft_weights") or "auto",
                                 label="Draft weights (fast kernels)",
                                 info="auto: 4-bit NF4 where this CPU runs its kernel (AVX512-BF16), else int8; "
                                      "exactness does not depend on it", elem_id="sq-draft-weights")
    trusted = {k: defaults.get(k) for k in ("target_device_map", "draft_device_map", "offload_folder")}

    def map_choices(key):
        extra = trusted[key]
        return DEVICE_MAPS + ([extra] if extra and extra not in DEVICE_MAPS else [])

    placed = any(defaults.get(k) for k in ("target_device_map", "draft_device_map", "max_memory", "offload_folder"))
    with gr.Accordion("Big targets: device map, memory limits, disk offload (accelerate)", open=bool(placed),
                      elem_id="sq-placement"):
        with gr.Row():
            target_map = gr.Dropdown(map_choices("target_device_map"),
                                     value=defaults.get("target_device_map") or NO_MAP, label="Target device map",
                                     info="none: the whole target on the device above", elem_id="sq-target-map")
            draft_map = gr.Dropdown(map_choices("draft_device_map"), value=defaults.get("draft_device_map") or NO_MAP,
                                    label="Draft device map", info="none: the draft on the device above",
                                    elem_id="sq-draft-map")
        with gr.Row():
            max_memory = gr.Textbox(label="Max memory per device", value=defaults.get("max_memory") or "",
                                    placeholder="e.g. gpu0=20GiB,cpu=60GiB", elem_id="sq-max-memory")
            offload = gr.Textbox(label="Offload folder (weights that fit nowhere go to disk here)",
                                 value=defaults.get("offload_folder") or "",
                                 placeholder=f"a name under {cache_dir() / 'offload'}", elem_id="sq-offload")
    with gr.Row():
        load = gr.Button("Load pair", variant="primary", elem_id="sq-load")
        load_stop = gr.Button("Stop", variant="stop", elem_id="sq-load-stop", scale=0, min_width=80)
        refresh = gr.Button("Refresh memory", elem_id="sq-memory-btn")
    status = gr.Markdown("", label="Load status", show_label=False, elem_id="sq-load-status")
    info = gr.Markdown(pair_markdown(ctx.worker.describe(), ctx.worker.load_underway),
                       label="Pair description", show_label=False, elem_id="sq-pair-info")
    memory = gr.Markdown(memory_markdown(ctx.worker.memory()), label="Memory", show_label=False, elem_id="sq-memory")
    with gr.Row():   # a button of its own width: full width and size "sm" it read as a thin divider
        use_recommended = gr.Button("Use the target's recommended sampling in Live and Race",
                                    elem_id="sq-use-recommended", scale=0, min_width=600)
    recommended_status = gr.Markdown("", label="Recommended sampling status", show_label=False,
                                     elem_id="sq-recommended-status")
    pair_json = gr.JSON(label="Pair (raw)", visible=False)

    with gr.Group():
        gr.Markdown("### Check this pair\nDoes speculative decoding on the loaded pair reproduce the target exactly? "
                    "Greedy output must equal the target's own `generate()`; sampled tokens are tested against the "
                    "target's exact distribution (chi-square); tree masks, tokenizer and KV cache are checked. "
                    "The time estimate is shown before the real work starts; **Stop** ends it early.",
                    elem_classes="sq-note-block", padding=True)
        # buttons of a button's height, centred beside the choices (stretched, they were 100 px tall)
        with gr.Row(equal_height=False, elem_id="sq-check-row"):
            check_mode = gr.Radio(CHECK_MODES, value="quick", label="Check mode", show_label=False,
                                  elem_id="sq-check-mode", scale=4)
            check_btn = gr.Button("Check this pair", variant="primary", elem_id="sq-check", scale=1, min_width=160)
            check_stop = gr.Button("Stop", variant="stop", elem_id="sq-check-stop", scale=0, min_width=80)
    check_status = gr.Markdown("", label="Check status", show_label=False, elem_id="sq-check-status")
    verdict = gr.HTML(verdict_html(None), label="Check verdict (HTML)", show_label=False, elem_id="sq-check-verdict")
    summary = gr.Markdown("", label="Check summary", show_label=False, elem_id="sq-check-summary")
    with gr.Accordion("Full check report", open=False, elem_id="sq-check-report-box"):
        report_text = gr.Textbox(label="Check report (text)", show_label=False, lines=12, max_lines=40,
                                 interactive=False, autoscroll=False, buttons=["copy"], elem_id="sq-check-report")
        report_json = gr.JSON(label="Report (raw, what the API returns)", elem_id="sq-check-json")

    # ------------------------------------------------------------ handlers
    def load_models(draft_v, target_v, device_v, dtype_v, target_map_v=NO_MAP, draft_map_v=NO_MAP,
                    max_memory_v="", offload_v="", kernels_v="fast", draft_weights_v="auto",
                    request: gr.Request = None):
        draft_v, target_v = (draft_v or "").strip(), (target_v or "").strip()
        sess = ctx.sessions.get(request)
        if taken_back(ctx, request, "load"):
            yield {status: TAKEN_BACK}
            return
        try:
            if not draft_v or not target_v:
                raise UserError("give both a draft and a target (an id, a folder, or 'default')")
            memory_v = (max_memory_v or "").strip() or None
            if memory_v:
                parse_max_memory(memory_v)  # refuse a typo before queueing
            placement = dict(target_device_map=device_map_choice(target_map_v, trusted["target_device_map"]),
                             draft_device_map=device_map_choice(draft_map_v, trusted["draft_device_map"]),
                             max_memory=memory_v, offload_folder=offload_folder(offload_v, trusted["offload_folder"]))
            if (placement["max_memory"] or placement["offload_folder"]) and not (
                    placement["target_device_map"] or placement["draft_device_map"]):
                raise UserError("max memory and an offload folder need a device map (e.g. target device map: auto)")
            job = ctx.worker.load(draft_v, target_v, device_v or None, dtype_v or None,
                                  cpu_kernels=kernels_v or "fast", draft_weights=draft_weights_v or "auto",
                                  **placement)
            sess.load_job = job
            stop_if_taken_back(ctx, request, "load", job)
        except UserError as exc:
            yield {status: f"✗ {exc}"}
            raise page_error(str(exc)) from None
        sess.run_going("load")   # its Stop's reply may land after its last line (Session.line_after_stop)
        ahead = job.position
        try:   # from the first yield (a page that goes away leaves its load going: the pair is every page's)
            yield {status: f"… waiting for {plural(ahead, 'job')} to finish first…" if ahead else "… loading…"}
            for item in job.stream():
                if isinstance(item, Progress):
                    yield {status: progress_text(item)}
        except GeneratorExit:   # the page went away: no last line will be shown
            sess.run_ended("load", "")
            raise
        except Exception as exc:  # noqa: BLE001
            message = failure_message(exc, "loading")
            still = ctx.worker.describe()
            keep = (f" The pair in use is still `{still['draft']}` → `{still['target']}`." if still
                    else " No pair is loaded now.")
            stop = "" if message.rstrip().endswith((".", "!", "?")) else "."
            yield {status: sess.run_ended("load", f"✗ {message}{stop}{keep}"), info: pair_markdown(still),
                   memory: memory_markdown(ctx.worker.memory())}
            raise page_error(message) from None
        desc = job.result
        if desc is None:   # stopped (engine/jobs.py load_job says where a load can stop)
            still = ctx.worker.describe()
            said = load_stopped_text(job.started_at is not None, job.stopped_with, still)
            yield {status: sess.run_ended("load", said),
                   info: pair_markdown(still), memory: memory_markdown(ctx.worker.memory())}
            return
        where = desc.get("target_device_map")
        placed_txt = f" Target placed by its device map — {_placement_text(where)}." if where else ""
        loaded = sess.run_ended("load", f"✓ Loaded `{desc['draft']}` → `{desc['target']}` on {desc['device']} "
                                        f"({desc['dtype']}).{placed_txt} Press **Check this pair** below to check "
                                        "that decoding on it is lossless.")
        yield {status: loaded,
               info: pair_markdown(desc), memory: memory_markdown(ctx.worker.memory()), pair_json: desc,
               verdict: verdict_html(None), summary: "", report_text: "", report_json: None, check_status: ""}

    def show_memory():
        return (memory_markdown(ctx.worker.memory()),
                pair_markdown(ctx.worker.describe(), ctx.worker.load_underway))

    def check_pair(mode_v, request: gr.Request):
        sess = ctx.sessions.get(request)
        if taken_back(ctx, request, "models"):
            yield {check_status: TAKEN_BACK}
            return
        try:
            config = check_config(mode_v)
            if ctx.worker.pair is None and not ctx.worker.load_underway:
                raise UserError("no model pair is loaded: load one above first")
            job = sess.check_job = ctx.worker.check(config)
            stop_if_taken_back(ctx, request, "models", job)
        except UserError as exc:
            raise page_error(str(exc)) from None
        ahead = job.position
        waiting = (f"… waiting for the model worker ({plural(ahead, 'job')} ahead)…" if ahead
                   else "… timing one step of each method to estimate the duration…")
        yield {check_status: waiting, verdict: verdict_html(None, "checking…"), summary: "", report_text: "",
               report_json: None}
        estimate, started = "", None
        try:
            for item in job.stream():
                if not isinstance(item, Progress):
                    continue
                started = started or time.monotonic()
                if item.message.startswith("estimated time"):
                    estimate = item.message
                lines = [f"{progress_text(item)} · {_elapsed(time.monotonic() - started)} so far"]
                if estimate and item.message != estimate:
                    lines.append(f"Estimate: {estimate.removeprefix('estimated time: ')}")
                yield {check_status: "\n\n".join(lines)}
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message
            message = failure_message(exc, "check")
            yield {check_status: f"✗ {message}", verdict: verdict_html(None, "The check could not run.")}
            raise page_error(message) from None
        finally:  # also when the page went away or the event was cancelled (GeneratorExit)
            if not job.done:
                job.stop()
        report = job.result
        if report is None:
            yield {check_status: "Check stopped before it started.", verdict: verdict_html(None)}
            return
        took = (f"Stopped after {_elapsed(report.seconds)}" if report.stopped
                else f"Checked in {_elapsed(report.seconds)}")
        yield {verdict: verdict_html(report.verdict, f"{report.pair.get('draft')} → {report.pair.get('target')}"),
               summary: summary_markdown(report), report_text: report.text(), report_json: report.to_dict(),
               check_status: f"{took} ({CHECK_MODE_NAMES.get(mode_v, mode_v)})."}

    def stop_check(request: gr.Request):
        took_back = take_back_waiting(ctx, request, "models")
        job = ctx.sessions.get(request).check_job
        going = job is not None and not job.done   # the slot holds checks only
        if going:
            job.stop()
        return stop_reply_with("■ stopping the check after the current step…" if going else "",
                               "No check is running in this tab.", took_back)

    controls = [c[k] for c in (sampling_controls or []) for k in ("temperature", "top_k", "top_p") if k in c]

    def take_recommended():
        """The target's generation-config sampling into every Live/Race temperature, top-k, top-p control."""
        info = ctx.worker.describe()
        try:
            values = recommended_values((info or {}).get("generation_defaults"))
        except UserError as exc:
            raise page_error(str(exc)) from None
        t, k, p = values
        note = (f"Live and Race now use temperature {t:g}, top-k {k}, top-p {p:g}"
                + (" (greedy: the checkpoint does not sample; top-k and top-p are off)" if t == 0 else "") + ".")
        per_control = {"temperature": t, "top_k": k, "top_p": p}
        updates = [per_control[key] for c in (sampling_controls or []) for key in ("temperature", "top_k", "top_p")
                   if key in c]
        return [note, *updates]

    took_recommended = use_recommended.click(take_recommended, None, [recommended_status, *controls],
                                             api_name="use_recommended_sampling", show_progress="hidden", **LIGHT)
    for parts in sampling_controls or []:   # the Live plan follows its new sampling settings
        if "replan_when_idle" in parts:
            fn, inputs, outputs = parts["replan_when_idle"]
            took_recommended.success(fn, inputs, outputs, api_name="plan_on_recommended_sampling", **PAGE_WIRING,
                                     show_progress="hidden", **LIGHT)

    load_inputs = [draft, target, device, dtype, target_map, draft_map, max_memory, offload, kernels, draft_weights]
    # the pair's dict stays the last output (scripts read loaded[-1])
    load_event = model_run(load, load_models, load_inputs, [status, info, memory, verdict, summary, report_text,
                                                                  report_json, check_status, pair_json],
                           "load_models", show_progress="minimal", show_progress_on=[status])
    wire_stop(ctx, load_stop, "load", status, api_name="stop_load", runs={"load": load_event},
              stopping=STOPPING_LOAD)   # it takes back a waiting load too
    refresh.click(show_memory, None, [memory, info], api_name="memory", show_progress="hidden", **LIGHT)
    checked = model_run(check_btn, check_pair, [check_mode], [check_status, verdict, summary, report_text,
                                                                      report_json],
                        "check", show_progress="minimal", show_progress_on=[check_status])
    ctx.run_events["models"] = waiting.event_ids({"check": checked})   # its Stop takes back a waiting check
    check_stop.click(stop_check, None, check_status, api_name="stop_check", show_progress="hidden", **LIGHT)
    return {"memory": memory, "info": info, "show_memory": show_memory, "load_event": load_event}

