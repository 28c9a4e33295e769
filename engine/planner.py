"""Tree planner: the Sequoia dynamic program (ALGORITHM.md §1) and hardware-aware sizing (§4).

Pure maths on an acceptance vector and measured cost curves; no models, so the UI, the
profiler and the CLI can all call it.

DP: T[m][l][b] = best F over trees with exactly m nodes, at most l levels (root counted),
root with exactly b children. One table answers every (n <= N, d <= D); lookups never redo it.

Ranks beyond W have acceptance 0. Rather than carry up to N-1 root-child columns, a single
extra column b = W+1 stands for "more than W children": such a root's extra children are
worthless (p = 0), so the best is the best W-child tree on y < m nodes plus m-y zero-value
leaves on the root; that is a prefix maximum of T[.][l][W]. This keeps every n reachable
(d >= 2) at the cost of one column.

Tie rule (values within TIE_TOL count as equal, so float summation order cannot flip it):
fewest root children b first, then the largest y (= root + first b-1 subtrees), i.e. the
earlier, likelier ranks get the nodes and the fewest zero-value filler leaves are used.
The same rule is applied recursively, so tree(n, d) is a pure function of (acceptance, n, d)
for a given table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.errors import UserError
from engine.tree import MAX_TREE_NODES, Tree

MAX_WIDTH = 64
TIE_TOL = 1e-9
NEG = -np.inf


def validate_acceptance(acceptance) -> np.ndarray:
    try:
        acc = np.asarray([float(x) for x in acceptance], dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError("acceptance must be a list of numbers (P(rank 1), P(rank 2), ...)") from None
    if acc.size == 0:
        raise UserError("acceptance vector is empty: give at least P(rank 1)")
    if acc.size > MAX_WIDTH:
        raise UserError(f"acceptance vector has {acc.size} ranks; at most {MAX_WIDTH} are supported")
    if not np.all(np.isfinite(acc)):
        raise UserError("acceptance entries must be finite numbers")
    if np.any(acc < 0) or np.any(acc > 1):
        raise UserError("acceptance entries must lie in [0, 1]")
    if acc.sum() > 1 + 1e-6:
        raise UserError(f"acceptance entries sum to {acc.sum():.6g}; they are probabilities of "
                        "disjoint events and must sum to at most 1")
    return acc


def parse_acceptance(text: str) -> list[float]:
    parts = [x.strip() for x in text.split(",")]
    try:   # an empty entry is refused, not dropped: "0.6,,0.1" would make 0.1 rank 2's
        values = [float(x) for x in parts]
    except ValueError:
        raise UserError(f"--acceptance must be comma-separated numbers, got {text!r}") from None
    return validate_acceptance(values).tolist()


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name} must be a whole number >= 1 (got {value!r})")
    return int(value)


def _first_max(vals: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Max along axis and the first index within TIE_TOL of it (-inf rows give index 0)."""
    best = vals.max(axis=axis)
    near = vals >= np.expand_dims(best, axis) - TIE_TOL
    return best, near.argmax(axis=axis)


