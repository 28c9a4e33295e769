"""Words the engine and the page share, so that a status line, a chart and the CLI say a count
the same way."""
from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """"1 token", "2 tokens", "0 tokens" (regular English plurals only)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
