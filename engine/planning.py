"""Planning, in one place: from a pair, settings and a method spec to a tree and its prediction.

    spec (what the user asked: ar | chain | specinfer | sequoia | sequoia-auto | tree)
      -> acceptance vector   (profiler's cache, interpolated between measured settings
                              (engine/interpolation.py), the nearest measured one, or measured
                              now; with learn=True pooled with what earlier runs observed,
                              engine/learning.py)
      -> DP table            (engine/planner.py; memoised per vector, so a budget change is a lookup)
      -> tree                (the DP tree for (budget, depth), or the hardware-aware (n, d))
      -> prediction          (tokens/step from the vector; seconds/step and speedup from the profile)

The worker, the CLI, the bench and the app all choose trees through this module. With
measure=False it only reads caches and never calls a model (safe on the UI thread)."""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable

from engine import answer_drift, domains, interpolation, learning, observed, profiler, prompt_memory
from engine import methods as methods_mod
from engine.errors import UserError
from engine.planner import Choice, CostCurve, PlanTable, choose_shape, step_seconds
from engine.settings import Settings
from engine.tree import Tree
from engine.wording import plural

log = logging.getLogger(__name__)
MAX_BUDGET = 256       # nodes, the root included
MAX_DEPTH = 32         # levels, the root included
TABLE_DEPTH = 16       # the DP table covers depths up to this; deeper asks build a bigger one
PROFILE_BUDGET = 128   # largest tree the device profile times (bigger ones are extrapolated)
CPU_PROFILE_BUDGET = 32  # on a CPU t(n) grows about linearly past a few rows: time less, extrapolate
METHOD_KINDS = ("ar", "chain", "specinfer", "sequoia", "sequoia-auto", "tree")


def check_shape(budget: int, depth: int, bounds: bool = False) -> None:
    """A (budget, depth) a tree can have; with `bounds` (hardware-aware: at most these) depth 1
    is allowed with any budget, as the root alone (the grid's only shape of depth 1)."""
    for value, name in ((budget, "budget"), (depth, "depth")):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{name} must be an integer (got {value!r})")
    if not 1 <= budget <= MAX_BUDGET:
        raise UserError(f"budget must be between 1 and {MAX_BUDGET} nodes, the root included (got {budget})")
    if not 1 <= depth <= MAX_DEPTH:
        raise UserError(f"depth must be between 1 and {MAX_DEPTH} levels, the root included (got {depth})")
    if budget > 1 and depth < 2 and not bounds:
        raise UserError("a tree with more than one node needs depth >= 2 (the root is level 1)")


@functools.lru_cache(maxsize=32)
def _table(acceptance: tuple[float, ...], max_nodes: int, max_depth: int) -> PlanTable:
    return PlanTable.build(list(acceptance), max_nodes, max_depth)


def profile_budget(pair, asked: int = PROFILE_BUDGET) -> int:
    """The largest tree worth timing on this pair's device."""
    return min(asked, CPU_PROFILE_BUDGET) if pair.device.type == "cpu" else asked


def table_for(acceptance, budget: int = MAX_BUDGET, depth: int = TABLE_DEPTH, shared: bool = True) -> PlanTable:
    """The DP table for this vector, covering at least (budget, depth). shared (memoised): one
    table as big as any ask (MAX_BUDGET x TABLE_DEPTH), which slider moves to other shapes reuse.
    shared=False, for a vector used once (learning's between-step posterior): exactly (budget,
    depth), not memoised: ~10 ms for 32 x 16 nodes/levels against ~165 ms for the shared table,
    a cost every re-planned step paid. The tree for an (n, d) does not depend on the table's size
    (tests/test_planner.py)."""
    acc = tuple(float(x) for x in acceptance)
    if not shared:
        return PlanTable.build(list(acc), budget, depth)
    return _table(acc, max(budget, MAX_BUDGET), max(depth, TABLE_DEPTH))


