"""Measurements on the live pair and device: acceptance vectors (ALGORITHM.md §2) and the
hardware profile t(n) / draft cost per width (§4). Both are cached on disk with the settings
that produced them; a missing entry is measured, never invented."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from transformers import DynamicCache

from engine import attention, intervals, methods
from engine import cpu_kernels as cpu_kernels_mod
from engine.decoding import Decoder, generate
from engine.errors import UserError
from engine.models import ModelPair, encode_prompt, synced_clock
from engine.paths import cache_dir, write_atomic
from engine.settings import Settings
from engine.tree import Tree

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "measured"
Progress = Callable[[float, str], None]


class Stopped(Exception):
    """A measurement ended early by the stop flag."""


# ---------------------------------------------------------------- acceptance vectors
@dataclass
class AcceptanceVector:
    probabilities: list[float]          # P(rank k accepted), k = 1..W
    none: float                         # P(no child accepted)
    positions: int                      # verification steps observed
    ci95: list[float]                   # half-width of a 95 % interval per rank (over `interval`)
    draft: str
    target: str
    sampler: str
    temperature: float
    top_p: float
    width: int
    prompts: int
    measured_at: str = ""
    seconds: float = 0.0
    source: str = "measured"            # or the cache file it came from
    draft_kernels: str = "default"      # the draft's CPU kernels (engine/cpu_kernels.py): int8 drafts accept a bit less
    top_k: int = 0                      # 0 = off (files written before top-k existed read as off)
    domain: str = ""                    # "" = every prompt pooled; or the prompt kind measured ("code", "prose")
    method: str = "star"                # "star" (on-policy star decoding) or "replay" (engine/replay.py)
    machine: dict = field(default_factory=dict)  # where it was measured (machine_description)
    # per measured prompt [positions, count of rank 1..W, none] (engine/intervals.py); [] in files
    # measured before prompts were recorded, and in interpolated or learned vectors
    prompt_counts: list = field(default_factory=list)
    interval: str = "positions"         # what ci95 is over: "prompts" (each prompt one draw), "positions",
                                        # or "posterior" (pooled with learned evidence: learning.with_stored)
    # a replay measurement's prompts (digest, seed), answer tokens and draws (replay.recipe): what
    # `measure --extend` repeats for prompts added to the set; {} where unknown
    recipe: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def draft_kernels(pair: ModelPair) -> str:
    """How the draft computes: its numerics and a pruned head change acceptance, never exactness."""
    report = getattr(pair, "cpu_kernels", {}).get("draft", {})
    mode = report.get("mode", "default") + _nf4_mark(report)
    return f"{mode}+head{report['head_tokens']}" if report.get("head_tokens") else mode


def _nf4_mark(draft_report: dict) -> str:
    """'+nf4' for an NF4 draft, which accepts and costs differently; int8 drafts keep the cache
    keys they always had."""
    return "+nf4" if cpu_kernels_mod.draft_weights_of(draft_report) == "nf4" else ""


def acceptance_key(pair: ModelPair, sampler: str, temperature: float, top_p: float, width: int,
                   top_k: int | None = 0, domain: str = "") -> str:
    """top_k 0/None (off) and domain "" (pooled) give the keys used before they existed, so older
    files are still found. The width is the one measured: at most the vocabulary's size."""
    sampler = "greedy" if temperature == 0 else sampler
    width = measurable_width(pair, width)
    parts = ["acceptance", pair.draft_name, pair.target_name, sampler, float(temperature),
             float(top_p) if temperature else 1.0, int(width)]
    if temperature and top_k:
        parts.append(f"top_k={int(top_k)}")
    if domain:
        parts.append(f"domain={domain}")
    kernels = draft_kernels(pair)
    return _key(*parts, kernels) if kernels != "default" else _key(*parts)


ci95 = intervals.binomial   # over positions; a measured vector's own interval: intervals.vector_ci


