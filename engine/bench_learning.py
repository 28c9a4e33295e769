"""`python -m engine bench --learning-check` (issue 15 goal): with learning on, after the first
AFTER (64) generated tokens, does the plan's predicted tokens/step hold for the rest of the run?

Protocol, at each bench temperature, for the first N code and the first N prose prompts of the
bench's prompts (N = --learning-check-prompts, default 1; the first shipped example of a kind,
engine/prompts.py, when the bench's prompts have none of it), one run each:
- ONE generation of the hardware-aware Sequoia plan (sequoia-auto with the bench's search bounds
  and the costs its hardware-aware lanes planned with: the device profile corrected by the step
  costs the bench's runs observed; the DP tree of the largest bench budget under --no-auto), AFTER + TOKENS new
  tokens, ignore_eos, learning ON: planning.Replanner(learn=True) from the bench's vector pooled
  with the evidence earlier runs stored (learning.with_stored: what build_plan does with learn=True);
- at the first step boundary at or after AFTER generated tokens it takes the tree the Replanner
  gives for the next step and the learner's posterior at that moment (for the rest of the answer:
  the domain's measured rest/opening drift where one applies, engine/answer_drift.py): predicted
  tokens/step = tree.expected_tokens(posterior). From then on the tree is FROZEN: the Replanner is not asked
  again, so the prediction is about the tree that actually runs;
- observed = the rest's step yields over its steps, by step_yields.rest_of_run (the same boundary; a last
  step cut by max-new-tokens counts its full verified yield, step_yields.step_yield: the issue 15 fix),
  with its own 95 % interval (block bootstrap over the rest's steps in blocks of 4, step_yields.yield_interval):
  how far the rest's tokens/step could fall from the rate of the text it ran on by the luck of the
  steps, were that text a steady process (assumed: acceptance still drifts over 64-token windows,
  and a dozen blocks make a percentile interval somewhat narrow). Over a 256-token rest it was
  +-5 to 11 % in the check of bench/learning-check-nf4drift-avx512.txt (4- and 5-node chains,
  55-87 steps; 3- and 4-node trees, 102-123 steps); a longer chain takes fewer, more varied steps
  and gets a wider one. A prediction inside it is one this run has too little power to reject;
  that is not the goal met. The interval holds nothing of the spread between answers (one
  answer's rest rate against another's, step_yields.answer_interval), which is the larger part; at
  T = 0 the text is fixed, so "luck" means the text's own arrangement, not a rerun. Across many
  runs about 1 in 20 right predictions falls outside, and a bias shows as errors of one sign.
It runs after the bench's other lanes, and its evidence is stored (only with --learn) after all of
its runs: every check run starts from the same store, and no other lane of the run sees it.

With --learning-check-running each prompt runs a second time with the same plan and settings,
NOT frozen (RUNNING, run_running): learning re-plans all along, as a Live run does, and every step
after the boundary is predicted by its own tree under the posterior of the steps before it. The
rest's mean prediction against its observed tokens/step is a one-step-ahead (prequential) test
of learning: each prediction is made before its step runs, but later ones have seen more of the
rest than the frozen check's one prediction. Its evidence is never stored.

With --learning-check-across-t, at each temperature after the first, each prompt also runs frozen
with the first run's seed, its learner carrying what the prompt's run at the first temperature
observed (prompt_memory.carried's rule, in memory): a prompt run again at another temperature.

With --learning-check-repeat each prompt runs a second time, frozen like the first, with the seed
plus REPEAT_SEED (at T > 0 another answer to the same prompt; at T = 0 the same answer), its
learner remembering the first run's opening and rest (engine/prompt_memory.py, in memory: the
store on disk is neither read nor written): close to what a user's second run of a prompt gets
(whose start, with --learn, also pools the first run's opening through the key's store). At
T = 0 the memory holds the very rest the repeat predicts: those rows are marked in-sample. Its
evidence is never stored."""
from __future__ import annotations

import time
from dataclasses import replace