def node_costs(prof, sampling: bool) -> tuple[float, float]:
    """(per expanded draft node, per visited target node) seconds of sampling maths; 0 when greedy
    or when the profile predates their measurement."""
    if not sampling or prof is None:
        return (0.0, 0.0)
    costs = getattr(prof, "sampling_seconds", None) or {}
    return (float(costs.get("draft_node", 0.0)), float(costs.get("target_node", 0.0)))


def hardware_aware(acceptance, prof, max_budget: int, max_depth: int, sampling: bool = False,
                   shared: bool = True) -> Choice:
    """The (n <= max_budget, d <= max_depth) that maximises predicted tokens/s on the profiled device.
    shared: as table_for's."""
    table = table_for(acceptance, max_budget, max_depth, shared)
    return choose_shape(table, prof.target_seconds, prof.draft_seconds, prof.overhead_seconds,
                        budgets=range(1, max_budget + 1), depths=range(1, max_depth + 1),
                        node_costs=node_costs(prof, sampling))


@dataclass
class Prediction:
    tokens_per_step: float | None
    seconds_per_step: float | None = None
    tokens_per_second: float | None = None
    speedup: float | None = None   # over autoregressive on the same profile


def predict(tree: Tree, acceptance, prof, sampling: bool = False) -> Prediction:
    """Tokens/step from the acceptance vector (None: unknown); time from the device profile
    (with the sampling maths when `sampling`, i.e. T > 0)."""
    if tree.size == 1:
        expected = 1.0
    elif acceptance is None:
        return Prediction(None)
    else:
        expected = tree.expected_tokens(acceptance)
    if prof is None:
        return Prediction(expected)
    target = CostCurve(prof.target_seconds, "target_seconds")
    draft = CostCurve(prof.draft_seconds, "draft_seconds")
    costs = node_costs(prof, sampling)
    seconds = step_seconds(tree.expanding_widths, target, draft, tree.size, prof.overhead_seconds, costs, expected)
    if seconds <= 0:
        return Prediction(expected, seconds)
    baseline = target(1) + prof.overhead_seconds + costs[1]
    return Prediction(expected, seconds, expected / seconds, expected / seconds * baseline)


def corrected_profile(pair, sampling: bool):
    """The cached device profile with the step costs real runs observed blended in (engine/observed.py)."""
    prof = profiler.cached_profile(pair)
    if prof is None:
        return None
    return observed.corrected(prof, observed.load(profiler.profile_key(pair)), sampling)


