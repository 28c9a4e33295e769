"""Words the engine and the page share, so that a status line, a chart and the CLI say a count
the same way."""
from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """"1 token", "2 tokens", "0 tokens" (regular English plurals only)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def tree_shape(tree) -> str:
    """A tree's size and depth in words, "6 nodes, 4 levels" (plan lines, imports, the CLI)."""
    return f"{plural(tree.size, 'node')}, {plural(tree.depth, 'level')}"


def hides_words(vec, shipped, path: str | None = None) -> str:
    """A user-cache vector hiding a larger shipped one (profiler.shipped_hidden_by), in words: the
    CLI's measure and the Planner's Measure say it alike."""
    return (f"This {vec.positions}-position vector now stands in for the shipped one of {shipped.positions} "
            f"positions at these settings (the user cache is read first); delete {path or vec.source} to plan "
            "from the shipped one again")
