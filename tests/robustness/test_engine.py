"""Robustness of the engine itself: stop at any point, failures inside a job, memory limits,
long prompts, many runs in a row. After each, the next greedy run is still exact."""
import gc

import psutil
import pytest
import torch

from engine import memory, methods, profiler
from engine.decoding import generate, generate_ids
from engine.errors import UserError
from engine.models import encode_prompt
from engine.settings import Settings
from engine.tree import Tree
from tests.tiny import greedy_reference, tiny_pair

METHOD = methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1]))
GREEDY = Settings(max_new_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama")


def assert_still_exact(pair):
    ids = encode_prompt(pair, "hello world", chat=False)
    assert generate_ids(pair, ids, METHOD, GREEDY)[0] == greedy_reference(pair, ids, 24)


class StopDuring:
    """A forward hook on one model that raises the stop flag during its n-th call."""

    def __init__(self, model, call: int):
        self.calls, self.call, self.flag = 0, call, False
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module, args):
        self.calls += 1
        if self.calls == self.call:
            self.flag = True

    def remove(self):
        self.handle.remove()


@pytest.mark.parametrize("role", ["draft", "target"])
def test_stop_during_drafting_or_verification(pair, role):
    ids = encode_prompt(pair, "hello world", chat=False)
    stopper = StopDuring(getattr(pair, role), call=4)
    try:
        events = list(generate(pair, ids, METHOD, Settings(max_new_tokens=60, ignore_eos=True),
                               should_stop=lambda: stopper.flag))
    finally:
        stopper.remove()
    assert events[-1].finish_reason == "stopped" and events[-1].done
    assert events[-1].total_tokens < 60
    assert_still_exact(pair)


def test_stop_while_measuring_and_profiling(pair):
    calls = {"n": 0}

    def stop_soon():
        calls["n"] += 1
        return calls["n"] > 3
    with pytest.raises(profiler.Stopped):
        profiler.measure_acceptance(pair, ["hello", "world"], 0.0, width=4, should_stop=stop_soon)
    calls["n"] = 0
    with pytest.raises(profiler.Stopped):
        profiler.profile_device(pair, max_budget=8, repeats=2, should_stop=stop_soon)
    assert_still_exact(pair)


def test_exception_inside_a_job_leaves_the_pair_usable(pair):
    ids = encode_prompt(pair, "hello world", chat=False)

    def boom(module, args):
        raise RuntimeError("injected failure")
    handle = pair.target.model.layers[1].register_forward_pre_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            list(generate(pair, ids, METHOD, GREEDY))
    finally:
        handle.remove()
    assert_still_exact(pair)


def test_runs_that_would_not_fit_are_refused_before_they_start(pair, monkeypatch):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 10_000)
    ids = encode_prompt(pair, "hello world", chat=False)
    with pytest.raises(UserError, match="GiB"):
        list(generate(pair, ids, METHOD, GREEDY))
    monkeypatch.undo()
    assert_still_exact(pair)


def test_prompt_longer_than_context_is_refused(pair):
    ids = encode_prompt(pair, "ab" * pair.context_limit, chat=False)
    with pytest.raises(UserError, match="context"):
        list(generate(pair, ids, METHOD, GREEDY))


def test_generation_stops_at_the_context_limit(pair):
    ids = encode_prompt(pair, "a" * (pair.context_limit - 10), chat=False)
    events = list(generate(pair, ids, METHOD, Settings(max_new_tokens=100, ignore_eos=True)))
    assert events[-1].finish_reason == "context"
    assert len(ids) + events[-1].total_tokens == pair.context_limit


@pytest.mark.parametrize("bad", [dict(temperature=float("nan")), dict(temperature=-1), dict(temperature=1e9),
                                 dict(top_p=0), dict(top_p=1.5), dict(max_new_tokens=0), dict(max_new_tokens=-3),
                                 dict(max_new_tokens=10**9), dict(seed=1.5), dict(seed="x")])
def test_bad_settings_are_clear_errors(bad):
    with pytest.raises(UserError):
        Settings(**bad)


def test_a_hundred_generations_do_not_grow_memory(pair):
    ids = encode_prompt(pair, "hello world", chat=False)
    settings = Settings(temperature=1.0, max_new_tokens=8, ignore_eos=True)
    process = psutil.Process()
    for _ in range(10):  # warm-up: allocator pools, caches of the tokenizer
        generate_ids(pair, ids, METHOD, settings)
    gc.collect()
    before = process.memory_info().rss
    for seed in range(100):
        generate_ids(pair, ids, METHOD, settings, generator=torch.Generator().manual_seed(seed))
    gc.collect()
    grown = process.memory_info().rss - before
    assert grown < 30 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 100 generations"
