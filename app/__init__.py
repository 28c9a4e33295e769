"""Sequoia Live's Gradio front end. It only renders what the engine emits: every model call goes
through engine.worker.Worker (one background thread, one job at a time).

    from app import create_app
    demo, ctx = create_app(draft="default", target="default")
    demo.launch(**launch_options())
"""
from __future__ import annotations

from pathlib import Path

from app.state import AppContext, Sessions, load_prompts

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def create_app(draft: str = "default", target: str = "default", device: str | None = None,
               dtype: str | None = None, worker=None, load: bool = True, cpu_kernels: str = "fast",
               draft_weights: str = "auto"):
    """Build the page around a worker (a new one unless given) and start loading the pair.
    Returns (gr.Blocks, AppContext); the page is usable while the pair loads."""
    from app import ui
    from engine.worker import Worker
    # the app times the device again while idle when its cached profile is noisy (engine/reprofile.py)
    worker = worker or Worker(background_profile=True)
    ctx = AppContext(worker=worker, sessions=Sessions(), prompts=load_prompts()).for_device(device)
    if load:
        worker.load(draft, target, device, dtype, cpu_kernels=cpu_kernels, draft_weights=draft_weights)
    demo = ui.build(ctx, {"draft": draft, "target": target, "device": device, "dtype": dtype,
                          "cpu_kernels": cpu_kernels, "draft_weights": draft_weights})
    ctx.sessions.blocks = demo
    return demo, ctx


def theme():
    import gradio as gr
    # system fonts only: the page must work with no internet
    return gr.themes.Default(primary_hue="indigo", neutral_hue="slate",
                          font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"])


def launch_options() -> dict:
    """Theme, CSS and the page's one script (Gradio 6 takes them at launch)."""
    return {"theme": theme(), "css_paths": [str(ASSETS / "style.css")],
            "js": (ASSETS / "page.js").read_text(encoding="utf-8"), "ssr_mode": False,
            "footer_links": ["api", "settings"]}
