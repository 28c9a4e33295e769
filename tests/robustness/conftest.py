"""Fixtures for tests/robustness: one app per test module on a tiny llama pair (`served`), the CLI's
output for the good request (`reference`), a gradio_client (`client`) and a spy on the jobs the
page submits (`jobs`)."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
from gradio_client import Client

from tests.app_server import served_tiny_pair
from tests.robustness.served import GOOD, PROMPT


@pytest.fixture(scope="module")
def served():
    yield from served_tiny_pair()


@pytest.fixture(scope="module")
def reference(served) -> dict:
    """The CLI's output for GOOD (a separate load of the same pair, as a user would run it)."""
    from engine.cli import main
    args = ["generate", "--draft", served["draft"], "--target", served["target"], "--device", "cpu", "--dtype",
            "float32", "--prompt", PROMPT, "--json"]
    for key, value in GOOD.items():
        if isinstance(value, bool):  # --learn / --no-learn
            args.append(f"--{'' if value else 'no-'}{key.replace('_', '-')}")
        else:
            args += [f"--{key.replace('_', '-')}", str(value)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    ref = json.loads(out.getvalue().strip().splitlines()[-1])
    assert ref["text"]
    return ref


@pytest.fixture()
def client(served):
    return Client(served["url"], verbose=False)


@pytest.fixture()
def jobs(served, monkeypatch):
    """Every job the page submits to the worker during the test."""
    worker, seen = served["ctx"].worker, []
    original = worker.submit

    def spy(*args, **kwargs):
        job = original(*args, **kwargs)
        seen.append(job)
        return job

    monkeypatch.setattr(worker, "submit", spy)
    return seen
