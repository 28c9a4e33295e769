"""The page launched in-process on a tiny pair, as the app tests and the browser tests use it."""
from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(draft, target, load: bool = True):
    """(gr.Blocks, AppContext, url) serving the pair on 127.0.0.1. Short measurements keep the
    tests quick; they are still real measurements on the pair."""
    from app import create_app, launch_options
    from engine.worker import Worker
    worker = Worker(measure_prompts=["hello world", "a tree of tokens"], measure_tokens=24, profile_budget=8)
    demo, ctx = create_app(str(draft), str(target), "cpu", "float32", worker=worker, load=False)
    if load:
        worker.load(str(draft), str(target), "cpu", "float32").wait(120)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_options())
    return demo, ctx, f"http://127.0.0.1:{port}/"


def served_tiny_pair():
    """A module fixture's body: the page on the tiny llama pair, closed after the module."""
    from tests.tiny import tiny_pair_dirs
    draft, target = tiny_pair_dirs("llama")
    demo, ctx, url = launch(draft, target)
    yield {"url": url, "ctx": ctx, "draft": str(draft), "target": str(target)}
    demo.close()
    ctx.worker.close()
