"""How an answer's rest differs from its opening (issue 15, learning goal).

The learner's evidence after an answer's first OPENING tokens describes the opening; the plan from
then on is for the rest. For the embedded pair the two differ: the rest of an answer is easier for
the draft than its opening (a code answer settles into the code's own repetitions; prose after its
first 128 tokens), so pooling the opening's evidence alone under-predicted every code learning
check on record.

The measured ratio, per domain of one pair and per horizon h (the run's max-new-tokens):

    ratio(h) = P(rank 1 missed) over answer positions OPENING..h-1  /  over positions 0..OPENING-1

from the target's greedy answers to the shipped measurement prompts, continued to 320 tokens with
ignore_eos (bench/acceptance_dynamics.py --tokens 320 --drift-out; assets/measured/answer-drift.json,
each ratio with its 95 % interval over prompts). A run's horizon takes the entry of the smallest
measured horizon at or above it (the largest, 320, beyond it: the rest of a longer answer is
assumed no easier than positions 64..319). A ratio is applied (engine/learning.py rest_posterior)
only where its interval excludes 1, only for the pair it was measured on, and only with a known
prompt domain; elsewhere the rest is predicted as the opening (None). At T > 0 the ratio measured
at T = 0 is used. Measured on answers sampled at T = 0.7 and T = 1 (bench/answer_drift_sampled.py,
bench/predictions-and-learning.md, "The drift at T = 0.7 and T = 1"), the ratios cannot be told
from T = 0's with twelve answers, except prose at T = 1 (rests harder than openings). A drift measured at each temperature,
applied by the same rule, predicted no better on both kinds: better for code at T = 1 and short
horizons, worse for prose at T = 1, the same at T = 0.7.
The answers were continued past their own EOS (as the learning check runs); cut at their first
EOS, as an app run stops, the ratios move by 0.035 or less (bench/drift_eos.py, bench/drift-eos.txt).

The draft's numerics (int8 on an AVX2 CPU, NF4 with bfloat16 activations on AVX512-BF16) change
how it agrees with the target, so each asset says which draft kernels measured it
(`draft_kernels`, profiler.draft_kernels): answer-drift.json the int8 draft's, answer-drift-nf4.json
the NF4 draft's. A run takes the asset of its own draft kernels, else the pair's int8 one.

How much one answer's opening tells its rest is measured too: the rest's prediction pools the
opening's evidence with the prior as if the prior were `weight` observations (a domain's
`prior_weight`: of a grid of weights, the one whose leave-one-prompt-out prediction of each
answer's rest miss rate from its opening had the least error over the measurement answers).
On the 12 + 12 measurement answers prose openings told their rests less than code's (128
against 64 pseudo-observations at 320 tokens; code's error is flat from 32 to 128). Where an
asset has no sane weight, learning.PRIOR_WEIGHT is used.

Where the ratio is not applied (its interval holds 1), the weight still is: the horizon entry's
`prior_weight_ratio_not_applied` (else the domain's), chosen the same way for the rest up to that
horizon predicted at the opening's rate (ratio 1), gives Drift(1.0, that weight). On both drafts'
measurement answers, every domain and horizon, the weights so chosen predicted the rests better
than learning.PRIOR_WEIGHT's 32 (leave-one-prompt-out RMSE of the rest's miss rate, lines "the
ratio not applied" in bench/acceptance-dynamics-320*.txt): 64 tokens of hits and misses are
noisier (sd ~0.05) than the rests differ between answers (~0.04), so the prior should count for
more than 32 observations. Assets without the field give no drift there. Such a run, like any
with a drift, stores only its opening's evidence (learning.Learner.record).
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

MEASURED = Path(__file__).resolve().parents[1] / "assets" / "measured"
SHIPPED = MEASURED / "answer-drift.json"   # the int8 draft's ("fast" kernels): the fallback for other kernels
OPENING = 64  # generated tokens: an answer's opening


@dataclass(frozen=True)
class Drift:
    """What the learner needs to predict an answer's rest from its opening (module docstring)."""
    ratio: float              # rest/opening P(rank 1 missed); 1.0: not applied, the weight only
    weight: float | None      # the prior's pseudo-observations against the opening; None: the learner's default
    draft_kernels: str | None = None   # the draft kernels it was measured with (profiler.draft_kernels)