class PlanTable:
    """The DP table for one acceptance vector; build once, then look up any (n, d)."""

    def __init__(self, acceptance, max_nodes: int, max_depth: int):
        self.acceptance = validate_acceptance(acceptance)
        self.max_nodes = _positive_int(max_nodes, "budget (max nodes)")
        self.max_depth = _positive_int(max_depth, "depth (max levels)")
        if self.max_nodes > MAX_TREE_NODES:
            raise UserError(f"budget {self.max_nodes} is above the limit of {MAX_TREE_NODES} nodes")
        self._solve()

    @classmethod
    def build(cls, acceptance, max_nodes: int, max_depth: int) -> "PlanTable":
        return cls(acceptance, max_nodes, max_depth)

    # ---------- the DP ----------
    def _solve(self) -> None:
        N, W = self.max_nodes, len(self.acceptance)
        L = min(self.max_depth, N)  # more levels than nodes cannot help
        B = min(W, N - 1)  # real rank columns; column B+1 = filler (only useful if N-1 > W)
        F = B + 1
        p = self.acceptance
        T = np.full((N + 1, L + 1, B + 2), NEG)
        Y = np.zeros((N + 1, L + 1, B + 2), dtype=np.int32)  # argmax y per (m, l, b)
        G = np.full((N + 1, L + 1), NEG)
        BEST_B = np.zeros((N + 1, L + 1), dtype=np.int32)
        m_idx = np.arange(N + 1)
        # rev_diff[m, k] = m - y with y = N - k: columns reversed so that ties pick the largest y
        rev_diff = m_idx[:, None] - (N - m_idx)[None, :]
        valid = rev_diff >= 1
        rev_idx = np.where(valid, rev_diff, 0)
        for l in range(1, L + 1):
            T[1, l, 0] = 1.0
            if l >= 2 and N >= 2:
                g_prev = G[:, l - 1]
                # Toeplitz view of the previous level: G[m - y][l-1], split into a finite part and
                # a 0/-inf mask so that p_b = 0 never meets -inf (0 * -inf = nan)
                g_rev = g_prev[rev_idx]
                ok = valid & np.isfinite(g_rev)
                g_fin = np.where(ok, g_rev, 0.0)
                g_mask = np.where(ok, 0.0, NEG)
                g_ok = np.isfinite(g_prev[1:N])
                T[2:, l, 1] = np.where(g_ok, 1.0 + p[0] * np.where(g_ok, g_prev[1:N], 0.0), NEG)
                Y[2:, l, 1] = 1
                for b in range(2, B + 1):
                    # max-plus convolution over y (the size of root + first b-1 subtrees)
                    vals = T[::-1, l, b - 1][None, :] + (p[b - 1] * g_fin + g_mask)
                    best, arg = _first_max(vals, axis=1)
                    T[:, l, b] = best
                    Y[:, l, b] = N - arg
                if N - 1 > W:
                    # filler column: best W-child tree on y <= m-1 nodes, plus m-y zero-value leaves
                    col = T[:, l, W]
                    run_best = np.maximum.accumulate(col)
                    # largest y achieving the prefix max (within tolerance) -> fewest fillers
                    run_arg = np.zeros(N + 1, dtype=np.int32)
                    for y in range(1, N + 1):
                        run_arg[y] = y if col[y] >= run_best[y] - TIE_TOL and col[y] > NEG else run_arg[y - 1]
                    T[2:, l, F] = run_best[1:N]
                    Y[2:, l, F] = run_arg[1:N]
            best, arg = _first_max(T[:, l, :], axis=1)
            G[:, l] = best
            BEST_B[:, l] = arg
        self._Y, self._G, self._best_b = Y, G, BEST_B   # T (values by filler) is not needed once G holds them
        self._levels, self._filler = L, (F if N - 1 > W else None)
        self._ew_memo: dict[tuple[int, int], list[int]] = {}

    # ---------- lookups ----------
    @property
    def G(self) -> np.ndarray:
        """[N+1, D+1] best expected tokens/step; -inf where no tree exists."""
        cols = np.minimum(np.arange(self.max_depth + 1), self._levels)
        return self._G[:, cols].copy()

    def _check(self, n, d) -> tuple[int, int]:
        n = _positive_int(n, "budget")
        d = _positive_int(d, "depth")
        if n > self.max_nodes:
            raise UserError(f"budget {n} is larger than this table's {self.max_nodes} nodes")
        if d > self.max_depth and self.max_depth < n:  # beyond n levels the answer is known
            raise UserError(f"depth {d} is larger than this table's {self.max_depth} levels")
        if n > 1 and d < 2:
            raise UserError(f"a tree of {n} nodes needs at least 2 levels (depth {d} given)")
        return n, min(d, self._levels)

    def expected(self, n: int, d: int) -> float:
        n, d = self._check(n, d)
        return float(self._G[n, d])

    def _split(self, m: int, l: int) -> list[int]:
        """Subtree sizes of the root's children, in rank order, for the optimal (m, l) tree."""
        sizes: list[int] = []
        b = int(self._best_b[m, l])
        while b >= 1:
            y = int(self._Y[m, l, b])
            if b == self._filler:
                sizes.extend([1] * (m - y))  # zero-value leaves after rank W
                b = len(self.acceptance)
            else:
                sizes.append(m - y)
                b -= 1
            m = y
        return sizes[::-1]

    def tree(self, n: int, d: int) -> Tree:
        """The optimal tree with exactly n nodes and at most d levels."""
        n, d = self._check(n, d)
        parents, stack = [-1], [(0, n, d)]
        while stack:  # explicit stack: depth can reach the node budget
            node, m, l = stack.pop()
            for size in self._split(m, l):
                parents.append(node)
                stack.append((len(parents) - 1, size, l - 1))
        return Tree.from_parents(parents)

    def expanding_widths(self, n: int, d: int) -> list[int]:
        """Tree(n, d).expanding_widths without building the Tree (memoised; for the cost grid)."""
        n, d = self._check(n, d)
        return self._ew(n, d)

    def _ew(self, m: int, l: int) -> list[int]:
        key = (m, l)
        if key not in self._ew_memo:
            out = [1 if m > 1 else 0]
            for size in self._split(m, l):
                for k, w in enumerate(self._ew(size, l - 1), start=1):
                    if k < len(out):
                        out[k] += w
                    else:
                        out.append(w)
            self._ew_memo[key] = out
        return list(self._ew_memo[key])


