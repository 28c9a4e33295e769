"""Losslessness self-check for a draft/target pair (`python -m engine check`, the "Check this pair" button).

Three sections, each a list of CheckItems with status pass / fail / warn / skip:

greedy     For each prompt and method, the speculative greedy output must equal the target's own greedy
           output token for token. The reference is transformers' `generate(do_sample=False)` on the target
           alone, with the model's generation config swapped for a neutral one for the call (a checkpoint's
           repetition_penalty or no_repeat_ngram_size would change "greedy"). A difference is a FAIL, shown
           with the first differing token; it is only a WARN when the two tokens' target logits there are
           within the dtype's rounding (a near tie: both paths are right up to rounding).
sampling   For each method and each sampling setting (T=1, and T=0.7 with top-p 0.9), N speculative steps
           from a few prefixes (positions along the prompts' greedy continuations where the target's
           distribution is most spread out); each sample is one real engine step (Decoder._step from
           caches prefilled once per prefix: its own draft forwards and one target tree forward), so the
           sampling part costs N x methods x settings steps. The emitted tokens are compared with the
           target's exact next-token distribution by a chi-square test:
             - "next token": the first token of the step, against p(. | prefix);
             - "after an accepted draft token": when the first token was an accepted draft node, the
               token after it (verified one tree level deeper, or the bonus there), against
               p(. | prefix + that token). Conditioning on which token was accepted is exact: the
               verification below a node uses fresh randomness, so it must reproduce p(. | prefix + a).
           The reference distributions come from plain transformers forwards (no tree mask, no engine
           code): one forward per prefix, plus one batched single-token forward on its cache for the
           accepted first tokens. Temperature and top-p are transformers' own logits warpers.
           Statistic (sample_test): per group (a prefix, or a prefix + accepted token) one bin per token
           whose expected count is >= 5 and the tail in an "other" bin (merged into the smallest bin when
           "other" itself would expect < 5); groups too small for two such bins are pooled by the
           randomised probability integral transform (each sample -> a uniform draw inside its token's
           slice of the group's probability-ordered CDF; Uniform(0, 1) under exactness, whatever the
           group) into equal bins. All pieces cover disjoint samples, so their chi-squares add up into
           one test. A sampled token that the target cannot produce (probability 0, e.g. outside the
           top-p nucleus) fails the test outright.
           Verdict: FAIL when p < alpha (default 0.001). Each p-value is uniform under exactness, so one
           test fails by chance once in 1000 runs: a FAIL is strong evidence (re-run with another seed to
           confirm). Each PASS line states the smallest deviation (chi-square distance over its bins)
           that the test detects with 90 % probability at that N.
structure  The tree-mask probes of both models (ModelPair.probe), tokenizer equality (re-loaded from the
           model folders), vocabulary sizes, dtype/device/eval mode, and the KV-commit check: after each
           of a few speculative steps at T=1, the logits from the committed caches equal those of a fresh
           plain forward over the committed sequence (target and draft).

Trees used (fixed shapes, so that the check does not depend on measuring acceptance first; all of depth
3 so that a sample costs 2 draft forwards + 1 target forward; deeper shapes are exercised by the test suite):
    sequoia    Tree.from_branching([3, 2, 1]): root with 3 children (drawn without replacement),
               the rank-1 child with 2, the rank-2 child with 1: 7 nodes, 3 levels
    specinfer  SpecInfer 3x3: 3 i.i.d. chains of 2 tokens: 7 nodes, 3 levels
    chain      a chain of 2 drafted tokens: 3 nodes, 3 levels
    ar         plain autoregressive decoding through the engine (optional)
Pass Method objects in CheckConfig.methods to check other shapes.

Timing: `estimate_check` times one prefill and one speculative step per method on the first prompt and
extrapolates; with `samples=None` it also picks N so that the sampling part takes about
`sample_budget_seconds` (between MIN_AUTO_SAMPLES and MAX_AUTO_SAMPLES).
"""
from __future__ import annotations

import collections
import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.stats import chi2, ncx2
from transformers import DynamicCache, GenerationConfig
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from engine import attention, methods, sampling
from engine.decoding import Decoder
from engine.errors import UserError
from engine.methods import Method
from engine.models import ModelPair, check_same_tokenizer, encode_prompt, probe_tree_mask
from engine.settings import Settings
from engine.tree import Tree

SECTIONS = ("greedy", "sampling", "structure")
DEFAULT_METHODS = ("sequoia", "specinfer", "chain")
CHECK_METHOD_NAMES = ("sequoia", "specinfer", "chain", "ar")
SAMPLING_SETTINGS = ((1.0, 1.0), (0.7, 0.9))
ALPHA = 1e-3
MIN_EXPECTED = 5.0
POWER = 0.9
MIN_AUTO_SAMPLES, MAX_AUTO_SAMPLES = 30, 400
MAX_CONTINUATIONS = 48          # accepted first tokens per prefix whose next-token distribution is computed

# A greedy difference is a near tie (WARN, not FAIL) when the two tokens' target logits differ by at most this.
TIE_TOLERANCE = {torch.float64: 1e-6, torch.float32: 2e-3, torch.bfloat16: 0.25, torch.float16: 0.06}
# KV commit: total variation between next-token distributions from the committed cache and a fresh forward.
KV_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.bfloat16: 0.05, torch.float16: 0.02}
# top-p boundary: a sampled token just outside the reference nucleus counts as rounding, not as an error.
NUCLEUS_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}

Progress = Callable[[float, str], None]


def check_method(name: str) -> Method:
    """The fixed shape the check uses for a method name (see the module docstring)."""
    if name == "sequoia":
        return methods.sequoia(Tree.from_branching([3, 2, 1]))
    if name == "specinfer":
        return methods.specinfer(3, 3)
    if name == "chain":
        return methods.chain(3)
    if name == "ar":
        return methods.autoregressive()
    raise UserError(f"unknown method '{name}' (use {', '.join(CHECK_METHOD_NAMES)})")


