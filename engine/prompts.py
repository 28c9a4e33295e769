"""The example prompts shipped in assets/prompts.json: what measurements, the bench and the
self-check run on when the user gives none."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ASSET_PROMPTS = Path(__file__).resolve().parents[1] / "assets" / "prompts.json"


@dataclass
class Prompt:
    title: str
    kind: str   # code | prose | custom
    text: str


def asset_prompts() -> list[Prompt]:
    return [Prompt(p.get("title", f"prompt {i + 1}"), p.get("kind", "custom"), p["prompt"])
            for i, p in enumerate(json.loads(ASSET_PROMPTS.read_text(encoding="utf-8")))]


def default_prompts() -> list[str]:
    """Every shipped prompt's text, in file order (what measurements use by default)."""
    return [p.text for p in asset_prompts()]


def prompt_mix(mix: dict[str, int]) -> list[Prompt]:
    """The first prompts of each kind, e.g. {"code": 2, "prose": 1}."""
    out, seen = [], {k: 0 for k in mix}
    for p in asset_prompts():
        if p.kind in mix and seen[p.kind] < mix[p.kind]:
            out.append(p)
            seen[p.kind] += 1
    return out


def prompts_from_texts(texts: list[str]) -> list[Prompt]:
    return [Prompt(f"prompt {i + 1}", "custom", t) for i, t in enumerate(texts)]
