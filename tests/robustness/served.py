"""What the app-level robustness tests share (the page itself is launched by tests.app_server):
the one good request and its exactness check, and a raw HTTP caller for what gradio_client
cannot send. The pytest fixtures built on these live in conftest.py."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "hello world"
# the good request: greedy Sequoia, so its text must equal the CLI's (and the target's own greedy text)
GOOD = dict(method="sequoia", budget=8, depth=4, temperature=0, top_p=1, max_new_tokens=24, seed=0, top_k=0,
            learn=False)
GEN_ARGS = ["prompt", "method", "budget", "depth", "hardware", "temperature", "top_p", "max_new_tokens", "seed",
            "top_k", "learn"]


def gen_args(**changes) -> list:
    values = {"prompt": PROMPT, "hardware": False, **GOOD, **changes}
    return [values[k] for k in GEN_ARGS]


def still_exact(client, reference) -> float:
    """A good request after a bad one: its text equals the CLI's. Returns seconds to its first step."""
    t0 = time.monotonic()
    job = client.submit(*gen_args(), api_name="/generate")
    first = None
    for update in job:
        if first is None and isinstance(update[6], dict) and "step" in update[6]:
            first = time.monotonic() - t0
    step = job.result()[6]
    assert step["done"] and step["text"] == reference["text"], (step, reference["text"])
    return first if first is not None else time.monotonic() - t0


def raw_call(url: str, api: str, data: list) -> tuple[str, object]:
    """Call an endpoint over plain HTTP (JSON that gradio_client cannot send: NaN, a forged file).
    Returns ("error", message) or ("complete", outputs)."""
    base = url.rstrip("/")
    body = json.dumps({"data": data})  # NaN and Infinity as JavaScript literals, as a browser could send
    r = httpx.post(f"{base}/gradio_api/call/{api}", content=body, headers={"content-type": "application/json"},
                   timeout=30)
    r.raise_for_status()
    event, payload = None, None
    with httpx.stream("GET", f"{base}/gradio_api/call/{api}/{r.json()['event_id']}", timeout=60) as s:
        for line in s.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("error", "complete"):
                payload = json.loads(line.split(":", 1)[1])
                break
    if event == "error":
        return "error", (payload or {}).get("error") if isinstance(payload, dict) else payload
    return event, payload


class HoldForward:
    """Holds the `call`-th forward of `model` (counting from the hook's install) until released,
    or for at most `limit` seconds (so a failed test cannot hang the app for the next)."""

    def __init__(self, model, call: int, limit: float = 30):
        self.calls, self.call, self.limit = 0, call, limit
        self.entered, self.released = threading.Event(), threading.Event()
        self.held_in = None  # the name of the thread whose forward was held
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.calls += 1
        if self.calls == self.call:
            self.held_in = threading.current_thread().name
            self.entered.set()
            self.released.wait(self.limit)

    def remove(self) -> None:
        self.released.set()
        self.handle.remove()


def wait_for(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()