def shipped() -> list[Path]:
    """The shipped drift assets, one per draft kernels measured (SHIPPED first)."""
    return [SHIPPED] + sorted(p for p in MEASURED.glob("answer-drift-*.json") if p != SHIPPED)


@lru_cache(maxsize=4)
def _load(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
        return obj if isinstance(obj, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable answer drift %s: %s", path, exc)
        return {}


def _ratio(entry) -> float | None:
    """An entry's ratio when it is a sane number, else None."""
    r = entry.get("rest_over_opening") if isinstance(entry, dict) else None
    return float(r) if isinstance(r, (int, float)) and math.isfinite(r) and r > 0 else None


def applies(entry: dict) -> bool:
    """The stated rule: a sane ratio whose 95 % interval over prompts excludes 1."""
    ci = entry.get("ci95") if isinstance(entry, dict) else None
    if _ratio(entry) is None or not (isinstance(ci, list) and len(ci) == 2):
        return False
    lo, hi = ci
    return lo > 1.0 or hi < 1.0


def entry_for(domain_entry: dict, horizon: int | None) -> dict:
    """The entry for a run of `horizon` generated tokens (module docstring); the whole measured
    rest when the horizon is unknown or no per-horizon entries exist."""
    by = {int(h): e for h, e in (domain_entry.get("by_horizon") or {}).items()}
    if horizon is None or not by:
        return domain_entry
    above = [h for h in by if h >= horizon]
    return by[min(above)] if above else by[max(by)]


def _weight(domain_entry: dict, key: str = "prior_weight") -> float | None:
    w = domain_entry.get(key)
    return float(w) if isinstance(w, (int, float)) and math.isfinite(w) and w >= 0 else None


def asset_for(draft: str, target: str, draft_kernels: str | None = None, path: Path | None = None) -> dict:
    """The drift asset measured for this pair with the run's draft kernels (a pruned head,
    '+head<n>', set aside: it drops tokens the target rarely picks); else the first shipped one
    for the pair, the int8 draft's (assumed closer than none; not measured: the int8 and NF4 drafts'
    code ratios differ by 0.08, inside each other's intervals); {} when none is for the pair.
    `path`: that file only."""
    objs = [o for o in map(_load, [path] if path else shipped())
            if o.get("draft") == draft and o.get("target") == target]
    base = draft_kernels.split("+head")[0] if draft_kernels else draft_kernels
    mine = ([o for o in objs if o.get("draft_kernels") == draft_kernels]
            or [o for o in objs if o.get("draft_kernels") == base])
    return (mine or objs or [{}])[0]


def drift_for(draft: str, target: str, domain: str | None, horizon: int | None = None,
              opening: int | None = None, path: Path | None = None, draft_kernels: str | None = None) -> Drift | None:
    """The drift for this pair (and draft kernels, asset_for), prompt domain and horizon, or None
    where none applies: a run that never passes the opening has no rest, and the ratios were
    measured for a 64-token opening (another boundary gets none). Where the horizon's ratio is not
    applied, the weight measured without it (module docstring), as Drift(1.0, weight)."""
    obj = asset_for(draft, target, draft_kernels, path)
    if not domain or not obj or opening not in (None, OPENING):
        return None
    if horizon is not None and horizon <= OPENING:
        return None
    domain_entry = (obj.get("domains") or {}).get(domain)
    if not isinstance(domain_entry, dict):
        return None
    entry = entry_for(domain_entry, horizon)
    if applies(entry):
        return Drift(_ratio(entry), _weight(domain_entry), obj.get("draft_kernels"))
    weight_only = _weight(entry, "prior_weight_ratio_not_applied")   # measured for this horizon's rest
    if weight_only is None:
        weight_only = _weight(domain_entry, "prior_weight_ratio_not_applied")
    return Drift(1.0, weight_only, obj.get("draft_kernels")) if weight_only is not None else None
