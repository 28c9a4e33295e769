"""Acceptance vectors and device profiles measured on a live (tiny) pair, and their caches."""
import json
import statistics

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
    # one row per prompt, [positions, rank 1..4, none], adding up to the vector's counts
    assert len(vec.prompt_counts) == len(PROMPTS) and vec.interval == "positions"   # 2 prompts: too few for a spread
    assert sum(row[0] for row in vec.prompt_counts) == vec.positions
    assert sum(row[1] for row in vec.prompt_counts) == round(vec.probabilities[0] * vec.positions)
    assert all(row[0] == sum(row[1:]) for row in vec.prompt_counts)


def test_a_measurement_says_each_prompt_before_reading_it():
    """Its first line came with the first step, after the prompt was read (12 s of "starting" on a
    loaded machine): each prompt is now said before it is read, then each step."""
    lines = []
    profiler.measure_acceptance(tiny_pair("llama"), PROMPTS, 0.0, width=4, tokens_per_prompt=8,
                                progress=lambda fraction, message: lines.append((fraction, message)))
    assert lines[0] == (0.0, "measuring acceptance: prompt 1/2, reading it (0 positions so far)")
    second = next(k for k, (_, message) in enumerate(lines) if "prompt 2/2, reading it" in message)
    assert lines[second][0] == 0.5 and all("positions" in message for _, message in lines[1:second])
    assert [f for f, _ in lines] == sorted(f for f, _ in lines)


def test_a_short_measurement_that_hides_a_shipped_vector_is_found(tmp_path, monkeypatch):
    """The user cache is read before the shipped vectors: a default `measure` (193 positions)
    silently took the place of the shipped 3,067-position vector at T = 0."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(profiler, "SHIPPED", tmp_path / "shipped")
    pair = tiny_pair("llama")
    vec = profiler.measure_acceptance(pair, PROMPTS, 0.0, width=4, tokens_per_prompt=8)
    key = profiler.acceptance_key(pair, vec.sampler, 0.0, 1.0, 4)
    (tmp_path / "shipped" / "acceptance").mkdir(parents=True)
    shipped_path = tmp_path / "shipped" / "acceptance" / f"{key}.json"
    shipped_path.write_text(json.dumps({**vec.to_dict(), "positions": 3067}))
    assert profiler.cached_acceptance(pair, 0.0, width=4).positions == 3067   # nothing of the user's yet
    vec.source = str(profiler.save_acceptance(pair, vec))
    assert profiler.cached_acceptance(pair, 0.0, width=4).positions == vec.positions   # the user's wins
    hidden = profiler.shipped_hidden_by(pair, vec)
    assert hidden is not None and hidden.positions == 3067 and hidden.source == str(shipped_path)
    from engine.wording import hides_words
    assert hides_words(vec, hidden, "/Data/Cache/x.json").startswith("This ")   # the path as it is, not lowered
    assert "shipped one of 3067 positions" in hides_words(vec, hidden) and "/Data/Cache/x.json" in hides_words(
        vec, hidden, "/Data/Cache/x.json")
    assert profiler.shipped_hidden_by(pair, hidden) is None   # the shipped one itself hides nothing
    shipped_path.write_text(json.dumps({**vec.to_dict(), "positions": 10}))
    assert profiler.shipped_hidden_by(pair, vec) is None      # a smaller shipped one is no loss


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
    assert sorted(prof.target_seconds) == [1, 2, 3, 4, 5, 6, 7, 8] == sorted(prof.draft_seconds)
    assert all(t > 0 for t in prof.target_seconds.values()) and prof.overhead_seconds >= 0
    assert profiler.cached_profile(pair).target_seconds == prof.target_seconds
    plan = planning.auto_plan(pair, Settings(temperature=0.0), max_budget=8, max_depth=4, prompts=PROMPTS,
                           tokens_per_prompt=12)
    assert plan.choice is not None and 1 <= plan.tree.size <= 8 and plan.choice.predicted_speedup > 0


@pytest.mark.parametrize("family", ["llama", "gemma3"])  # gemma3: sliding and full layers mixed
def test_a_run_continued_from_the_profilers_caches_equals_a_fresh_one(family):
    """_measure_overhead continues from the caches the timers used instead of prefilling again:
    those caches hold the prefix exactly as a fresh run's prefill does (same steps, same tokens,
    long enough to pass the tiny gemma's sliding window), and caches of the wrong length are refused."""
    import torch

    from engine import methods
    from engine.decoding import Decoder, generate_ids
    from engine.tree import Tree
    pair = tiny_pair(family)
    prefix = [(31 * i + 11) % pair.vocab_size for i in range(24)]
    clock = lambda: 0.0  # noqa: E731
    caches = {role: profiler.prefilled_cache(m, prefix) for role, m in (("target", pair.target), ("draft", pair.draft))}
    for n in (1, 3):  # timed forwards leave the caches as they found them
        profiler._forward_timer(pair.target, caches["target"], len(prefix), n, clock)()
        profiler._forward_timer(pair.draft, caches["draft"], len(prefix), n, clock)()
    method, settings = methods.sequoia(Tree.from_branching([2, 2, 1])), Settings(max_new_tokens=40, ignore_eos=True)
    prompt = [*prefix, prefix[-1]]
    with torch.inference_mode():
        continued = list(Decoder(pair, method, settings, prefilled=(caches["target"], caches["draft"])).run(prompt))
        fresh_ids, fresh = generate_ids(pair, prompt, method, settings)
    assert continued[-1].token_ids == fresh_ids
    assert [e.accepted_path for e in continued] == [e.accepted_path for e in fresh]
    short = profiler.prefilled_cache(pair.target, prefix[:-1])
    with pytest.raises(ValueError, match="prefilled caches hold"):
        list(Decoder(pair, method, settings, prefilled=(short, caches["draft"])).run(prompt))
    assert profiler._measure_overhead(pair, prefix, lambda: False, (profiler.prefilled_cache(pair.target, prefix),
                                                                    profiler.prefilled_cache(pair.draft, prefix))) > 0


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
    assert len(calls) == 4 * (2 + 1)  # n = 1, 2, 3, 4; two timed tries and a warm-up each
    assert set(prof.target_seconds.values()) == {1.0}  # each try: exactly one tick between its two clock reads
    ratios = prof.quality["round_ratios"]
    assert set(ratios["target_over_t1"]) == {"1", "2", "3", "4"} and set(ratios["target_over_t1"].values()) == {1.0}
    assert set(ratios["draft_over_t1"].values()) == {1.0}
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
        # code and prose vectors have their own keys; the pooled one ("") has the key used before domains
        assert profiler.acceptance_key(pair, vec.sampler, vec.temperature, vec.top_p, vec.width,
                                       domain=vec.domain) == path.stem
        found = profiler.cached_acceptance(pair, vec.temperature, vec.top_p, vec.sampler, width=vec.width,
                                           domain=vec.domain)
        assert found is not None and found.probabilities == vec.probabilities and found.domain == vec.domain
    domains = {(v["temperature"], v["top_p"], v.get("domain", "")) for v in map(lambda p: json.loads(p.read_text()), shipped)
               if v.get("draft_kernels") == "fast"}
    for t, p in {(t, p) for t, p, _ in domains}:  # every fast-path setting ships code, prose and pooled
        assert {(t, p, d) for d in ("", "code", "prose")} <= domains, (t, p)


