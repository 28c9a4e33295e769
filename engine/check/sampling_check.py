"""The sampling section: N real engine steps per method and sampling setting from a few informative prefixes,
their first tokens (and the token after an accepted draft token) tested against the target's exact
next-token distributions by one chi-square test each (see engine/check/stats.py)."""
from __future__ import annotations

import collections
import math

import numpy as np

from engine.check.config import MAX_CONTINUATIONS, MIN_EXPECTED, NUCLEUS_TOLERANCE, sampling_triple
from engine.check.context import CheckContext, split_evenly
from engine.check.reference import near_nucleus, prefix_and_continuations, reference_distribution
from engine.check.stats import ChiSquare, sample_test
from engine.check.stepping import Prefilled, seeded_generator
from engine.settings import Settings


def run_sampling(ctx: CheckContext, prompts: list[list[int]]) -> None:
    """Draw N engine steps per (prefix share, setting, method), then test them all (_sampling_tests)."""
    cfg, pair = ctx.config, ctx.pair
    n = ctx.estimate.samples
    drafting = [m for m in ctx.methods if m.uses_draft]
    prefixes = _choose_prefixes(ctx, prompts, n)
    per_prefix = split_evenly(n, len(prefixes))
    # samples[(setting, method)] = list of (prefix index, first token, accepted, second token or None)
    samples: dict[tuple, list] = collections.defaultdict(list)
    step_seconds = ctx.estimate.timings["sample_step_seconds"]
    for pi, (prefix, where) in enumerate(prefixes):
        ctx.check_stop()
        state = Prefilled(pair, prefix, with_draft=bool(drafting))
        ctx.advance(ctx.estimate.timings["prefix_seconds"], f"sampling: prefix {pi + 1} ({where}) ready", True)
        for si, (temperature, top_p, top_k) in enumerate(map(sampling_triple, cfg.sampling_settings)):
            settings = Settings(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=2,
                                ignore_eos=True, seed=cfg.seed)
            for mi, method in enumerate(ctx.methods):
                g = seeded_generator(pair, cfg.seed * 1_000_003 + pi * 10_007 + si * 101 + mi)
                for k in range(per_prefix[pi]):
                    ctx.check_stop()
                    step = state.step(method, settings, g)
                    ids_, accepted = step["new_ids"], bool(step["accepted_ranks"])
                    second = ids_[1] if accepted and len(ids_) > 1 else None
                    samples[(si, method.name)].append((pi, ids_[0], accepted, second))
                    ctx.advance(step_seconds[method.name],
                                f"sampling T={temperature:g} top-p={top_p:g}: {method.name}, prefix {pi + 1} of "
                                f"{len(prefixes)}, sample {k + 1}/{per_prefix[pi]}")
    _sampling_tests(ctx, prefixes, samples)


