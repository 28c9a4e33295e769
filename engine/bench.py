"""Side-by-side measurements of the decoding methods on one pair: tokens/s, tokens/step, speedup
over autoregressive, predicted vs observed tokens/step, time split, peak memory; as a table,
JSON and a plot (ARCHITECTURE.md: engine/bench.py; issue 6). This module measures; a run's
predictions are engine/bench_predictions.py, its steps' yields engine/step_yields.py, the rows
engine/bench_aggregate.py, showing the report engine/bench_report.py.

How a run is made (so that the numbers can be trusted and compared):
- One `Settings` per (temperature, prompt): every method decodes the same prompt with the same
  seed. At T=0 every method must reproduce the autoregressive tokens (checked, `matches_ar`).
- Methods run interleaved, step by step (engine/interleave.py): for prompt i every method's
  generation is a Lane, and run_together always advances the lane furthest behind (share of its
  max-new-tokens), so all lanes of a prompt spread their steps over the same minutes and the
  machine's drifting speed (plain decoding took 83-137 ms per token within one run here when
  methods ran one after another) reaches them alike. Ties go in an order that rotates with the
  prompt.
- A warm-up generation per method (warmup_tokens, 8) runs first and is not counted, except for
  peak memory, which is measured there (interleaved runs share one process-wide peak), and its
  step costs, which calibrate the plans like any earlier run's: the machine's speed moves in
  phases (a profile timed t(1) at 77 ms a minute before a benchmark whose plain decoding ran at
  130-140 ms per token), so the first prompt is not planned from the profile alone.
- Times are wall-clock around the lane's own steps (prefill excluded; a lane's clock stops while
  other lanes step): `draft_seconds` and `verify_seconds` are the engine's per-step timers,
  `other_seconds` is everything else of the decode wall time (walk, KV commit, bookkeeping,
  text decoding, event building). So draft + verify + other = the decode wall time that
  tokens/s is computed from.
- Speedup over autoregressive is paired: the ratio of tokens/s on the same prompt in the same
  run, then the median over prompts.
- Predicted tokens/step is F(tree) under the positional acceptance model with the acceptance
  vector in use (the DP's G(n, d) for Sequoia trees); it is only given where the model applies
  (Sequoia sampler and chains at any temperature; SpecInfer at T=0 where it is greedy too).
- Acceptance vectors and the device profile come from the cache when present, else they are
  measured in this run; the JSON says which (`measured_in_run`, `source`).
- Tokens/step counts each step with its full verified yield (accepted nodes + bonus), also the
  last step of a run that max-new-tokens cut: by Wald's identity (the number of steps is a
  stopping time) pooled yields over pooled steps is then an unbiased estimate of the mean yield
  per step, which is what F(tree) predicts. Counting the cut step with the tokens kept biased it
  low (-5 % at 48 tokens); dropping the cut step biases it low too (the step that crosses the
  limit tends to be a long one). tokens/s still counts only the tokens kept.
- Learning (`learn`, on by default): each run's censored acceptance outcomes are added to the
  stored learned evidence (engine/learning.py); the trees under test stay fixed (planned from
  the measured vector), so predicted vs observed compares the measured vector. With runs of
  more than LEARN_AFTER tokens, `rest_*` says how well the posterior after the first LEARN_AFTER
  tokens (for the rest of the answer where a measured drift applies, engine/answer_drift.py)
  predicts the rest of the run.
- `learning_check` (off by default): after every other lane, one learning run of the
  hardware-aware plan per temperature on a code and a prose prompt, re-planning until
  learning_check_after (64) tokens and frozen after; see engine/bench_learning.py.
"""
from __future__ import annotations

import logging
import os
import platform
import re
import resource
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from engine import answer_drift, bench_goals, learning, observed, profiler
from engine import methods as M
from engine.bench_aggregate import aggregate, auto_label, observed_costs
from engine.bench_predictions import prompts_per_vector, prompts_sharing, run_prediction
from engine.decoding import generate
from engine.errors import UserError
from engine.interleave import Lane, run_together
from engine.models import ModelPair, encode_prompt
from engine.prompts import (HELDOUT_PROMPTS, Prompt, asset_prompts, prompt_mix, prompt_set,  # noqa: F401
                            prompts_from_texts)
from engine.planning import (TABLE_DEPTH, hardware_aware, learning_key, learns_from, predict, table_for,
                             vector_for_prompt)