def test_dropping_the_page_cache_without_permission_is_a_clear_error(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(profiler.os, "sync", lambda: None)
    monkeypatch.setattr(profiler.Path, "write_text", refuse)
    with pytest.raises(profiler.UserError, match="cannot drop the page cache .*root"):
        profiler.drop_page_cache()


# ------------------------------------------------------------------ issue 15: review findings
SMALL = "ab"  # vocabulary of 4 tokens: <eos>, a, b, <unk>
LONG_PROMPTS = ["ab", "ba", "aab", "bba", "abab", "bbaa", "baab", "aaab"]


def test_a_star_wider_than_the_vocabulary_is_measured_at_the_vocabulary_width(tmp_path, monkeypatch):
    """A 16-wide star on a 4-token vocabulary is measured at width 4, cached under the key a
    16-wide ask looks up, and the Sequoia plan made from it decodes (no node wider than the vocabulary)."""
    from engine.decoding import generate
    from engine.models import encode_prompt
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama", chars=SMALL)
    assert pair.vocab_size == 4
    vec = profiler.acceptance_vector(pair, 1.0, prompts=["ab", "ba"], tokens_per_prompt=12, ignore_eos=True)
    assert vec.width == 4 and len(vec.probabilities) == 4
    assert profiler.cached_acceptance(pair, 1.0) is not None  # the width-16 ask finds it: no re-measuring
    plan = planning.dp_plan(pair, Settings(temperature=1.0), 16, 4)
    assert max(len(c) for c in plan.tree.children) <= 4
    events = list(generate(pair, encode_prompt(pair, "ab", chat=False), plan.method,
                           Settings(temperature=1.0, max_new_tokens=12, ignore_eos=True)))
    assert events[-1].total_tokens == 12


def _spied_measure(monkeypatch, pair, temperature, top_p, sampler, width, prompts, tokens):
    """measure_acceptance, recording what it passed to the decoder and the steps it saw."""
    calls = []
    real = profiler.generate

    def spy(pair_, ids, method, settings, **kw):
        rec = {"ids": list(ids), "method": method, "settings": settings, "events": []}
        calls.append(rec)
        for ev in real(pair_, ids, method, settings, **kw):
            rec["events"].append(ev)
            yield ev

    monkeypatch.setattr(profiler, "generate", spy)
    vec = profiler.measure_acceptance(pair, prompts, temperature, top_p, sampler, width=width,
                                      tokens_per_prompt=tokens, ignore_eos=True)
    monkeypatch.setattr(profiler, "generate", real)
    return vec, calls


def _check_settings_used(calls, temperature, top_p, sampler):
    for c in calls:
        assert c["settings"].temperature == temperature and c["settings"].top_p == top_p
        assert c["method"].sampler == sampler


def _check_rank_one(pair, vec, calls, temperature, top_p):
    """Measured P(rank 1) against the mean of sum(min(p, q)) over the roots the measurement
    visited (the exact chance that the first child, drawn from q, is accepted), at the asked T/top-p."""
    import torch
    from engine import sampling
    exact = []
    for c in calls:
        for ev in c["events"]:
            if len(ev.tree_parents) < 2 or not ev.nodes:
                continue
            before = ev.total_tokens - len(ev.new_token_ids)
            ctx = torch.tensor([c["ids"] + ev.token_ids[:before]])
            with torch.no_grad():
                p = sampling.target_distribution(pair.target(ctx).logits[0, -1].double(), temperature, top_p)
                q = sampling.draft_distribution(pair.draft(ctx).logits[0, -1].double(), temperature)
            exact.append(float(torch.minimum(p, q).sum()))
    mean = sum(exact) / len(exact)
    se = (mean * (1 - mean) / vec.positions) ** 0.5
    assert len(exact) == vec.positions
    assert abs(vec.probabilities[0] - mean) < 3 * se + 0.01, (vec.probabilities[0], mean, se)


def _check_full_cover(vec):
    """Sequoia's children drawn without replacement over the whole vocabulary cover p's support:
    some child is always accepted (ALGORITHM.md section 3). With replacement they often do not."""
    assert vec.none == 0.0, vec.none


def _measure_and_check(monkeypatch, pair):
    checks = []
    for T, top_p in ((1.0, 1.0), (0.5, 0.8)):
        vec, calls = _spied_measure(monkeypatch, pair, T, top_p, "sequoia", 16, LONG_PROMPTS, 60)
        _check_settings_used(calls, T, top_p, "sequoia")
        _check_rank_one(pair, vec, calls, T, top_p)
        _check_full_cover(vec)
        checks.append(vec)
    return checks


def test_measured_acceptance_matches_the_asked_sampler_and_temperature(monkeypatch):
    pair = tiny_pair("llama", chars=SMALL, noise=0.2)
    _measure_and_check(monkeypatch, pair)


@pytest.mark.parametrize("mutant", ["always_specinfer", "always_t1"])
def test_the_acceptance_checks_fail_on_wrong_profilers(monkeypatch, mutant):
    """The two wrong profilers of the review: one always measuring with the SpecInfer sampler,
    one always at T = 1 / top-p 1. Each must fail the checks above (the tests have teeth)."""
    pair = tiny_pair("llama", chars=SMALL, noise=0.2)
    if mutant == "always_specinfer":
        real_method = profiler.methods.Method
        monkeypatch.setattr(profiler.methods, "Method",
                            lambda name, tree, sampler: real_method(name, tree, "specinfer"))
    else:
        real_settings = profiler.Settings
        monkeypatch.setattr(profiler, "Settings",
                            lambda **kw: real_settings(**{**kw, "temperature": 1.0, "top_p": 1.0}))
    with pytest.raises(AssertionError):
        _measure_and_check(monkeypatch, pair)


def test_the_full_cover_value_check_alone_catches_the_specinfer_profiler(monkeypatch):
    """Without looking at what was passed: the SpecInfer sampler (with replacement) leaves a
    full-vocabulary star without an accepted child at times; Sequoia's never does. (The T=1
    profiler is caught by the check of the settings passed: on these tiny pairs sum(min(p, q))
    moves too little with T for ~300 positions to tell it apart.)"""
    real_method = profiler.methods.Method
    monkeypatch.setattr(profiler.methods, "Method", lambda name, tree, sampler: real_method(name, tree, "specinfer"))
    far = tiny_pair("llama", chars=SMALL, noise=0.6)  # a draft far from the target: repeats are common
    vec, _ = _spied_measure(monkeypatch, far, 1.0, 1.0, "sequoia", 16, LONG_PROMPTS, 40)
    with pytest.raises(AssertionError):
        _check_full_cover(vec)


def test_the_profile_grid_is_dense_where_cpu_trees_live():
    assert profiler.profile_grid(32) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]
    assert profiler.profile_grid(5) == [1, 2, 3, 4, 5]
    assert profiler.profile_grid(12) == [1, 2, 3, 4, 5, 6, 7, 8, 12]


