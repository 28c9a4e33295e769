"""Acceptance vectors between measured settings (issue 15, item 3): a slider move to a
temperature or top-p that was never measured re-plans at once from an interpolated vector,
labelled as such, instead of waiting minutes for a measurement.

Rule (stated, so a reader can redo it):
- Candidates: measured vectors of this pair with the same kind of sampler (the asked sampler at
  T > 0; a greedy vector stands for T = 0 of every top-p, the limit the samplers reach as T -> 0),
  the same top-k, and this draft's kernels when any such exist (else any kernels, said so).
- Per measured top-p: the two measured temperatures around T, linearly in T
  (w = (T - T_lo) / (T_hi - T_lo)); outside the measured range, the nearest end (no extrapolation).
- Across top-p: the same between the two measured top-p values around the asked one, else the
  nearest.
- When that leaves one vector (outside every measured range), there is nothing to interpolate:
  None, and planning falls back to the nearest measured vector, labelled "nearest".
- Rank by rank on the common width of the vectors used (a convex mix of vectors summing to <= 1
  still sums to <= 1). A vector measured at exactly the asked settings is not interpolated: the
  caller reads it from the cache first.
The result is an AcceptanceVector whose `source` starts with "interpolated" and lists the
vectors and weights used; it is never written to the acceptance cache."""
from __future__ import annotations

from dataclasses import replace

from engine import profiler


def _mix(parts: list[tuple[float, object]]):
    """Weighted mix of AcceptanceVectors ([(weight, vec)], weights summing to 1)."""
    parts = [(w, v) for w, v in parts if w > 0]
    width = min(len(v.probabilities) for _, v in parts)
    probs = [sum(w * v.probabilities[k] for w, v in parts) for k in range(width)]
    ci = [sum(w * (v.ci95[k] if k < len(v.ci95) else 0.0) for w, v in parts) for k in range(width)]
    return probs, ci, width, parts


def _along(cands: list, value: float, attr: str) -> list[tuple[float, object]]:
    """Weights over `cands` interpolating linearly in `attr` at `value` (nearest end outside)."""
    by = {}
    for v in cands:  # one vector per coordinate: the one with most positions
        x = float(getattr(v, attr))
        if x not in by or v.positions > by[x].positions:
            by[x] = v
    xs = sorted(by)
    if value <= xs[0]:
        return [(1.0, by[xs[0]])]
    if value >= xs[-1]:
        return [(1.0, by[xs[-1]])]
    hi = next(x for x in xs if x >= value)
    lo = max(x for x in xs if x <= value)
    if hi == lo:
        return [(1.0, by[lo])]
    w = (value - lo) / (hi - lo)
    return [(1.0 - w, by[lo]), (w, by[hi])]


def interpolated_vector(pair, temperature: float, top_p: float = 1.0, sampler: str = "sequoia",
                        top_k: int | None = 0, vectors: list | None = None, domain: str = ""):
    """An interpolated AcceptanceVector for these settings, or None when nothing measured fits;
    from the vectors of one prompt domain ("" = pooled)."""
    vectors = profiler.measured_vectors(pair, domain) if vectors is None else vectors
    top_k = int(top_k or 0)
    if temperature == 0:
        return None  # greedy has no neighbours to mix: the nearest greedy vector stands in (planning)
    kernels = profiler.draft_kernels(pair)
    sampling = [v for v in vectors if v.sampler == sampler and v.temperature > 0 and (v.top_k or 0) == top_k]
    greedy = [v for v in vectors if v.sampler == "greedy"]
    if not sampling:
        return None
    pool = sampling + greedy
    same = [v for v in pool if v.draft_kernels == kernels]
    if any(v.temperature > 0 for v in same):
        pool = same
    sampling = [v for v in pool if v.temperature > 0]
    anchors = [v for v in pool if v.temperature == 0]
    groups: dict[float, list] = {}
    for v in sampling:
        groups.setdefault(float(v.top_p), []).append(v)
    per_p = []
    for p, group in groups.items():
        per_p.append((p, _along(group + anchors, temperature, "temperature")))
    ps = sorted(p for p, _ in per_p)
    table = dict(per_p)
    if top_p <= ps[0]:
        across = [(1.0, ps[0])]
    elif top_p >= ps[-1]:
        across = [(1.0, ps[-1])]
    else:
        hi = next(p for p in ps if p >= top_p)
        lo = max(p for p in ps if p <= top_p)
        w = 0.0 if hi == lo else (top_p - lo) / (hi - lo)
        across = [(1.0 - w, lo), (w, hi)] if hi != lo else [(1.0, lo)]
    parts: list[tuple[float, object]] = []
    for wp, p in across:
        for wt, v in table[p]:
            parts.append((wp * wt, v))
    probs, ci, width, used = _mix(parts)
    if len(used) < 2:
        return None  # outside the measured range: that is the nearest vector, labelled so by planning
    described = ", ".join(f"{w:.2f} x (T={v.temperature:g}, top-p={v.top_p:g}"
                          f"{'' if v.draft_kernels == kernels else f', draft on {v.draft_kernels} kernels'}; "
                          f"{v.positions} positions)" for w, v in used)
    base = used[0][1]
    positions = int(sum(w * v.positions for w, v in used))
    return replace(base, probabilities=probs, none=max(0.0, 1.0 - sum(probs)), ci95=ci, width=width,
                   sampler=sampler, temperature=float(temperature), top_p=float(top_p), top_k=top_k,
                   positions=positions, source=f"interpolated: {described}",
                   measured_at="", seconds=0.0, draft_kernels=base.draft_kernels, prompt_counts=[], recipe={},
                   interval=_interval_of(v for _, v in used))


def _interval_of(vectors) -> str:
    """A mix's interval is over prompts only when every vector mixed had one over prompts."""
    return "prompts" if all(getattr(v, "interval", "positions") == "prompts" for v in vectors) else "positions"


def is_interpolated(vec) -> bool:
    return vec is not None and str(getattr(vec, "source", "")).startswith("interpolated")

