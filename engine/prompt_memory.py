"""What earlier runs of the same prompt observed (issue 15: the rest's rate belongs to the prompt).

An answer's rest accepts at a rate its 64-token opening does not reveal, but the prompt does: over
the 12 learning-check prompts the rests' tokens/step at T = 0 and at T = 0.7 (different answers)
correlate 0.96 (README, "The rest's rate belongs to the prompt"). So a run keeps, per prompt, the
censored evidence of its opening and of its rest apart, and a later run of the same prompt at the
same settings (the learning key: pair, draft kernels' acceptance, T, top-p, top-k, sampler, domain)
counts them as evidence of its own opening and rest (learning.Learner). A first run has none.

Stored in cache_dir()/learned/prompts/<learning key>.json, one entry per prompt (the SHA-256 of
its token ids, chat template included): the opening's and the rest's Evidence, each capped at
CAP rank-1 trials (older runs fade), and at most MAX_PROMPTS prompts per key (the least recently
run go first). The measured vector and the key's pooled store (learning.load) are not touched.

Exactness: a run reads only what finished runs stored, so every step's tree still depends on
the past only (ALGORITHM.md section 7, "Adaptive trees are exact")."""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from engine import learning   # circular (learning's Learner uses this module): used at call time only
from engine.paths import cache_dir, locked, write_atomic

log = logging.getLogger(__name__)

CAP = 1024.0        # rank-1 trials kept per prompt and part (opening, rest)
MAX_PROMPTS = 256   # prompts kept per learning key


@dataclass(frozen=True)
class Remembered:
    """One prompt's evidence from earlier runs: its openings' and its rests'."""
    head: learning.Evidence
    tail: learning.Evidence
    runs: int

    @property
    def positions(self) -> int:
        return int(self.head.nodes + self.tail.nodes)


def described(positions: int, runs: int) -> str:
    """The words every view uses for what a plan or posterior counts from this memory."""
    return f"{positions} positions remembered from {runs} earlier run{'' if runs == 1 else 's'} of this prompt"


def digest(prompt_ids) -> str:
    """The prompt's name in the store: its token ids hashed (the text as the models see it)."""
    return hashlib.sha256(",".join(str(int(t)) for t in prompt_ids).encode()).hexdigest()[:24]


def path_for(key: str) -> Path:
    return cache_dir() / "learned" / "prompts" / f"{key}.json"


def _read(key: str) -> dict | None:
    """The key's prompts ({} when none stored; None when the file is unreadable)."""
    path = path_for(key)
    try:
        obj = json.loads(path.read_text())
        if not isinstance(obj, dict) or not isinstance(obj.get("prompts"), dict):
            raise ValueError("no 'prompts' object")
        return {d: e for d, e in obj["prompts"].items() if isinstance(e, dict)}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring unreadable prompt memory %s: %s", path, exc)
        return None


def _sane(ev: learning.Evidence) -> bool:
    """Counts a run could have stored: one per rank, finite, 0 <= accepts <= trials."""
    return (len(ev.trials) == len(ev.accepts) and math.isfinite(ev.nodes) and ev.nodes >= 0
            and all(math.isfinite(t) and math.isfinite(a) and 0 <= a <= t for t, a in zip(ev.trials, ev.accepts)))


def _entry(prompts: dict, prompt_digest: str) -> Remembered | None:
    entry = prompts.get(prompt_digest)
    try:
        got = Remembered(learning.Evidence.from_dict(entry["head"]), learning.Evidence.from_dict(entry["tail"]),
                         int(entry["runs"]))
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    return got if _sane(got.head) and _sane(got.tail) and got.positions > 0 else None


def recall(key: str, prompt_digest: str) -> Remembered | None:
    """What earlier runs of this prompt at these settings observed, or None."""
    return _entry(_read(key) or {}, prompt_digest)


def _when(entry: dict) -> float:
    t = entry.get("updated_at")
    return float(t) if isinstance(t, (int, float)) else 0.0


def remember(key: str, prompt_digest: str, head: learning.Evidence, tail: learning.Evidence) -> Remembered | None:
    """Add one run's opening and rest evidence to this prompt's; returns what is now remembered
    (None when the run observed nothing). An unreadable file is set aside as <key>.json.corrupt
    (not overwritten unseen); a read-only cache is logged, not raised. Two processes writing one
    key at once wait for each other (paths.locked); each write is whole (paths.write_atomic)."""
    if head.nodes + tail.nodes <= 0:
        return None
    path = path_for(key)
    with locked(path):
        return _remember(key, prompt_digest, head, tail)


def _remember(key: str, prompt_digest: str, head: learning.Evidence, tail: learning.Evidence) -> Remembered:
    path = path_for(key)
    prompts = _read(key)
    if prompts is None:
        try:
            path.replace(path.with_suffix(".json.corrupt"))
        except OSError:
            pass
        prompts = {}
    before = _entry(prompts, prompt_digest) or Remembered(learning.Evidence(), learning.Evidence(), 0)
    now = Remembered(before.head.add(replace(head, runs=0)).capped(CAP),
                     before.tail.add(replace(tail, runs=0)).capped(CAP), before.runs + 1)
    prompts[prompt_digest] = {"head": now.head.to_dict(), "tail": now.tail.to_dict(), "runs": now.runs,
                              "updated_at": time.time()}
    if len(prompts) > MAX_PROMPTS:   # forget the least recently run
        for old in sorted(prompts, key=lambda d: _when(prompts[d]))[:len(prompts) - MAX_PROMPTS]:
            del prompts[old]
    try:
        write_atomic(path, json.dumps({"format": 1, "cap": CAP, "prompts": prompts}))
    except OSError as exc:
        log.warning("could not store the prompt memory: %s", exc)
    return now
