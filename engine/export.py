"""Carry a planned tree to other engines, and read it back.

Formats (`FORMATS`):
* `json`    - this project's tree JSON (`Tree.to_json`).
* `vllm`    - `{"speculative_config": {...}, "command": "vllm serve ...", "notes": [...]}`; the config's
              `speculative_token_tree` is the string vLLM parses with `ast.literal_eval`.
* `medusa`  - the list of paths ("medusa_choices"), as JSON.
* `growmap` - the original Sequoia `.pt` dict (roots, branches, Successors, mask, depth, size).

Both path formats use one representation: a node's *path* is the tuple of its 0-based sibling ranks
from the root down, the root itself excluded: (0,) is the first child drafted, (0, 1) that child's
second child. Sorting paths by (depth, ranks) is exactly Tree's canonical breadth-first order, so
path i is node i + 1 and every export round-trips to the same parents and sibling ranks.
"""
from __future__ import annotations

import ast
import io
import json
import shlex
from pathlib import Path

import torch

from engine.errors import UserError
from engine.tree import MAX_TREE_NODES, Tree, TreeError

FORMATS = ("json", "vllm", "medusa", "growmap")
SUFFIX = {"json": ".json", "vllm": ".vllm.json", "medusa": ".medusa.json", "growmap": ".pt"}
# vLLM methods whose proposer reads speculative_token_tree (the model-based branch of its config)
VLLM_METHODS = ("draft_model", "eagle", "eagle3", "mtp")

RankPath = tuple[int, ...]


# ---------- paths (shared by vllm and medusa) ----------
def tree_paths(tree: Tree) -> list[RankPath]:
    """Breadth-first list of every non-root node's path of 0-based sibling ranks."""
    paths: list[RankPath] = [()]
    for i in range(1, tree.size):
        paths.append(paths[tree.parents[i]] + (tree.rank[i] - 1,))
    return paths[1:]


def validate_paths(paths, what: str = "paths") -> list[RankPath]:
    """The paths as tuples, or a TreeError naming the first rule broken."""
    if not isinstance(paths, (list, tuple)):
        raise TreeError(f"{what} must be a list of paths, got {type(paths).__name__}")
    if len(paths) > MAX_TREE_NODES - 1:
        raise TreeError(f"{what} lists {len(paths)} nodes; at most {MAX_TREE_NODES - 1} (plus the root) are allowed")
    out: list[RankPath] = []
    for k, p in enumerate(paths):
        if not isinstance(p, (list, tuple)) or not p:
            raise TreeError(f"{what}[{k}] = {p!r}: each path must be a non-empty list of ranks")
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in p):
            raise TreeError(f"{what}[{k}] = {p!r}: ranks must be integers >= 0 (0 = first child)")
        out.append(tuple(p))
    for k in range(1, len(out)):
        if (len(out[k]), out[k]) < (len(out[k - 1]), out[k - 1]):
            raise TreeError(f"{what}[{k}] = {out[k]} comes after {out[k - 1]}: paths must be sorted by depth, "
                            "then by ranks (breadth-first)")
    seen: set[RankPath] = set()
    for k, p in enumerate(out):
        if p in seen:
            raise TreeError(f"{what}[{k}] = {p}: duplicate path")
        if len(p) > 1 and p[:-1] not in seen:  # sorted, so a parent is always listed earlier
            raise TreeError(f"{what}[{k}] = {p}: its prefix {p[:-1]} is missing (every prefix must be present)")
        if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in seen:
            raise TreeError(f"{what}[{k}] = {p}: sibling rank {p[-1] - 1} is missing "
                            "(ranks of siblings must be 0, 1, 2, ... without gaps)")
        seen.add(p)
    return out


def tree_from_paths(paths, what: str = "paths") -> Tree:
    paths = validate_paths(paths, what)
    index: dict[RankPath, int] = {(): 0}
    parents = [-1]
    for i, p in enumerate(paths, start=1):
        parents.append(index[p[:-1]])
        index[p] = i
    return Tree(tuple(parents))  # already canonical: sorted paths are breadth-first