from engine import bench_goals, learning, planning, prompt_memory, step_yields
from engine import methods as M
from engine.decoding import generate
from engine.models import encode_prompt
from engine.prompts import Prompt, prompt_mix
from engine.settings import Settings
from engine.tree import Tree

KINDS = ("code", "prose")
FROZEN = ("the tree is frozen at the first step boundary at or after {after} generated tokens: "
          "no re-plans after it, so the prediction is about the tree that ran")


RUNNING = ("with --learning-check-running, a second run of each prompt that keeps re-planning (a Live run): "
           "each step after the boundary predicted by its own tree under the posterior of the steps before it; "
           "the rest's mean prediction over its observed tokens/step")
REPEAT = ("with --learning-check-repeat, a second frozen run of each prompt (seed + {seed}: at T = 0 the same "
          "answer) remembering what the first run observed, its opening and its rest (engine/prompt_memory.py)")
REPEAT_SEED = 1000
ACROSS = ("with --learning-check-across-t, at each later temperature a frozen run of each prompt (the first run's "
          "seed) carrying what its run at T={first:g} observed, its rank-1 misses rescaled by the measured "
          "vectors' (engine/prompt_memory.py carried)")


def check_prompts(prompts: list[Prompt], per_kind: int = 1) -> list[tuple[Prompt, int | None]]:
    """(prompt, index in the bench's prompts or None for a shipped example): the first `per_kind`
    of each kind (fewer where the bench's prompts hold fewer; a shipped example where none)."""
    out = []
    for kind in KINDS:
        found = [(p, i) for i, p in enumerate(prompts) if p.kind == kind][:per_kind]
        out += found or [(p, None) for p in prompt_mix({kind: 1})]
    return out


def learning_plan(pair, config, settings: Settings, vec, prof, prompt: str | None = None) -> planning.PlanResult:
    """The plan the check runs: sequoia-auto (or the DP tree of the largest budget without a
    profile or under --no-auto) for `vec` (or the prompt domain's own vector where code and prose
    differ: planning.vector_for_prompt) pooled with the stored evidence of these settings."""
    own, domain, _ = planning.vector_for_prompt(pair, settings, "sequoia", prompt)
    vec = own or vec
    if config.auto and prof is not None:
        spec = planning.MethodSpec("sequoia-auto", config.auto_max_budget, config.max_depth)
    else:
        n = max(config.budgets)
        spec = planning.MethodSpec("sequoia", n, config.max_depth if n > 1 else 1)
    key = planning.learning_key(pair, settings, domain=domain)
    stored = learning.load(key)
    start = learning.with_stored(vec, stored)
    tree = planning.plan_from_vector(spec, start.probabilities, prof, not settings.greedy)
    return planning.PlanResult(spec, M.sequoia(tree, name=spec.kind), tree.expected_tokens(start.probabilities),
                               start, start.source, True, prof, base_acceptance=vec,
                               learned={"key": key, "positions": int(stored.nodes), "runs": stored.runs},
                               domain=domain)