def measurable_width(pair, width: int) -> int:
    """A star cannot have more children than the vocabulary has tokens: measure at most that many."""
    vocab = getattr(pair, "vocab_size", None)
    return min(int(width), int(vocab)) if isinstance(vocab, int) and vocab > 0 else int(width)


def measure_acceptance(pair: ModelPair, prompts: list[str], temperature: float, top_p: float = 1.0,
                       sampler: str = "sequoia", width: int = 16, tokens_per_prompt: int = 48,
                       seed: int = 0, chat: bool | None = None, progress: Progress | None = None,
                       should_stop: Callable[[], bool] = lambda: False, ignore_eos: bool = False,
                       top_k: int | None = 0) -> AcceptanceVector:
    """On-policy: decode with a star tree (root + `width` children) under the sampler that
    decoding will use and count which rank got accepted. The text produced is exact target
    sampling, so the positions are the ones real decoding visits."""
    if not 1 <= width <= 64:
        raise UserError(f"width must be between 1 and 64 (got {width})")
    width = measurable_width(pair, width)  # a 16-wide star on a 10-token vocabulary: measure 10
    settings = Settings(temperature=temperature, top_p=top_p, max_new_tokens=tokens_per_prompt, seed=seed,
                        ignore_eos=ignore_eos, top_k=int(top_k or 0))
    method = methods.Method("measure", Tree.star(width), sampler)
    counts, none, start = [0] * width, 0, time.perf_counter()
    prompt_counts = []
    for i, prompt in enumerate(prompts):
        ids = encode_prompt(pair, prompt, chat)
        before = [*counts, none]
        if progress:   # said before its prompt is read: the first step's line came seconds later
            progress(i / len(prompts), f"measuring acceptance: prompt {i + 1}/{len(prompts)}, reading it "
                                       f"({sum(counts) + none} positions so far)")
        for event in generate(pair, ids, method, settings, should_stop=should_stop):
            if event.finish_reason == "stopped":
                raise Stopped("measurement stopped")
            if len(event.tree_parents) < 2:
                continue  # no children this step (stopped, or the star was cut at the context limit)
            if event.accepted_ranks:
                counts[event.accepted_ranks[0] - 1] += 1
            else:
                none += 1
            if progress:
                progress((i + min(event.total_tokens / tokens_per_prompt, 1)) / len(prompts),
                         f"measuring acceptance: prompt {i + 1}/{len(prompts)}, {sum(counts) + none} positions")
        own = [a - b for a, b in zip([*counts, none], before)]
        prompt_counts.append(intervals.prompt_row(own, sum(own)))
    total = sum(counts) + none
    if total == 0:
        raise UserError("no positions measured (prompts ended at once)")
    probs = [c / total for c in counts]
    ci, basis = intervals.vector_ci(probs, total, prompt_counts)
    return AcceptanceVector(probs, none / total, total, ci, pair.draft_name, pair.target_name,
                            "greedy" if temperature == 0 else sampler, float(temperature),
                            float(top_p), width, len(prompts), time.strftime("%Y-%m-%dT%H:%M:%S"),
                            time.perf_counter() - start, draft_kernels=draft_kernels(pair),
                            top_k=int(top_k or 0) if temperature else 0, machine=machine_description(pair.device),
                            prompt_counts=prompt_counts, interval=basis)


def cached_acceptance(pair: ModelPair, temperature: float, top_p: float = 1.0, sampler: str = "sequoia",
                      width: int = 16, top_k: int | None = 0, domain: str = "") -> AcceptanceVector | None:
    """A measured vector for these exact settings (and prompt domain; "" = pooled), from the user
    cache or a file shipped in assets/."""
    found = _read_cached("acceptance", acceptance_key(pair, sampler, temperature, top_p, width, top_k, domain))
    if found is None:
        return None
    path, obj = found
    vec = AcceptanceVector(**obj)
    vec.source = str(path)
    return vec


def save_acceptance(pair: ModelPair, vec: AcceptanceVector) -> Path:
    key = acceptance_key(pair, vec.sampler, vec.temperature, vec.top_p, vec.width, vec.top_k, vec.domain)
    return _write_cached("acceptance", key, vec.to_dict())


