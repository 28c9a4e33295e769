"""The benchmark's goals (issue 14 and before), each judged on the figure this run measured:
from the aggregated results, and from the loaded pair and its device profile."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.models import ModelPair


def geometric_mean(xs) -> float | None:
    """statistics.geometric_mean, or None where it is undefined (no values, or a value <= 0)."""
    xs = list(xs)
    return statistics.geometric_mean(xs) if xs and min(xs) > 0 else None


def _by_prompt(r: dict) -> dict:
    """prompt -> tokens/s of one result row (reports before prompt_runs: the runs in prompt order)."""
    prompts = r.get("prompt_runs") or range(len(r["tokens_per_second_runs"]))
    return dict(zip(prompts, r["tokens_per_second_runs"]))


def speed(r: dict) -> float:
    """A row's tokens/s for comparing methods: the geometric mean over prompts (see
    bench.DEFINITIONS tokens_per_second_geomean)."""
    return geometric_mean(_by_prompt(r).values()) or 0.0


def paired_ratio(a: dict, b: dict) -> tuple[float, str]:
    """a's tokens/s over b's as the geometric mean of per-prompt ratios (same prompts, same run),
    and a detail with those ratios and the medians over prompts."""
    pa, pb = _by_prompt(a), _by_prompt(b)
    ratios = [pa[p] / pb[p] for p in pa if p in pb and pb[p] > 0]
    ratio = geometric_mean(ratios) or 0.0
    return ratio, (f"per prompt {', '.join(f'{x:.2f}' for x in ratios)}; medians over prompts "
                   f"{a['tokens_per_second']:.2f} vs {b['tokens_per_second']:.2f} tok/s")


def evaluate_goals(results: list[dict]) -> list[dict]:
    """The issue's goals, each with the measured figure; never rounded in our favour."""
    goals = []
    temps = sorted({r["temperature"] for r in results})
    by = lambda t, m: [r for r in results if r["temperature"] == t and r["method"] == m]  # noqa: E731
    for t in temps:
        for si in by(t, "specinfer"):
            sq = [r for r in by(t, "sequoia") if r["nodes"] == si["nodes"]]
            if sq:
                ratio = sq[0]["tokens_per_step"] / si["tokens_per_step"]
                goals.append({"goal": f"T={t:g}: Sequoia tokens/step >= 1.25x SpecInfer {si['label'].split()[1]} "
                                      f"at {si['nodes']} nodes", "measured": ratio, "target": 1.25,
                              "met": ratio >= 1.25, "detail": f"{sq[0]['tokens_per_step']:.2f} vs {si['tokens_per_step']:.2f}"})
        for r in by(t, "sequoia") + by(t, "sequoia-auto"):
            if r.get("predicted_tokens_per_step"):
                err = r["tokens_per_step"] / r["predicted_tokens_per_step"] - 1
                span = r.get("tokens_per_step_interval_95")
                inside = (f" (95 % interval {span[0]:.2f}-{span[1]:.2f} over {r['steps']} steps: the prediction is "
                          f"{_where(r['predicted_tokens_per_step'], span)} it"
                          f"{_by_answer(r['predicted_tokens_per_step'], r.get('tokens_per_step_interval_95_by_answer'))})"
                          if span else "")
                goals.append({"goal": f"T={t:g}: {r['label']} predicted tokens/step within 10 % of observed",
                              "measured": err, "target": 0.10, "met": abs(err) <= 0.10,
                              "detail": f"observed {r['tokens_per_step']:.2f}{inside}, "
                                        f"predicted {r['predicted_tokens_per_step']:.2f}"
                                        f"{_vector_range(r.get('predicted_tokens_per_step_range'))}"
                                        f"{_these_prompts(r)}"})
        seq = by(t, "sequoia")  # the fixed trees of the sweep (the hardware-aware lane is judged against them)
        auto = by(t, "sequoia-auto")
        if auto and seq:
            best = max(seq, key=speed)
            ratio, detail = paired_ratio(auto[0], best)
            goals.append({"goal": f"T={t:g}: hardware-aware choice within 5 % of the best swept Sequoia tree (tokens/s, "
                                  "geometric mean of per-prompt ratios)",
                          "measured": ratio, "target": 0.95, "met": ratio >= 0.95,
                          "detail": f"{auto[0]['label']} vs best {best['label']}: {detail}"})
        spec = [r for r in results if r["temperature"] == t and r["method"] != "ar"]
        if spec:
            worst = max(spec, key=lambda r: r["other_fraction"] or 0)
            goals.append({"goal": f"T={t:g}: everything except model forwards <= 10 % of step time (worst method)",
                          "measured": worst["other_fraction"], "target": 0.10,
                          "met": (worst["other_fraction"] or 0) <= 0.10, "detail": worst["label"]})
    marks = {0.0: {"code": 1.6, "prose": 1.1}, 0.7: {"code": 1.2, "prose": 1.1}}
    for t in temps:
        auto, chains = by(t, "sequoia-auto"), by(t, "chain")
        seq = by(t, "sequoia") or auto
        if not seq:
            continue
        best = max(seq, key=speed)
        for who, r in (("hardware-aware", auto[0] if auto else None), ("best swept", best)):
            if r is None:
                continue
            for kind, target in marks.get(t, {}).items():
                k = r["by_kind"].get(kind)
                if k and k["speedup_vs_ar"] is not None:
                    goals.append({"goal": f"T={t:g}: Sequoia ({who}, {r['label']}) tokens/s >= {target}x "
                                          f"autoregressive on {kind} prompts",
                                  "measured": k["speedup_vs_ar"], "target": target,
                                  "met": k["speedup_vs_ar"] >= target})
            if chains and t == 0.0:
                bc = max(chains, key=speed)
                ratio, detail = paired_ratio(r, bc)
                goals.append({"goal": f"T=0: Sequoia ({who}, {r['label']}) tokens/s >= 1.15x the best chain "
                                      "(geometric mean of per-prompt ratios)",
                              "measured": ratio, "target": 1.15, "met": ratio >= 1.15,
                              "detail": f"best chain {bc['label']}: {detail}"})
        for r in auto:
            if r.get("predicted_tokens_per_second_pooled"):
                # the same runs on both sides; the medians over prompts may pair different prompts
                err = r["tokens_per_second_pooled"] / r["predicted_tokens_per_second_pooled"] - 1
                runs = ", ".join(f"{e:+.0%}" for e in r["predicted_tokens_per_second_error_runs"])
                goals.append({"goal": f"T={t:g}: hardware-aware predicted tokens/s within 15 % of measured",
                              "measured": err, "target": 0.15, "met": abs(err) <= 0.15,
                              "detail": f"all prompts' tokens over their decode time {r['tokens_per_second_pooled']:.2f}"
                                        f" tok/s, predicted {r['predicted_tokens_per_second_pooled']:.2f}; per "
                                        f"prompt {runs}; medians over prompts {r['tokens_per_second']:.2f} vs "
                                        f"{r['predicted_tokens_per_second']:.2f}"})
        base = by(t, "ar-default-kernels")
        ar = by(t, "ar")
        if base and ar:
            ratio = ar[0]["tokens_per_second"] / base[0]["tokens_per_second"]
            goals.append({"goal": f"T={t:g}: plain decoding on the fast CPU path >= 2.5x plain decoding on "
                                  "--cpu-kernels default", "measured": ratio, "target": 2.5, "met": ratio >= 2.5,
                          "detail": f"{ar[0]['tokens_per_second']:.2f} vs {base[0]['tokens_per_second']:.2f} tok/s"})
    if 0.0 in temps:
        seq = by(0.0, "sequoia") + by(0.0, "sequoia-auto")
        mism = [r["label"] for r in by(0.0, "chain") + by(0.0, "specinfer") + seq if r.get("matches_ar") is False]
        goals.append({"goal": "T=0: every method reproduces the autoregressive tokens", "measured": len(mism),
                      "target": 0, "met": not mism, "detail": ", ".join(mism) or "all equal"})
    return goals