from engine.settings import Settings
from engine.step_yields import rest_of_run, step_yield
from engine.tree import Tree

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
LEARN_AFTER = answer_drift.OPENING  # tokens (64): rest_* and --learning-check compare the posterior after these with the rest


# ------------------------------------------------------------------ configuration
@dataclass
class BenchConfig:
    temperatures: tuple[float, ...] = (0.0, 0.7)
    top_p: float = 1.0
    top_k: int = 0                                    # 0 = off; transformers' order: temperature, top-k, top-p
    max_new_tokens: int = 32
    budgets: tuple[int, ...] = (4, 8, 16, 32)        # Sequoia DP trees (nodes, root included)
    max_depth: int = TABLE_DEPTH                      # depth bound handed to the DP
    chain_depths: tuple[int, ...] = (3, 5, 7)         # levels, root included
    specinfer: tuple[tuple[int, int], ...] = ((2, 4), (5, 4))  # (width k, depth d incl. root)
    match_specinfer: bool = True                      # also run Sequoia at each SpecInfer node count
    auto: bool = True                                 # Sequoia hardware-aware
    auto_max_budget: int = 64
    seed: int = 0
    ignore_eos: bool = False
    chat: bool | None = None
    warmup_tokens: int = 8                            # per method, untimed; its step costs calibrate the plans
    acceptance_width: int = 16
    acceptance_tokens: int = 32
    acceptance_prompts: str = "bench"                 # "bench" (the benchmark prompts) or "assets" (all examples)
    profile_max_budget: int = 64
    profile_repeats: int = 3
    fresh: bool = False                               # measure acceptance + profile even if cached
    learn: bool = True                                # store what runs observe (engine/learning.py)
    compare_default_kernels: bool = False             # also time plain decoding on --cpu-kernels default
    learning_check: bool = False                      # issue 15: learning's prediction after 64 tokens
    learning_check_tokens: int = 256                  # tokens the check runs after the boundary
    learning_check_after: int = LEARN_AFTER           # the boundary (generated tokens)
    learning_check_prompts: int = 1                   # check runs per prompt kind (the first of each)
    learning_check_running: bool = False              # also a run per prompt that keeps re-planning
    learning_check_repeat: bool = False               # also a second run per prompt remembering the first
    learning_check_across: bool = False               # also a run per prompt at later T carrying the first T's

    def to_dict(self) -> dict:
        d = asdict(self)
        d["specinfer"] = [f"{k}x{dd}" for k, dd in self.specinfer]
        return d


# The bench's prompts: code and prose of the kinds the shipped vectors were measured on, written
# apart from them and never measured on. The app's examples (assets/prompts.json) are canonical
# tasks and programming-themed prose, easier than both sets, so predictions there lean low
# (bench/predictions-and-learning.md, "Predictions on held-out prompts").
BENCH_PROMPTS = HELDOUT_PROMPTS
DEFAULT_PROMPT_MIX = {"code": 2, "prose": 2}
QUICK = dict(temperatures=(0.0, 0.7), max_new_tokens=12, budgets=(4, 8), chain_depths=(2, 3),
             specinfer=((2, 3),), auto_max_budget=8, warmup_tokens=2, acceptance_width=8,
             acceptance_tokens=12, acceptance_prompts="bench", profile_max_budget=8, profile_repeats=1)
QUICK_PROMPT_MIX = {"code": 1, "prose": 1}


def default_prompts(mix: dict[str, int] | None = None, source: list[Prompt] | None = None) -> list[Prompt]:
    """The first prompts of each kind from `source` (default BENCH_PROMPTS; 2 code + 2 prose by default)."""
    return prompt_mix(DEFAULT_PROMPT_MIX if mix is None else mix,
                      prompt_set(BENCH_PROMPTS) if source is None else source)