def run_one(pair, prompt_ids: list[int], result: planning.PlanResult, settings: Settings, after: int,
            memory: prompt_memory.Remembered | None = None):
    """One learning run frozen at the boundary: (row of figures, the Replanner holding its evidence).
    `memory`: what earlier runs of the prompt observed (--learning-check-repeat)."""
    replan = planning.Replanner(pair, result, settings, learn=True, opening=after, memory=memory)
    learner = replan.learner
    frozen = {}

    def plan():
        if frozen:
            return frozen["tree"]
        tree = replan()
        # the step boundary as the learner counts it (its opening is `after`): freeze
        if learner is not None and not learning.in_opening(learner.tokens, after):
            frozen.update(tree=tree, posterior=list(learner.posterior), replans=replan.replans,
                          positions=int(learner.run.nodes), tokens=learner.tokens)
        return tree

    steps, last, t0 = [], None, time.perf_counter()
    for event in generate(pair, prompt_ids, result.method, settings, plan=plan):
        replan.observe(event)
        steps += [event] if event.nodes else []
        last = event
    row = {"method": result.spec.kind, "finish_reason": last.finish_reason, "tokens": last.total_tokens,
           "steps": last.total_steps, "seconds": time.perf_counter() - t0, "frozen": bool(frozen),
           "replans": replan.replans, "start_source": result.acceptance.source,
           "acceptance_domain": result.domain or "pooled", "rest_over_opening": None, "rest_prior_weight": None,
           "rest_drift_kernels": None}
    rest = step_yields.rest_of_run(steps, frozen["tree"], learner.start, after, learner.drift) if frozen else None
    if rest is None:
        row.update(error=None, note=("no learning: the plan drafts nothing" if learner is None else
                                     f"the run ended after {last.total_tokens} tokens, with no step after a "
                                     f"boundary at or after {after} tokens"))
        return row, replan
    tree, n = frozen["tree"], rest["rest_steps"]
    tail = steps[len(steps) - n:]
    kept = sum(len(e.new_token_ids) for e in tail)
    predicted = tree.expected_tokens(frozen["posterior"])
    observed = rest["rest_observed_tokens_per_step"]
    trees = [tuple(tree.parents)] + [tuple(e.tree_parents) for e in tail]
    base = result.base_acceptance
    positions = {"measured": int(base.positions), "stored": result.learned["positions"],
                 "stored_runs": result.learned["runs"], "this_run": frozen["positions"],
                 "remembered": int(learner.remembered.nodes) if memory is not None else 0}   # what it counts past the opening
    positions["total"] = positions["measured"] + positions["stored"] + positions["this_run"] + positions["remembered"]
    row.update(tokens_before=frozen["tokens"], steps_before=len(steps) - n, tokens_after=kept, steps_after=n,
               truncated_tokens_after=sum(rest["rest_step_yields"]) - kept,
               predicted_tokens_per_step=predicted, observed_tokens_per_step=observed,
               observed_interval_95=rest["rest_observed_interval_95"], step_yields_after=rest["rest_step_yields"],
               error=predicted / observed - 1, positions_behind_posterior=positions,
               rest_over_opening=rest["rest_over_opening"], rest_prior_weight=rest["rest_prior_weight"],
               rest_drift_kernels=rest["rest_drift_kernels"],
               remembered=learner.state()["remembered"], posterior=frozen["posterior"], replans_before_freeze=frozen["replans"],
               replans_after_freeze=replan.replans - frozen["replans"],
               tree_changes_after_freeze=sum(a != b for a, b in zip(trees, trees[1:])),
               frozen_tree={"nodes": tree.size, "depth": tree.depth, "parents": list(tree.parents)})
    return row, replan


def run_running(pair, prompt_ids: list[int], result: planning.PlanResult, settings: Settings, after: int) -> dict:
    """One learning run that is never frozen (RUNNING): the rest's steps, each predicted before it
    ran (the expected tokens of the tree the step ran, as the Decoder cut it to the context, under
    the learner's posterior when the Replanner gave its tree), against the rest's observed yields
    (step_yields.step_yield, the same boundary as step_yields.split_at)."""
    replan = planning.Replanner(pair, result, settings, learn=True, opening=after)
    learner = replan.learner
    if learner is None:
        return {"error": None, "note": "no learning: the plan drafts nothing"}
    # keyed by the events observed so far: the Decoder asks once more before its first step
    # (check_fits), and the step's own request replaces that one
    posteriors: dict[int, list[float]] = {}
    events_seen, replans_before_rest = 0, None

    def plan():
        nonlocal replans_before_rest
        tree = replan()
        if not learning.in_opening(learner.tokens, after):   # this step is one of the rest's
            posteriors[events_seen] = list(learner.posterior)
            if replans_before_rest is None:
                replans_before_rest = replan.replans
        return tree

    steps = []
    for event in generate(pair, prompt_ids, result.method, settings, plan=plan):
        replan.observe(event)   # before the next plan(): each tree depends on the past only
        events_seen += 1
        if event.nodes:
            steps.append(event)
    _, rest = step_yields.split_at(steps, after)
    if not rest or len(rest) != len(posteriors):
        return {"error": None, "note": f"{len(rest)} steps after the boundary, {len(posteriors)} predicted"}
    predicted = [Tree(tuple(e.tree_parents)).expected_tokens(post) for e, post in zip(rest, posteriors.values())]
    yields = [step_yields.step_yield(e) for e in rest]
    mean_predicted, observed = sum(predicted) / len(predicted), sum(yields) / len(yields)
    trees = [tuple(e.tree_parents) for e in rest]
    return {"predicted_tokens_per_step": mean_predicted, "observed_tokens_per_step": observed,
            "error": mean_predicted / observed - 1, "first_prediction": predicted[0], "steps_after": len(rest),
            "step_predictions": predicted, "step_yields_after": yields,
            "replans_after": replan.replans - replans_before_rest,   # those made for the rest's steps
            "tree_changes_after": sum(a != b for a, b in zip(trees, trees[1:]))}