def _drafts_something(tree: Tree, fmt: str) -> None:
    if tree.size < 2:
        raise TreeError(f"a root-only tree drafts no token, which the {fmt} format cannot express "
                        "(it needs at least one speculative token)")


# ---------- vllm ----------
def vllm_tree_string(tree: Tree) -> str:
    _drafts_something(tree, "vllm")
    return str(tree_paths(tree))  # Python's repr: "[(0,), (1,), (0, 0)]", what vLLM itself writes


def vllm_notes(tree: Tree, method: str) -> list[str]:
    """What vLLM will do differently from the plan (the config itself is valid either way)."""
    notes = ["vLLM reads speculative_token_tree only with its tree attention backend (TREE_ATTN), "
             "which is experimental and was removed from vLLM main (PR #42121): use a release that has it."]
    uneven = [d for d, lv in enumerate(tree.levels[:-1]) if len({len(tree.children[v]) for v in lv}) > 1]
    if uneven:
        notes.append(f"levels {uneven} (0 = root) give their nodes different numbers of children; vLLM's tree "
                     "drafter gives every node of a level the same number (nodes of the next level // nodes of "
                     "this level), so it will not draft this tree as planned.")
    if method == "draft_model":
        notes.append("vLLM's own tests skip TREE_ATTN for its draft_model proposer; the tree drafting it "
                     "implements is its EAGLE proposer's (eagle, eagle3, mtp).")
    return notes


def to_vllm(tree: Tree, method: str = "draft_model", draft: str | None = None, target: str | None = None,
            tensor_parallel_size: int = 1) -> dict:
    if method not in VLLM_METHODS:
        raise UserError(f"vLLM method must be one of {', '.join(VLLM_METHODS)} (got {method!r})")
    if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
        raise UserError(f"tensor parallel size must be an integer >= 1 (got {tensor_parallel_size!r})")
    config = {"method": method}
    if draft:
        config["model"] = draft
    config.update(num_speculative_tokens=tree.size - 1, speculative_token_tree=vllm_tree_string(tree))
    command = (f"vllm serve {shlex.quote(target or 'TARGET_MODEL')} --tensor-parallel-size {tensor_parallel_size} "
               f"--attention-backend TREE_ATTN --speculative-config {shlex.quote(json.dumps(config))}")
    return {"speculative_config": config, "command": command, "notes": vllm_notes(tree, method)}


def from_vllm(obj) -> Tree:
    """From our vllm export, a bare speculative_config dict, or the tree string itself."""
    config = obj.get("speculative_config", obj) if isinstance(obj, dict) else {"speculative_token_tree": obj}
    text = config.get("speculative_token_tree") if isinstance(config, dict) else None
    if not isinstance(text, str):
        raise TreeError("vLLM export needs speculative_config.speculative_token_tree (a string)")
    try:
        paths = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise TreeError(f"speculative_token_tree is not a Python list of tuples: {text[:60]!r}") from None
    tree = tree_from_paths(paths, "speculative_token_tree")
    count = config.get("num_speculative_tokens")
    if count is not None and count != tree.size - 1:
        raise TreeError(f"num_speculative_tokens is {count} but speculative_token_tree lists {tree.size - 1} nodes")
    return tree


# ---------- medusa ----------
def to_medusa(tree: Tree) -> list[list[int]]:
    _drafts_something(tree, "medusa")
    return [list(p) for p in tree_paths(tree)]


def from_medusa(obj) -> Tree:
    return tree_from_paths(obj, "medusa choices")


# ---------- growmap ----------
def to_growmap(tree: Tree) -> dict:
    """The dict the original Sequoia code writes (tree_search.py) and reads (run_sequoia.py, SpecTree):
    roots[k] = the nodes of level k, branches[k] = their child counts, the last level all zeros."""
    return {"roots": [list(lv) for lv in tree.levels],
            "branches": [[len(tree.children[v]) for v in lv] for lv in tree.levels],
            "Successors": [list(c) for c in tree.children],
            "mask": tree.ancestor_mask.long(),  # [size, size], 1 at a node and its ancestors
            "depth": torch.tensor(tree.depth_of, dtype=torch.long),
            "size": tree.size}


