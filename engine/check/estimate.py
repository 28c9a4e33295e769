"""How long a check will take: time one prefill and one speculative step per method on the first prompt and
extrapolate; with samples=None also choose N so that the sampling part fits its time budget."""
from __future__ import annotations

import copy
import math


from engine import attention
from engine.check.config import MAX_AUTO_SAMPLES, MIN_AUTO_SAMPLES, CheckConfig, prompt_ids
from engine.check.report import CheckEstimate
from engine.check.stepping import Prefilled, seeded_generator
from engine.models import ModelPair, synced_clock
from engine.settings import Settings


def estimate_check(pair: ModelPair, config: CheckConfig | None = None) -> CheckEstimate:
    """Time one prefill and one speculative step per method on the first prompt, and extrapolate.
    Also fixes N when config.samples is None (auto)."""
    config = config or CheckConfig()
    config.validate()
    prompts = prompt_ids(pair, config)
    return estimate_for_prompts(pair, config, prompts)


def estimate_for_prompts(pair: ModelPair, config: CheckConfig, prompts: list[list[int]]) -> CheckEstimate:
    """estimate_check on prompts already encoded (run_check encodes them once for both)."""
    now = synced_clock(pair)
    start = now()
    check_methods = config.resolved_methods()
    ids = prompts[0]
    drafting = any(m.uses_draft for m in check_methods)
    t0 = now()
    state = Prefilled(pair, ids, with_draft=False)
    t1 = now()
    target_rate = (t1 - t0) / max(1, len(ids) - 1)
    draft_rate = 0.0
    if drafting and len(ids) > 1:
        cache = attention.new_cache(pair.draft)
        attention.forward_causal(pair.draft, cache, ids[:-1])
        state.draft, state.draft_len = cache, len(ids) - 1
        draft_rate = (now() - t1) / max(1, len(ids) - 1)
    t2 = now()
    attention.forward_causal(pair.target, copy.deepcopy(state.target), [ids[-1]])
    target_token = now() - t2
    sample_step, greedy_step, greedy_tokens = {}, {}, {}
    for m in check_methods:
        t = now()
        state.step(m, Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True), seeded_generator(pair, config.seed))
        sample_step[m.name] = now() - t
        t = now()
        out = state.step(m, Settings(temperature=0.0, max_new_tokens=m.tree.depth, ignore_eos=True),
                         seeded_generator(pair, config.seed))
        greedy_step[m.name] = now() - t
        greedy_tokens[m.name] = max(1.0, min(float(len(out["new_ids"])), float(m.tree.depth)))
    per_round = sum(sample_step.values()) * len(config.sampling_settings) * 1.05
    auto = config.samples is None
    if auto:
        samples = int(config.sample_budget_seconds / per_round) if per_round > 0 else MAX_AUTO_SAMPLES
        samples = max(MIN_AUTO_SAMPLES, min(MAX_AUTO_SAMPLES, samples))
    else:
        samples = config.samples
    g = config.greedy_tokens
    prefill = target_rate + draft_rate
    reference_seconds = [len(p) * target_rate + g * target_token for p in prompts]
    greedy_runs = [{m.name: len(p) * (target_rate + (draft_rate if m.uses_draft else 0.0))
                    + math.ceil(g / greedy_tokens[m.name]) * greedy_step[m.name] for m in check_methods}
                   for p in prompts]
    mean_len = sum(len(p) for p in prompts) / len(prompts) + g / 2
    prefix_seconds = mean_len * prefill
    kv_method = next((m for m in check_methods if m.uses_draft), check_methods[0])
    kv_step = greedy_step[kv_method.name] + (len(ids) + config.kv_steps) * prefill
    sections = {}
    if "greedy" in config.sections or "sampling" in config.sections:
        sections["greedy"] = sum(reference_seconds) + (sum(sum(r.values()) for r in greedy_runs)
                                                       if "greedy" in config.sections else 0.0)
    if "sampling" in config.sections:
        n_prefixes = min(config.prefixes, max(1, samples // 20))
        sections["sampling"] = samples * per_round + n_prefixes * 2 * prefix_seconds
    if "structure" in config.sections:
        sections["structure"] = config.kv_steps * kv_step
    timings = {"target_prefill_seconds_per_token": target_rate, "draft_prefill_seconds_per_token": draft_rate,
               "target_token_seconds": target_token, "sample_step_seconds": sample_step,
               "greedy_step_seconds": greedy_step, "greedy_tokens_per_step_guess": greedy_tokens,
               "reference_seconds": reference_seconds, "greedy_run_seconds": greedy_runs,
               "prefix_seconds": prefix_seconds, "kv_step_seconds": kv_step}
    return CheckEstimate(sum(sections.values()), sections, samples, auto, timings, now() - start)