def _choose_prefixes(ctx: CheckContext, prompts, n) -> list[tuple[list[int], str]]:
    """The most informative positions along the prompts' greedy continuations: most tokens with an
    expected count >= 5 at the sampling settings (then highest entropy); one per prompt in turn."""
    count = min(ctx.config.prefixes, max(1, n // 20))
    per_prefix = max(1, n // count)
    ranked = []
    for i, ids in enumerate(prompts):
        ref, ref_logits = ctx.reference(i, ids)
        scored = []
        for j in range(len(ref)):
            if len(ids) + j + 2 >= ctx.pair.context_limit:
                break
            score = 0
            for t, p, k in map(sampling_triple, ctx.config.sampling_settings):
                probs = reference_distribution(ref_logits[j], t, p, k)
                score += int((probs * per_prefix >= MIN_EXPECTED).sum())
            probs = reference_distribution(ref_logits[j], 1.0, 1.0)
            entropy = float(-(probs * probs.clamp_min(1e-300).log()).sum())
            scored.append((score, entropy, -j, j))
        scored.sort(reverse=True)
        ranked.append([(ids + ref[:j], f"prompt {i + 1} + {j} generated tokens") for *_, j in scored])
    chosen, round_ = [], 0
    while len(chosen) < count and any(round_ < len(r) for r in ranked):
        for r in ranked:
            if round_ < len(r) and len(chosen) < count:
                chosen.append(r[round_])
        round_ += 1
    if not chosen:
        chosen = [(prompts[0], "prompt 1")]
    return chosen


def _sampling_tests(ctx: CheckContext, prefixes, samples) -> None:
    """One test item per (setting, method) for the first token, and one after an accepted draft token."""
    cfg, pair = ctx.config, ctx.pair
    nucleus_tol = NUCLEUS_TOLERANCE.get(pair.dtype, 1e-4)
    # exact distributions: one plain forward per prefix + one batched forward for accepted first tokens
    first_logits, next_logits = [], []
    for pi, (prefix, _) in enumerate(prefixes):
        ctx.check_stop()
        wanted = collections.Counter(a for rows in samples.values() for (p, a, acc, b) in rows
                                     if p == pi and b is not None)
        tokens = [a for a, _ in wanted.most_common(MAX_CONTINUATIONS)]
        first, nxt = prefix_and_continuations(pair.target, prefix, tokens)
        first_logits.append(first)
        next_logits.append(nxt)
        ctx.advance(ctx.estimate.timings["prefix_seconds"], f"sampling: exact distributions for prefix {pi + 1}")
    for si, (temperature, top_p, top_k) in enumerate(map(sampling_triple, cfg.sampling_settings)):
        setting = f"T={temperature:g}" + (f" top-k={top_k}" if top_k else "") + (f" top-p={top_p:g}" if top_p < 1 else "")
        for mi, method in enumerate(ctx.methods):
            rows = samples.get((si, method.name), [])
            if not rows:
                continue
            boundary = boundary_second = 0
            groups_first, groups_second = [], []
            for pi in range(len(prefixes)):
                logits = first_logits[pi]
                probs = reference_distribution(logits, temperature, top_p, top_k)
                counts = collections.Counter()
                for p, a, acc, b in rows:
                    if p != pi:
                        continue
                    if probs[a] <= 0 and near_nucleus(a, logits, temperature, top_p, nucleus_tol, top_k):
                        boundary += 1
                        continue
                    counts[a] += 1
                groups_first.append((counts, probs.numpy()))
                by_token = collections.defaultdict(collections.Counter)
                for p, a, acc, b in rows:
                    if p == pi and b is not None and a in next_logits[pi]:
                        by_token[a][b] += 1
                for a, counts_b in by_token.items():
                    logits_b = next_logits[pi][a]
                    probs_b = reference_distribution(logits_b, temperature, top_p, top_k)
                    for b in [b for b in counts_b if probs_b[b] <= 0]:
                        if near_nucleus(b, logits_b, temperature, top_p, nucleus_tol, top_k):
                            boundary_second += counts_b.pop(b)
                    groups_second.append((counts_b, probs_b.numpy()))
            rng = np.random.default_rng([cfg.seed, si, mi])
            accepted = sum(1 for r in rows if r[2])
            _add_test(ctx, f"{method.name} {setting} next token", sample_test(groups_first, rng, cfg.alpha),
                      method.name, temperature, top_p, "next token", len(rows), accepted, boundary, top_k)
            if method.uses_draft:
                with_second = sum(1 for r in rows if r[3] is not None)
                _add_test(ctx, f"{method.name} {setting} after an accepted draft token",
                          sample_test(groups_second, rng, cfg.alpha), method.name, temperature, top_p,
                          "after accepted draft token", with_second, accepted, boundary_second, top_k)


def _add_test(ctx: CheckContext, name, result: ChiSquare, method, temperature, top_p, position, drawn,
              accepted, boundary, top_k=0):
    alpha = ctx.config.alpha
    stats = result.to_dict()
    if not math.isfinite(stats["statistic"]):
        stats["statistic"] = None  # keep to_dict() strict JSON
    details = {"method": method, "temperature": temperature, "top_p": top_p, "top_k": top_k, "position": position,
               "samples_drawn": drawn, "first_token_accepted": accepted, "alpha": alpha,
               "nucleus_boundary_samples": boundary, **stats}
    if result.impossible:
        ctx.add("sampling", name, "fail", f"{result.impossible} sampled token(s) have probability 0 under the "
                "target (e.g. outside the top-p nucleus): impossible for exact decoding", **details)
    elif result.pvalue is None:
        ctx.add("sampling", name, "skip", f"not enough samples to test ({drawn} drawn; a test needs two "
                f"bins of expected count >= {MIN_EXPECTED:g}, or 20 samples to pool); raise --samples", **details)
    else:
        ok = result.pvalue >= alpha
        msg = (f"p = {result.pvalue:.3g} {'>=' if ok else '<'} {alpha:g} (chi2 = {result.statistic:.1f}, "
               f"df {result.df}, {result.samples} samples in " + _bins_text(result)
               + f"); detects a chi-square distance >= {result.detectable:.2g} with 90% probability")
        if position == "next token" and drawn:
            msg += f"; first token from the draft in {accepted}/{drawn} steps"
        ctx.add("sampling", name, "pass" if ok else "fail", msg, **details)


def _bins_text(result: ChiSquare) -> str:
    parts = []
    if result.bins - result.pit_bins:
        parts.append(f"{result.bins - result.pit_bins} token bins")
    if result.pit_bins:
        parts.append(f"{result.pit_bins} probability-ordered bins")
    return " + ".join(parts)