def parse_methods(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise UserError("--methods is empty (use e.g. sequoia,specinfer,chain)")
    for name in names:
        check_method(name)
    if len(set(names)) != len(names):
        raise UserError(f"--methods lists a method twice: {text}")
    return names


# ----------------------------------------------------------------------------------------- config
@dataclass
class CheckConfig:
    prompts: list[str] | None = None          # None: the first `num_prompts` example prompts (assets/prompts.json)
    num_prompts: int = 2
    chat: bool | None = None                  # chat template: default on when the tokenizer has one
    methods: tuple = DEFAULT_METHODS          # names (see check_method) or Method objects
    sections: tuple[str, ...] = SECTIONS
    greedy_tokens: int = 16
    samples: int | None = None                # per (method, setting); None = auto from the timing
    sample_budget_seconds: float = 150.0      # what "auto" aims the sampling part at
    prefixes: int = 2
    sampling_settings: tuple = SAMPLING_SETTINGS  # (temperature, top_p) pairs
    alpha: float = ALPHA
    kv_steps: int = 4
    seed: int = 0

    def validate(self) -> None:
        if self.prompts is not None and (not self.prompts or not all(isinstance(p, str) and p.strip()
                                                                     for p in self.prompts)):
            raise UserError("the check needs at least one non-empty prompt")
        for name, value, low, high in (("num_prompts", self.num_prompts, 1, 100),
                                       ("greedy_tokens", self.greedy_tokens, 1, 1024),
                                       ("prefixes", self.prefixes, 1, 32), ("kv_steps", self.kv_steps, 1, 64)):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise UserError(f"{name} must be an integer between {low} and {high} (got {value!r})")
        if self.samples is not None and (not isinstance(self.samples, int) or isinstance(self.samples, bool)
                                         or not 1 <= self.samples <= 100_000):
            raise UserError(f"samples must be between 1 and 100000 (got {self.samples!r})")
        if not 0 < float(self.alpha) < 0.5:
            raise UserError(f"alpha must be in (0, 0.5) (got {self.alpha})")
        if not self.sample_budget_seconds > 0:
            raise UserError("sample_budget_seconds must be positive")
        bad = [s for s in self.sections if s not in SECTIONS]
        if bad or not self.sections:
            raise UserError(f"unknown section(s) {bad or '(none given)'}: use {', '.join(SECTIONS)}")
        if not self.methods:
            raise UserError("no methods to check")
        for t, p in self.sampling_settings:
            Settings(temperature=t, top_p=p)  # same validation as decoding
            if t == 0:
                raise UserError("sampling settings need a temperature > 0 (greedy is its own section)")
        self.resolved_methods()

    def resolved_methods(self) -> list[Method]:
        out = [m if isinstance(m, Method) else check_method(m) for m in self.methods]
        labels = [m.name for m in out]
        if len(set(labels)) != len(labels):
            raise UserError(f"methods listed twice: {labels}")
        return out

    def to_dict(self) -> dict:
        out = asdict(self)
        out["methods"] = [m.name for m in self.resolved_methods()]
        out["sampling_settings"] = [list(s) for s in self.sampling_settings]
        return out


# ----------------------------------------------------------------------------------------- report
@dataclass
class CheckItem:
    section: str      # greedy | sampling | structure
    name: str
    status: str       # pass | fail | warn | skip
    message: str      # one line for people
    details: dict = field(default_factory=dict)


@dataclass
class CheckEstimate:
    seconds: float
    sections: dict            # section -> seconds
    samples: int              # N per (method, setting) the run will use
    samples_auto: bool
    timings: dict             # what was measured
    measured_seconds: float   # time the timing itself took

    def message(self) -> str:
        parts = ", ".join(f"{k} {_duration(v)}" for k, v in self.sections.items())
        step = self.timings.get("sample_step_seconds", {})
        step_txt = ", ".join(f"{k} {v:.2g} s" for k, v in step.items())
        return (f"estimated time: about {_duration(self.seconds)} ({parts}); N = {self.samples} samples per "
                f"method and setting{' (auto)' if self.samples_auto else ''}; one speculative step: {step_txt}; "
                f"one target token: {self.timings.get('target_token_seconds', 0):.2g} s")

    def to_dict(self) -> dict:
        return asdict(self)


EXPLANATION = ("Greedy: the speculative output must equal the target's own greedy generate() token for token. "
               "Sampling: a test FAILs when its p-value is below {alpha:g}. If decoding is exact every p-value is "
               "uniform on [0, 1], so a single test fails by chance once in {inv:,} runs ({tests} here: about "
               "one run in {family:,}); a FAIL at this level is strong evidence of a real difference (re-run with "
               "another seed to confirm). A PASS means no difference was detected with these samples: each line "
               "states the chi-square distance detected with 90% probability; smaller deviations can go unnoticed. "
               "Structure: tree-attention probes, tokenizer, dtype/device and the KV-cache commit must all hold.")


@dataclass
class CheckReport:
    pair: dict
    config: dict
    items: list[CheckItem] = field(default_factory=list)
    estimate: CheckEstimate | None = None
    seconds: float = 0.0
    stopped: bool = False

    @property
    def verdict(self) -> str:
        statuses = [i.status for i in self.items]
        if "fail" in statuses:
            return "FAIL"
        if self.stopped:
            return "STOPPED"
        if "warn" in statuses:
            return "WARN"
        return "PASS"

    @property
    def passed(self) -> bool:
        return self.verdict in ("PASS", "WARN")

    def section_counts(self) -> dict:
        out: dict = {}
        for item in self.items:
            c = out.setdefault(item.section, {"pass": 0, "fail": 0, "warn": 0, "skip": 0})
            c[item.status] += 1
        return out

    def explanation(self) -> str:
        alpha = float(self.config.get("alpha", ALPHA))
        tests = max(1, sum(1 for i in self.items if i.section == "sampling" and i.status != "skip"))
        return EXPLANATION.format(alpha=alpha, inv=round(1 / alpha), tests=f"{tests} test{'s' if tests > 1 else ''}",
                                  family=max(1, round(1 / (1 - (1 - alpha) ** tests))))

    def summary(self) -> str:
        """Two or three lines for people: the verdict, per-section counts, the first problems."""
        names = f"{self.pair.get('draft', '?')} -> {self.pair.get('target', '?')}"
        head = {"PASS": f"PASS: speculative decoding on {names} reproduced the target exactly, "
                        "as far as this check can tell.",
                "WARN": f"PASS with warnings: no losslessness failure on {names}; see the warnings.",
                "FAIL": f"FAIL: speculative decoding on {names} does NOT reproduce the target.",
                "STOPPED": f"STOPPED: the check of {names} was interrupted; no problem found in what ran."}[self.verdict]
        counts = []
        for section, c in self.section_counts().items():
            total = sum(c.values())
            extra = "".join(f", {c[s]} {s}" for s in ("fail", "warn", "skip") if c[s])
            counts.append(f"{section} {c['pass']}/{total} ok{extra}")
        lines = [head, "; ".join(counts) + f" ({_duration(self.seconds)})."]
        problems = [i for i in self.items if i.status == "fail"] or [i for i in self.items if i.status == "warn"]
        for item in problems[:3]:
            lines.append(f"- {item.section} / {item.name}: {item.message}")
        if len(problems) > 3:
            lines.append(f"- ... and {len(problems) - 3} more")
        return "\n".join(lines)

    def text(self) -> str:
        """The full report for the terminal."""
        lines = [self.summary(), ""]
        for section in SECTIONS:
            items = [i for i in self.items if i.section == section]
            if not items:
                continue
            lines.append(f"{section}:")
            for i in items:
                lines.append(f"  [{i.status.upper():4}] {i.name}: {i.message}")
        lines += ["", self.explanation()]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "passed": self.passed, "summary": self.summary(),
                "explanation": self.explanation(), "pair": self.pair, "config": self.config,
                "sections": self.section_counts(), "items": [asdict(i) for i in self.items],
                "estimate": self.estimate.to_dict() if self.estimate else None,
                "seconds": self.seconds, "stopped": self.stopped}


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


