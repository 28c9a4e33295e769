"""How an answer's rest differs from its opening (issue 15, learning goal).

The learner's evidence after an answer's first OPENING tokens describes the opening; the plan from
then on is for the rest. For the embedded pair the two differ by domain: the rest of a code answer
is easier for the draft than its opening (the answer settles into the code's own repetitions), so
pooling the opening's evidence alone under-predicted every code learning check on record.

The measured ratio, per domain of one pair:

    ratio = P(rank 1 missed) over answer positions OPENING..end  /  over positions 0..OPENING

from the target's greedy answers to the shipped measurement prompts (bench/acceptance_dynamics.py
--tokens 320 --drift-out, stored in assets/measured/answer-drift.json with its 95 % interval
over prompts). It is applied (engine/learning.py rest_posterior) only where that interval excludes 1,
only for the pair it was measured on, and only with a known prompt domain; elsewhere the rest is
predicted as the opening (ratio None). At T > 0 the ratio measured at T = 0 is used: the draft's
agreement with the target is what drifts (an assumption the held-out learning check tests).
"""
from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "measured" / "answer-drift.json"
OPENING = 64  # generated tokens: an answer's opening


@lru_cache(maxsize=4)
def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable answer drift %s: %s", path, exc)
        return {}


def applies(entry: dict) -> bool:
    """The stated rule: a ratio whose 95 % interval over prompts excludes 1."""
    lo, hi = entry.get("ci95", [1.0, 1.0])
    return lo > 1.0 or hi < 1.0


def ratio_for(draft: str, target: str, domain: str | None, path: Path | None = None) -> float | None:
    """The rest/opening miss ratio for this pair and prompt domain, or None where none applies."""
    obj = _load(path or SHIPPED)
    if not domain or obj.get("draft") != draft or obj.get("target") != target:
        return None
    entry = obj.get("domains", {}).get(domain)
    return float(entry["rest_over_opening"]) if entry and applies(entry) else None