def run_across(pair, prompt_ids: list[int], result: planning.PlanResult, settings: Settings, after: int,
               first: learning.Learner | None, first_label: str) -> dict:
    """The prompt's run at a later temperature (ACROSS): frozen like its first run there, carrying
    the first temperature's run, rescaled as prompt_memory.carried does."""
    if first is None:
        return {"error": None, "note": "no learning: the plan drafts nothing"}
    ratio = prompt_memory.miss_ratio(1.0 - result.measured_acceptance.probabilities[0], 1.0 - first.base[0])
    if ratio is None:
        return {"error": None, "note": "a vector whose rank 1 never misses: no ratio to rescale by"}
    memory = prompt_memory.carried_to(prompt_memory.Remembered(first.head, first.tail, 1), ratio, first_label)
    row, _ = run_one(pair, prompt_ids, result, settings, after, memory=memory)
    return {**row, "carried_from": first_label, "miss_ratio": ratio}


def run_repeat(pair, prompt_ids: list[int], result: planning.PlanResult, settings: Settings, after: int,
               first: learning.Learner | None) -> dict:
    """The prompt's second run (REPEAT): frozen like the first, another seed, remembering the first
    run's opening and rest."""
    if first is None:
        return {"error": None, "note": "no learning: the plan drafts nothing"}
    memory = prompt_memory.Remembered(first.head, first.tail, 1)
    again = replace(settings, seed=settings.seed + REPEAT_SEED)
    row, _ = run_one(pair, prompt_ids, result, again, after, memory=memory)
    return row