def test_profile_sizes_are_timed_in_rounds_so_a_drifting_machine_keeps_their_ratios():
    """A machine that slows down while it is profiled (here 1 % per forward): timing each n in
    its own block gives t(4)/t(1) 12 % above the true 1.6; rounds over every n keep it, and
    ratios taken round by round keep it closer still."""
    forwards = []

    def timer(n, drift=0.01):
        def once():
            forwards.append(n)
            return (1 + n / 4) * (1 + drift * len(forwards))  # at one speed t(4)/t(1) = 2 / 1.25
        return once

    times = profiler._time_in_rounds({n: timer(n) for n in (1, 2, 4)}, 5, lambda: False)
    assert forwards[:6] == [1, 2, 4, 4, 2, 1]  # the warm-up round up the list, then down
    assert len(forwards) == 3 * (5 + 1) and all(len(t) == 5 for t in times.values())
    medians = {n: statistics.median(t) for n, t in times.items()}
    assert medians[4] / medians[1] == pytest.approx(1.6, rel=0.03)
    assert profiler.round_ratios(times, 1)[4] == pytest.approx(1.6, rel=0.02)
    forwards.clear()
    blocked = {n: statistics.median(profiler._time_in_rounds({n: timer(n)}, 5, lambda: False)[n]) for n in (1, 2, 4)}
    assert blocked[4] / blocked[1] > 1.75  # what timing n after n does under the same drift
    # a machine drifting faster keeps the spread above NOISY_SPREAD: rounds stop at max_repeats
    forwards.clear()
    profiler._time_in_rounds({n: timer(n, drift=0.2) for n in (1, 2, 4)}, 2, lambda: False, max_repeats=4)
    assert len(forwards) == 3 * (1 + 4)


