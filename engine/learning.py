"""Learning the acceptance vector while decoding (issue 15, ALGORITHM.md §7).

What a step tells (censored acceptance): at every node the walk visited and decided, its c
children were tried in rank order; the outcome is "rank r accepted" (r <= c) or "none of the c".
That node says nothing about ranks above c. So, per rank k,

    trials[k]  = decided visited nodes with at least k children
    accepts[k] = those of them where rank k was the accepted child

and accepts[k] / trials[k] estimates p_k, the planner's P(rank k accepted at a node with >= k
children), without bias ("none of c" counts as a rejection of ranks 1..c). A node whose children
were never tried (an accepted EOS ended the walk there) is not counted.

Pooling with the prior (stated rule; PRIOR_WEIGHT pseudo-observations per rank):

    posterior[k] = (w * prior[k] + accepts[k]) / (w + trials[k])

i.e. the mean of a Beta(w * prior[k], w * (1 - prior[k])) prior updated with the rank's own
trials. Ranks are estimated separately, so the sum may exceed 1 on little evidence: it is then
scaled down to MAX_TOTAL. Two stages use the rule:
  1. the run's starting vector = the measured (or interpolated) vector pooled with the evidence
     stored by earlier runs at the same settings (cache_dir()/learned/<acceptance key>.json);
  2. within a run, the starting vector pooled with this run's evidence; the decoder gets a
     re-planned tree between steps (engine/planning.py plan_from_vector).
A run of a prompt seen before also counts what its earlier runs observed, openings and rests
apart (engine/prompt_memory.py; the rule is in Learner's docstring).
Past an answer's opening (answer_drift.OPENING generated tokens) the plan is for the rest of the
answer, which for the embedded pair accepts differently from the opening (engine/answer_drift.py).
Where a measured drift applies (ratio, and the domain's measured prior weight w'), stage 2
becomes (rest_posterior):

    opening[k] = posterior above over the opening's own evidence, with w' for w
    rest0      = drifted(opening, ratio): P(rank 1 missed) times ratio, ranks 2.. scaled alike
    rest[k]    = ((w' + opening trials[k]) * rest0[k] + rest accepts[k]) / (w' + opening trials[k] + rest trials[k])

Where the domain's ratio is not applied (its interval holds 1) the drift is ratio 1 with the
weight measured for that case: the rest is predicted at the opening's rate, the prior worth w'.
The measured w' was chosen for the first of these two uses (predicting the rest from the opening,
what the learning check tests); the second (how fast the rest's own steps move the posterior)
follows from it as a Beta update; measured offline (bench/acceptance_dynamics.py
rest_weight_rmse) it was within 4-13 % of the best prior weight for the rest of an answer, and
lighter priors were worse. At the boundary the opening's
evidence is re-pooled with w' instead of w, so the posterior moves there for that reason too.
With a drift a run stores only its opening's evidence (the start it pools into is an opening
rate). Stored evidence is capped at STORED_CAP trials of rank 1 (older evidence is scaled down), so the
stored vector follows a pair's recent use. The measured vector in the acceptance cache is never
touched.

Exactness: the tree of step t is computed from steps < t only (their accepted ranks), never
from step t's own draws; verification is exact for any fixed tree (ALGORITHM.md §7 "Adaptive
trees are exact"), so every step, and the whole output, stays distributed as the target's."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine import answer_drift, intervals, prompt_memory
from engine.paths import cache_dir, locked, write_atomic

log = logging.getLogger(__name__)

PRIOR_WEIGHT = 32.0   # pseudo-observations per rank the prior counts for
STORED_CAP = 2048.0   # stored evidence keeps at most this many rank-1 trials (older ones fade)
MAX_TOTAL = 0.999     # a pooled vector's sum is scaled down to this when it exceeds 1
MIN_CHANGE = 0.01     # re-plan when some rank of the posterior moved by more than this
# Stored evidence format: 2 = where a drift applies only the opening is stored (Learner.record,
# bench._learner). Files before it hold whole runs, rests included, which would make every start
# look like an answer's easier rest: they are ignored (the evidence re-accumulates).
STORED_FORMAT = 2


# ---------------------------------------------------------------- evidence
@dataclass
class Evidence:
    """Censored counts per rank (index 0 = rank 1)."""
    trials: list[float] = field(default_factory=list)
    accepts: list[float] = field(default_factory=list)
    nodes: float = 0.0        # decided visited nodes with at least one child (= trials of rank 1)
    runs: int = 0

    def _grow(self, width: int) -> None:
        while len(self.trials) < width:
            self.trials.append(0.0)
            self.accepts.append(0.0)

    def add_node(self, children: int, accepted_rank: int | None) -> None:
        """One decided node: `children` tried in rank order, `accepted_rank` (1-based) or None."""
        if children <= 0:
            return
        self._grow(children)
        for k in range(children):
            self.trials[k] += 1
        if accepted_rank is not None:
            if not 1 <= accepted_rank <= children:
                raise ValueError(f"accepted rank {accepted_rank} of a node with {children} children")
            self.accepts[accepted_rank - 1] += 1
        self.nodes += 1

    def add(self, other: "Evidence") -> "Evidence":
        out = Evidence(list(self.trials), list(self.accepts), self.nodes + other.nodes, self.runs + other.runs)
        out._grow(len(other.trials))
        for k in range(len(other.trials)):
            out.trials[k] += other.trials[k]
            out.accepts[k] += other.accepts[k]
        return out

    def less(self, other: "Evidence") -> "Evidence":
        """This evidence without `other`'s part of it, per rank never below 0 (a capped store holds
        less of it than `other` counts)."""
        trials = [max(0.0, t - (other.trials[k] if k < len(other.trials) else 0.0)) for k, t in enumerate(self.trials)]
        accepts = [min(max(0.0, a - (other.accepts[k] if k < len(other.accepts) else 0.0)), trials[k])
                   for k, a in enumerate(self.accepts)]
        return Evidence(trials, accepts, max(0.0, self.nodes - other.nodes), max(0, self.runs - other.runs))

    def observed(self) -> list[float | None]:
        """accepts / trials per rank (None where a rank had no trial)."""
        return [a / t if t else None for a, t in zip(self.accepts, self.trials)]

    def capped(self, cap: float = STORED_CAP) -> "Evidence":
        if self.nodes <= cap:
            return self
        f = cap / self.nodes
        return Evidence([t * f for t in self.trials], [a * f for a in self.accepts], cap, self.runs)

    def to_dict(self) -> dict:
        return {"trials": self.trials, "accepts": self.accepts, "nodes": self.nodes, "runs": self.runs}

    @classmethod
    def from_dict(cls, obj: dict) -> "Evidence":
        return cls([float(x) for x in obj.get("trials", [])], [float(x) for x in obj.get("accepts", [])],
                   float(obj.get("nodes", 0)), int(obj.get("runs", 0)))


def one_answer(lanes: list[Evidence]) -> Evidence:
    """The evidence of runs that gave one answer (a race's lanes at T = 0: the same greedy text,
    so, where their texts agree, a rank tried at the same position is the same event in every
    lane that tried it, and adding the lanes would count it once per lane): per rank, the counts
    of the lane that tried it most; one run. A lower bound: positions where only other lanes
    tried rank k are not added."""
    out = Evidence(nodes=max((ev.nodes for ev in lanes), default=0.0), runs=1)
    out._grow(max((len(ev.trials) for ev in lanes), default=0))
    for k in range(len(out.trials)):
        most = max(lanes, key=lambda ev: ev.trials[k] if k < len(ev.trials) else 0.0)
        if k < len(most.trials):
            out.trials[k], out.accepts[k] = most.trials[k], most.accepts[k]
    return out


def store_answers(learners: list["Learner"], greedy: bool) -> Evidence | None:
    """Store what runs of one prompt, run side by side, observed (a race's lanes, a bench prompt's
    lanes); returns the last store written. At T = 0 they gave one greedy answer, so each key
    stores it once (one_answer: one run, not one per lane); sampled runs are answers of their own."""
    stored = None
    if not greedy:
        for learner in learners:
            stored = learner.record() or stored
        return stored
    by_key: dict = {}
    for learner in learners:   # one key per setting and domain, as record() keys them
        by_key.setdefault(learner.key, []).append(learner)
    for same in by_key.values():
        stored = same[0].record(one_answer([learner.to_store for learner in same])) or stored
    return stored


def step_evidence(event) -> Evidence:
    """The censored outcomes of one StepEvent (empty for an event without a tree step)."""
    ev = Evidence()
    if not event.nodes:
        return ev
    parents = list(event.tree_parents)
    kids = [0] * len(parents)
    for p in parents:
        if p >= 0:
            kids[p] += 1
    status = {n.index: n.status for n in event.nodes[:len(parents)] if n.status != "bonus"}
    path = list(event.accepted_path)
    for i, v in enumerate(path):
        accepted = event.accepted_ranks[i] if i < len(event.accepted_ranks) else None
        children = [c for c, p in enumerate(parents) if p == v]
        if accepted is None and not any(status.get(c) == "rejected" for c in children):
            continue  # a leaf, or an accepted EOS ended the walk here: no child was tried
        ev.add_node(kids[v], accepted)
    return ev


def events_evidence(events) -> Evidence:
    out = Evidence()
    for e in events:
        out = out.add(step_evidence(e))
    return out


# ---------------------------------------------------------------- pooling
def _capped(probs: list[float]) -> list[float]:
    """A vector whose sum exceeds MAX_TOTAL scaled down to it (ranks are estimated separately)."""
    total = sum(probs)
    return [x * MAX_TOTAL / total for x in probs] if total > MAX_TOTAL else probs


def _updated(prior: list[float], evidence: Evidence, weights: list[float]) -> list[float]:
    """Per rank, the Beta prior of mean prior[k] worth weights[k] observations updated with the
    rank's own trials; as long as the prior."""
    out = []
    for k, (p, w) in enumerate(zip(prior, weights)):
        t = evidence.trials[k] if k < len(evidence.trials) else 0.0
        a = evidence.accepts[k] if k < len(evidence.accepts) else 0.0
        out.append((w * float(p) + a) / (w + t) if w + t > 0 else float(p))
    return _capped(out)