# ------------------------------------------------------------------ measurement helpers
class PeakMemory:
    """Peak memory of one run. CUDA: torch's peak allocated bytes. CPU: the process's peak
    resident set (VmHWM), reset before each run through /proc/self/clear_refs; where that
    reset is not available the value is the process's lifetime peak and `kind` says so."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cuda":
            self.kind = "torch.cuda.max_memory_allocated"
        elif self._reset_cpu():
            self.kind = "process peak RSS (VmHWM, reset per run)"
        else:
            self.kind = "process lifetime peak RSS (no per-run reset available)"

    @staticmethod
    def _reset_cpu() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            return _vm_hwm() is not None
        except OSError:
            return False

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif "reset per run" in self.kind:
            self._reset_cpu()

    def current(self) -> int | None:
        """Memory in use now (the baseline a run's peak is compared with)."""
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return _vm_field("VmRSS")

    def peak(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        hwm = _vm_hwm()
        if hwm is not None:
            return hwm
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _vm_field(name: str) -> int | None:
    try:
        m = re.search(name + r":\s+(\d+)\s*kB", Path("/proc/self/status").read_text())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def _vm_hwm() -> int | None:
    return _vm_field("VmHWM")


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def describe_machine(pair: ModelPair) -> dict:
    info = profiler.machine_description(pair.device)
    info.update(cpu_count=os.cpu_count(), torch_interop_threads=torch.get_num_interop_threads(),
                dtype=str(pair.dtype).replace("torch.", ""), machine=platform.machine(),
                load_average_start=load_average())
    try:
        import psutil
        vm = psutil.virtual_memory()
        info.update(memory_total_bytes=int(vm.total), memory_available_bytes_start=int(vm.available))
    except ImportError:
        pass
    if pair.device.type == "cuda":
        props = torch.cuda.get_device_properties(pair.device)
        info.update(gpu_memory_bytes=int(props.total_memory), cuda=torch.version.cuda)
    return info


# ------------------------------------------------------------------ methods to run
@dataclass
class MethodSpec:
    family: str                 # ar | chain | specinfer | sequoia | sequoia-auto
    method: M.Method
    budget: int | None = None   # Sequoia: the node budget handed to the DP
    width: int | None = None    # chain 1, SpecInfer k
    matched_to: str | None = None
    predicted_tokens_per_step: float | None = None
    predicted_tokens_per_second: float | None = None
    predicted_speedup: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tree(self) -> Tree:
        return self.method.tree

    @property
    def key(self) -> str:
        t = self.tree
        if self.family in ("ar", "ar-default-kernels"):
            return self.family
        if self.family == "chain":
            return f"chain d={t.depth}"
        if self.family == "specinfer":
            return f"specinfer {self.width}x{t.depth}"
        if self.family == "sequoia-auto":
            return "sequoia-auto"  # planned per prompt: the runs carry their own trees
        return f"{self.family} n={t.size} d={t.depth}"


def build_methods(config: BenchConfig, temperature: float, acceptance: list[float],
                  prof: profiler.DeviceProfile | None) -> list[MethodSpec]:
    greedy = temperature == 0
    need = max([*config.budgets, config.auto_max_budget if config.auto else 1,
                *[k * (d - 1) + 1 for k, d in config.specinfer]])
    table = table_for(acceptance, need, config.max_depth)
    specs = [MethodSpec("ar", M.autoregressive(), width=None)]
    if config.compare_default_kernels:  # runs on a second copy of the pair (run_bench's baseline_pair)
        specs.append(MethodSpec("ar-default-kernels", M.autoregressive(), width=None))
    specs += [MethodSpec("chain", M.chain(d), width=1) for d in config.chain_depths]
    specs += [MethodSpec("specinfer", M.specinfer(k, d), width=k) for k, d in config.specinfer]
    budgets = {int(b): None for b in config.budgets}
    if config.match_specinfer:
        for k, d in config.specinfer:
            n = k * (d - 1) + 1
            budgets.setdefault(n, f"specinfer {k}x{d}")
            if budgets[n] is None:
                budgets[n] = f"specinfer {k}x{d}"
            elif f"{k}x{d}" not in budgets[n]:
                budgets[n] += f", specinfer {k}x{d}"
    for n in sorted(budgets):
        if n < 1:
            raise UserError(f"budgets must be at least 1 node (got {n})")
        depth = config.max_depth if n > 1 else 1
        tree = table.tree(n, depth)
        specs.append(MethodSpec("sequoia", M.sequoia(tree), budget=n, matched_to=budgets[n],
                                predicted_tokens_per_step=table.expected(n, depth)))
    if config.auto:
        if prof is None:
            raise UserError("the hardware-aware method needs a device profile")
        choice = hardware_aware(acceptance, prof, config.auto_max_budget, config.max_depth, not greedy)
        specs.append(MethodSpec("sequoia-auto", M.sequoia(choice.tree, name="sequoia-auto"), budget=choice.n,
                                predicted_tokens_per_step=choice.predicted_tokens_per_step,
                                extra={"chosen_budget": choice.n, "chosen_depth_bound": choice.d,
                                       "search_budgets": [1, config.auto_max_budget],
                                       "search_depths": [1, config.max_depth]}))
    for s in specs:
        if s.predicted_tokens_per_step is None and (s.method.sampler == "sequoia" or greedy):
            s.predicted_tokens_per_step = s.tree.expected_tokens(acceptance)
    if prof is not None:
        for s in specs:
            if s.predicted_tokens_per_step is None:
                continue
            pred = predict(s.tree, acceptance, prof, not greedy)
            s.predicted_tokens_per_second, s.predicted_speedup = pred.tokens_per_second, pred.speedup
    return specs


# ------------------------------------------------------------------ one run
def lane_result(pair: ModelPair, lane: Lane) -> dict:
    """A finished lane's decode wall time (prefill excluded) and its split, tokens, yields, events."""
    events, last = lane.events, lane.events[-1]
    draft = sum(e.draft_seconds for e in events)
    verify = sum(e.verify_seconds for e in events)
    decode = max(lane.wall - last.prefill_seconds, 1e-12)
    steps = [e for e in events if e.nodes]
    yields = [step_yield(e) for e in steps]
    step_tokens = sum(yields)
    return {"tokens": last.total_tokens, "steps": last.total_steps, "seconds": decode,
            "step_tokens": step_tokens, "truncated_tokens": step_tokens - sum(len(e.new_token_ids) for e in steps),
            "step_yields": yields,
            "events": steps,
            "prefill_seconds": last.prefill_seconds, "draft_seconds": draft, "verify_seconds": verify,
            "other_seconds": max(decode - draft - verify, 0.0),
            "engine_other_seconds": sum(e.other_seconds for e in events),
            "tokens_per_second": last.total_tokens / decode,
            "tokens_per_step": step_tokens / last.total_steps if last.total_steps else 0.0,
            "finish_reason": last.finish_reason, "token_ids": list(last.token_ids),
            "cpu_utilisation": (lane.cpu / lane.wall / max(torch.get_num_threads(), 1)
                                if pair.device.type == "cpu" and lane.wall > 0 else None)}


def new_lane(pair: ModelPair, prompt_ids: list[int], spec: MethodSpec, settings: Settings) -> Lane:
    return Lane(spec.key, generate(pair, prompt_ids, spec.method, settings), settings.max_new_tokens)


def run_once(pair: ModelPair, prompt_ids: list[int], spec: MethodSpec, settings: Settings,
             memory: PeakMemory | None = None) -> dict:
    """One generation on its own (the warm-up, tests); with `memory`, its peak memory."""
    base = None
    if memory:
        base = memory.current()
        memory.reset()
    lane = new_lane(pair, prompt_ids, spec, settings)
    for _ in run_together([lane]):
        pass
    peak = memory.peak() if memory else None
    return {**lane_result(pair, lane), "peak_memory_bytes": peak,
            "peak_memory_above_start_bytes": peak - base if peak is not None and base is not None else None}


# ------------------------------------------------------------------ the whole benchmark
def run_bench(pair: ModelPair, prompts: list[Prompt], config: BenchConfig,
              progress: Progress | None = None, baseline_pair: ModelPair | None = None) -> dict:
    """baseline_pair: the same models on --cpu-kernels default, for the ar-default-kernels lane."""
    say = progress or log.info
    if not prompts:
        raise UserError("no prompts to benchmark")
    if config.compare_default_kernels and baseline_pair is None:
        raise UserError("comparing with the default CPU kernels needs the pair loaded a second time on them")
    started, wall0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.perf_counter()
    machine = describe_machine(pair)
    machine["cpu_kernels"] = {"mode": pair.cpu_kernels_mode, **pair.cpu_kernels}
    memory = PeakMemory(pair.device)
    machine["peak_memory_kind"] = memory.kind
    ids = [encode_prompt(pair, p.text, config.chat) for p in prompts]
    acc_texts = ([p.text for p in prompts] if config.acceptance_prompts == "bench"
                 else [p.text for p in asset_prompts()])

    prof, prof_info = None, None
    if config.auto:
        prof, prof_info = _profile(pair, config, say)

    runs: list[dict] = []
    acceptance_info: dict[str, dict] = {}
    specs_by_t: dict[float, list[MethodSpec]] = {}
    vectors = {}
    loads = []
    costs_seen = observed.Observations()  # step costs of this run's earlier runs (never the user's store)
    warmups: dict[str, dict] = {}
    for temperature in config.temperatures:
        vec, info = _acceptance(pair, config, temperature, acc_texts, say)
        acceptance_info[_tkey(temperature)] = info
        vectors[temperature] = vec
        specs = build_methods(config, temperature, vec.probabilities, prof)
        specs_by_t[temperature] = specs
        say(f"T={temperature}: {len(specs)} methods: " + ", ".join(s.key for s in specs))
        warm = Settings(temperature=temperature, top_p=config.top_p, top_k=config.top_k,
                        max_new_tokens=config.warmup_tokens,
                        seed=config.seed, ignore_eos=True)
        memory_of = {}  # key -> the warm-up's peak memory (timed runs are interleaved: see DEFINITIONS)
        warm_steps = 0
        if config.warmup_tokens > 0:
            for s in specs:  # excluded from every figure but memory; its step costs calibrate the plans
                w = run_once(_runs_on(s, pair, baseline_pair), ids[0], s, warm, memory)
                memory_of[s.key] = {k: w[k] for k in ("peak_memory_bytes", "peak_memory_above_start_bytes")}
                if prof is not None and s.family != "ar-default-kernels":
                    observed.add_events(costs_seen, prof, w["events"], temperature > 0)
                    warm_steps += sum(1 for e in w["events"] if e.step > 1)  # add_events skips first steps
        warmups[_tkey(temperature)] = {"tokens": config.warmup_tokens, "observed_steps": warm_steps}
        sharing = prompts_per_vector(pair, prompts, Settings(temperature=temperature, top_p=config.top_p,
                                                              top_k=config.top_k))
        # a vector measured in this run on these very prompts: they are not new to it
        measured_here = info["measured_in_run"] and config.acceptance_prompts == "bench"
        for i, prompt in enumerate(prompts):
            settings = Settings(temperature=temperature, top_p=config.top_p, top_k=config.top_k,
                                max_new_tokens=config.max_new_tokens,
                                seed=config.seed + i, ignore_eos=config.ignore_eos)
            own, domain, why = vector_for_prompt(pair, settings, "sequoia", prompt.text)
            acceptance_info[_tkey(temperature)].setdefault("per_prompt", {})[str(i)] = {
                "domain": domain or "pooled", "note": why.lstrip("; ") or "pooled vector (no code/prose vectors)",
                "positions": (own or vec).positions, "source": (own or vec).source}
            # every lane of the prompt is planned and predicted from the step costs of the warm-up
            # and the earlier prompts' runs (the app plans a request from what it observed before
            # it), then all lanes run interleaved step by step (run_together)
            costs = observed.corrected(prof, costs_seen, temperature > 0)  # None without a profile
            behind = costs_seen.steps
            shift = i % len(specs)
            planned = [_auto_for_prompt(s, config, own or vec, costs, temperature)
                       for s in specs[shift:] + specs[:shift]]
            load = load_average()
            runs_on = [_runs_on(s, pair, baseline_pair) for s in planned]
            lanes = [new_lane(p, ids[i], s, settings) for p, s in zip(runs_on, planned)]
            for _ in run_together(lanes):  # interleaved step by step: engine/interleave.py
                pass
            # every lane's rest-of-run check starts from the store as it was before this prompt
            stored = learning.load(learning_key(pair, settings, domain=domain)) if config.learn else None
            learners = []
            for s, lane, p in zip(planned, lanes, runs_on):
                r = lane_result(p, lane)
                r.update(temperature=temperature, method=s.family, key=s.key, prompt=i, kind=prompt.kind,
                         load_average=load, load_average_after=load_average(),
                         **memory_of.get(s.key, dict.fromkeys(("peak_memory_bytes", "peak_memory_above_start_bytes"))),
                         **run_prediction(s, own or vec, prof, costs, behind, temperature,
                                           *prompts_sharing(sharing, domain, prompt.kind, own is None and measured_here),
                                           config.max_new_tokens))
                r.update(nodes=s.tree.size, depth=s.tree.depth)
                if s.family == "sequoia-auto":
                    r.update(parents=list(s.tree.parents))
                if prof is not None and s.family != "ar-default-kernels":  # that lane runs on other kernels
                    observed.add_events(costs_seen, prof, r["events"], temperature > 0)
                learner = _learner(pair, config, settings, s, r, own or vec, stored, domain)
                learners += [learner] if learner is not None else []
                runs.append(r)
                name = auto_label(s.tree.size, s.tree.depth) if s.family == "sequoia-auto" else s.key
                say(f"T={temperature} prompt {i + 1}/{len(prompts)} {name:<24s} {r['tokens']:3d} tok "
                    f"{r['steps']:3d} steps {r['tokens_per_second']:6.2f} tok/s {r['tokens_per_step']:5.2f} tok/step "
                    f"(load {load[0] if load else '?'}; {time.perf_counter() - wall0:.0f} s elapsed)")
            _store_prompt(learners, settings, acceptance_info[_tkey(temperature)], domain)
            loads.append(load[0] if load else None)
    check = None
    if config.learning_check:  # after every other lane: its evidence never reaches them
        from engine import bench_learning
        # planned from the costs the hardware-aware lanes saw last (profile + this run's observations)
        costs = {t: observed.corrected(prof, costs_seen, t > 0) for t in config.temperatures}
        check = bench_learning.run_check(pair, prompts, config, vectors, prof, say, costs=costs)
    machine["load_average_end"] = load_average()
    seen = [x for x in loads if x is not None]
    if seen:
        machine["load_average_1min_during_runs"] = {"min": min(seen), "median": statistics.median(seen),
                                                    "max": max(seen)}
    try:
        import psutil
        machine["memory_available_bytes_end"] = int(psutil.virtual_memory().available)
    except ImportError:
        pass

    results = aggregate(runs, specs_by_t)
    machine["observed_costs"] = observed_costs(runs)
    out = {"machine": machine, "pair": pair.describe(), "config": config.to_dict(),
           "prompts": [asdict(p) for p in prompts], "acceptance": acceptance_info, "profile": prof_info,
           "results": results, "goals": (bench_goals.evaluate_goals(results) + bench_goals.loaded_pair_goals(pair, prof)
                                         + bench_goals.learning_check_goals(check)),
           "learning_check": check, "warmup": warmups,
           "started_at": started, "wall_seconds": time.perf_counter() - wall0,
           "definitions": DEFINITIONS,
           "runs": [{k: v for k, v in r.items() if k not in ("token_ids", "events")} for r in runs]}
    return out


def _auto_for_prompt(spec: MethodSpec, config: BenchConfig, vec, costs, temperature: float) -> MethodSpec:
    """The hardware-aware lane as the app plans it for this prompt: its domain's vector (else the
    pooled one) and the profile corrected by the step costs of the warm-up and the earlier
    prompts' runs (this bench's only)."""
    if spec.family != "sequoia-auto" or costs is None:
        return spec
    choice = hardware_aware(vec.probabilities, costs, config.auto_max_budget, config.max_depth, temperature > 0)
    return replace(spec, method=M.sequoia(choice.tree, name="sequoia-auto"), budget=choice.n,
                   predicted_tokens_per_step=choice.predicted_tokens_per_step,
                   extra={**spec.extra, "chosen_budget": choice.n, "chosen_depth_bound": choice.d})


def _learner(pair, config: BenchConfig, settings: Settings, spec: MethodSpec, r: dict, vec, stored,
             domain: str = "") -> "learning.Learner | None":
    """Learning on: the run's learner (its censored outcomes, sorted into opening and rest as a Live
    run's with the same drift), to be stored with the prompt's other lanes (_store_prompt); adds the
    rest-of-run check to the run. `stored`: the store as it was before this prompt's lanes."""
    events = r.pop("events")
    if not (config.learn and spec.method.uses_draft and learns_from(spec.method, settings)):
        return None
    key = learning_key(pair, settings, domain=domain)
    start = learning.with_stored(vec, stored).probabilities
    drift = answer_drift.drift_for(pair.draft_name, pair.target_name, domain, settings.max_new_tokens,
                                   draft_kernels=profiler.draft_kernels(pair))
    rest = rest_of_run(events, spec.tree, start, drift=drift)
    if rest is not None:
        rest.pop("rest_step_yields")   # the row's step_yields hold them
        r.update(rest)
    meta = {"draft": pair.draft_name, "target": pair.target_name, "temperature": settings.temperature,
            "top_p": settings.top_p, "sampler": "greedy" if settings.greedy else "sequoia"}
    learner = learning.Learner(start, key, meta, base=vec.probabilities, drift=drift)
    for e in events:   # the run's tree stayed fixed: the learner only sorts and stores
        learner.observe(e)
    return learner


def _store_prompt(learners: list, settings: Settings, info: dict, domain: str = "") -> None:
    """Store what one prompt's lanes observed, as a race's lanes are stored: at T = 0 their one
    greedy answer once (learning.store_answers), so the store counts prompts, not lanes."""
    stored = learning.store_answers(learners, settings.greedy)
    if stored is None:
        return
    info.setdefault("learned_by_domain", {})[domain or "pooled"] = {"key": learners[0].key,
                                                                    "positions": int(stored.nodes),
                                                                    "runs": stored.runs}
    info["learned"] = info["learned_by_domain"][domain or "pooled"]


def _runs_on(spec: MethodSpec, pair: ModelPair, baseline_pair: ModelPair | None) -> ModelPair:
    return baseline_pair if spec.family == "ar-default-kernels" else pair


DEFINITIONS = {
    "tokens_per_second": "median over prompts of generated tokens / decode wall seconds (prefill excluded)",
    "tokens_per_step": "all step yields / all steps, pooled over prompts; a step's yield is accepted nodes + bonus, "
                       "also for the last step when max-new-tokens cut it (Wald: unbiased for the mean yield)",
    "truncated_tokens": "tokens the max-new-tokens limit cut from the last step (counted in tokens/step only)",
    "learn": "config.learn: the runs' censored acceptance outcomes were stored (engine/learning.py), each prompt's "
             "lanes after the prompt: at T = 0 their one greedy answer once (learning.store_answers), sampled "
             "lanes each; every lane's rest check starts from the store as it was before its prompt",
    "rest_error": "learning check on runs longer than LEARN_AFTER tokens: F(tree) under the posterior after the "
                  "first LEARN_AFTER tokens (drifted to the rest of the answer where a measured ratio applies, "
                  "engine/answer_drift.py) over the rest's observed tokens/step, minus 1; rest_drift_kernels: the "
                  "draft kernels that drift was measured with; rest_observed_interval_95: the rest's own 95 % "
                  "interval (yield_interval; None for 4 steps or fewer)",
    "learning_check": "--learning-check: per temperature and prompt kind, F(frozen tree) under the posterior at the "
                      "first step boundary at or after learning_check_after tokens over the rest's observed "
                      "tokens/step (counted as tokens_per_step), minus 1 (engine/bench_learning.py); "
                      "observed_interval_95: the rest's own 95 % interval (block bootstrap over its steps, "
                      "yield_interval), how far one answer's rest falls from its expectation by chance",
    "learning_check_running": "--learning-check-running: learning_check.runs[].running, a second run of each check "
                              "prompt that keeps re-planning: the mean over the rest's steps of each step's tree's "
                              "F under the posterior before that step, over the rest's observed tokens/step, minus 1 "
                              "(engine/bench_learning.py run_running; its evidence is not stored)",
    "learning_check_repeat": "--learning-check-repeat: learning_check.runs[].repeat, a second frozen run of each "
                             "check prompt (another seed) whose learner remembers the first run's opening and "
                             "rest (engine/prompt_memory.py), judged as the first; its evidence is not stored",
    "learning_check_across": "--learning-check-across-t: learning_check.runs[].across, at each temperature after "
                             "the first a frozen run of each check prompt (the first run's seed) whose learner "
                             "carries what the prompt's run at the first temperature observed, rescaled "
                             "(prompt_memory.carried), judged as the first; its evidence is not stored",
    "observed_costs": "machine.observed_costs: t(n)/t(1) and the draft's seconds per level over t(1) read off this "
                      "run's interleaved lanes (verify seconds per step by tree size; chains' draft seconds per "
                      "level), beside the device profile's",
    "warmup": "per temperature: the warm-up's tokens per method and how many of its steps fed the cost model "
              "(each run's first step is left out), so that the first prompt is planned from observed costs too",
    "tokens_per_step_interval_95": "a 95 % interval of tokens_per_step: block bootstrap over the runs' steps "
                                   "(blocks of 4 consecutive steps of one run, 2000 resamples)",
    "tokens_per_step_interval_95_by_answer": "the same from resampling whole runs (answers, one per prompt) with "
                                             "replacement: it counts how much answers differ, so with few prompts "
                                             "it is the wider one (null with one run)",
    "tokens_per_second_geomean": "geometric mean over prompts of tokens/s (prompt_runs: the prompts, in the order "
                                 "of every *_runs list); the goals that compare two methods' tokens/s (the best "
                                 "swept tree, the best chain) use it: their ratio is the geometric mean of the "
                                 "per-prompt ratios, so one prompt's easiness cannot flip the comparison as it can "
                                 "the medians over a mix of code and prose prompts",
    "speedup_vs_ar": "median over prompts of tokens/s divided by autoregressive tokens/s on the same prompt, same run",
    "draft_seconds": "sum over prompts of the engine's draft timer (draft forwards + drafting children)",
    "verify_seconds": "sum over prompts of the engine's verify timer (one target forward per step)",
    "other_seconds": "decode wall time minus draft and verify: walk, KV commit, bookkeeping, text decoding",
    "predicted_tokens_per_step": "F(tree) under the positional acceptance model, per run from the vector of the "
                                 "prompt's domain where code and prose differ (else pooled), pooled over runs as "
                                 "yields / predicted steps; *_pooled_vector: from the pooled vector alone; "
                                 "*_range: the same with the vector's rank-1 rate at either edge of its 95 % "
                                 "interval (over the vector's prompts where it recorded them, else its positions; "
                                 "the other ranks as measured, scaled to fit beside it): the range rank 1's interval "
                                 "alone allows, a lower bound on the vector's uncertainty, wider the deeper the tree; "
                                 "*_range_these_prompts: the same with rank 1's 95 % interval for the mean of as many "
                                 "new prompts as this bench predicted from that vector (its own uncertainty plus how "
                                 "much so few prompts spread, from the prompts it recorded): what a run of so few "
                                 "prompts can expect to see around the prediction",
    "predicted_tokens_per_second": "median over prompts of predicted tokens/step over the modelled step time: the "
                                   "device profile corrected by the step costs this bench's warm-up and its runs on "
                                   "earlier prompts observed (engine/observed.py, as the app's planner corrects it; "
                                   "warmup.observed_steps says how many steps the warm-up gave; a run's "
                                   "cost_model_observed_steps, how many step-cost samples the corrected model held: "
                                   "the latest at most 64 per tree size); *_profile: from the profile alone",
    "tokens_per_second_pooled": "the lane's tokens over its decode seconds, all prompts together; "
                                "predicted_*_pooled: the same tokens over the seconds each run's own prediction "
                                "gives them (the hardware-aware prediction goal compares these two); "
                                "predicted_tokens_per_second_error_runs: each run's measured over predicted, minus 1",
    "sequoia-auto": "the hardware-aware plan made per prompt as the app makes it: the prompt domain's vector (else "
                    "the pooled one) and the corrected profile above; trees_by_prompt lists the trees that ran",
    "peak_memory_bytes": "the peak of the method's untimed warm-up run (the timed runs are interleaved step by "
                         "step and share one process-wide peak); see machine.peak_memory_kind (on CPU it includes "
                         "the weights)",
    "peak_memory_above_start_bytes": "the warm-up's peak minus the memory in use when it started (what the method "
                                     "itself adds: KV caches, activations, logits)",
    "load_average": "per run: the 1-minute load average when its prompt's interleaved lanes started "
                    "(load_average_after: when they had all finished)",
}


def _tkey(t: float) -> str:
    return f"{t:g}"


def _acceptance(pair, config: BenchConfig, temperature: float, texts: list[str], say) -> tuple:
    t0 = time.perf_counter()
    vec = None if config.fresh else profiler.cached_acceptance(pair, temperature, config.top_p, "sequoia",
                                                                 width=config.acceptance_width, top_k=config.top_k)
    measured = vec is None
    if measured:
        say(f"T={temperature}: measuring the acceptance vector (star of {config.acceptance_width}, "
            f"{len(texts)} prompts x {config.acceptance_tokens} tokens)")
        vec = profiler.measure_acceptance(pair, texts, temperature, config.top_p, "sequoia",
                                          config.acceptance_width, tokens_per_prompt=config.acceptance_tokens,
                                          seed=config.seed, chat=config.chat, top_k=config.top_k)
        vec.source = str(profiler.save_acceptance(pair, vec))
    info = vec.to_dict()
    info.update(measured_in_run=measured, seconds_in_run=time.perf_counter() - t0)
    say(f"T={temperature}: acceptance {'measured in this run' if measured else 'from cache ' + vec.source}: "
        + ", ".join(f"{p:.3f}" for p in vec.probabilities[:6]) + " ...")
    return vec, info


def _profile(pair, config: BenchConfig, say) -> tuple:
    t0 = time.perf_counter()
    prof = None if config.fresh else profiler.cached_profile(pair)
    measured = prof is None
    if measured:
        say(f"profiling the device (t(n) for n <= {config.profile_max_budget}, {config.profile_repeats} repeats)")
        prof = profiler.profile_device(pair, max_budget=config.profile_max_budget, repeats=config.profile_repeats)
        prof.source = str(profiler.save_profile(pair, prof))
    info = prof.to_dict()
    info.update(measured_in_run=measured, seconds_in_run=time.perf_counter() - t0)
    say(f"device profile {'measured in this run' if measured else 'from cache ' + prof.source}: t(1) = "
        f"{prof.target_seconds[min(prof.target_seconds)] * 1e3:.1f} ms")
    return prof, info