def shipped_hidden_by(pair: ModelPair, vec: AcceptanceVector) -> AcceptanceVector | None:
    """The shipped vector (assets/measured/) for the same settings, kernels and prompt domain as a
    vector in the user cache, where it holds more positions: the user cache is read first, so a
    short measurement (the app's Measure, a default `measure`: ~190 positions) hides a shipped one
    of thousands; the caller says so, with how to go back (delete the user's file)."""
    key = acceptance_key(pair, vec.sampler, vec.temperature, vec.top_p, vec.width, vec.top_k, vec.domain)
    try:
        found = _read_cached("acceptance", key, folders=(SHIPPED / "acceptance",))
        if found is None or Path(vec.source or "").resolve() == found[0].resolve():
            return None
        shipped = AcceptanceVector(**found[1])
    except (OSError, ValueError, TypeError):
        return None
    shipped.source = str(found[0])
    return shipped if shipped.positions > vec.positions else None


def measured_vectors(pair: ModelPair, domain: str | None = "") -> list[AcceptanceVector]:
    """Every cached acceptance vector of this pair (user cache and shipped files), any settings, of
    one prompt domain ("" = pooled over every prompt; None = any domain)."""
    out = []
    for folder in (cache_dir() / "acceptance", SHIPPED / "acceptance"):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            try:
                vec = AcceptanceVector(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if vec.draft == pair.draft_name and vec.target == pair.target_name and domain in (None, vec.domain):
                vec.source = str(path)
                out.append(vec)
    return out


def nearest_vector(pair: ModelPair, temperature: float, top_p: float, sampler: str = "sequoia",
                   top_k: int | None = 0):
    """The measured vector closest in (temperature, top-p) with the same kind of sampler, or None;
    one measured with this draft's kernels first. Greedy (T=0) vectors only stand in for T=0 and
    sampling ones only for T>0."""
    want, kernels = "greedy" if temperature == 0 else sampler, draft_kernels(pair)
    cands = [v for v in measured_vectors(pair) if v.sampler == want]
    if not cands:
        return None
    return min(cands, key=lambda v: (v.draft_kernels != kernels, (v.top_k or 0) != (top_k or 0),
                                     abs(v.temperature - temperature) + abs(v.top_p - top_p), v.temperature))


def _read_cached(kind: str, key: str, folders=None) -> tuple[Path, dict] | None:
    """The user cache first, then files shipped in assets/measured/ (or only `folders`)."""
    for folder in folders or (cache_dir() / kind, SHIPPED / kind):
        path = folder / f"{key}.json"
        if path.exists():
            return path, json.loads(path.read_text())
    return None


def _write_cached(kind: str, key: str, obj: dict) -> Path:
    path = cache_dir() / kind / f"{key}.json"
    write_atomic(path, json.dumps(obj, indent=1))
    return path


def acceptance_vector(pair: ModelPair, temperature: float, top_p: float = 1.0, sampler: str = "sequoia",
                      width: int = 16, prompts: list[str] | None = None, measure: bool = True,
                      top_k: int | None = 0, **kwargs) -> AcceptanceVector | None:
    """The cached vector, or a fresh measurement (then cached) when allowed."""
    vec = cached_acceptance(pair, temperature, top_p, sampler, width, top_k)
    if vec is not None or not measure:
        return vec
    if prompts is None:
        from engine.prompts import default_prompts
        prompts = default_prompts()
    vec = measure_acceptance(pair, prompts, temperature, top_p, sampler, width, top_k=top_k, **kwargs)
    vec.source = str(save_acceptance(pair, vec))
    return vec


# ---------------------------------------------------------------- device profile
@dataclass
class DeviceProfile:
    target_seconds: dict[int, float]     # n tree tokens verified in one target forward
    draft_seconds: dict[int, float]      # one draft forward over `width` tokens
    overhead_seconds: float              # per step, everything but the forwards
    prefix_tokens: int
    repeats: int
    draft: str
    target: str
    device: str
    dtype: str
    machine: dict = field(default_factory=dict)
    measured_at: str = ""
    source: str = "measured"
    quality: dict = field(default_factory=dict)           # load seen, spread of the repeats, noisy or not
    sampling_seconds: dict = field(default_factory=dict)  # per node at T > 0: draft_node, target_node

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def noisy(self) -> bool:
        return bool(self.quality.get("noisy"))

    @classmethod
    def from_dict(cls, obj: dict) -> "DeviceProfile":
        obj = dict(obj)
        obj["target_seconds"] = {int(k): float(v) for k, v in obj["target_seconds"].items()}
        obj["draft_seconds"] = {int(k): float(v) for k, v in obj["draft_seconds"].items()}
        return cls(**obj)


def clean_one_stays(old: DeviceProfile, new: DeviceProfile) -> bool:
    """Whether a cached profile should stay in place of a new one: the new one's repeats disagree
    (the machine was busy while it timed) and the cached one's agreed. A profile pressed beside
    other work replaced a clean one (8 %) with a noisy one (47 %) and moved the plan on noise. The
    sizes do not decide: the Planner's Profile times up to 128 where a first load's stops at 32
    nodes and 16 draft rows, and plans read the clean one's as before."""
    return new.noisy and not old.noisy


def geometric_grid(maximum: int) -> list[int]:
    grid, n = [], 1
    while n < maximum:
        grid.append(n)
        n *= 2
    grid.append(maximum)
    return sorted(set(grid))


DENSE_UP_TO = 8  # every n up to here is profiled: the best CPU trees are 3-8 nodes, where t(n) bends


def profile_grid(maximum: int) -> list[int]:
    """Every n <= DENSE_UP_TO, then doubling: interpolating t(5) between t(4) and t(8) made the
    planner pass over a 5-node chain that beat the 4-node one it chose (issue 14)."""
    return sorted({*range(1, min(maximum, DENSE_UP_TO) + 1), *geometric_grid(maximum)})


def machine_description(device: torch.device | str | None = None) -> dict:
    import transformers
    info = {"platform": platform.platform(), "processor": _cpu_name(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    if device is not None:
        info["device"] = str(device)
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


NOISY_SPREAD = 0.10   # a profile point whose interquartile range exceeds this share of its median is noisy
MAX_REPEATS = 15      # adaptive repeats stop here even when the spread stays large


def spread(times: list[float]) -> float:
    """Interquartile range over median: how much the repeats of one timing disagree."""
    if len(times) < 2:
        return 0.0
    q = statistics.quantiles(times, n=4, method="inclusive")
    med = statistics.median(times)
    return (q[2] - q[0]) / med if med > 0 else 0.0


def prefilled_cache(model, prefix_ids: list[int]) -> DynamicCache:
    """A KV cache holding the prefix, for forward timers (one per model serves every n: each try
    is cut back off it); the decoder's own kind (attention.new_cache), so that a real run can
    continue from it (_measure_overhead)."""
    cache = attention.new_cache(model)
    attention.forward_causal(model, cache, prefix_ids)
    return cache


def _star_inputs(model, base: int, n: int) -> tuple[list[int], list[int], torch.Tensor]:
    """Token ids, positions and visibility of n tree tokens as a star (all at one depth) after `base`."""
    tree = Tree.star(n - 1) if n > 1 else Tree((-1,))
    visible = attention.tree_visibility(base, tree.ancestor_mask, list(range(n)), list(range(n)),
                                        attention.input_device(model))
    ids = [(7 * i + 3) % model.config.vocab_size for i in range(n)]
    return ids, [base + d for d in tree.depth_of], visible


def _forward_timer(model, cache: DynamicCache, base: int, n: int, clock,
                   before_each: Callable[[], None] | None = None) -> Callable[[], float]:
    """A function timing one forward over n tree tokens (a star) on `cache`, which holds `base`
    prefix tokens and is cut back after each try; `before_each` runs first, outside the clock."""
    inputs = _star_inputs(model, base, n)

    def once() -> float:
        if before_each is not None:
            before_each()
        t0 = clock()
        attention.forward(model, cache, *inputs)
        elapsed = clock() - t0
        attention.commit(cache, base, [])
        return elapsed
    return once


def _time_forward(model, prefix_ids: list[int], n: int, repeats: int, clock, should_stop,
                  before_each: Callable[[], None] | None = None, spreads: dict | None = None) -> float:
    """Median seconds of one forward over n tree tokens (a star: all at one depth) on a KV cache
    prefilled with the prefix and cut back after each try. At least `repeats` timed tries, more
    (up to MAX_REPEATS) while their spread is above NOISY_SPREAD; the spread reached goes to
    spreads[n]. `before_each` runs before every timed forward, outside the clock."""
    timer = _forward_timer(model, prefilled_cache(model, prefix_ids), len(prefix_ids), n, clock, before_each)
    times = _time_in_rounds({n: timer}, repeats, should_stop)[n]
    if spreads is not None:
        spreads[n] = spread(times)
    return statistics.median(times)


def _time_in_rounds(timers: dict, repeats: int, should_stop, each_round: Callable[[int], None] | None = None,
                    max_repeats: int = MAX_REPEATS) -> dict:
    """Seconds of every timer per round, in rounds that run each timer once, in order and then
    in reverse: a shared machine's speed drifts over seconds to minutes (plain decoding took
    83-137 ms per token within one benchmark here, and t(1) was profiled at 77, ~110 and 148 ms
    within minutes), and timing one size after another carried that drift into t(n)/t(1) and the
    draft/target ratio. Round r of every timer is taken close together, so ratios taken round by
    round (round_ratios) cancel it. A warm-up round, then at least `repeats` rounds, more (up to
    max_repeats) while any timer's spread is above NOISY_SPREAD. each_round(k) after round k
    (0: the warm-up)."""
    order = list(timers)
    times: dict = {key: [] for key in order}
    rounds = 0
    while True:
        for key in (order if rounds % 2 == 0 else order[::-1]):
            if should_stop():
                raise Stopped("profiling stopped")
            elapsed = timers[key]()
            if rounds:  # round 0 is the warm-up
                times[key].append(elapsed)
        if each_round is not None:
            each_round(rounds)
        timed, rounds = rounds, rounds + 1
        worst = max(spread(t) for t in times.values())
        if timed >= repeats and (worst <= NOISY_SPREAD or timed >= max(repeats, max_repeats)):
            return times


def round_ratios(times: dict, over) -> dict:
    """Median over rounds of each timer's seconds over the `over` timer's in the same round."""
    return {key: statistics.median(a / b for a, b in zip(t, times[over])) for key, t in times.items()}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def sampling_seconds(vocab_size: int, device: torch.device, repeats: int = 5) -> dict:
    """What the sampling maths costs per node at T > 0 on this device (engine/sampling.py on
    vocabulary-sized vectors): per expanded draft node (q, then 2 draws) and per visited target
    node (p, one child tried and rejected, the bonus draw). Added to the cost model at T > 0."""
    from engine import sampling
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(vocab_size, device=device, generator=gen) * 3
    other = logits + torch.randn(vocab_size, device=device, generator=gen)

    def draft_node():
        q = sampling.draft_distribution(logits, 0.7)
        sampling.draw_without_replacement(q, 2, gen)
        return q

    q = draft_node()
    worst = int(torch.argmin(other))  # surely rejected: the residual update runs

    def target_node():
        p = sampling.target_distribution(other, 0.7)
        verdict = sampling.verify_sequoia(p, q, [worst], gen)
        sampling.sample_token(verdict.residual if verdict.residual is not None else p, gen)

    return {"draft_node": median_seconds(draft_node, repeats), "target_node": median_seconds(target_node, repeats)}


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of `repeats` calls of fn, after one untimed call (warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def profile_device(pair: ModelPair, max_budget: int = 64, max_width: int | None = None, prefix_tokens: int = 128,
                   repeats: int = 5, progress: Progress | None = None,
                   should_stop: Callable[[], bool] = lambda: False,
                   before_target_forward: Callable[[], None] | None = None,
                   max_repeats: int = MAX_REPEATS) -> DeviceProfile:
    """t(n) of the target and the draft's cost per width. `before_target_forward` runs before each
    timed target forward (the benchmark uses it to drop the page cache: see drop_page_cache).
    Rounds beyond `repeats` are added while the timings disagree, up to `max_repeats`."""
    if not 1 <= max_budget <= 1024:
        raise UserError(f"max budget must be between 1 and 1024 (got {max_budget})")
    prefix_tokens = max(1, min(prefix_tokens, pair.context_limit - max_budget - 1))
    clock = synced_clock(pair)
    vocab = pair.vocab_size
    prefix = [(31 * i + 11) % vocab for i in range(prefix_tokens)]
    target_grid, draft_grid = profile_grid(max_budget), profile_grid(max_width or max_budget)
    load_before = load_average()
    # both models' prefilled caches at once (a 128-token prefix: megabytes), so that every round
    # times every size of both models within seconds of each other
    caches = {role: prefilled_cache(model, prefix) for role, model in (("target", pair.target), ("draft", pair.draft))}
    timers = {("target", n): _forward_timer(pair.target, caches["target"], len(prefix), n, clock, before_target_forward)
              for n in target_grid}
    timers.update({("draft", w): _forward_timer(pair.draft, caches["draft"], len(prefix), w, clock)
                   for w in draft_grid})
    sizes = f"target over {target_grid[0]}-{target_grid[-1]}, draft over {draft_grid[0]}-{draft_grid[-1]} tokens"

    def each_round(k):  # k: the round just finished (0: the warm-up)
        if progress:
            extra = max(max_repeats - repeats, 0)
            step = ("warm-up" if k < 0 else "timing" if k == 0
                    else f"{k} of {repeats} rounds timed" if k <= repeats
                    else f"{k} rounds timed: they disagree, so more (up to {repeats + extra})")
            # the rounds asked for fill 0-75 %, the extra ones (while repeats disagree) 75-90 %: a
            # bar at 90 % for a minute and a half read as stuck
            done = (min(k + 1, repeats + 1) / (repeats + 1) * 0.75 if k <= repeats
                    else 0.75 + 0.15 * (k - repeats) / max(extra, 1))
            progress(done, f"profiling forwards ({sizes}): {step}")

    each_round(-1)
    times = _time_in_rounds(timers, repeats, should_stop, each_round, max_repeats)
    target_s = {n: statistics.median(times["target", n]) for n in target_grid}
    draft_s = {w: statistics.median(times["draft", w]) for w in draft_grid}
    spreads = {role: {n: spread(t) for (r, n), t in times.items() if r == role} for role in ("target", "draft")}
    ratios = round_ratios(times, ("target", 1))
    if progress:
        progress(0.9, "measuring per-step overhead and sampling costs")
    overhead = _measure_overhead(pair, prefix, should_stop, (caches["target"], caches["draft"]))
    del caches, timers
    machine = machine_description(pair.device)
    machine.update({k: v for k, v in pair.describe().items() if k.endswith("device_map") and v})
    machine["cpu_kernels"] = pair.cpu_kernels_mode
    machine["draft_weights"] = cpu_kernels_mod.draft_weights_of(pair.cpu_kernels.get("draft", {}))
    if before_target_forward is drop_page_cache:
        machine["page_cache"] = "dropped before each timed target forward"
    worst = max([*spreads["target"].values(), *spreads["draft"].values()], default=0.0)
    quality = {"load_average_before": load_before, "load_average_after": load_average(),
               "spread": {role: {str(k): round(v, 4) for k, v in d.items()} for role, d in spreads.items()},
               "worst_spread": round(worst, 4), "noisy": worst > NOISY_SPREAD,
               # per-round ratios: drift between rounds cancels (see _time_in_rounds)
               "round_ratios": {"target_over_t1": {str(n): round(ratios["target", n], 4) for n in target_grid},
                                "draft_over_t1": {str(w): round(ratios["draft", w], 4) for w in draft_grid}},
               "cpu_count": os.cpu_count()}
    return DeviceProfile(target_s, draft_s, overhead, prefix_tokens, repeats, pair.draft_name, pair.target_name,
                         str(pair.device), str(pair.dtype).replace("torch.", ""), machine,
                         time.strftime("%Y-%m-%dT%H:%M:%S"), quality=quality,
                         sampling_seconds=sampling_seconds(vocab, torch.device("cpu") if pair.device.type == "mps"
                                                           else pair.device))


def drop_page_cache() -> None:
    """Ask Linux to forget cached file pages, so disk-offloaded weights are read from the disk
    again, as they would be if they did not fit in RAM. Needs root."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as exc:
        raise UserError(f"cannot drop the page cache ({exc.strerror}): it needs Linux and root") from None


def _measure_overhead(pair: ModelPair, prefix: list[int], should_stop, prefilled: tuple) -> float:
    """Median 'other' time (walk, commit, bookkeeping) of a few real steps with a small tree.
    prefilled: (target, draft) caches holding `prefix` (the timers' own): the run continues from
    them instead of prefilling the prefix again (about 4 s of a CPU profile)."""
    method = methods.sequoia(Tree.from_branching([2, 1, 1]))
    others = []
    events = Decoder(pair, method, Settings(max_new_tokens=12, ignore_eos=True), prefilled=prefilled).run(
        [*prefix, prefix[-1]], should_stop)  # the caches hold all of the prompt but its last token
    for event in events:
        if event.finish_reason == "stopped":
            raise Stopped("profiling stopped")
        if event.nodes:
            others.append(event.other_seconds)
    return statistics.median(others) if others else 0.0


def profile_key(pair: ModelPair) -> str:
    """Timing depends on where the weights live, so a device map is part of the key."""
    placement = pair.describe()
    parts = ["profile", pair.draft_name, pair.target_name, str(pair.device), str(pair.dtype),
             placement["target_device_map"], placement["draft_device_map"]]
    if pair.cpu_kernels_mode != "fast":
        return _key(*parts)
    return _key(*parts, "fast" + _nf4_mark(pair.cpu_kernels.get("draft", {})))


def cached_profile(pair: ModelPair) -> DeviceProfile | None:
    found = _read_cached("profiles", profile_key(pair))
    if found is None:
        return None
    path, obj = found
    prof = DeviceProfile.from_dict(obj)
    prof.source = str(path)
    return prof


def profile_stamp(pair: ModelPair) -> tuple[str, int, int, int] | None:
    """Which cached profile plans read now (its file; when it was written, its inode and size),
    without reading it: a page compares stamps to see that its shown plan rests on a profile since
    replaced. The inode too: a write within one tick of the file clock keeps the time, but the
    cache writes a new file and renames it over the old one."""
    key = profile_key(pair)
    for folder in (cache_dir() / "profiles", SHIPPED / "profiles"):
        path = folder / f"{key}.json"
        try:
            st = path.stat()
        except OSError:
            continue
        return str(path), st.st_mtime_ns, st.st_ino, st.st_size
    return None


def save_profile(pair: ModelPair, prof: DeviceProfile) -> Path:
    return _write_cached("profiles", profile_key(pair), prof.to_dict())


def covers(prof: DeviceProfile | None, max_budget: int) -> bool:
    """Whether a profile timed the target up to max_budget (else plans extrapolate t(n) past it)."""
    return prof is not None and max(prof.target_seconds) >= max_budget


def device_profile(pair: ModelPair, measure: bool = True, **kwargs) -> DeviceProfile | None:
    """The cached profile if it covers the budgets asked for; otherwise a new measurement."""
    prof = cached_profile(pair)
    if covers(prof, kwargs.get("max_budget", 1)) or not measure:
        return prof
    prof = profile_device(pair, **kwargs)
    prof.source = str(save_profile(pair, prof))
    return prof
