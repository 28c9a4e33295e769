"""Acceptance by prompt domain (issue 15): a code prompt and a prose prompt are accepted at
different rates by the same pair (top-1 agreement about 0.71 vs 0.58 for the embedded pair), so
vectors are measured per domain and the planner takes the one that fits the prompt.

Rule, stated so a reader can redo it:
- A prompt is "code" when it shows at least two signs of code (a programming word such as
  function, class, SQL, Python, script, bug (Go only with its capital: "go" is an everyday
  word); or code characters such as backticks, braces,
  `def `, `=>`, `;` at a line end), "prose" when it shows none and has at least five words, and
  unsure otherwise.
- The domain's own vector is used only when the code and prose vectors of the same settings differ
  beyond their 95 % intervals on one of the first three ranks (`differ`); otherwise, or when the
  prompt is unsure, or when no domain vectors exist, the pooled vector (every prompt) is used.
"""
from __future__ import annotations

import math
import re

from engine import intervals
from engine.errors import UserError

DOMAINS = ("code", "prose")
_CODE_WORDS = re.compile(
    r"\b(code|coding|function|method|class|script|program|programming|implement|refactor|compile|debug|bug|"
    r"python|javascript|typescript|java|rust|golang|(?-i:Go)|c\+\+|sql|query|bash|shell|regex|api|json|html|css|"
    r"react|vue|angular|svelte|django|flask|kotlin|php|haskell|scala|perl|pytest|unit tests?|algorithm|variable|"
    r"loop|array|dictionary|list comprehension|linked list|struct|stdin|stdout)\b",
    re.IGNORECASE)
_CODE_MARKS = re.compile(r"`|[{}]|\bdef |=>|;\s*$|\w+\(.*\)|^\s{4}\S", re.MULTILINE)


def prompt_domain(text: str | None) -> str | None:
    """'code', 'prose', or None when unsure (see the module's rule)."""
    if not text or not text.strip():
        return None
    signs = len(_CODE_WORDS.findall(text)) + len(_CODE_MARKS.findall(text))
    if signs >= 2:
        return "code"
    if signs == 0 and len(text.split()) >= 5:
        return "prose"
    return None


def differ(a, b, ranks: int = 3) -> bool:
    """Whether two acceptance vectors differ beyond their 95 % intervals on any of the first
    `ranks` ranks (a two-sample normal test per rank)."""
    for k in range(min(ranks, len(a.probabilities), len(b.probabilities))):
        if abs(a.probabilities[k] - b.probabilities[k]) > math.hypot(a.ci95[k], b.ci95[k]):
            return True
    return False


def pooled_vector(parts: list, domain: str = ""):
    """Vectors of the same settings measured on disjoint prompt sets, pooled position-weighted
    (what one measurement over all their prompts gives), for `domain` ("": every prompt; a kind
    where every part is of it)."""
    from engine.profiler import AcceptanceVector
    if not parts:
        raise UserError("nothing to pool")
    total = sum(v.positions for v in parts)
    width = min(v.width for v in parts)
    probs = [sum(v.probabilities[k] * v.positions for v in parts) / total for k in range(width)]
    # the parts' prompts together, when every part recorded its own (else the interval is over positions)
    recorded = all(_records_its_prompts(v) for v in parts)
    # ranks past `width` (a wider part's) count as "none", as the pooled vector's none does
    prompt_counts = ([row[:1 + width] + [row[0] - sum(row[1:1 + width])] for v in parts for row in v.prompt_counts]
                     if recorded else [])
    ci, basis = intervals.vector_ci(probs, total, prompt_counts)
    first = parts[0]
    return AcceptanceVector(probs, max(0.0, 1.0 - sum(probs)), total, ci, first.draft, first.target,
                            first.sampler, first.temperature, first.top_p, width,
                            sum(v.prompts for v in parts), max(v.measured_at for v in parts),
                            sum(v.seconds for v in parts),
                            draft_kernels=first.draft_kernels, top_k=first.top_k, domain=domain,
                            method=first.method, machine=first.machine, prompt_counts=prompt_counts, interval=basis,
                            recipe=_joined_recipe(parts))


def _joined_recipe(parts: list) -> dict:
    """The parts' prompts one after another, where every part says how it was measured, the same way."""
    recipes = [getattr(v, "recipe", None) or {} for v in parts]
    same = {(r.get("tokens_per_prompt"), r.get("draws")) for r in recipes}
    if not all(recipes) or len(same) != 1:
        return {}
    joined = {k: v for k, v in recipes[0].items() if k != "prompts"}
    joined["prompts"] = [row for r in recipes for row in r["prompts"]]
    return joined


def _records_its_prompts(vec) -> bool:
    """Whether `vec.prompt_counts` holds every one of its positions (files before it hold none)."""
    rows = getattr(vec, "prompt_counts", None) or []
    return bool(rows) and abs(sum(row[0] for row in rows) - vec.positions) < 0.5
