"""What every section of the check shares: the pair, the config and its methods, the report being filled,
progress and stop polling, and the target's greedy references (computed once, used by greedy and sampling)."""
from __future__ import annotations

import time

import torch

from engine.check.config import CheckConfig, Progress
from engine.check.reference import hf_greedy
from engine.check.report import CheckEstimate, CheckItem, CheckReport
from engine.models import ModelPair


class Stopped(Exception):
    """should_stop() said so: unwinds to run_check, which marks the report STOPPED."""


class CheckContext:
    def __init__(self, pair: ModelPair, config: CheckConfig, report: CheckReport, progress: Progress | None,
                 should_stop, estimate: CheckEstimate):
        self.pair, self.config, self.report = pair, config, report
        self.progress_cb, self.should_stop = progress, should_stop
        self.estimate = estimate
        self.methods = config.resolved_methods()
        self.done = 0.0
        self.total = max(estimate.seconds, 1e-6)
        self.last_report = 0.0
        self.refs: dict[int, tuple[list[int], torch.Tensor]] = {}

    def advance(self, seconds: float, message: str, force: bool = False) -> None:
        """Count `seconds` of the estimate as done; report progress at most twice a second unless forced."""
        self.done += seconds
        if self.progress_cb is None:
            return
        t = time.perf_counter()
        if force or t - self.last_report >= 0.5:
            self.last_report = t
            self.progress_cb(min(self.done / self.total, 0.99), message)

    def check_stop(self) -> None:
        if self.should_stop():
            raise Stopped

    def add(self, section, name, status, message, **details) -> CheckItem:
        item = CheckItem(section, name, status, message, details)
        self.report.items.append(item)
        return item

    def reference(self, index: int, ids: list[int]) -> tuple[list[int], torch.Tensor]:
        """The target's greedy tokens and logits for prompt `index` (hf_greedy), computed once."""
        if index not in self.refs:
            self.refs[index] = hf_greedy(self.pair, ids, self.config.greedy_tokens)
        return self.refs[index]


def error_text(exc: Exception) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def split_evenly(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