# ---------------------------------------------------------------- what the user asks for
@dataclass(frozen=True)
class MethodSpec:
    """What the user asked for; turned into a Method (and maybe a plan) by build_plan.

    kind: ar | chain | specinfer | sequoia (DP for budget/depth) | sequoia-auto (hardware-aware,
    budget/depth are upper bounds) | tree (a given tree, e.g. imported).
    SpecInfer's width defaults to the most chains of `depth` levels that fit in `budget` nodes."""
    kind: str
    budget: int = 16
    depth: int = 8
    width: int | None = None
    tree: Tree | None = None

    def check(self) -> None:
        if self.kind not in METHOD_KINDS:
            raise UserError(f"unknown method '{self.kind}' (use one of {', '.join(METHOD_KINDS)})")
        if self.kind == "tree":
            if self.tree is None:
                raise UserError("no tree given: import a tree JSON or growmap first")
            return
        if self.kind != "ar":
            check_shape(self.budget, self.depth, bounds=self.kind == "sequoia-auto")
        if self.kind in ("chain", "specinfer") and self.depth < 2:
            raise UserError(f"{self.kind} needs depth >= 2 (the root is level 1)")
        if self.kind in ("chain", "specinfer"):
            nodes = 1 + self.specinfer_width * (self.depth - 1) if self.kind == "specinfer" else self.depth
            if nodes > self.budget:
                raise UserError(f"{self.kind} with depth {self.depth} needs {nodes} nodes, above the budget of "
                                f"{self.budget}; lower the depth or raise the budget")

    @property
    def specinfer_width(self) -> int:
        if self.width is not None:
            return self.width
        return max(1, (self.budget - 1) // max(1, self.depth - 1))


@dataclass
class PlanResult:
    spec: MethodSpec
    method: Any                       # engine.methods.Method
    expected_tokens: float | None     # F(tree) under the acceptance vector, when one applies
    acceptance: Any = None            # profiler.AcceptanceVector used (or None)
    acceptance_note: str = ""         # where the vector came from, said in words
    exact: bool = True                # the vector is for exactly these settings
    profile: Any = None               # profiler.DeviceProfile (or None)
    choice: Any = None                # planner.Choice for hardware-aware plans
    predicted_speedup: float | None = None
    predicted_seconds_per_step: float | None = None
    base_acceptance: Any = None       # the vector before pooling with learned evidence (learn=True)
    learned: dict | None = None       # learn=True: key, positions and runs of the stored evidence used
    domain: str = ""                  # the prompt domain whose vector was used ("" = pooled over every prompt)
    remembered: dict | None = None    # learn=True, a prompt seen before: runs, positions, and the posterior
    #                                   the tree was planned from (engine/prompt_memory.py)

    @property
    def tree(self) -> Tree:
        return self.method.tree

    @property
    def measured_acceptance(self):
        """The vector as measured (or interpolated), before any pooling with learned evidence."""
        return self.base_acceptance if self.base_acceptance is not None else self.acceptance

    @property
    def planning_probabilities(self) -> list[float] | None:
        """The vector the tree was planned from: the acceptance vector, or for a prompt seen before
        the posterior its earlier runs give (what the run's learning starts planning from)."""
        if self.remembered is not None:
            return list(self.remembered["posterior"])
        return list(self.acceptance.probabilities) if self.acceptance is not None else None

    @property
    def backing_positions(self) -> int:
        """Positions behind the plan's vector: measured (or interpolated), learned over runs at these
        settings, and remembered from earlier runs of this prompt."""
        base = self.measured_acceptance
        measured = int(base.positions) if base is not None else 0
        return (measured + int((self.learned or {}).get("positions", 0))
                + int((self.remembered or {}).get("positions", 0)))

    def summary(self) -> dict:
        t = self.tree
        out = {"method": self.method.name, "label": self.method.label, "budget": t.size, "size": t.size,
               "depth": t.depth, "levels": t.level_widths, "parents": list(t.parents),
               "expected_tokens": self.expected_tokens, "acceptance_note": self.acceptance_note,
               "exact_acceptance": self.exact, "predicted_speedup": self.predicted_speedup}
        if self.acceptance is not None:
            out.update(acceptance=list(self.acceptance.probabilities), acceptance_source=self.acceptance.source,
                       acceptance_positions=self.acceptance.positions,
                       acceptance_temperature=self.acceptance.temperature,
                       acceptance_interpolated=interpolation.is_interpolated(self.measured_acceptance),
                       backing_positions=self.backing_positions, acceptance_domain=self.domain or "pooled")
        if self.learned is not None:
            out["learned"] = dict(self.learned)
        if self.remembered is not None:
            out["remembered"] = {k: self.remembered[k] for k in ("runs", "positions", "carried_from")}
            out["planned_acceptance"] = self.planning_probabilities
        if self.profile is not None:
            out["profile_source"] = self.profile.source
        if self.choice is not None:
            out.update(chosen_budget=self.choice.n, chosen_depth=self.choice.d)
        return out


class NeedsMeasurement(UserError):
    """A plan from caches alone was asked for, and a measurement is missing: `what` is
    'acceptance' or 'profile'."""

    def __init__(self, what: str, message: str):
        super().__init__(message)
        self.what = what


def _fixed_method(spec: MethodSpec):
    """The method of a spec whose tree needs no acceptance vector, else None."""
    if spec.kind == "ar":
        return methods_mod.autoregressive()
    if spec.kind == "chain":
        return methods_mod.chain(spec.depth)
    if spec.kind == "specinfer":
        return methods_mod.specinfer(spec.specinfer_width, spec.depth)
    if spec.kind == "tree":   # verified as Sequoia trees are; labelled as what it is
        return methods_mod.sequoia(spec.tree, title="Imported tree")
    return None


def _interpolated(pair, settings: Settings, sampler: str, domain: str = ""):
    """(vector, note) interpolated between measured settings, or (None, '')."""
    vec = interpolation.interpolated_vector(pair, settings.temperature, settings.top_p, sampler, settings.top_k,
                                            domain=domain)
    if vec is None:
        return None, ""
    return vec, (f"no vector measured at T={settings.temperature:g}, top-p={settings.top_p:g}: "
                 f"INTERPOLATED ({vec.source[len('interpolated: '):]})")


def vector_for_prompt(pair, settings: Settings, sampler: str, prompt: str | None, interpolated: bool = False):
    """(vector or None, domain, note): the prompt domain's own vector where code and prose differ
    (engine/domains.py states the rule), else None and why the pooled one stands."""
    T, top_p, top_k = settings.temperature, settings.top_p, settings.top_k
    if interpolated:
        found = {d: _interpolated(pair, settings, sampler, d)[0] for d in domains.DOMAINS}
    else:
        found = {d: profiler.cached_acceptance(pair, T, top_p, sampler, top_k=top_k, domain=d)
                 for d in domains.DOMAINS}
    if any(v is None for v in found.values()):
        return None, "", ""  # no code/prose vectors at these settings: the pooled one, nothing to say
    kind = domains.prompt_domain(prompt)
    if kind is None:
        return None, "", "; prompt kind unsure (or none given): the pooled code+prose vector"
    if not domains.differ(*found.values()):
        return None, "", "; code and prose agree at these settings: the pooled code+prose vector"
    vec = found[kind]
    # its positions and source are not repeated: the plan's note names the vector it uses (the
    # bench's per-prompt rows store them beside this note)
    return vec, kind, f"; a {kind} prompt: the {kind} vector, code and prose differ here"


def _acceptance(pair, spec: MethodSpec, settings: Settings, sampler: str, measure: bool, allow_nearest: bool,
                progress, should_stop, prompts, tokens_per_prompt,
                interpolate_first: bool = False, prompt: str | None = None) -> tuple[Any, bool, str, str]:
    """(vector or None, exact for these settings, where it came from in words, prompt domain used).
    Without an exact vector: measured now when `measure`, except with `interpolate_first` (the
    app's runs; learning runs, which refine whatever they start from), which takes an interpolated vector, else the
    nearest measured one, and measures only when the pair has no vector of that kind at all;
    without `measure`: interpolated, else the nearest measured one (allow_nearest). A measured or interpolated pooled vector gives way to the prompt
    domain's own (vector_for_prompt)."""
    T, top_p, top_k = settings.temperature, settings.top_p, settings.top_k

    def measured_now():
        vec = profiler.acceptance_vector(pair, T, top_p, sampler, measure=True, progress=progress, top_k=top_k,
                                         should_stop=should_stop, prompts=prompts,
                                         tokens_per_prompt=tokens_per_prompt)
        return vec, True, f"measured just now over {vec.positions} positions (cached in {vec.source})", ""

    vec = profiler.cached_acceptance(pair, T, top_p, sampler, top_k=top_k)
    if vec is not None:
        own, domain, why = vector_for_prompt(pair, settings, sampler, prompt, interpolated=False)
        vec = own or vec
        return vec, True, f"measured over {vec.positions} positions, cache file {vec.source}{why}", domain
    fixed = spec.kind not in ("sequoia", "sequoia-auto")   # a tree the vector only predicts, never shapes
    no_prediction = f"no acceptance vector measured for the {sampler} sampler at T={T:g}: no prediction"
    if spec.kind == "ar":
        return None, True, "autoregressive: one token per step, no acceptance vector needed", ""
    if fixed and sampler != "sequoia":   # (every vector the app has is of the Sequoia sampler)
        return None, True, no_prediction, ""
    if fixed:   # predicted from an interpolated or nearest vector, as a Sequoia plan there is (a chain
        # said "no prediction" beside a Sequoia plan at the same settings), but never measured for
        measure, interpolate_first = False, True
    if interpolate_first or (not measure and allow_nearest):
        vec, note = _interpolated(pair, settings, sampler)
        if vec is not None:
            own, domain, why = vector_for_prompt(pair, settings, sampler, prompt, interpolated=True)
            if own is not None:
                vec, note = own, (f"no vector measured at T={T:g}, top-p={top_p:g}: INTERPOLATED "
                                  f"({own.source[len('interpolated: '):]})")
            return vec, False, note + why, domain
    if measure and not interpolate_first:
        return measured_now()
    near = profiler.nearest_vector(pair, T, top_p, sampler, top_k) if allow_nearest or interpolate_first else None
    if near is None and measure:  # nothing of this kind measured for the pair at all: measure now
        return measured_now()
    if near is None and fixed:
        return None, True, no_prediction, ""
    if near is None:
        raise NeedsMeasurement("acceptance", f"no acceptance vector measured for this pair at T={T:g}, "
                               f"top-p={top_p:g}: it must be measured first")
    other = ("" if near.draft_kernels == profiler.draft_kernels(pair)
             else f", measured with the draft on {near.draft_kernels} kernels")
    # the nearest settings' code or prose vector where those differ, by the same rule as at the
    # run's own settings (top-k 40 planned from the pooled vector: n=8 d=4 against the code
    # vector's n=8 d=6 at top-k 0 on a code prompt)
    try:
        at_near = replace(settings, temperature=near.temperature, top_p=near.top_p, top_k=int(near.top_k or 0))
    except (UserError, TypeError, ValueError):   # a cache file's odd settings: the pooled vector as found
        at_near = None
    own, domain, why = (vector_for_prompt(pair, at_near, sampler, prompt) if at_near is not None and not other
                        else (None, "", ""))
    near = own or near
    return near, False, (f"no vector measured at {settings_words(T, top_p, top_k)}: using the nearest measured one "
                         f"({settings_words(near.temperature, near.top_p, near.top_k)}{other}; {near.positions} positions, "
                         f"{near.source}){why}"), domain


def settings_words(temperature: float, top_p: float, top_k: int | None = 0) -> str:
    """The sampling settings a vector is for, in words ("T=0.7, top-p=1, top-k=1"): top-k named
    only where it applies (T > 0, on)."""
    return f"T={temperature:g}, top-p={top_p:g}" + (f", top-k={int(top_k)}" if temperature and top_k else "")


def learning_key(pair, settings: Settings, sampler: str = "sequoia", domain: str = "") -> str:
    """Where learned evidence for these settings (and prompt domain, "" = pooled) is stored: the
    acceptance key (default width)."""
    return profiler.acceptance_key(pair, sampler, settings.temperature, settings.top_p, 16, settings.top_k, domain)


def learns_from(method, settings: Settings) -> bool:
    """Whether a method's steps are evidence about the Sequoia/greedy vector: greedy steps always,
    sampled steps when children are drawn without replacement (SpecInfer's are not; a chain's
    single child is drawn and tested the same way under both samplers)."""
    return settings.greedy or method.sampler == "sequoia" or max(len(c) for c in method.tree.children) <= 1


def plan_from_vector(spec: MethodSpec, acceptance, prof=None, sampling: bool = False,
                     shared: bool = True) -> Tree | None:
    """The tree a DP spec (sequoia | sequoia-auto) gets for a given acceptance vector; None for
    other kinds, or for sequoia-auto without a device profile. Used by build_plan and by the
    between-step re-plans of learning (Replanner, with shared=False: see table_for)."""
    if spec.kind == "sequoia":
        return table_for(acceptance, spec.budget, spec.depth, shared).tree(spec.budget, spec.depth)
    if spec.kind == "sequoia-auto" and prof is not None:
        return hardware_aware(acceptance, prof, spec.budget, spec.depth, sampling, shared).tree
    return None


def learner_for(pair, result: "PlanResult", settings: Settings, opening: int | None = None,
                prompt_ids=None, memory=None):
    """The learning of one run planned as `result` (engine/learning.py), or None when its steps say
    nothing about the Sequoia/greedy acceptance vector (SpecInfer at T > 0, autoregressive).
    `opening`: the generated tokens after which it plans for the answer's rest (answer_drift.OPENING).
    `prompt_ids`: the prompt's tokens, so that the run reads and keeps what runs of this prompt
    observed (engine/prompt_memory.py); `memory` given instead is used as is, and nothing is kept."""
    if not result.method.uses_draft or not learns_from(result.method, settings):
        return None
    # the prompt's memory is read again here rather than taken from the plan: a CLI --num-samples
    # run's later samples count what its earlier ones stored (build_plan read it for the first tree)
    learner = _learner(pair, result.acceptance, result.base_acceptance, result.domain, settings, opening,
                       prompt_ids, memory)
    if result.planning_probabilities is not None:   # what the run's first tree was planned from
        learner.planned_with = result.planning_probabilities
    return learner


def _learner(pair, vec, base, domain: str, settings: Settings, opening: int | None, prompt_ids, memory,
             own_read: bool = False):
    """A Learner starting from `vec` (the measured vector pooled with the stored evidence; `base`
    before pooling) for a prompt of `domain`. `own_read`: the caller found no memory of this prompt
    at these settings already, or could not read it (_own_memory), so only memory carried from
    others is looked for."""
    start = list(vec.probabilities) if vec is not None else [0.0] * 16
    base = base if base is not None else vec
    meta = {"draft": pair.draft_name, "target": pair.target_name, "temperature": settings.temperature,
            "top_p": settings.top_p, "top_k": settings.top_k, "sampler": "greedy" if settings.greedy else "sequoia",
            "draft_kernels": profiler.draft_kernels(pair), "domain": domain}
    drift = answer_drift.drift_for(pair.draft_name, pair.target_name, domain, settings.max_new_tokens, opening,
                                   draft_kernels=meta["draft_kernels"])
    key = learning_key(pair, settings, domain=domain)
    base = list(base.probabilities) if base is not None else None
    digest = prompt_memory.digest(prompt_ids) if prompt_ids is not None and memory is None else None
    if digest is not None:   # runs at these settings, else runs at the nearest others, rescaled
        try:
            memory = ((None if own_read else prompt_memory.recall(key, digest))
                      or prompt_memory.carried(key, digest, meta, 1.0 - base[0] if base else None))
        except Exception:  # noqa: BLE001 - a prompt's memory must not cost the plan or the run
            log.exception("could not read this prompt's memory; planning without it")
            memory = None
    return learning.Learner(start, key, meta, base=base, drift=drift, opening=opening, memory=memory,
                            prompt_digest=digest)


def _own_memory(key: str, prompt_ids):
    """This prompt's memory at these settings (prompt_memory.recall), or None."""
    try:
        return prompt_memory.recall(key, prompt_memory.digest(prompt_ids))
    except Exception:  # noqa: BLE001 - a prompt's memory must not cost the plan its store
        log.exception("could not read this prompt's memory; planning without it")
        return None


def _less_this_prompt(pair, stored, memory, domain: str, settings: Settings):
    """The key's stored evidence without what this prompt's own earlier runs (`memory`) put there:
    a run of a prompt seen before counts those runs from the prompt's memory (prompt_memory), and
    counted them twice (a second run of a new prompt: "26 learned over 1 run, 26 positions
    remembered from 1 earlier run of this prompt", the same 26). The store keeps openings where a
    drift applies, else whole runs (Learner.record); memory carried from other settings was never
    in this store."""
    if stored.nodes <= 0 or memory is None:
        return stored
    drift = answer_drift.drift_for(pair.draft_name, pair.target_name, domain, settings.max_new_tokens,
                                   draft_kernels=profiler.draft_kernels(pair))
    mine = memory.head if drift is not None else memory.head.add(memory.tail)
    return stored.less(replace(mine, runs=memory.runs))


def _remembered(pair, vec, base, domain: str, settings: Settings, prompt_ids, memory=None,
                own_read: bool = False) -> dict | None:
    """What earlier runs of this prompt give the plan (engine/prompt_memory.py): the posterior the
    run's learning would start planning from, with the runs and positions behind it (and the
    settings it was carried from, for a code prompt run before only at others); None for a prompt
    with no memory the run would count. `memory`: the prompt's memory at these settings when the
    caller has read it already (else it is read here, or carried from others; `own_read`: the caller
    read it and found none)."""
    learner = _learner(pair, vec, base, domain, settings, None, prompt_ids, memory, own_read)
    if learner.memory is None or learner.remembered.nodes <= 0:   # none, or none of the part a start counts
        return None
    return {"runs": learner.memory.runs, "positions": int(learner.remembered.nodes), "posterior": learner.posterior,
            "carried_from": learner.memory.carried_from}


class Replanner:
    """The Decoder's `plan` callback for one run (called before every step). It returns the tree
    for the next step:
      - a tree the caller publishes (`user`: zero-arg, returns None, a Tree, or a PlanResult whose
        spec then becomes the one re-planned), and
      - with learning, the DP tree of the current spec for the posterior of the steps observed so
        far, re-planned when the posterior moved (learning.MIN_CHANGE) or the user re-planned.
    Exact: only steps already finished are observed (observe() runs between steps), so the tree
    of step t depends on the past only (ALGORITHM.md section 7, "Adaptive trees are exact")."""

    def __init__(self, pair, result: "PlanResult", settings: Settings, user=None, learn: bool = True,
                 opening: int | None = None, prompt_ids=None, memory=None):
        self.result, self.settings, self.user = result, settings, user
        self.tree, self.spec, self.forced = result.method.tree, result.spec, False
        self.learner = learner_for(pair, result, settings, opening, prompt_ids, memory) if learn else None
        self.replans = 0        # learning's DP re-runs
        self.tree_changes = 0   # those that gave another tree
        self.user_changes = 0   # plans sent by the user (a slider moved mid-run) that gave another tree

    def observe(self, event) -> None:
        if self.learner is not None:
            self.learner.observe(event)

    def __call__(self) -> Tree:
        if self.user is not None and self.result.method.uses_draft:
            try:
                got = self.user()
            except Exception:  # noqa: BLE001 - a bad re-plan must not kill the run
                log.exception("re-plan callback failed; keeping the current tree")
                got = None
            tree = getattr(got, "tree", got)
            if tree is not None and tree.size >= 1:
                self.user_changes += tuple(tree.parents) != tuple(self.tree.parents)
                self.tree, self.spec = tree, getattr(got, "spec", self.spec)
                self.forced = True
        learner = self.learner
        if learner is not None and learner.has_evidence and (self.forced or learner.should_replan()):
            posterior = learner.posterior
            try:
                tree = plan_from_vector(self.spec, posterior, self.result.profile, not self.settings.greedy,
                                        shared=False)  # a new vector each time: the small table
            except Exception:  # noqa: BLE001
                log.exception("learning re-plan failed; keeping the current tree")
                tree = None
            if tree is not None:
                # a re-plan (the DP run again) need not change the tree: counted apart
                self.tree_changes += tuple(tree.parents) != tuple(self.tree.parents)
                self.tree = tree
                learner.planned_with = posterior
                self.replans += 1
            self.forced = False
        return self.tree

    def state(self) -> dict:
        """What the Live chart shows (learning on): prior, observed, posterior, the current tree."""
        out = self.learner.state() if self.learner is not None else {}
        out.update(tree_parents=list(self.tree.parents), replans=self.replans, tree_changes=self.tree_changes,
                   user_changes=self.user_changes,
                   expected_tokens=(self.tree.expected_tokens(out["posterior"]) if out else None))
        return out

    def finish(self):
        """Store the run's evidence (learning on); returns the stored evidence or None."""
        return self.learner.record() if self.learner is not None else None


def build_plan(pair, spec: MethodSpec, settings: Settings, *, measure: bool, allow_nearest: bool = False,
               progress: Callable[[float | None, str], None] | None = None,
               should_stop: Callable[[], bool] = lambda: False, prompts: list[str] | None = None,
               tokens_per_prompt: int = 48, profile_budget: int = PROFILE_BUDGET,
               learn: bool = False, prompt: str | None = None, prompt_ids: list[int] | None = None,
               interpolate_first: bool | None = None) -> PlanResult:
    """Spec -> Method (+ the numbers that predict it). Measures only when `measure` is True;
    otherwise raises NeedsMeasurement. Pure cache reads when measure=False (no model calls).
    interpolate_first (default: as `learn`): with `measure`, an interpolated or nearest vector is
    used rather than measuring, unless the pair has none of that kind (the app's runs, which run
    the plan their page showed; learning on, the run refines it).
    learn=True: the vector is pooled with the evidence earlier runs stored for these settings (engine/learning.py).
    prompt: the text to be decoded, so its domain's vector can be used (engine/domains.py).
    prompt_ids: its tokens; with learn, a DP tree of a prompt run before (at these settings, or for
    a code prompt at others, rescaled) is planned from what those runs observed
    (engine/prompt_memory.py), as the run's learning would."""
    spec.check()
    method = _fixed_method(spec)
    sampler = method.sampler if method is not None else "sequoia"
    vec, exact, note, domain = _acceptance(pair, spec, settings, sampler, measure, allow_nearest, progress,
                                           should_stop, prompts, tokens_per_prompt,
                                           interpolate_first=learn if interpolate_first is None else interpolate_first,
                                           prompt=prompt)
    base, learned, memory, own_read = vec, None, None, False
    counts_memory = (learn and prompt_ids is not None
                     and (method is None or (method.uses_draft and learns_from(method, settings))))
    if learn and vec is not None:
        key = learning_key(pair, settings, domain=domain)
        stored = learning.load(key)
        full = stored.nodes >= learning.STORED_CAP   # the store keeps its newest evidence only
        if counts_memory:   # read once: the store is counted without it, and the plan pools it
            memory, own_read = _own_memory(key, prompt_ids), True
            stored = _less_this_prompt(pair, stored, memory, domain, settings)
        learned = {"key": key, "positions": int(stored.nodes), "runs": stored.runs, "at_cap": full,
                   "store": str(learning.learned_path(key))}  # not "path": gradio_client would fetch it as a file
        if stored.nodes > 0:
            vec = learning.with_stored(vec, stored)
            note += f"; pooled with {int(stored.nodes)} positions learned over {plural(stored.runs, 'run')}"
    remembered = None   # a prompt run before: the DP plans from, and every method predicts by, its posterior
    if counts_memory and vec is not None:
        remembered = _remembered(pair, vec, base, domain, settings, prompt_ids, memory, own_read)
    probs = remembered["posterior"] if remembered is not None else (vec.probabilities if vec is not None else None)
    prof = corrected_profile(pair, not settings.greedy)
    choice = None
    if spec.kind == "sequoia-auto":
        if prof is None:
            if not measure:
                raise NeedsMeasurement("profile", "hardware-aware planning needs a device profile: "
                                       "profile this device first")
            prof = profiler.device_profile(pair, measure=True, max_budget=profile_budget,
                                           progress=progress, should_stop=should_stop)
        choice = hardware_aware(probs, prof, spec.budget, spec.depth, not settings.greedy)
        method = methods_mod.sequoia(choice.tree, name="sequoia-auto")
    elif spec.kind == "sequoia":
        method = methods_mod.sequoia(plan_from_vector(spec, probs))
    pred = predict(method.tree, probs, prof, not settings.greedy)
    return PlanResult(spec, method, pred.tokens_per_step, vec, note, exact, prof, choice, pred.speedup,
                      pred.seconds_per_step, base, learned, domain, remembered)


def dp_plan(pair, settings: Settings, budget: int, depth: int, **measuring) -> PlanResult:
    """The DP tree for (budget, depth), measuring the acceptance vector if none is cached."""
    return build_plan(pair, MethodSpec("sequoia", budget, depth), settings, measure=True, **measuring)


def auto_plan(pair, settings: Settings, max_budget: int = 128, max_depth: int = TABLE_DEPTH,
              **measuring) -> PlanResult:
    """Hardware-aware: the (n, d) that maximises predicted tokens/s on this device (measuring the
    acceptance vector and the device profile if none is cached)."""
    return build_plan(pair, MethodSpec("sequoia-auto", max_budget, max_depth), settings, measure=True,
                      profile_budget=max_budget, **measuring)