# ----------------------------------------------------------------------------------------- statistics
@dataclass
class ChiSquare:
    statistic: float
    df: int
    pvalue: float | None      # None when the samples cannot form two bins of expected count >= 5
    samples: int              # samples in the groups that were tested
    bins: int
    impossible: int           # samples of tokens with probability 0 (p-value forced to 0)
    detectable: float | None  # chi-square distance detected with POWER at alpha
    pit_samples: int = 0      # of `samples`, those pooled by the probability integral transform
    pit_bins: int = 0         # of `bins`, the probability-ordered ones

    def to_dict(self) -> dict:
        return asdict(self)


def chi_square(groups: Sequence[tuple[dict, np.ndarray]], alpha: float = ALPHA,
               min_expected: float = MIN_EXPECTED, leftovers: list | None = None) -> ChiSquare:
    """Goodness of fit of several independent groups of samples, each against its own exact
    distribution: groups are (counts {token: n}, probabilities over the vocabulary).

    Per group: one bin per token expected >= min_expected times, the tail in an "other" bin (merged
    into the smallest bin when it expects fewer); statistics and degrees of freedom add up. Groups too
    small for two such bins are skipped (appended to `leftovers` when given)."""
    stat, df, used, bins, impossible = 0.0, 0, 0, 0, 0
    for counts, probs in groups:
        probs = np.asarray(probs, dtype=np.float64)
        n = int(sum(counts.values()))
        if n == 0:
            continue
        impossible += sum(c for tok, c in counts.items() if probs[tok] <= 0)
        order = np.argsort(-probs, kind="stable")
        k = int(np.searchsorted(-(probs[order] * n), -min_expected, side="right"))
        chosen = order[:k]
        expected = list(probs[chosen] * n)
        observed = [float(counts.get(int(t), 0)) for t in chosen]
        rest_expected = float(probs[order[k:]].sum() * n)
        rest_observed = n - sum(observed)
        if rest_expected >= min_expected or (not expected and rest_expected > 0):
            expected.append(rest_expected)
            observed.append(rest_observed)
        elif expected:
            expected[-1] += rest_expected
            observed[-1] += rest_observed
        if len(expected) < 2 or min(expected) < min_expected:
            if leftovers is not None:
                leftovers.append((counts, probs))
            continue
        e, o = np.array(expected), np.array(observed)
        stat += float(((o - e) ** 2 / e).sum())
        df += len(e) - 1
        used += n
        bins += len(e)
    if impossible:
        return ChiSquare(math.inf, df, 0.0, used, bins, impossible, None)
    if df == 0:
        return ChiSquare(0.0, 0, None, used, 0, 0, None)
    return ChiSquare(stat, df, float(chi2.sf(stat, df)), used, bins, 0, detectable_distance(df, used, alpha))