def learning_check_goals(check: dict | None) -> list[dict]:
    """--learning-check (engine/bench_learning.py): per temperature and prompt kind, the prediction
    at the boundary against the rest of the run; a run that could not be measured is not met."""
    goals = []
    runs = (check or {}).get("runs", [])
    groups = learning_runs_by_setting(runs)
    for r in runs:
        err = r.get("error")
        several = len(groups[(r["temperature"], r["kind"])]) > 1
        which = f"{r['kind']}: {r['prompt']}" if several else r["kind"]
        detail = (r.get("note", "") if err is None else
                  f"predicted {r['predicted_tokens_per_step']:.2f}, observed {r['observed_tokens_per_step']:.2f} "
                  f"over {r['steps_after']} steps / {r['tokens_after']} tokens after the freeze; one run, "
                  f"{r['positions_behind_posterior']['total']} positions behind the posterior")
        goals.append({"goal": f"T={r['temperature']:g}: learning after {check['after']} tokens: predicted "
                              f"tokens/step within 10 % of the rest of the run ({which})",
                      "measured": err, "target": 0.10, "met": learning_met(err), "detail": detail})
    return goals


def learning_met(error: float | None) -> bool:
    """The learning goal for one check run: measured, and within 10 %."""
    return error is not None and abs(error) <= 0.10


