"""`run_check`: the sections in order on a loaded pair, filling one CheckReport."""
from __future__ import annotations

import time
from typing import Callable

from engine.check.config import SECTIONS, CheckConfig, Progress, prompt_ids
from engine.check.context import CheckContext, Stopped, error_text
from engine.check.estimate import estimate_for_prompts
from engine.check.greedy_check import run_greedy
from engine.check.report import CheckEstimate, CheckItem, CheckReport
from engine.check.sampling_check import run_sampling
from engine.check.structure_check import run_structure
from engine.models import ModelPair

SECTION_RUNS = {"greedy": run_greedy, "sampling": run_sampling, "structure": run_structure}


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
    prompts = prompt_ids(pair, config)
    if progress:
        progress(0.0, "timing one step of each method to estimate the duration")
    est = estimate or estimate_for_prompts(pair, config, prompts)
    report.estimate = est
    report.config["samples"] = est.samples
    if progress:
        progress(0.0, est.message())
    ctx = CheckContext(pair, config, report, progress, should_stop, est)
    try:
        for section in SECTIONS:
            if section not in config.sections:
                continue
            try:
                SECTION_RUNS[section](ctx, prompts)
            except (Stopped, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - an engine error on this pair is a finding, not a crash
                report.items.append(CheckItem(section, "error", "fail", f"the {section} check could not finish: "
                                              f"{error_text(exc)}", {"error": error_text(exc)}))
    except Stopped:
        report.stopped = True
    report.seconds = time.perf_counter() - start
    if progress:
        progress(1.0, f"check finished: {report.verdict}")
    return report
