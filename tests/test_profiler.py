"""Acceptance vectors and device profiles measured on a live (tiny) pair, and their caches."""
import json

import pytest

from engine import planning, profiler
from engine.settings import Settings
from tests.tiny import tiny_pair

PROMPTS = ["hello world", "the cat sat"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_draft_equal_to_target_accepts_rank_one(temperature):
    pair = tiny_pair("llama", noise=0.0)  # the draft is an exact copy of the target
    vec = profiler.measure_acceptance(pair, PROMPTS, temperature, width=4, tokens_per_prompt=16, ignore_eos=True)
    assert vec.positions >= 12  # each step yields 2 tokens here
    assert vec.probabilities[0] > 0.99 and vec.none < 0.01


def test_vector_is_measured_once_then_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    assert profiler.cached_acceptance(pair, 0.7, 0.9, width=8) is None
    vec = profiler.acceptance_vector(pair, 0.7, 0.9, width=8, prompts=PROMPTS, tokens_per_prompt=12)
    assert vec.sampler == "sequoia" and vec.temperature == 0.7 and vec.top_p == 0.9 and vec.width == 8
    assert abs(sum(vec.probabilities) + vec.none - 1) < 1e-9 and len(vec.ci95) == 8
    again = profiler.cached_acceptance(pair, 0.7, 0.9, width=8)
    assert again.probabilities == vec.probabilities and again.source.startswith(str(tmp_path))
    # other settings are a different entry: never reused for a temperature it was not measured at
    assert profiler.cached_acceptance(pair, 0.8, 0.9, width=8) is None
    assert profiler.acceptance_vector(pair, 0.8, 0.9, width=8, measure=False) is None


def test_dp_plan_uses_the_measured_vector(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    plan = planning.dp_plan(pair, Settings(temperature=0.0), 12, 5, prompts=PROMPTS, tokens_per_prompt=12)
    assert plan.tree.size == 12 and plan.tree.depth <= 5
    assert abs(plan.expected_tokens - plan.tree.expected_tokens(plan.acceptance.probabilities)) < 1e-9


def test_device_profile_is_measured_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    prof = profiler.device_profile(pair, max_budget=8, repeats=2, prefix_tokens=16)
    assert sorted(prof.target_seconds) == [1, 2, 4, 8] == sorted(prof.draft_seconds)
    assert all(t > 0 for t in prof.target_seconds.values()) and prof.overhead_seconds >= 0
    assert profiler.cached_profile(pair).target_seconds == prof.target_seconds
    plan = planning.auto_plan(pair, Settings(temperature=0.0), max_budget=8, max_depth=4, prompts=PROMPTS,
                           tokens_per_prompt=12)
    assert plan.choice is not None and 1 <= plan.tree.size <= 8 and plan.choice.predicted_speedup > 0


def test_the_hook_before_each_target_forward_runs_outside_the_clock(monkeypatch):
    """The cold-cache benchmark drops the page cache before every timed target forward: the hook
    must run once per target try (warm-up included), never for the draft, and not be timed."""
    pair = tiny_pair("llama")
    calls = []
    clock = iter(range(10_000))
    monkeypatch.setattr(profiler.time, "perf_counter", lambda: float(next(clock)))

    def hook():
        calls.append(1)
        for _ in range(5):  # five clock ticks that must not count
            next(clock)

    prof = profiler.profile_device(pair, max_budget=4, repeats=2, prefix_tokens=8, before_target_forward=hook)
    assert len(calls) == 3 * (2 + 1)  # n = 1, 2, 4; two timed tries and a warm-up each
    assert set(prof.target_seconds.values()) == {1.0}  # each try: exactly one tick between its two clock reads
    assert "page_cache" not in prof.machine


def test_shipped_acceptance_vectors_are_found_under_their_own_key(tmp_path, monkeypatch):
    """Files in assets/measured/acceptance/ spare a fresh install its first measurement: each must
    be a measured vector whose file name is the key its own pair and settings look up."""
    from types import SimpleNamespace
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))  # an empty user cache: only shipped files
    shipped = sorted((profiler.SHIPPED / "acceptance").glob("*.json"))
    assert shipped
    for path in shipped:
        vec = profiler.AcceptanceVector(**json.loads(path.read_text()))
        assert vec.positions > 0 and vec.measured_at and len(vec.probabilities) == vec.width
        assert abs(sum(vec.probabilities) + vec.none - 1) < 1e-6
        pair = SimpleNamespace(draft_name=vec.draft, target_name=vec.target,
                               cpu_kernels={"draft": {"mode": vec.draft_kernels}})
        assert profiler.acceptance_key(pair, vec.sampler, vec.temperature, vec.top_p, vec.width) == path.stem
        found = profiler.cached_acceptance(pair, vec.temperature, vec.top_p, vec.sampler, width=vec.width)
        assert found is not None and found.probabilities == vec.probabilities


def test_dropping_the_page_cache_without_permission_is_a_clear_error(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(profiler.os, "sync", lambda: None)
    monkeypatch.setattr(profiler.Path, "write_text", refuse)
    with pytest.raises(profiler.UserError, match="cannot drop the page cache .*root"):
        profiler.drop_page_cache()