# ---------- hardware-aware sizing (§4) ----------
class CostCurve:
    """Piecewise-linear seconds(width) through measured points, read as their running maximum:
    a forward over more tokens does the work of one over fewer and more, so a point measured
    below a narrower one is timing noise (a profile here had the draft at 6 rows 12 % under 5
    rows), and taking it at face value would steer plans to that width. Below the first point
    it is held flat (a forward never gets cheaper than the smallest one measured); beyond the
    last it continues with the slope of the last two points, never decreasing (flat if only one
    point), because past the knee cost keeps growing."""

    def __init__(self, points: dict, name: str):
        try:
            pts = sorted((int(k), float(v)) for k, v in dict(points).items())
        except (TypeError, ValueError):
            raise UserError(f"{name} must map widths (whole numbers) to seconds") from None
        if not pts:
            raise UserError(f"{name} has no measured points")
        if any(k < 1 or not math.isfinite(v) or v < 0 for k, v in pts):
            raise UserError(f"{name} needs widths >= 1 and finite, non-negative seconds")
        self.x = np.array([k for k, _ in pts], dtype=np.float64)
        self.y = np.maximum.accumulate(np.array([v for _, v in pts], dtype=np.float64))
        self.slope = max(0.0, (self.y[-1] - self.y[-2]) / (self.x[-1] - self.x[-2])) if len(pts) > 1 else 0.0

    def __call__(self, width) -> float:
        if width > self.x[-1]:
            return float(self.y[-1] + self.slope * (width - self.x[-1]))
        return float(np.interp(width, self.x, self.y))


@dataclass
class Grid:
    """Predictions for every (budget, depth) pair; rows = budgets, columns = depths; NaN = impossible."""
    budgets: list[int]
    depths: list[int]
    tokens_per_step: np.ndarray
    seconds_per_step: np.ndarray
    tokens_per_second: np.ndarray
    speedup: np.ndarray

    def to_dict(self) -> dict:
        def clean(a):
            return [[None if not math.isfinite(v) else float(v) for v in row] for row in a]
        return {"budgets": self.budgets, "depths": self.depths,
                "tokens_per_step": clean(self.tokens_per_step),
                "seconds_per_step": clean(self.seconds_per_step),
                "tokens_per_second": clean(self.tokens_per_second),
                "speedup": clean(self.speedup)}


@dataclass
class Choice:
    n: int
    d: int  # the depth bound; tree.depth may be smaller
    tree: Tree
    predicted_tokens_per_step: float
    predicted_seconds_per_step: float
    predicted_tokens_per_second: float
    predicted_speedup: float
    baseline_seconds_per_token: float  # autoregressive: t_target(1) + overhead
    grid: Grid = field(repr=False)


def step_seconds(expanding_widths, target: CostCurve, draft: CostCurve, n: int, overhead: float,
                 node_costs: tuple[float, float] = (0.0, 0.0), expected_tokens: float = 0.0) -> float:
    """One step: target verify of n tokens + one draft forward per level that has expanding nodes
    (level 0 = the root's own forward) + fixed overhead; when sampling (T > 0), plus the sampling
    maths: node_costs = (per expanded draft node, per visited target node), and a step visits
    about as many target nodes as it yields tokens."""
    draft_node, target_node = node_costs
    return (target(n) + sum(draft(w) for w in expanding_widths if w > 0) + overhead
            + draft_node * sum(expanding_widths) + target_node * expected_tokens)


def choose_shape(table: PlanTable, target_seconds: dict, draft_seconds: dict, overhead_seconds: float,
                 budgets=None, depths=None, node_costs: tuple[float, float] = (0.0, 0.0)) -> Choice:
    """Pick the (n, d) maximising predicted tokens/s = G(n, d) / seconds per step.
    Ties (relative 1e-12) go to the smallest n, then the smallest d. node_costs: see step_seconds."""
    target = CostCurve(target_seconds, "target_seconds")
    draft = CostCurve(draft_seconds, "draft_seconds")
    overhead = float(overhead_seconds)
    if not math.isfinite(overhead) or overhead < 0:
        raise UserError("overhead_seconds must be a finite number >= 0")
    budgets = sorted({_positive_int(b, "budget") for b in (budgets or range(1, table.max_nodes + 1))})
    depths = sorted({_positive_int(d, "depth") for d in (depths or range(1, table.max_depth + 1))})
    baseline = target(1) + overhead + node_costs[1]  # autoregressive visits one target node per token
    if baseline <= 0:
        raise UserError("autoregressive step time t_target(1) + overhead must be positive")
    shape = (len(budgets), len(depths))
    tps, sps = np.full(shape, np.nan), np.full(shape, np.nan)
    for i, n in enumerate(budgets):
        for j, d in enumerate(depths):
            if n > 1 and d < 2:
                continue
            tps[i, j] = table.expected(n, d)
            sps[i, j] = step_seconds(table.expanding_widths(n, d), target, draft, n, overhead, node_costs,
                                     tps[i, j])
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(sps > 0, tps / sps, np.inf)
    rate = np.where(np.isnan(tps), np.nan, rate)
    grid = Grid(budgets, depths, tps, sps, rate, rate * baseline)
    if np.all(np.isnan(rate)):
        raise UserError("no (budget, depth) pair in the grid gives a valid tree (depth 1 allows only the root)")
    top = np.nanmax(rate)
    i, j = np.argwhere(rate >= top - 1e-12 * abs(top) if math.isfinite(top) else rate == top)[0]
    n, d = budgets[i], depths[j]
    return Choice(n=n, d=d, tree=table.tree(n, d), predicted_tokens_per_step=float(tps[i, j]),
                  predicted_seconds_per_step=float(sps[i, j]), predicted_tokens_per_second=float(rate[i, j]),
                  predicted_speedup=float(rate[i, j] * baseline), baseline_seconds_per_token=baseline, grid=grid)
