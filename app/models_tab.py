"""Models tab: load a draft/target pair by Hugging Face id or local path; device, dtype, memory."""
from __future__ import annotations

import logging

import gradio as gr

from app import render
from app.live import LIGHT, MODEL, user_message
from app.state import AppContext
from engine.errors import UserError
from engine.tree import TreeError
from engine.worker import Progress

log = logging.getLogger(__name__)
DEVICES = ["auto", "cpu", "cuda", "mps"]
DTYPES = ["auto", "float32", "bfloat16", "float16"]


def pair_markdown(info: dict | None) -> str:
    if info is None:
        return "No pair loaded."
    return (f"| | model | parameters |\n|---|---|---|\n"
            f"| draft | `{info['draft']}` | {render.human_count(info.get('draft_parameters'))} |\n"
            f"| target | `{info['target']}` | {render.human_count(info.get('target_parameters'))} |\n\n"
            f"device **{info['device']}** · dtype **{info['dtype']}** · context {info.get('context_limit')} tokens · "
            f"vocabulary {info.get('vocab_size')}")


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


def build(ctx: AppContext, defaults: dict) -> dict:
    gr.Markdown("Load any draft/target pair that shares one tokenizer: a Hugging Face id (from the local cache, or "
                "downloaded when the hub is reachable), a local folder, or `default` (the embedded Qwen2.5-Coder "
                "0.5B → 1.5B pair). The loaded pair stays in use until the new one has passed its checks.",
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
    with gr.Row():
        load = gr.Button("Load pair", variant="primary", elem_id="sq-load")
        refresh = gr.Button("Refresh memory", elem_id="sq-memory-btn")
    status = gr.Markdown("", elem_id="sq-load-status")
    info = gr.Markdown(pair_markdown(ctx.worker.describe()), elem_id="sq-pair-info")
    memory = gr.Markdown(memory_markdown(ctx.worker.memory()), elem_id="sq-memory")
    pair_json = gr.JSON(label="Pair (raw)", visible=False)

    def load_models(draft_v, target_v, device_v, dtype_v):
        draft_v, target_v = (draft_v or "").strip(), (target_v or "").strip()
        if not draft_v or not target_v:
            raise gr.Error("give both a draft and a target (an id, a folder, or 'default')")
        job = ctx.worker.load(draft_v, target_v, device_v or None, dtype_v or None)
        ahead = job.position
        yield {status: f"… waiting for {ahead} job(s) to finish first…" if ahead else "… loading…"}
        try:
            for item in job.stream():
                if isinstance(item, Progress):
                    pct = f" — {100 * item.fraction:.0f} %" if item.fraction is not None else ""
                    yield {status: f"… {item.message}{pct}"}
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, (UserError, TreeError)):
                log.exception("loading failed")
            still = ctx.worker.describe()
            keep = (f" The pair in use is still `{still['draft']}` → `{still['target']}`." if still
                    else " No pair is loaded now.")
            yield {status: f"✗ {user_message(exc)}{keep}", info: pair_markdown(still),
                   memory: memory_markdown(ctx.worker.memory())}
            raise gr.Error(user_message(exc)) from None
        desc = job.result
        yield {status: f"✓ Loaded `{desc['draft']}` → `{desc['target']}` on {desc['device']} ({desc['dtype']}).",
               info: pair_markdown(desc), memory: memory_markdown(ctx.worker.memory()), pair_json: desc}

    def show_memory():
        return memory_markdown(ctx.worker.memory()), pair_markdown(ctx.worker.describe())

    load.click(load_models, [draft, target, device, dtype], [status, info, memory, pair_json], api_name="load_models",
               show_progress="minimal", show_progress_on=[status], **MODEL)
    refresh.click(show_memory, None, [memory, info], api_name="memory", show_progress="hidden", **LIGHT)
    return {"memory": memory, "info": info, "show_memory": show_memory}