def pooled(prior: list[float], evidence: Evidence, weight: float = PRIOR_WEIGHT) -> list[float]:
    """The posterior mean per rank (see the module docstring); as long as the prior."""
    return _updated(prior, evidence, [weight] * len(prior))


def drifted(probs: list[float], ratio: float) -> list[float]:
    """`probs` with P(rank 1 missed) multiplied by `ratio` and the ranks after it scaled alike
    (the draft's ranking given a rank-1 miss keeps its shape); the sum capped at MAX_TOTAL."""
    if not probs:
        return []
    missed = 1.0 - probs[0]
    now = min(1.0, missed * ratio)   # a miss mass above 1 cannot be: rank 1 then never accepts
    scale = now / missed if missed > 0 else 0.0
    return _capped([1.0 - now] + [p * scale for p in probs[1:]])


def rest_weight(drift: answer_drift.Drift | None, weight: float = PRIOR_WEIGHT) -> float:
    """The prior's pseudo-observations in rest_posterior: the drift's measured weight where it has
    one (it replaces `weight`), else `weight`."""
    return drift.weight if drift is not None and drift.weight is not None else weight


def rest_posterior(prior: list[float], head: Evidence, rest: Evidence, drift: answer_drift.Drift | None,
                   weight: float = PRIOR_WEIGHT) -> list[float]:
    """The posterior for an answer's rest (module docstring) from `head`, the evidence of its
    opening (Learner.head; `opening` elsewhere is the opening's length in tokens), and `rest`, the
    evidence since: the opening's posterior (the prior worth rest_weight), drifted by the measured
    ratio, as a prior as strong as what backs it, updated with the rest's evidence. Without a drift
    the rest is taken as the opening: the prior pooled with all the evidence."""
    if drift is None:
        return pooled(prior, head.add(rest), weight)
    weight = rest_weight(drift, weight)
    weights = [weight + (head.trials[k] if k < len(head.trials) else 0.0) for k in range(len(prior))]
    return _updated(drifted(pooled(prior, head, weight), drift.ratio), rest, weights)


