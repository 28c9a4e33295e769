"""The static shape of a speculation tree.

A Tree only knows *where* tokens go: who is whose parent, in which rank order siblings
are drafted, and which tree positions may attend to which. The tokens themselves are
filled in every step by the decoder.

Canonical order (enforced by every constructor): breadth-first, so node 0 is the root,
every level is a contiguous index range, parents come before children and siblings
appear in rank order (rank 1 = the first child drafted and the first one verified).
"""
from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass
from functools import cached_property

import torch


def _unpickler_reason(exc: pickle.UnpicklingError) -> str:
    """The line of torch's weights-only refusal that names what it met ("Unsupported global:
    GLOBAL os.system", "unsupported GLOBAL posix.system", "Unsupported operand 54"), without its
    advice to load with weights_only=False, which would run whatever the file holds."""
    advice = ("weights_only", "Weights only load failed", "documentation", "file an issue", "trust")
    for line in str(exc).splitlines():
        line = line.split("WeightsUnpickler error:", 1)[-1]
        line = line.split(" was not an allowed global")[0].split(" whose module")[0].strip()
        if line and not any(a in line for a in advice):
            return line
    return "refused by torch"


class TreeError(ValueError):
    """A tree description that cannot be used (cycle, missing root, too large, ...)."""


MAX_TREE_NODES = 1024  # hard upper bound for files; device limits are checked elsewhere