def learning_runs_by_setting(runs: list[dict]) -> dict[tuple[float, str], list[dict]]:
    """Learning-check runs grouped by (temperature, kind), each group in run order."""
    groups: dict[tuple[float, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["temperature"], r["kind"]), []).append(r)
    return groups


def loaded_pair_goals(pair: ModelPair, prof) -> list[dict]:
    """Goals read off the loaded pair and its device profile (fast CPU path). The ratios are the
    profile's round-by-round ones where it has them (drift between rounds cancels), else the
    ratio of the medians."""
    goals = []
    if prof is not None and 1 in prof.target_seconds:
        t1 = prof.target_seconds[1]
        rounds = prof.quality.get("round_ratios", {})

        def ratio(seconds: dict, key: str, n: int) -> tuple[float, str]:
            by_round = rounds.get(key, {}).get(str(n))
            medians = seconds[n] / t1
            if by_round is None:
                return medians, ""
            return by_round, f"; median over rounds of the per-round ratio (ratio of the medians {medians:.3f})"

        if 4 in prof.target_seconds:
            value, how = ratio(prof.target_seconds, "target_over_t1", 4)
            goals.append({"goal": "profile: t(4)/t(1) <= 1.15", "measured": value, "target": 1.15,
                          "met": value <= 1.15, "detail": f"t(1) {t1 * 1e3:.1f} ms{how}"})
        if 1 in prof.draft_seconds:
            value, how = ratio(prof.draft_seconds, "draft_over_t1", 1)
            goals.append({"goal": "profile: one-token draft forward <= 0.25 of a one-token target forward",
                          "measured": value, "target": 0.25, "met": value <= 0.25,
                          "detail": f"draft {prof.draft_seconds[1] * 1e3:.1f} ms{how}"})
    gib = pair.model_bytes() / 2**30
    goals.append({"goal": "loaded pair <= 6 GB (weights as held, packed included)", "measured": gib, "target": 6.0,
                  "met": gib <= 6.0})
    return goals


def _where(value: float, span: list[float]) -> str:
    return "inside" if span[0] <= value <= span[1] else "outside"


def _vector_range(span: list[float] | None) -> str:
    """How far the vector's rank-1 interval alone moves the prediction (engine/bench_predictions.py rank1_range)."""
    return f" ({span[0]:.2f}-{span[1]:.2f} with rank 1 at the edges of its 95 % interval)" if span else ""


def _these_prompts(row: dict) -> str:
    """The range a run of this row's few prompts can expect around the prediction
    (engine/bench_predictions.py these_prompts_range), and whether the observed value lies in it."""
    span = row.get("predicted_tokens_per_step_range_these_prompts")
    if not span:
        return ""
    kinds = row.get("by_kind") or {}
    counted = " + ".join(f"{v['prompts']} {k}" for k, v in kinds.items()) or f"{len(row.get('prompt_runs', []))}"
    return (f"; {span[0]:.2f}-{span[1]:.2f} for {counted} prompts like the measured ones: observed "
            f"{_where(row['tokens_per_step'], span)} it")


def _by_answer(value: float, span: list[float] | None) -> str:
    """The interval over answers (resampled whole runs), which counts how much answers differ."""
    return f"; over answers {span[0]:.2f}-{span[1]:.2f}: {_where(value, span)}" if span else ""