def growmap_bytes(tree: Tree) -> bytes:
    buf = io.BytesIO()
    torch.save(to_growmap(tree), buf)
    return buf.getvalue()


def from_growmap(data: bytes) -> Tree:
    """Tree.from_growmap (Successors), then checks that roots/branches, when present, agree with it:
    the original loader drafts from those, so a disagreement is a file it would misread."""
    tree = Tree.from_growmap(data)
    obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    succ = obj["Successors"]
    if "roots" in obj or "branches" in obj:
        try:
            pairs = [(int(v), int(b)) for rs, bs in zip(obj["roots"], obj["branches"], strict=True)
                     for v, b in zip(rs, bs, strict=True)]
        except (KeyError, TypeError, ValueError):
            raise TreeError("growmap 'roots' and 'branches' must be lists of equal-length lists") from None
        for v, b in pairs:
            if not 0 <= v < len(succ) or len(succ[v]) != b:
                raise TreeError(f"growmap: branches says node {v} has {b} children, Successors disagrees")
    return tree


# ---------- one entry point each way ----------
def export_tree(tree: Tree, fmt: str, **vllm_options) -> str | bytes:
    """Text for json/vllm/medusa, bytes for growmap."""
    if fmt == "json":
        return json.dumps(tree.to_dict(), indent=1)
    if fmt == "vllm":
        return json.dumps(to_vllm(tree, **vllm_options), indent=1)
    if fmt == "medusa":
        return json.dumps(to_medusa(tree))
    if fmt == "growmap":
        return growmap_bytes(tree)
    raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")


def detect_format(data: bytes) -> str:
    if data[:2] == b"PK" or data[:1] == b"\x80":  # torch zip archive or legacy pickle: a growmap
        return "growmap"
    try:
        text = data.decode("utf-8-sig")   # a BOM (Windows editors) is no reason to refuse a file
        obj = json.loads(text)
    except UnicodeDecodeError:
        return "vllm"
    except json.JSONDecodeError:
        # a bare "[(0,), (1,)]" string is vLLM's, whose own parser gives the clear error; anything
        # else is a broken tree JSON (its parser says where: "hello" was told it is no list of tuples)
        head = text.lstrip()[:1]
        return "vllm" if head in ("[", "(") or "speculative" in text else "json"
    if isinstance(obj, dict):
        return "vllm" if "speculative_config" in obj or "speculative_token_tree" in obj else "json"
    if isinstance(obj, list) and obj and all(isinstance(x, list) for x in obj):
        return "medusa"
    return "json"


def read_tree_file(path: str, described: str) -> Tree:
    """The tree in file `path`, in any format import_tree reads; `described` names the file in a
    refusal as its reader knows it (the CLI's "--tree FILE", the Planner's "the uploaded file")."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {described}: {exc.strerror}") from None
    if not data:
        raise UserError(f"{described} is empty")
    return import_tree(data, name=path)


def import_tree(data: bytes, fmt: str | None = None, name: str | None = None) -> Tree:
    """Any export back to a Tree; the format is detected when not given (a file `name` ending in
    .pt or .pth is a growmap). The one reader of tree files: `export --tree`, `generate --tree`
    and the Planner tab's import."""
    if not data:
        raise UserError("the tree file is empty")
    if fmt is None and name is not None and str(name).endswith((".pt", ".pth")):
        fmt = "growmap"
    detected, fmt = fmt is None, fmt or detect_format(data)
    if fmt == "growmap":
        return from_growmap(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        if detected:   # binary, and no growmap: none of the formats
            raise TreeError("the file is neither a tree file (JSON, vLLM or Medusa export) nor an original "
                            "Sequoia growmap (.pt)") from None
        raise TreeError(f"a {fmt} tree file must be UTF-8 text") from None
    if fmt == "json":
        return Tree.from_json(text)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        if fmt != "vllm":
            raise TreeError(f"the {fmt} tree file is not valid JSON") from None
        obj = text.strip()  # a bare speculative_token_tree string
    if fmt == "vllm":
        return from_vllm(obj)
    if fmt == "medusa":
        return from_medusa(obj)
    raise UserError(f"unknown tree format {fmt!r}; choose one of {', '.join(FORMATS)}")