def run_check(pair, prompts: list[Prompt], config, vectors: dict, prof, say=print, costs: dict | None = None) -> dict:
    """Every (temperature, kind) run; `vectors` maps each bench temperature to its acceptance vector,
    `costs` (optional) to the corrected costs to plan with there (engine/observed.py), else `prof`."""
    after, tokens = config.learning_check_after, config.learning_check_tokens
    rows, replanners, firsts = [], [], {}   # firsts: the first temperature's learner per prompt
    for temperature in config.temperatures:
        for prompt, index in check_prompts(prompts, config.learning_check_prompts):
            settings = Settings(temperature=temperature, top_p=config.top_p, top_k=config.top_k,
                                max_new_tokens=after + tokens, seed=config.seed + (index or 0), ignore_eos=True)
            plan_costs = (costs or {}).get(temperature) or prof
            result = learning_plan(pair, config, settings, vectors[temperature], plan_costs, prompt.text)
            ids = encode_prompt(pair, prompt.text, config.chat)
            row, replan = run_one(pair, ids, result, settings, after)
            row = {"temperature": temperature, "kind": prompt.kind, "prompt": prompt.title,
                   "prompt_source": "bench" if index is not None else "assets", **row}
            rows.append(row)
            replanners.append(replan)
            err = row["error"]
            say(f"learning check T={temperature:g} {prompt.kind}: " + (row["note"] if err is None else
                f"predicted {row['predicted_tokens_per_step']:.2f} vs observed {row['observed_tokens_per_step']:.2f} "
                f"tok/step over the last {row['tokens_after']} tokens ({err:+.1%})"))
            if config.learning_check_running:
                row["running"] = running = run_running(pair, ids, result, settings, after)
                say("  running (re-planned all along): " + (running["note"] if running["error"] is None else
                    f"mean prediction {running['predicted_tokens_per_step']:.2f} vs observed "
                    f"{running['observed_tokens_per_step']:.2f} tok/step ({running['error']:+.1%})"))
            if temperature == config.temperatures[0]:
                firsts[prompt.title] = replan.learner
            elif config.learning_check_across:
                label = prompt_memory.settings_label({"temperature": config.temperatures[0], "top_p": config.top_p,
                                                      "top_k": config.top_k})
                row["across"] = run_across(pair, ids, result, settings, after, firsts.get(prompt.title), label)
                say(f"  carrying the run at {label}: " + _outcome(row["across"]))
            if config.learning_check_repeat:
                row["repeat"] = run_repeat(pair, ids, result, settings, after, replan.learner)
                say(f"  repeated{_in_sample(temperature)}, remembering the first run: " + _outcome(row["repeat"]))
    stored = bool(config.learn)
    for replan in replanners if stored else ():
        replan.finish()
    return {"after": after, "tokens": tokens, "frozen": FROZEN.format(after=after), "evidence_stored": stored,
            **({"running": RUNNING} if config.learning_check_running else {}),
            **({"repeat": REPEAT.format(seed=REPEAT_SEED)} if config.learning_check_repeat else {}),
            **({"across": ACROSS.format(first=config.temperatures[0])} if config.learning_check_across else {}),
            "storage": ("stored after all check runs (--learn), so none of them, nor any other lane, "
                        "started from another check run's evidence" if stored
                        else "not stored (--no-learn)"),
            "runs": rows}


def format_check(check: dict | None) -> str:
    """The printed section of the report."""
    if not check:
        return ""
    groups = bench_goals.learning_runs_by_setting(check["runs"])
    per = max(map(len, groups.values()), default=0)
    lines = [f"learning check ({check['after']} + {check['tokens']} tokens, "
             f"{'one run' if per == 1 else f'up to {per} runs'} per temperature and kind): "
             f"{check['frozen']}; evidence {check['storage']}"]
    for r in check["runs"]:
        head = f"  T={r['temperature']:g} {r['kind']:<5} {r['method']} ({r['prompt']}): "
        if r["error"] is None:
            lines.append(head + r["note"])
            continue
        p = r["positions_behind_posterior"]
        lines.append(head + f"{r['tokens_before']} tok / {r['steps_before']} steps before "
                     f"({r['replans_before_freeze']} re-plans), {r['tokens_after']} tok / {r['steps_after']} "
                     f"steps after "
                     f"({r['truncated_tokens_after']} cut); predicted {r['predicted_tokens_per_step']:.2f}, observed "
                     f"{r['observed_tokens_per_step']:.2f}{_interval(r)} tok/step ({r['error']:+.1%}); "
                     f"posterior from {p['total']} "
                     f"positions ({p['measured']} measured + {p['stored']} stored + {p['this_run']} this run"
                     + (f" + {p['remembered']} remembered" if p.get("remembered") else "")
                     + (f", drifted to the rest by {r['rest_over_opening']:.3f}"
                        if r.get("rest_over_opening") not in (None, 1.0) else "")
                     + (f", prior worth {r['rest_prior_weight']:g}" if r.get("rest_prior_weight") is not None else "")
                     + (f", drift measured on {r['rest_drift_kernels']} draft kernels"
                        if r.get("rest_drift_kernels") else "")
                     + "); "
                     f"re-plans after the freeze {r['replans_after_freeze']}")
        running = r.get("running")
        if running:
            lines.append("      running (re-planned all along): " + (running["note"] if running["error"] is None else
                         f"mean prediction {running['predicted_tokens_per_step']:.2f} (first "
                         f"{running['first_prediction']:.2f}) vs observed {running['observed_tokens_per_step']:.2f} "
                         f"tok/step over {running['steps_after']} steps ({running['error']:+.1%}); "
                         f"{running['replans_after']} re-plans and {running['tree_changes_after']} tree changes "
                         "after the boundary"))
        across = r.get("across")
        if across:
            lines.append(f"      carrying the run at {across.get('carried_from', '?')}: " + (
                across["note"] if across["error"] is None else
                f"predicted {across['predicted_tokens_per_step']:.2f} vs observed "
                f"{across['observed_tokens_per_step']:.2f}{_interval(across)} tok/step over the last "
                f"{across['tokens_after']} tokens ({across['error']:+.1%}); "
                f"{(across.get('remembered') or {}).get('positions', 0)} positions carried, rank-1 misses "
                f"x{across['miss_ratio']:.3f}"))
        again = r.get("repeat")
        if again:
            lines.append(f"      repeated{_in_sample(r['temperature'])}, remembering the first run: " + (again["note"] if again["error"] is None else
                         f"predicted {again['predicted_tokens_per_step']:.2f} vs observed "
                         f"{again['observed_tokens_per_step']:.2f}{_interval(again)} tok/step over the last "
                         f"{again['tokens_after']} tokens ({again['error']:+.1%}); "
                         f"{(again.get('remembered') or {}).get('positions', 0)} positions remembered"))
    lines += _tallies(groups)
    return "\n".join(lines)


