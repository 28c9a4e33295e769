"""The shipped prompt sets: the app's examples (assets/prompts.json, what the self-check runs on
when the user gives none), the set the acceptance vectors were measured on, and the held-out set
the bench runs by default."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ASSET_PROMPTS = Path(__file__).resolve().parents[1] / "assets" / "prompts.json"
# the 24 code and prose prompts the shipped acceptance vectors were measured on (issue 15)
MEASUREMENT_PROMPTS = ASSET_PROMPTS.with_name("measurement-prompts.json")
# 24 more in the same style, never measured on: the bench's prompts (a held-out check of those vectors)
HELDOUT_PROMPTS = ASSET_PROMPTS.with_name("heldout-prompts.json")


@dataclass
class Prompt:
    title: str
    kind: str   # code | prose | custom
    text: str


def prompt_set(path: Path | str) -> list[Prompt]:
    """A JSON prompt file: a list of {title, kind, prompt}, or {"prompts": [...]} with more about it."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    items = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(items, list):   # (said in the file's terms, not as a KeyError or TypeError)
        raise ValueError('it must hold a list of prompts, or {"prompts": [...]}')
    for i, p in enumerate(items):
        if not isinstance(p, dict) or not isinstance(p.get("prompt"), str):
            raise ValueError(f'entry {i + 1} is not an object with a "prompt" string (got {json.dumps(p)[:60]})')
    return [Prompt(p.get("title", f"prompt {i + 1}"), p.get("kind", "custom"), p["prompt"])
            for i, p in enumerate(items)]


def asset_prompts() -> list[Prompt]:
    return prompt_set(ASSET_PROMPTS)


def default_prompts() -> list[str]:
    """Every shipped prompt's text, in file order (what measurements use by default)."""
    return [p.text for p in asset_prompts()]


def prompt_mix(mix: dict[str, int], prompts: list[Prompt] | None = None) -> list[Prompt]:
    """The first prompts of each kind, e.g. {"code": 2, "prose": 1}, of `prompts` (default: the examples)."""
    out, seen = [], {k: 0 for k in mix}
    for p in asset_prompts() if prompts is None else prompts:
        if p.kind in mix and seen[p.kind] < mix[p.kind]:
            out.append(p)
            seen[p.kind] += 1
    return out


def prompts_from_texts(texts: list[str]) -> list[Prompt]:
    return [Prompt(f"prompt {i + 1}", "custom", t) for i, t in enumerate(texts)]