@dataclass(frozen=True)
class Tree:
    parents: tuple[int, ...]  # parents[0] == -1, canonical breadth-first order

    def __post_init__(self):
        p = self.parents
        if not p or p[0] != -1:
            raise TreeError("a tree needs a root: parents[0] must be -1")
        for i in range(1, len(p)):
            if not 0 <= p[i] < i:
                raise TreeError(f"node {i} has parent {p[i]}; parents must come before children")
        depth = self.depth_of
        if any(depth[i] < depth[i - 1] for i in range(1, len(p))):
            raise TreeError("nodes must be in breadth-first order (use Tree.from_parents)")
        for i in range(2, len(p)):
            if depth[i] == depth[i - 1] and p[i] < p[i - 1]:
                raise TreeError("siblings of a level must be grouped in parent order")

    # ---------- constructors ----------
    @classmethod
    def from_parents(cls, parents) -> "Tree":
        """Any parent list with a single root (-1) and no cycles; reordered breadth-first.
        Children keep their relative order, which becomes their rank."""
        parents = [int(x) for x in parents]
        n = len(parents)
        if n == 0:
            raise TreeError("empty tree")
        if n > MAX_TREE_NODES:
            raise TreeError(f"tree has {n} nodes; at most {MAX_TREE_NODES} are allowed")
        roots = [i for i, x in enumerate(parents) if x == -1]
        if len(roots) != 1:
            raise TreeError(f"a tree needs exactly one root (parent -1); found {len(roots)}")
        children: list[list[int]] = [[] for _ in range(n)]
        for i, x in enumerate(parents):
            if x == -1:
                continue
            if not 0 <= x < n:
                raise TreeError(f"node {i} has parent {x}, which is not a node")
            children[x].append(i)
        order, frontier = [], [roots[0]]
        while frontier:
            order.extend(frontier)
            frontier = [c for v in frontier for c in children[v]]
        if len(order) != n:
            raise TreeError("the parent list has a cycle or nodes not connected to the root")
        new_index = {old: new for new, old in enumerate(order)}
        return cls(tuple(-1 if parents[o] == -1 else new_index[parents[o]] for o in order))

    @classmethod
    def from_branching(cls, children_per_node: list[int]) -> "Tree":
        """children_per_node in breadth-first order (as the DP rebuild produces)."""
        parents, queue, nxt = [-1], [0], 1
        for v, k in zip(queue, children_per_node):
            for _ in range(int(k)):
                parents.append(v)
                queue.append(nxt)
                nxt += 1
        return cls.from_parents(parents)

    @classmethod
    def chain(cls, depth: int) -> "Tree":
        """depth levels counting the root: depth-1 drafted tokens."""
        if depth < 1:
            raise TreeError("depth must be at least 1")
        return cls(tuple(range(-1, depth - 1)))

    @classmethod
    def k_ary_chains(cls, width: int, depth: int) -> "Tree":
        """SpecInfer k x d: `width` independent chains under the root, depth levels counting the root."""
        if width < 1 or depth < 1:
            raise TreeError("width and depth must be at least 1")
        if depth == 1:
            return cls((-1,))
        parents = [-1]
        parents.extend([0] * width)  # level 1: nodes 1..width
        for level in range(2, depth):
            first_prev = 1 + (level - 2) * width
            parents.extend(first_prev + j for j in range(width))
        return cls(tuple(parents))

    @classmethod
    def star(cls, width: int) -> "Tree":
        return cls.k_ary_chains(width, 2)

    # ---------- derived structure ----------
    @property
    def size(self) -> int:
        return len(self.parents)

    @cached_property
    def depth_of(self) -> tuple[int, ...]:
        d = [0] * len(self.parents)
        for i in range(1, len(self.parents)):
            d[i] = d[self.parents[i]] + 1
        return tuple(d)

    @property
    def depth(self) -> int:
        """Number of levels, the root's included."""
        return max(self.depth_of) + 1

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        ch: list[list[int]] = [[] for _ in self.parents]
        for i in range(1, len(self.parents)):
            ch[self.parents[i]].append(i)
        return tuple(tuple(c) for c in ch)

    @cached_property
    def rank(self) -> tuple[int, ...]:
        """1-based rank among siblings (0 for the root)."""
        r = [0] * len(self.parents)
        for kids in self.children:
            for k, c in enumerate(kids, start=1):
                r[c] = k
        return tuple(r)

    @cached_property
    def levels(self) -> tuple[tuple[int, ...], ...]:
        lv: list[list[int]] = [[] for _ in range(self.depth)]
        for i, d in enumerate(self.depth_of):
            lv[d].append(i)
        return tuple(tuple(x) for x in lv)

    @property
    def level_widths(self) -> list[int]:
        return [len(x) for x in self.levels]

    @property
    def expanding_widths(self) -> list[int]:
        """Per level, how many nodes have children: the draft forwards exactly these."""
        return [sum(1 for v in lv if self.children[v]) for lv in self.levels]

    @cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """[n, n] bool: row i is True at i and at every ancestor of i."""
        n = self.size
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            m[i, i] = True
            if i:
                m[i] |= m[self.parents[i]]
        return m

    def path_to(self, node: int) -> list[int]:
        path = [node]
        while self.parents[path[-1]] != -1:
            path.append(self.parents[path[-1]])
        return path[::-1]

    def truncated(self, max_depth: int) -> "Tree":
        """The same tree with every level at or beyond max_depth dropped."""
        if self.depth <= max_depth:
            return self  # keeps the cached masks: this runs every step
        keep = [i for i, d in enumerate(self.depth_of) if d < max_depth]
        return Tree(tuple(self.parents[i] for i in keep))

    def reach_probabilities(self, acceptance) -> list[float]:
        """Per node, the probability that the accepted path reaches it under the positional model:
        the product of p_rank along its root path (root = 1)."""
        acc = list(acceptance)
        value = [1.0] * self.size
        for i in range(1, self.size):
            r = self.rank[i]
            value[i] = value[self.parents[i]] * (acc[r - 1] if r <= len(acc) else 0.0)
        return value

    def expected_tokens(self, acceptance) -> float:
        """F(tree) = sum over nodes of the probability the accepted path reaches them."""
        return float(sum(self.reach_probabilities(acceptance)))

    # ---------- serialisation ----------
    def to_dict(self) -> dict:
        return {"format": "sequoia-live-tree/1", "parents": list(self.parents),
                "size": self.size, "depth": self.depth}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Tree":
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
            raise TreeError(f"tree file is not valid JSON: {exc}") from None
        if isinstance(obj, list):
            parents = obj
        elif isinstance(obj, dict) and isinstance(obj.get("parents"), list):
            parents = obj["parents"]
        else:
            raise TreeError('tree JSON must be {"parents": [-1, 0, ...]} or a list of parents')
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in parents):
            raise TreeError("tree parents must be integers")
        try:
            return cls.from_parents(parents)
        except TreeError as exc:   # [1, 2] read "found 0" and left the shape to guess
            if "exactly one root" not in str(exc):
                raise
            raise TreeError(f'{exc}: a tree JSON lists each node\'s parent, the root\'s -1 first, e.g. '
                            '{"parents": [-1, 0, 0, 1]}') from None

    @classmethod
    def from_growmap(cls, data: bytes | str) -> "Tree":
        """Import an original Sequoia growmap (.pt: dict with roots, branches, Successors, ...).

        Loaded with torch.load(weights_only=True), so pickled code is refused, never run.
        Only `Successors` (children lists of nodes in breadth-first numbering) is needed."""
        source = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
        try:
            obj = torch.load(source, weights_only=True, map_location="cpu")
        except pickle.UnpicklingError as exc:
            raise TreeError(f"growmap refused: not a file of plain lists and tensors ({_unpickler_reason(exc)}); "
                            "nothing in it was run") from None
        except Exception as exc:  # corrupt zip, truncated file, ...
            raise TreeError(f"growmap file could not be read as a torch .pt file ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
        if not isinstance(obj, dict) or "Successors" not in obj:
            raise TreeError("growmap must be a dict with a 'Successors' entry")
        successors = obj["Successors"]
        try:
            succ = [[int(c) for c in (s.tolist() if torch.is_tensor(s) else s)] for s in successors]
        except (TypeError, ValueError):
            raise TreeError("growmap 'Successors' must be a list of child-index lists") from None
        n = len(succ)
        if n > MAX_TREE_NODES:
            raise TreeError(f"growmap has {n} nodes; at most {MAX_TREE_NODES} are allowed")
        parents = [-1] * n
        seen_child = set()
        for v, kids in enumerate(succ):
            for c in kids:
                if not 0 <= c < n or c == 0 or c in seen_child:
                    raise TreeError(f"growmap: node {v} lists an invalid or repeated child {c}")
                seen_child.add(c)
                parents[c] = v
        if "size" in obj:
            try:
                size = int(obj["size"])
            except (TypeError, ValueError):
                raise TreeError("growmap 'size' must be an integer") from None
            if size != n:
                raise TreeError(f"growmap says size {size} but lists {n} nodes")
        return cls.from_parents(parents)