def _outcome(row: dict) -> str:
    """A check run's note, or its prediction against what it observed."""
    if row["error"] is None:
        return row["note"]
    return (f"predicted {row['predicted_tokens_per_step']:.2f} vs observed {row['observed_tokens_per_step']:.2f} "
            f"tok/step ({row['error']:+.1%})")


def _in_sample(temperature: float) -> str:
    """At T = 0 a repeat is the same answer: its memory holds the very rest it predicts."""
    return " (the same answer: in-sample)" if temperature == 0 else ""


def _interval(row: dict) -> str:
    """' (95 % a-b)': the rest's own interval, where the row has one."""
    ci = row.get("observed_interval_95")
    return f" (95 % {ci[0]:.2f}-{ci[1]:.2f})" if ci else ""


def inside_interval(row: dict) -> bool | None:
    """Whether the prediction lies inside the rest's own 95 % interval (None without one)."""
    ci = row.get("observed_interval_95")
    return None if not ci or row.get("error") is None else ci[0] <= row["predicted_tokens_per_step"] <= ci[1]


def _tallies(groups: dict[tuple[float, str], list[dict]]) -> list[str]:
    """Per temperature with more than one run of a kind: how many runs of each kind met the goal,
    and how many predictions lay inside the rest's own 95 % interval."""
    out = []
    for t in sorted({t for t, _ in groups}):
        kinds = [(kind, groups[(t, kind)]) for kind in KINDS if (t, kind) in groups]
        if max((len(rs) for _, rs in kinds), default=0) > 1:
            out.append(f"  T={t:g}: within 10 %: " + ", ".join(
                f"{kind} {sum(bench_goals.learning_met(r['error']) for r in rs)} of {len(rs)}" for kind, rs in kinds)
                + "; inside the rest's own 95 % interval: " + ", ".join(
                f"{kind} {sum(inside_interval(r) is True for r in rs)} of "
                f"{sum(inside_interval(r) is not None for r in rs)}" for kind, rs in kinds))
            for part, name in (("running", "running"), ("across", "carrying the first temperature's run"),
                               ("repeat", f"repeated{_in_sample(t)}")):
                ran = [(kind, [r[part] for r in rs if (r.get(part) or {}).get("error") is not None])
                       for kind, rs in kinds]
                if any(rs for _, rs in ran):
                    out.append(f"  T={t:g} {name}: within 10 %: " + ", ".join(
                        f"{kind} {sum(bench_goals.learning_met(r['error']) for r in rs)} of {len(rs)}"
                        for kind, rs in ran))
    return out
