"""What a check runs: sections, methods and their fixed shapes, sampling settings, thresholds and
tolerances, and the prompts it decodes."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from engine import methods
from engine.errors import UserError
from engine.methods import Method
from engine.models import ModelPair, encode_prompt
from engine.prompts import default_prompts
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
# ... and for a model whose kernels round more coarsely than the pair's dtype (a draft on the NF4 kernel,
# bfloat16 in and out): the largest logit difference in rounding steps of that dtype at the largest
# logit. Summing in another order moves a logit by whole steps (1 on the embedded pair, 48 steps measured),
# which near an even pair of tokens is a total variation of 0.06 and more; a wrong commit moves
# logits by whole units.
KV_ROUNDING_STEPS = 4
# top-p boundary: a sampled token just outside the reference nucleus counts as rounding, not as an error.
NUCLEUS_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}

Progress = Callable[[float, str], None]


def check_method(name: str) -> Method:
    """The fixed shape the check uses for a method name (see the docstring of engine/check/__init__.py)."""
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
    sampling_settings: tuple = SAMPLING_SETTINGS  # (temperature, top_p) or (temperature, top_p, top_k)
    alpha: float = ALPHA
    kv_steps: int = 4
    seed: int = 0

    def validate(self) -> None:
        if self.prompts is not None and (not self.prompts or not all(isinstance(p, str) and p.strip()
                                                                     for p in self.prompts)):
            raise UserError("the check needs at least one non-empty prompt")
        # said in words (the CLI's flags and the page's fields name them alike; "num_prompts" neither)
        for name, value, low, high in (("the number of prompts", self.num_prompts, 1, 100),
                                       ("greedy tokens per prompt", self.greedy_tokens, 1, 1024),
                                       ("prefixes", self.prefixes, 1, 32), ("KV steps", self.kv_steps, 1, 64)):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise UserError(f"{name} must be an integer between {low} and {high} (got {value!r})")
        if self.samples is not None and (not isinstance(self.samples, int) or isinstance(self.samples, bool)
                                         or not 1 <= self.samples <= 100_000):
            raise UserError(f"samples must be between 1 and 100000 (got {self.samples!r})")
        if not 0 < float(self.alpha) < 0.5:
            raise UserError(f"alpha must be in (0, 0.5) (got {self.alpha})")
        if not self.sample_budget_seconds > 0:
            raise UserError(f"the sampling part's time budget (seconds) must be positive (got {self.sample_budget_seconds})")
        bad = [s for s in self.sections if s not in SECTIONS]
        if bad or not self.sections:
            raise UserError(f"unknown section(s) {bad or '(none given)'}: use {', '.join(SECTIONS)}")
        if not self.methods:
            raise UserError("no methods to check")
        for setting in self.sampling_settings:
            if len(setting) not in (2, 3):
                raise UserError(f"a sampling setting is (temperature, top_p[, top_k]); got {setting!r}")
            t, p, k = sampling_triple(setting)
            Settings(temperature=t, top_p=p, top_k=k)  # same validation as decoding
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


def sampling_triple(setting) -> tuple[float, float, int]:
    """(temperature, top_p) or (temperature, top_p, top_k) -> (temperature, top_p, top_k); top_k 0 = off."""
    t, p, *rest = setting
    return t, p, int(rest[0]) if rest else 0


def prompt_ids(pair: ModelPair, config: CheckConfig) -> list[list[int]]:
    """The config's prompts (or the first example prompts) encoded, each checked to fit the context."""
    prompts = config.prompts
    if prompts is None:
        prompts = default_prompts()[:config.num_prompts]
    out = []
    for text in prompts:
        ids = encode_prompt(pair, text, config.chat)
        if len(ids) + config.greedy_tokens + 2 >= pair.context_limit:
            raise UserError(f"a check prompt has {len(ids)} tokens; with {config.greedy_tokens} generated tokens "
                            f"that does not fit the models' context of {pair.context_limit}")
        out.append(ids)
    return out