def pit_chi_square(groups: Sequence[tuple[dict, np.ndarray]], rng: np.random.Generator, alpha: float = ALPHA,
                   max_bins: int = 10, per_bin: int = 10) -> ChiSquare:
    """Goodness of fit for many small groups at once (each group: counts {token: n} against its own exact
    distribution), by the randomised probability integral transform: order each group's vocabulary by
    decreasing probability; a sample of token x becomes u drawn uniformly from [F(before x), F(x)].
    Under exactness every u is Uniform(0, 1) whatever its group, so all samples pool into k equal bins
    (k = samples / per_bin, between 2 and max_bins). Tests mass moved between likely and unlikely tokens."""
    us, impossible = [], 0
    for counts, probs in groups:
        probs = np.asarray(probs, dtype=np.float64)
        if not counts:
            continue
        order = np.argsort(-probs, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        cumulative = np.cumsum(probs[order])
        for token, c in counts.items():
            if probs[token] <= 0:
                impossible += c
                continue
            hi = cumulative[position[token]]
            lo = hi - probs[token]
            us.extend((lo + rng.random(c) * (hi - lo)).tolist())
    n = len(us) + impossible
    if impossible:
        return ChiSquare(math.inf, 0, 0.0, n, 0, impossible, None)
    k = min(max_bins, n // per_bin)
    if k < 2:
        return ChiSquare(0.0, 0, None, n, 0, 0, None)
    observed = np.bincount(np.minimum((np.array(us) * k).astype(int), k - 1), minlength=k)
    expected = n / k
    stat = float(((observed - expected) ** 2 / expected).sum())
    return ChiSquare(stat, k - 1, float(chi2.sf(stat, k - 1)), n, k, 0, detectable_distance(k - 1, n, alpha))


def sample_test(groups: Sequence[tuple[dict, np.ndarray]], rng: np.random.Generator,
                alpha: float = ALPHA) -> ChiSquare:
    """Per-token bins for the groups large enough (chi_square), the randomised PIT (pit_chi_square)
    for the samples of all the other groups together; the two statistics cover disjoint samples, so
    they add up into one chi-square test."""
    leftovers: list = []
    tokens = chi_square(groups, alpha, leftovers=leftovers)
    if tokens.impossible:
        return tokens
    pit = pit_chi_square(leftovers, rng, alpha)
    if pit.impossible:
        return pit
    parts = [r for r in (tokens, pit) if r.pvalue is not None]
    samples = sum(r.samples for r in parts)
    df = sum(r.df for r in parts)
    if df == 0:
        return ChiSquare(0.0, 0, None, tokens.samples + pit.samples, 0, 0, None)
    stat = sum(r.statistic for r in parts)
    pit_used = pit.pvalue is not None
    return ChiSquare(stat, df, float(chi2.sf(stat, df)), samples, sum(r.bins for r in parts), 0,
                     detectable_distance(df, samples, alpha), pit.samples if pit_used else 0,
                     pit.bins if pit_used else 0)


def detectable_distance(df: int, samples: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest chi-square distance sum((p'-p)^2/p) over the bins that a test with these df and samples
    detects with probability `power` at level `alpha` (noncentral chi-square, lambda = samples * d)."""
    critical = chi2.isf(alpha, df)
    lam = brentq(lambda x: ncx2.sf(critical, df, x) - power, 1e-9, 1e6)
    return float(lam / samples)


def reference_distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution transformers' sampling draws from: temperature then top-p warpers on the
    float32 logits, softmax in float64. Written here, not taken from engine.sampling, so that the
    check does not trust the code it checks."""
    scores = logits.float()[None]
    scores = TemperatureLogitsWarper(float(temperature))(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(float(top_p))(None, scores)
    return torch.softmax(scores[0].double(), dim=-1)


def _near_nucleus(token: int, logits: torch.Tensor, temperature: float, top_p: float, tolerance: float) -> bool:
    """A token outside the reference top-p nucleus only because of rounding: the tempered mass of the
    tokens strictly more likely than it is within `tolerance` of top_p."""
    if top_p >= 1.0:
        return False
    tempered = torch.softmax(logits.double() / temperature, -1)
    above = float(tempered[tempered > tempered[token]].sum())
    return above <= top_p + tolerance


# ----------------------------------------------------------------------------------------- helpers
def _generator(pair: ModelPair, seed: int) -> torch.Generator:
    g = torch.Generator(device=pair.device if pair.device.type != "mps" else "cpu")
    g.manual_seed(int(seed) % (2**63))
    return g


def _clock(pair: ModelPair):
    sync = torch.cuda.synchronize if pair.device.type == "cuda" else (lambda: None)

    def now() -> float:
        sync()
        return time.perf_counter()
    return now


def _pad_id(pair: ModelPair) -> int:
    pad = getattr(pair.tokenizer, "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    return min(pair.eos_ids) if pair.eos_ids else 0


@torch.inference_mode()
def hf_greedy(pair: ModelPair, ids: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """The target's own greedy decoding by transformers' generate(): n tokens (EOS does not stop it)
    and the target's logits [n, V] before each of them. The model's generation config is swapped for a
    neutral one during the call: repetition penalties and the like are not part of "the target"."""
    model = pair.target
    saved = model.generation_config
    pad = _pad_id(pair)
    model.generation_config = GenerationConfig(pad_token_id=pad)
    try:
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n, eos_token_id=None, pad_token_id=pad,
                                  output_logits=True, return_dict_in_generate=True)
        inputs = torch.tensor([ids], device=pair.device)
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config)
    finally:
        model.generation_config = saved
    tokens = out.sequences[0, len(ids):].tolist()
    logits = torch.stack([step[0] for step in out.logits]).float().cpu()
    return tokens, logits


@torch.inference_mode()
def _plain_logits(model, seq: list[int]) -> torch.Tensor:
    """Last-position logits of a plain transformers forward (no custom mask, no cache)."""
    return model(input_ids=torch.tensor([seq], device=model.device)).logits[0, -1].float().cpu()


@torch.inference_mode()
def _prefix_and_continuations(model, prefix: list[int], tokens: list[int]) -> tuple[torch.Tensor, dict]:
    """One plain forward over the prefix (logits of its next token) and one batched single-token
    forward on its cache for each continuation token: {token: logits of the token after it}."""
    device = model.device
    out = model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
    first = out.logits[0, -1].float().cpu()
    if not tokens:
        return first, {}
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(tokens))
    nxt = model(input_ids=torch.tensor(tokens, device=device)[:, None],
                attention_mask=torch.ones(len(tokens), len(prefix) + 1, dtype=torch.long, device=device),
                cache=cache, use_cache=True).logits[:, -1].float().cpu()
    return first, dict(zip(tokens, nxt))


class _Prefilled:
    """Both caches filled with prefix[:-1], the state Decoder.run reaches after its prefill, so that
    many single steps from one prefix pay for the prefill once."""

    def __init__(self, pair: ModelPair, prefix: list[int], with_draft: bool):
        self.pair, self.prefix = pair, list(prefix)
        self.target = DynamicCache(config=pair.target.config)
        self.draft = DynamicCache(config=pair.draft.config)
        self.draft_len = 0
        if len(prefix) > 1:
            attention.forward_causal(pair.target, self.target, self.prefix[:-1])
            if with_draft:
                attention.forward_causal(pair.draft, self.draft, self.prefix[:-1])
                self.draft_len = len(prefix) - 1

    def step(self, method: Method, settings: Settings, generator: torch.Generator) -> dict:
        """One speculative step through the engine's Decoder; returns its new tokens and accepted ranks.
        (Uses Decoder._step: run() has no way to start from prefilled caches.)"""
        decoder = Decoder(self.pair, method, settings, generator=generator)
        decoder.target_cache = copy.deepcopy(self.target)
        if method.uses_draft:
            decoder.draft_cache = copy.deepcopy(self.draft)
            decoder.draft_len = self.draft_len
        tree = method.tree.truncated(self.pair.context_limit - len(self.prefix))
        parts = decoder.step(list(self.prefix), tree)
        return {"new_ids": parts["new_ids"], "accepted_ranks": parts["accepted_ranks"]}


class _Stopped(Exception):
    pass


class _Runner:
    """Carries the pair, config, progress and the accumulating report through the sections."""

    def __init__(self, pair, config, report, progress, should_stop, estimate):
        self.pair, self.config, self.report = pair, config, report
        self.progress_cb, self.should_stop = progress, should_stop
        self.estimate = estimate
        self.methods = config.resolved_methods()
        self.now = _clock(pair)
        self.done = 0.0
        self.total = max(estimate.seconds, 1e-6)
        self.last_report = 0.0
        self.refs: dict[int, tuple[list[int], torch.Tensor]] = {}

    # progress ------------------------------------------------------------
    def advance(self, seconds: float, message: str, force: bool = False) -> None:
        self.done += seconds
        if self.progress_cb is None:
            return
        t = time.perf_counter()
        if force or t - self.last_report >= 0.5:
            self.last_report = t
            self.progress_cb(min(self.done / self.total, 0.99), message)

    def check_stop(self) -> None:
        if self.should_stop():
            raise _Stopped

    def add(self, section, name, status, message, **details) -> CheckItem:
        item = CheckItem(section, name, status, message, details)
        self.report.items.append(item)
        return item

    def reference(self, index: int, ids: list[int]) -> tuple[list[int], torch.Tensor]:
        if index not in self.refs:
            self.refs[index] = hf_greedy(self.pair, ids, self.config.greedy_tokens)
        return self.refs[index]

    # greedy --------------------------------------------------------------
    def greedy(self, prompts: list[list[int]]) -> None:
        timings = self.estimate.timings
        tie = TIE_TOLERANCE.get(self.pair.dtype, 2e-3)
        for i, ids in enumerate(prompts):
            self.check_stop()
            try:
                ref, ref_logits = self.reference(i, ids)
            except Exception as exc:  # noqa: BLE001 - a model that cannot generate is a finding
                self.add("greedy", f"prompt {i + 1} reference", "fail",
                         f"transformers generate() failed on the target: {_error(exc)}")
                continue
            self.advance(timings["reference_seconds"][i], f"greedy: target reference for prompt {i + 1}", True)
            for method in self.methods:
                self.check_stop()
                name = f"prompt {i + 1} / {method.name}"
                settings = Settings(temperature=0.0, max_new_tokens=len(ref), ignore_eos=True, seed=self.config.seed)
                try:
                    events = list(Decoder(self.pair, method, settings).run(ids, self.should_stop))
                except Exception as exc:  # noqa: BLE001
                    self.add("greedy", name, "fail", f"decoding raised {_error(exc)}", method=method.name)
                    continue
                last = events[-1]
                if last.finish_reason == "stopped":
                    raise _Stopped
                out = last.token_ids
                details = {"method": method.name, "prompt": i + 1, "tokens": len(ref), "steps": last.total_steps,
                           "tokens_per_step": last.tokens_per_step}
                if out == ref:
                    note = ""
                    if method.uses_draft and last.total_steps >= len(ref):
                        note = " (no draft token was accepted, so this says little about the tree)"
                    self.add("greedy", name, "pass", f"identical, {len(ref)} tokens in {last.total_steps} steps "
                             f"({last.tokens_per_step:.2f} tokens/step){note}", **details)
                else:
                    self.add("greedy", name, *self._difference(ids, ref, ref_logits, out, tie), **details)
                self.advance(timings["greedy_run_seconds"][i][method.name], f"greedy: prompt {i + 1}, {method.name}")

    def _difference(self, ids, ref, ref_logits, out, tie) -> tuple[str, str]:
        j = next((k for k, (a, b) in enumerate(zip(out, ref)) if a != b), min(len(out), len(ref)))
        if j >= len(out) or j >= len(ref):
            return "fail", f"lengths differ: {len(out)} tokens against the target's {len(ref)}"
        tok = self.pair.tokenizer
        got, want = out[j], ref[j]
        logits = ref_logits[j]
        gap = float(logits[want] - logits[got]) if got < logits.shape[-1] else math.inf
        context = tok.decode(ref[max(0, j - 8):j])
        where = (f"first difference at token {j + 1}: speculative {got} {tok.decode([got])!r}, target {want} "
                 f"{tok.decode([want])!r} after ...{context!r}; target logit gap {gap:.3g}")
        if gap <= tie:
            return "warn", where + f" <= {tie:g}: a near tie, rounding decides it (not a logic error)"
        return "fail", where

    # sampling ------------------------------------------------------------
    def sampling(self, prompts: list[list[int]]) -> None:
        cfg, pair = self.config, self.pair
        n = self.estimate.samples
        drafting = [m for m in self.methods if m.uses_draft]
        prefixes = self._choose_prefixes(prompts, n)
        per_prefix = _split(n, len(prefixes))
        # samples[(setting, method)] = list of (prefix index, first token, accepted, second token or None)
        samples: dict[tuple, list] = collections.defaultdict(list)
        step_seconds = self.estimate.timings["sample_step_seconds"]
        for pi, (prefix, where) in enumerate(prefixes):
            self.check_stop()
            state = _Prefilled(pair, prefix, with_draft=bool(drafting))
            self.advance(self.estimate.timings["prefix_seconds"], f"sampling: prefix {pi + 1} ({where}) ready", True)
            for si, (temperature, top_p) in enumerate(cfg.sampling_settings):
                settings = Settings(temperature=temperature, top_p=top_p, max_new_tokens=2, ignore_eos=True,
                                    seed=cfg.seed)
                for mi, method in enumerate(self.methods):
                    g = _generator(pair, cfg.seed * 1_000_003 + pi * 10_007 + si * 101 + mi)
                    for k in range(per_prefix[pi]):
                        self.check_stop()
                        step = state.step(method, settings, g)
                        ids_, accepted = step["new_ids"], bool(step["accepted_ranks"])
                        second = ids_[1] if accepted and len(ids_) > 1 else None
                        samples[(si, method.name)].append((pi, ids_[0], accepted, second))
                        self.advance(step_seconds[method.name],
                                     f"sampling T={temperature:g} top-p={top_p:g}: {method.name}, prefix {pi + 1}, "
                                     f"{k + 1}/{per_prefix[pi]}")
        self._sampling_tests(prefixes, samples)

    def _choose_prefixes(self, prompts, n) -> list[tuple[list[int], str]]:
        """The most informative positions along the prompts' greedy continuations: most tokens with an
        expected count >= 5 at the sampling settings (then highest entropy); one per prompt in turn."""
        count = min(self.config.prefixes, max(1, n // 20))
        per_prefix = max(1, n // count)
        ranked = []
        for i, ids in enumerate(prompts):
            ref, ref_logits = self.reference(i, ids)
            scored = []
            for j in range(len(ref)):
                if len(ids) + j + 2 >= self.pair.context_limit:
                    break
                score = 0
                for t, p in self.config.sampling_settings:
                    probs = reference_distribution(ref_logits[j], t, p)
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

    def _sampling_tests(self, prefixes, samples) -> None:
        cfg, pair = self.config, self.pair
        nucleus_tol = NUCLEUS_TOLERANCE.get(pair.dtype, 1e-4)
        # exact distributions: one plain forward per prefix + one batched forward for accepted first tokens
        first_logits, next_logits = [], []
        for pi, (prefix, _) in enumerate(prefixes):
            self.check_stop()
            wanted = collections.Counter(a for rows in samples.values() for (p, a, acc, b) in rows
                                         if p == pi and b is not None)
            tokens = [a for a, _ in wanted.most_common(MAX_CONTINUATIONS)]
            first, nxt = _prefix_and_continuations(pair.target, prefix, tokens)
            first_logits.append(first)
            next_logits.append(nxt)
            self.advance(self.estimate.timings["prefix_seconds"], f"sampling: exact distributions for prefix {pi + 1}")
        for si, (temperature, top_p) in enumerate(cfg.sampling_settings):
            setting = f"T={temperature:g}" + (f" top-p={top_p:g}" if top_p < 1 else "")
            for mi, method in enumerate(self.methods):
                rows = samples.get((si, method.name), [])
                if not rows:
                    continue
                boundary = boundary_second = 0
                groups_first, groups_second = [], []
                for pi in range(len(prefixes)):
                    logits = first_logits[pi]
                    probs = reference_distribution(logits, temperature, top_p)
                    counts = collections.Counter()
                    for p, a, acc, b in rows:
                        if p != pi:
                            continue
                        if probs[a] <= 0 and _near_nucleus(a, logits, temperature, top_p, nucleus_tol):
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
                        probs_b = reference_distribution(logits_b, temperature, top_p)
                        for b in [b for b in counts_b if probs_b[b] <= 0]:
                            if _near_nucleus(b, logits_b, temperature, top_p, nucleus_tol):
                                boundary_second += counts_b.pop(b)
                        groups_second.append((counts_b, probs_b.numpy()))
                rng = np.random.default_rng([cfg.seed, si, mi])
                accepted = sum(1 for r in rows if r[2])
                self._add_test(f"{method.name} {setting} next token", sample_test(groups_first, rng, cfg.alpha),
                               method.name, temperature, top_p, "next token", len(rows), accepted, boundary)
                if method.uses_draft:
                    with_second = sum(1 for r in rows if r[3] is not None)
                    self._add_test(f"{method.name} {setting} after an accepted draft token",
                                   sample_test(groups_second, rng, cfg.alpha), method.name, temperature, top_p,
                                   "after accepted draft token", with_second, accepted, boundary_second)

    def _add_test(self, name, result: ChiSquare, method, temperature, top_p, position, drawn, accepted, boundary):
        alpha = self.config.alpha
        stats = result.to_dict()
        if not math.isfinite(stats["statistic"]):
            stats["statistic"] = None  # keep to_dict() strict JSON
        details = {"method": method, "temperature": temperature, "top_p": top_p, "position": position,
                   "samples_drawn": drawn, "first_token_accepted": accepted, "alpha": alpha,
                   "nucleus_boundary_samples": boundary, **stats}
        if result.impossible:
            self.add("sampling", name, "fail", f"{result.impossible} sampled token(s) have probability 0 under the "
                     "target (e.g. outside the top-p nucleus): impossible for exact decoding", **details)
        elif result.pvalue is None:
            self.add("sampling", name, "skip", f"not enough samples to test ({drawn} drawn; a test needs two "
                     f"bins of expected count >= {MIN_EXPECTED:g}, or 20 samples to pool); raise --samples", **details)
        else:
            ok = result.pvalue >= alpha
            msg = (f"p = {result.pvalue:.3g} {'>=' if ok else '<'} {alpha:g} (chi2 = {result.statistic:.1f}, "
                   f"df {result.df}, {result.samples} samples in " + _bins_text(result)
                   + f"); detects a chi-square distance >= {result.detectable:.2g} with 90% probability")
            if position == "next token" and drawn:
                msg += f"; first token from the draft in {accepted}/{drawn} steps"
            self.add("sampling", name, "pass" if ok else "fail", msg, **details)

    # structure -----------------------------------------------------------
    def structure(self, prompts: list[list[int]]) -> None:
        pair = self.pair
        for role in ("draft", "target"):
            probe = (pair.probe or {}).get(role)
            if probe is None:
                try:
                    probe = probe_tree_mask(getattr(pair, role), getattr(pair, f"{role}_name"))
                except UserError as exc:
                    self.add("structure", f"tree-mask probe ({role})", "fail", str(exc))
                    continue
            status = "pass" if probe.get("passed") else "fail"
            self.add("structure", f"tree-mask probe ({role})", status,
                     f"custom 4-D mask honoured: tree logits off by {probe.get('max_error', float('nan')):.2g}, "
                     f"mask effect {probe.get('mask_effect', float('nan')):.2g}", **probe)
        self._tokenizers()
        self._dtype_device()
        self.check_stop()
        self._kv_commit(prompts[0])

    def _tokenizers(self) -> None:
        pair = self.pair
        from transformers import AutoTokenizer
        sources = {role: getattr(getattr(pair, role), "name_or_path", "") or "" for role in ("draft", "target")}
        draft_v = pair.draft.get_output_embeddings().weight.shape[0]
        target_v = pair.target.get_output_embeddings().weight.shape[0]
        sizes = {"tokenizer": len(pair.tokenizer), "draft_logits": draft_v, "target_logits": target_v}
        try:
            toks = {role: AutoTokenizer.from_pretrained(src, local_files_only=True) for role, src in sources.items()}
        except Exception as exc:  # noqa: BLE001 - e.g. a model built in memory
            self.add("structure", "tokenizer", "pass", "same vocabulary (checked by load_pair, which refuses "
                     f"different vocabularies; not re-loaded here: {_error(exc)})", sources=sources, **sizes)
        else:
            try:
                check_same_tokenizer(toks["draft"], toks["target"], pair.draft_name, pair.target_name)
            except UserError as exc:
                self.add("structure", "tokenizer", "fail", str(exc), sources=sources, **sizes)
            else:
                self.add("structure", "tokenizer", "pass", f"draft and target tokenizers have the same "
                         f"{len(toks['target'].get_vocab())}-entry vocabulary", sources=sources, **sizes)
        note = []
        if draft_v != target_v:
            note.append(f"draft logits cover {draft_v} ids, target {target_v}: the engine pads/trims the draft "
                        "to the target's space (ids the draft lacks get draft probability 0)")
        if len(pair.tokenizer) > target_v:
            note.append(f"the tokenizer has {len(pair.tokenizer)} entries but the target only {target_v} logits")
        self.add("structure", "vocabulary sizes", "warn" if len(pair.tokenizer) > target_v else "pass",
                 "; ".join(note) or f"draft and target both score {target_v} ids", **sizes)

    def _dtype_device(self) -> None:
        pair = self.pair
        info, problems = {}, []
        for role in ("draft", "target"):
            model = getattr(pair, role)
            params = list(model.parameters())
            dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
            devices = sorted({str(p.device) for p in params})
            info[role] = {"dtypes": dtypes, "devices": devices, "training": bool(model.training),
                          "device_map": bool(getattr(model, "hf_device_map", None))}
            if model.training:
                problems.append(f"the {role} is in training mode (dropout makes outputs random)")
        prob = str(sampling.PROB_DTYPE).replace("torch.", "")
        if sampling.PROB_DTYPE not in (torch.float32, torch.float64):
            problems.append(f"probabilities are computed in {prob}; float16 underflows (ALGORITHM.md §3)")
        msg = (f"pair dtype {str(pair.dtype).replace('torch.', '')} on {pair.device}; draft "
               f"{'/'.join(info['draft']['dtypes'])} on {'/'.join(info['draft']['devices'])}, target "
               f"{'/'.join(info['target']['dtypes'])} on {'/'.join(info['target']['devices'])}; "
               f"probabilities in {prob}")
        self.add("structure", "dtype and device", "fail" if problems else "pass",
                 "; ".join(problems) if problems else msg, probability_dtype=prob, **info)

    def _kv_commit(self, ids: list[int]) -> None:
        pair, cfg = self.pair, self.config
        drafting = [m for m in self.methods if m.uses_draft]
        method = drafting[0] if drafting else self.methods[0]
        tol = KV_TOLERANCE.get(pair.dtype, 1e-3)
        settings = Settings(temperature=1.0, max_new_tokens=cfg.kv_steps * method.tree.depth + 1, ignore_eos=True,
                            seed=cfg.seed)
        decoder = Decoder(pair, method, settings, generator=_generator(pair, cfg.seed + 7))
        worst = {"target": 0.0, "draft": 0.0}
        logit_worst = {"target": 0.0, "draft": 0.0}
        steps = accepted = 0
        try:
            for event in decoder.run(ids, self.should_stop):
                if event.finish_reason == "stopped":
                    raise _Stopped
                if event.done or steps >= cfg.kv_steps:
                    break
                steps += 1
                accepted += len(event.accepted_ranks)
                seq = ids + event.token_ids
                # target: the cache holds seq[:-1]; the root's logits must match a fresh forward
                cache = copy.deepcopy(decoder.target_cache)
                if cache.get_seq_length() != len(seq) - 1:
                    raise _CommitMismatch(f"target cache holds {cache.get_seq_length()} tokens after step {steps}, "
                                          f"expected {len(seq) - 1}")
                got = attention.forward(pair.target, cache, [seq[-1]], [len(seq) - 1],
                                        attention.causal_visibility(len(seq) - 1, 1, pair.device))[-1].cpu()
                self._compare("target", got, _plain_logits(pair.target, seq), worst, logit_worst)
                if method.uses_draft:
                    cache = copy.deepcopy(decoder.draft_cache)
                    held = cache.get_seq_length()
                    if held != decoder.draft_len or not 0 < held < len(seq):
                        raise _CommitMismatch(f"draft cache holds {held} tokens after step {steps} "
                                              f"(decoder says {decoder.draft_len}, sequence {len(seq)})")
                    got = attention.forward_causal(pair.draft, cache, seq[held:])[-1].cpu()
                    self._compare("draft", got, _plain_logits(pair.draft, seq), worst, logit_worst)
                self.advance(self.estimate.timings["kv_step_seconds"], f"structure: KV commit, step {steps}")
        except _Stopped:
            raise
        except _CommitMismatch as exc:
            self.add("structure", "KV commit", "fail", str(exc), method=method.name)
            return
        except Exception as exc:  # noqa: BLE001
            self.add("structure", "KV commit", "fail", f"decoding raised {_error(exc)}", method=method.name)
            return
        details = {"method": method.name, "steps": steps, "accepted_draft_tokens": accepted, "tolerance_tv": tol,
                   "max_tv": worst, "max_logit_diff": logit_worst}
        bad = [role for role, tv in worst.items() if tv > tol]
        if bad:
            self.add("structure", "KV commit", "fail", "logits after a commit differ from a fresh forward: "
                     + ", ".join(f"{r} total variation {worst[r]:.3g} (logits off by {logit_worst[r]:.3g})"
                                 for r in bad) + f" > {tol:g}", **details)
        elif steps == 0:
            self.add("structure", "KV commit", "skip", "generation ended before a step could be checked", **details)
        else:
            self.add("structure", "KV commit", "pass", f"after {steps} {method.name} steps at T=1 ({accepted} draft "
                     f"tokens accepted) the cached logits equal a fresh forward: total variation "
                     f"target {worst['target']:.2g}, draft {worst['draft']:.2g} (<= {tol:g})", **details)

    @staticmethod
    def _compare(role, got, fresh, worst, logit_worst) -> None:
        tv = 0.5 * float((torch.softmax(got.double(), -1) - torch.softmax(fresh.double(), -1)).abs().sum())
        worst[role] = max(worst[role], tv)
        logit_worst[role] = max(logit_worst[role], float((got - fresh).abs().max()))


class _CommitMismatch(Exception):
    pass


def _bins_text(result: ChiSquare) -> str:
    parts = []
    if result.bins - result.pit_bins:
        parts.append(f"{result.bins - result.pit_bins} token bins")
    if result.pit_bins:
        parts.append(f"{result.pit_bins} probability-ordered bins")
    return " + ".join(parts)


def _error(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def _prompt_ids(pair: ModelPair, config: CheckConfig) -> list[list[int]]:
    prompts = config.prompts
    if prompts is None:
        from engine.commands.common import default_prompts
        prompts = default_prompts()[:config.num_prompts]
    out = []
    for text in prompts:
        ids = encode_prompt(pair, text, config.chat)
        if len(ids) + config.greedy_tokens + 2 >= pair.context_limit:
            raise UserError(f"a check prompt has {len(ids)} tokens; with {config.greedy_tokens} generated tokens "
                            f"that does not fit the models' context of {pair.context_limit}")
        out.append(ids)
    return out


# ----------------------------------------------------------------------------------------- timing
def estimate_check(pair: ModelPair, config: CheckConfig | None = None) -> CheckEstimate:
    """Time one prefill and one speculative step per method on the first prompt, and extrapolate.
    Also fixes N when config.samples is None (auto)."""
    config = config or CheckConfig()
    config.validate()
    prompts = _prompt_ids(pair, config)
    return _estimate(pair, config, prompts)


def _estimate(pair: ModelPair, config: CheckConfig, prompts: list[list[int]]) -> CheckEstimate:
    now = _clock(pair)
    start = now()
    check_methods = config.resolved_methods()
    ids = prompts[0]
    drafting = any(m.uses_draft for m in check_methods)
    t0 = now()
    state = _Prefilled(pair, ids, with_draft=False)
    t1 = now()
    target_rate = (t1 - t0) / max(1, len(ids) - 1)
    draft_rate = 0.0
    if drafting and len(ids) > 1:
        cache = DynamicCache(config=pair.draft.config)
        attention.forward_causal(pair.draft, cache, ids[:-1])
        state.draft, state.draft_len = cache, len(ids) - 1
        draft_rate = (now() - t1) / max(1, len(ids) - 1)
    t2 = now()
    attention.forward_causal(pair.target, copy.deepcopy(state.target), [ids[-1]])
    target_token = now() - t2
    sample_step, greedy_step, greedy_tokens = {}, {}, {}
    for m in check_methods:
        t = now()
        state.step(m, Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True), _generator(pair, config.seed))
        sample_step[m.name] = now() - t
        t = now()
        out = state.step(m, Settings(temperature=0.0, max_new_tokens=m.tree.depth, ignore_eos=True),
                         _generator(pair, config.seed))
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
    kv_step = sample_step[kv_method.name] + (len(ids) + config.kv_steps) * prefill
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


# ----------------------------------------------------------------------------------------- entry point
def run_check(pair: ModelPair, config: CheckConfig | None = None, progress: Progress | None = None,
              should_stop: Callable[[], bool] | None = None, estimate: CheckEstimate | None = None) -> CheckReport:
    """Run the losslessness check on a loaded pair.

    progress(fraction in [0, 1], message) is called as work completes; its first call (fraction 0)
    carries the time estimate. should_stop() is polled between steps; when it returns True the check
    ends early and the report says STOPPED (items done so far are kept). Bad configuration raises
    UserError; anything the engine raises on this pair becomes a failed item instead."""
    config = config or CheckConfig()
    config.validate()
    should_stop = should_stop or (lambda: False)
    start = time.perf_counter()
    report = CheckReport(pair=pair.describe(), config=config.to_dict())
    prompts = _prompt_ids(pair, config)
    if progress:
        progress(0.0, "timing one step of each method to estimate the duration")
    est = estimate or _estimate(pair, config, prompts)
    report.estimate = est
    report.config["samples"] = est.samples
    if progress:
        progress(0.0, est.message())
    runner = _Runner(pair, config, report, progress, should_stop, est)
    try:
        for section in SECTIONS:
            if section not in config.sections:
                continue
            try:
                getattr(runner, section)(prompts)
            except (_Stopped, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - an engine error on this pair is a finding, not a crash
                report.items.append(CheckItem(section, "error", "fail", f"the {section} check could not finish: "
                                              f"{_error(exc)}", {"error": _error(exc)}))
    except _Stopped:
        report.stopped = True
    report.seconds = time.perf_counter() - start
    if progress:
        progress(1.0, f"check finished: {report.verdict}")
    return report