# ---------------------------------------------------------------- storage
def learned_path(key: str) -> Path:
    return cache_dir() / "learned" / f"{key}.json"


def load(key: str) -> Evidence:
    """The evidence stored for this acceptance key (empty when none, unreadable, or stored in a
    format before STORED_FORMAT)."""
    path = learned_path(key)
    try:
        obj = json.loads(path.read_text())
        if obj.get("format", 1) < STORED_FORMAT:
            log.info("ignoring learned acceptance %s: stored before runs kept their answer's rest out of it", path)
            return Evidence()
        return Evidence.from_dict(obj)
    except FileNotFoundError:
        return Evidence()
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring unreadable learned acceptance %s: %s", path, exc)
        return Evidence()


def save(key: str, evidence: Evidence, meta: dict | None = None, prior: list[float] | None = None) -> Path:
    path = learned_path(key)
    obj = {**(meta or {}), **evidence.to_dict(), "format": STORED_FORMAT,
           "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "pooling": f"posterior[k] = ({PRIOR_WEIGHT:g} * prior[k] + accepts[k]) / ({PRIOR_WEIGHT:g} + trials[k])"}
    if prior is not None:
        obj["prior"] = list(prior)
        obj["posterior"] = pooled(prior, evidence)
    write_atomic(path, json.dumps(obj, indent=1))
    return path


def record(key: str, run: Evidence, meta: dict | None = None, prior: list[float] | None = None) -> Evidence:
    """Add one run's evidence to the stored evidence of this key; returns the new stored evidence.
    Runs recording one key at once (the app and a CLI run) wait for each other (paths.locked)."""
    if run.nodes <= 0:
        return load(key)
    with locked(learned_path(key)):
        stored = load(key).add(replace(run, runs=1)).capped()
        try:
            save(key, stored, meta, prior)
        except OSError as exc:  # a read-only cache must not fail the run
            log.warning("could not store the learned acceptance: %s", exc)
    return stored


def with_stored(vec, stored: Evidence):
    """An AcceptanceVector: `vec` pooled with stored evidence (stage 1), or `vec` itself when there
    is none. Its `source` and `positions` say what backs it; its ± is the pooling rule's own
    (interval "posterior": the prior counts as PRIOR_WEIGHT observations per rank, so it is wider
    than the measured vector's, which is about the measurement prompts' mean rate)."""
    if vec is None or stored.nodes <= 0:
        return vec
    probs = pooled(vec.probabilities, stored)
    n = max(1.0, stored.nodes)
    ci = [intervals.binomial([p], PRIOR_WEIGHT + (stored.trials[k] if k < len(stored.trials) else 0.0))[0]
          for k, p in enumerate(probs)]
    return replace(vec, probabilities=probs, none=max(0.0, 1.0 - sum(probs)), ci95=ci, prompt_counts=[],
                   recipe={}, interval="posterior", positions=int(vec.positions + n),
                   source=f"{vec.source} + learned from {int(n)} positions over {stored.runs} runs")


# ---------------------------------------------------------------- one run
def in_opening(tokens_before: int, opening: int) -> bool:
    """Whether a step that starts after `tokens_before` generated tokens belongs to the answer's
    opening: the one boundary rule of the Learner, step_yields.split_at and the learning checks."""
    return tokens_before < opening


class Learner:
    """Learning during one run: starts from `start` (a vector already pooled with stored
    evidence), absorbs each StepEvent, and says when the posterior moved enough to re-plan.
    With `drift` (answer_drift.drift_for), once `opening` tokens were generated the posterior is
    for the rest of the answer (rest_posterior). `record()` at the end adds the run's evidence to
    the store under `key`.

    With `memory` (engine/prompt_memory.py: what earlier runs of this prompt observed) its
    openings count as evidence of this run's opening and its rests as evidence of this rest:
    in the opening the posterior is pooled(start, memory.head + head); past it
    rest_posterior(start, head, memory.tail + tail, drift), so the rest's prior (the drifted
    opening, worth w' + this run's opening trials) is updated by every rest of this prompt seen so
    far; without a drift, pooled(start, all of memory + all of the run). `prompt_digest` names the
    prompt: record() then adds this run's opening and rest to its memory (at these settings only,
    also when `memory` was carried from runs at others: prompt_memory.carried)."""

    def __init__(self, start: list[float], key: str | None = None, meta: dict | None = None,
                 base: list[float] | None = None, weight: float = PRIOR_WEIGHT,
                 drift: answer_drift.Drift | None = None, opening: int | None = None,
                 memory: "prompt_memory.Remembered | None" = None, prompt_digest: str | None = None):
        self.start, self.key, self.meta, self.weight = list(start), key, meta or {}, weight
        self.base = list(base) if base is not None else list(start)   # the measured/interpolated vector
        self.drift, self.opening = drift, answer_drift.OPENING if opening is None else opening
        self.head, self.tail = Evidence(), Evidence()   # the run's evidence in the opening / after it
        self.tokens = 0                                 # generated tokens observed so far
        self.planned_with = list(start)   # the vector the current tree was planned from
        self.memory, self.prompt_digest = memory, prompt_digest

    def observe(self, event) -> None:
        ev = step_evidence(event)
        if in_opening(self.tokens, self.opening):   # a step that starts in the opening counts for it
            self.head = self.head.add(ev)
        else:
            self.tail = self.tail.add(ev)
        self.tokens += len(getattr(event, "new_token_ids", ()) or ())

    @property
    def run(self) -> Evidence:
        """All of this run's evidence."""
        return self.head.add(self.tail)

    @property
    def past_opening(self) -> bool:
        return self.drift is not None and not in_opening(self.tokens, self.opening)

    @property
    def has_evidence(self) -> bool:
        """Whether anything beyond the start backs the posterior (this run's steps, or memory)."""
        return self.run.nodes > 0 or self.memory is not None

    @property
    def remembered(self) -> Evidence | None:
        """The part of the prompt's memory the posterior counts now: its rests past the opening,
        its openings in it, all of it without a drift; None without a memory."""
        memory = self.memory
        if memory is None:
            return None
        if self.past_opening:
            return memory.tail
        return memory.head if self.drift is not None else memory.head.add(memory.tail)

    @property
    def posterior(self) -> list[float]:
        head, tail, remembered = self.head, self.tail, self.remembered
        if remembered is not None and self.past_opening:
            tail = remembered.add(tail)
        elif remembered is not None:   # in the opening, or no drift: the answer taken as one rate
            head = remembered.add(head)
        return rest_posterior(self.start, head, tail, self.drift if self.past_opening else None, self.weight)

    def should_replan(self) -> bool:
        return any(abs(a - b) > MIN_CHANGE for a, b in zip(self.posterior, self.planned_with))

    def state(self) -> dict:
        """What the Live chart shows: prior, observed (hits, trials) and posterior per rank."""
        width = len(self.start)
        trials = (self.run.trials + [0.0] * width)[:width]
        accepts = (self.run.accepts + [0.0] * width)[:width]
        return {"prior": list(self.start), "posterior": self.posterior,
                "observed": [(int(a), int(t)) for a, t in zip(accepts, trials)],
                "positions": int(self.run.nodes),
                "remembered": ({"runs": self.memory.runs, "positions": int(self.remembered.nodes),
                                "carried_from": self.memory.carried_from}
                               if self.memory is not None else None),
                "weight": rest_weight(self.drift, self.weight) if self.past_opening else self.weight,
                "drift": ({"ratio": self.drift.ratio, "prior_weight": self.drift.weight, "opening": self.opening,
                           "applied": self.past_opening, "draft_kernels": self.drift.draft_kernels}
                          if self.drift is not None else None)}

    @property
    def to_store(self) -> Evidence:
        """What record() adds to the store: with a drift only the opening's evidence, since the
        stored evidence pools into the next run's start (an opening rate), which a drift then
        carries to the rest; without one, the whole run's."""
        return self.head if self.drift is not None else self.run

    def record(self, evidence: Evidence | None = None) -> Evidence | None:
        """Store `to_store` (or `evidence` given instead: a race's lanes at T = 0 store one
        answer's, one_answer). With a `prompt_digest`, the opening and the rest are also kept for
        this prompt."""
        if self.key is None:
            return None
        if self.prompt_digest is not None:
            try:
                prompt_memory.remember(self.key, self.prompt_digest, self.head, self.tail, self.meta,
                                       1.0 - self.base[0] if self.base else None)
            except Exception:  # noqa: BLE001 - the prompt's memory must not cost the run its pooled store
                log.exception("could not keep this prompt's evidence")
        return record(self.key, self.to_store if evidence is None else evidence, self.meta, self.base)