def test_shipped_vectors_give_their_interval_over_the_prompts_they_record():
    """A shipped vector that records its prompts' counts (engine/intervals.py) must be those counts:
    its probabilities are their shares and its ± the interval over them, not a number typed in.
    The fast path's vectors (NF4 and int8 drafts) all record their prompts; only the float32
    draft's two old on-policy vectors (48 positions each) do not."""
    from engine import intervals
    shipped = [json.loads(p.read_text()) for p in sorted((profiler.SHIPPED / "acceptance").glob("*.json"))]
    for vec in shipped:
        rows = vec.get("prompt_counts") or []
        if vec.get("draft_kernels") in ("fast", "fast+nf4"):
            assert vec.get("interval") == "prompts" and len(rows) == vec["prompts"], vec["measured_at"]
        if not rows:
            assert vec.get("interval", "positions") == "positions"
            continue
        assert sum(row[0] for row in rows) == pytest.approx(vec["positions"])
        assert all(row[0] == pytest.approx(sum(row[1:])) for row in rows)   # ranks + none: every position
        shares = [sum(row[1 + k] for row in rows) / vec["positions"] for k in range(vec["width"])]
        assert shares == pytest.approx(vec["probabilities"], abs=1e-12)
        ci, basis = intervals.vector_ci(vec["probabilities"], vec["positions"], rows)
        assert basis == vec["interval"] and ci == pytest.approx(vec["ci95"], abs=1e-12)


def test_shipped_fast_path_vectors_count_the_whole_measurement_set_each_kind_over_2000_positions():
    """Issue 15: each shipped vector over ≥ 2,000 positions, code and prose kept apart. Every fast-path
    file's recipe names its prompts: exactly its kind's prompts of assets/measurement-prompts.json
    (all of them, in the set's order: a prompt added to the set and not measured fails here), at
    128 answer tokens and 4 draws, and its kind's vector reaches 2,000 positions."""
    from engine.prompts import MEASUREMENT_PROMPTS, prompt_set
    from engine.replay import prompt_digest
    kinds = {k: [prompt_digest(p.text) for p in prompt_set(MEASUREMENT_PROMPTS) if p.kind == k]
             for k in ("code", "prose")}
    fast = [json.loads(p.read_text()) for p in sorted((profiler.SHIPPED / "acceptance").glob("*.json"))]
    fast = [v for v in fast if v.get("draft_kernels") in ("fast", "fast+nf4")]
    assert len(fast) == 30   # 5 settings x (code, prose, pooled) x 2 drafts
    for vec in fast:
        recipe = vec["recipe"]
        assert (recipe["tokens_per_prompt"], recipe["draws"]) == (128, 4)
        wanted = kinds["code"] + kinds["prose"] if not vec["domain"] else kinds[vec["domain"]]
        assert [digest for digest, _ in recipe["prompts"]] == wanted, (vec["domain"], vec["temperature"])
        assert len(vec["prompt_counts"]) == vec["prompts"] == len(wanted)
        assert vec["positions"] >= (4000 if not vec["domain"] else 2000), (vec["domain"], vec["temperature"])

