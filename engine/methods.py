"""Decoding methods are data: a tree shape plus the sampler that drafts and verifies it.

One decoding loop (engine/decoding.py) serves them all. At temperature 0 every method
uses the greedy sampler (top-b children, argmax check), whatever its name says."""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import UserError
from engine.tree import Tree

METHOD_NAMES = ("ar", "chain", "specinfer", "sequoia")


@dataclass(frozen=True)
class Method:
    name: str      # ar | chain | specinfer | sequoia | sequoia-auto
    tree: Tree
    sampler: str   # "sequoia": children without replacement; "specinfer": with replacement
    title: str = ""   # its own name in labels (an imported tree), else one from `name`

    @property
    def label(self) -> str:
        t = self.tree
        if self.title:
            return f"{self.title} n={t.size} d={t.depth}"
        if self.name == "ar":
            return "autoregressive"
        if self.name == "chain":
            return f"chain d={t.depth}"
        if self.name == "specinfer":
            return f"SpecInfer {t.level_widths[1] if t.depth > 1 else 0}x{t.depth}"
        name = "Sequoia (hardware-aware)" if self.name == "sequoia-auto" else "Sequoia"
        if t.size == 1:   # a plan where no draft pays (slow draft, poor acceptance): say what runs
            return f"{name} n=1: plain decoding, nothing drafted"
        return f"{name} n={t.size} d={t.depth}"

    @property
    def uses_draft(self) -> bool:
        return self.tree.size > 1


def autoregressive() -> Method:
    return Method("ar", Tree((-1,)), "sequoia")


def chain(depth: int) -> Method:
    """Leviathan-style chain: one child per level; depth counts the root."""
    _check_depth(depth)
    return Method("chain", Tree.chain(depth), "sequoia")


def specinfer(width: int, depth: int) -> Method:
    """SpecInfer k x d: `width` independent chains under the root, `depth` levels counting the root."""
    _check_depth(depth)
    if width < 1:
        raise UserError(f"width must be at least 1 (got {width})")
    return Method("specinfer", Tree.k_ary_chains(width, depth), "specinfer")


def sequoia(tree: Tree, name: str = "sequoia", title: str = "") -> Method:
    return Method(name, tree, "sequoia", title)


def _check_depth(depth: int) -> None:
    if depth < 1:
        raise UserError(f"depth must be at least 1 (levels including the root; got {depth})")
