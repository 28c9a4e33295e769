"""Validated generation settings: every bad value is refused here with a one-line message."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import UserError

MAX_TEMPERATURE = 20.0
MIN_TEMPERATURE = 1e-2  # below this, logits / T overflows float32; use 0 for greedy
MAX_NEW_TOKENS = 8192


@dataclass(frozen=True)
class Settings:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off; else keep the k most likely tokens (transformers' TopKLogitsWarper)
    max_new_tokens: int = 64
    seed: int = 0
    ignore_eos: bool = False

    def __post_init__(self):
        t, p = self.temperature, self.top_p
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
            raise UserError(f"temperature must be a finite number (got {t!r})")
        if t < 0:
            raise UserError(f"temperature must be 0 (greedy) or positive (got {t})")
        if 0 < t < MIN_TEMPERATURE:
            raise UserError(f"temperature {t} is too small to sample stably; use 0 for greedy or at least {MIN_TEMPERATURE}")
        if t > MAX_TEMPERATURE:
            raise UserError(f"temperature {t} is too large (at most {MAX_TEMPERATURE})")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not math.isfinite(p) or not 0 < p <= 1:
            raise UserError(f"top-p must be in (0, 1] (got {p!r})")
        k = self.top_k
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise UserError(f"top-k must be 0 (off) or a positive integer (got {k!r})")
        if not isinstance(self.max_new_tokens, int) or isinstance(self.max_new_tokens, bool):
            raise UserError(f"max new tokens must be an integer (got {self.max_new_tokens!r})")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise UserError(f"max new tokens must be between 1 and {MAX_NEW_TOKENS} (got {self.max_new_tokens})")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise UserError(f"seed must be a non-negative integer (got {self.seed!r})")
        if self.seed >= 2**63:   # a signed 64-bit integer, the range the app has always taken (torch's own goes to 2^64 - 1)
            raise UserError(f"seed must be below 2^63 = {2**63:,} (got {self.seed:,})")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
