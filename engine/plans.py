"""From a live pair and settings to a tree: acceptance vector (cached or measured) -> DP table
-> tree for (budget, depth), or the hardware-aware (n, d) from the device profile.

Tables are memoised per acceptance vector, so moving the budget slider is a lookup."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from engine import profiler
from engine.errors import UserError
from engine.models import ModelPair
from engine.planner import Choice, PlanTable, choose_shape
from engine.settings import Settings
from engine.tree import Tree

MAX_BUDGET = 256   # nodes, the root included
MAX_DEPTH = 32     # levels, the root included
TABLE_DEPTH = 16   # the DP table covers depths up to this; deeper asks build a bigger one


def check_shape(budget: int, depth: int) -> None:
    for value, name in ((budget, "budget"), (depth, "depth")):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{name} must be an integer (got {value!r})")
    if not 1 <= budget <= MAX_BUDGET:
        raise UserError(f"budget must be between 1 and {MAX_BUDGET} nodes, the root included (got {budget})")
    if not 1 <= depth <= MAX_DEPTH:
        raise UserError(f"depth must be between 1 and {MAX_DEPTH} levels, the root included (got {depth})")
    if budget > 1 and depth < 2:
        raise UserError("a tree with more than one node needs depth >= 2 (the root is level 1)")


@functools.lru_cache(maxsize=32)
def _table(acceptance: tuple[float, ...], max_nodes: int, max_depth: int) -> PlanTable:
    return PlanTable.build(list(acceptance), max_nodes, max_depth)


def table_for(acceptance, budget: int = MAX_BUDGET, depth: int = TABLE_DEPTH) -> PlanTable:
    return _table(tuple(float(x) for x in acceptance), max(budget, MAX_BUDGET), max(depth, TABLE_DEPTH))


@dataclass
class Plan:
    tree: Tree
    expected_tokens: float
    acceptance: profiler.AcceptanceVector
    choice: Choice | None = None          # set for hardware-aware plans
    profile: profiler.DeviceProfile | None = None

    def summary(self) -> dict:
        out = {"budget": self.tree.size, "depth": self.tree.depth, "levels": self.tree.level_widths,
               "parents": list(self.tree.parents), "expected_tokens": self.expected_tokens,
               "acceptance": self.acceptance.probabilities, "acceptance_source": self.acceptance.source,
               "acceptance_positions": self.acceptance.positions}
        if self.choice is not None:
            out.update(predicted_speedup=self.choice.predicted_speedup,
                       predicted_tokens_per_second=self.choice.predicted_tokens_per_second,
                       profile_source=self.profile.source if self.profile else None)
        return out


def acceptance_for(pair: ModelPair, settings: Settings, sampler: str = "sequoia", measure: bool = True,
                   **kwargs) -> profiler.AcceptanceVector:
    vec = profiler.acceptance_vector(pair, settings.temperature, settings.top_p, sampler, measure=measure, **kwargs)
    if vec is None:
        raise UserError(f"no acceptance vector measured for T={settings.temperature}, top-p={settings.top_p}")
    return vec


def dp_plan(pair: ModelPair, settings: Settings, budget: int, depth: int, **kwargs) -> Plan:
    check_shape(budget, depth)
    vec = acceptance_for(pair, settings, **kwargs)
    table = table_for(vec.probabilities, budget, depth)
    return Plan(table.tree(budget, depth), table.expected(budget, depth), vec)


def auto_plan(pair: ModelPair, settings: Settings, max_budget: int = 128, max_depth: int = TABLE_DEPTH,
              profile_kwargs: dict | None = None, **kwargs) -> Plan:
    """Hardware-aware: the (n, d) that maximises predicted tokens/s on this device."""
    check_shape(max_budget, max_depth)
    vec = acceptance_for(pair, settings, **kwargs)
    prof = profiler.device_profile(pair, **{"max_budget": max_budget, **(profile_kwargs or {})})
    table = table_for(vec.probabilities, max_budget, max_depth)
    choice = choose_shape(table, prof.target_seconds, prof.draft_seconds, prof.overhead_seconds,
                          budgets=range(1, max_budget + 1), depths=range(1, max_depth + 1))
    return Plan(choice.tree, choice.predicted_tokens_per_step, vec, choice, prof)
