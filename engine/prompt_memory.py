"""What earlier runs of the same prompt observed (issue 15: the rest's rate belongs to the prompt).

An answer's rest accepts at a rate its 64-token opening does not reveal, but the prompt does: over
the 12 learning-check prompts the rests' tokens/step at T = 0 and at T = 0.7 (different answers)
correlate 0.96 (bench/predictions-and-learning.md, "The rest's rate belongs to the prompt").
So a run keeps, per prompt, the censored evidence of its opening and of its rest apart, and a
later run of the same prompt at the same settings (the learning key: pair, draft kernels'
acceptance, T, top-p, top-k, sampler, domain) counts them as evidence of its own opening and rest
(learning.Learner). A code prompt never run at these settings carries its runs at the nearest
others, rescaled (carried, below). A first run has none.

Stored in cache_dir()/learned/prompts/<learning key>.json, one entry per prompt (the SHA-256 of
its token ids, chat template included): the opening's and the rest's Evidence, each capped at
CAP rank-1 trials (older runs fade), and the measured vector's P(rank 1 missed) at the key's
settings (base_miss), at most MAX_PROMPTS prompts per key (the least recently run go first). The
file's header names its family (pair, draft kernels, domain) and settings (T, top-p, top-k), so
that runs at other settings can find it (carried). The measured vector and the key's pooled store
(learning.load) are not touched.

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
from engine.wording import plural

log = logging.getLogger(__name__)

CAP = 1024.0        # rank-1 trials kept per prompt and part (opening, rest)
MAX_PROMPTS = 256   # prompts kept per learning key


@dataclass(frozen=True)
class Remembered:
    """One prompt's evidence from earlier runs: its openings' and its rests'. `carried_from`: the
    settings of runs at another temperature (or top-p, top-k) it was carried from ("" = these)."""
    head: learning.Evidence
    tail: learning.Evidence
    runs: int
    carried_from: str = ""

    @property
    def positions(self) -> int:
        return int(self.head.nodes + self.tail.nodes)


def described(positions: int, runs: int, carried_from: str = "", wrap: str = " ") -> str:
    """The words every view uses for what a plan or posterior counts from this memory (`wrap`
    goes before "of this prompt": a chart legend breaks the line there)."""
    return (f"{positions} positions remembered from {plural(runs, 'earlier run')}{wrap}of this "
            "prompt" + (f" at {carried_from} (rescaled)" if carried_from else ""))


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
    except (TypeError, KeyError, ValueError, AttributeError, OverflowError):
        return None
    return got if _sane(got.head) and _sane(got.tail) and got.positions > 0 else None


def recall(key: str, prompt_digest: str) -> Remembered | None:
    """What earlier runs of this prompt at these settings observed, or None."""
    return _entry(_read(key) or {}, prompt_digest)


def _when(entry: dict) -> float:
    t = entry.get("updated_at")
    return float(t) if isinstance(t, (int, float)) else 0.0


def remember(key: str, prompt_digest: str, head: learning.Evidence, tail: learning.Evidence,
             meta: dict | None = None, base_miss: float | None = None) -> Remembered | None:
    """Add one run's opening and rest evidence to this prompt's; returns what is now remembered
    (None when the run observed nothing). An unreadable file is set aside as <key>.json.corrupt
    (not overwritten unseen); a read-only cache is logged, not raised. Two processes writing one
    key at once wait for each other (paths.locked); each write is whole (paths.write_atomic).
    `meta` (the Learner's: pair, draft kernels, domain, T, top-p, top-k) and `base_miss` (the
    measured vector's P(rank 1 missed) at these settings) let runs at other settings carry it."""
    if head.nodes + tail.nodes <= 0:
        return None
    path = path_for(key)
    with locked(path):
        return _remember(key, prompt_digest, head, tail, meta, base_miss)


def _remember(key: str, prompt_digest: str, head: learning.Evidence, tail: learning.Evidence,
              meta: dict | None, base_miss: float | None) -> Remembered:
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
                              "updated_at": time.time(),
                              **({"base_miss": float(base_miss)} if _miss_ok(base_miss) else {})}
    if len(prompts) > MAX_PROMPTS:   # forget the least recently run
        for old in sorted(prompts, key=lambda d: _when(prompts[d]))[:len(prompts) - MAX_PROMPTS]:
            del prompts[old]
    try:
        header = {"family": family(meta), "settings": _settings(meta)} if meta else {}
        write_atomic(path, json.dumps({"format": 1, "cap": CAP, **header, "prompts": prompts}))
    except OSError as exc:
        log.warning("could not store the prompt memory: %s", exc)
    return now


# ---------------------------------------------------------------- carried across settings
# A code prompt's rest accepts alike at T = 0 and T = 0.7 (bench/predictions-and-learning.md,
# "Within a kind it holds for code more than for prose"): a code prompt never run at these
# settings counts what its runs at others observed, their P(rank 1 missed) rescaled by the ratio
# of the measured vectors' misses at the two settings (ranks 2.. scaled alike, as
# learning.drifted does). Runs at these settings win.
# Prose rests differ about as much by answer as by prompt, and carrying them measured worse than
# a first run (bench/predictions-and-learning.md, "A prompt run again at another temperature"):
# prose is not carried.
CARRIED_DOMAINS = ("code",)

def family(meta: dict | None) -> str:
    """What a memory may be carried across: one pair, draft kernels and prompt domain."""
    meta = meta or {}
    ident = [meta.get(k) for k in ("draft", "target", "draft_kernels", "domain")]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:16]


def _settings(meta: dict) -> dict:
    """The settings a store was written at, as numbers; greedy ignores top-p and top-k (as the
    acceptance key does). Raises (TypeError, ValueError, OverflowError) on values that are none."""
    t = float(meta.get("temperature") or 0.0)
    greedy = t == 0
    out = {"temperature": t, "top_p": 1.0 if greedy else float(meta.get("top_p", 1.0)),
           "top_k": 0 if greedy else int(meta.get("top_k") or 0)}
    if not all(math.isfinite(v) for v in out.values()):
        raise ValueError(f"settings not finite: {out}")
    return out


def _miss_ok(miss) -> bool:
    return isinstance(miss, (int, float)) and math.isfinite(miss) and 0 < miss <= 1


def settings_label(settings: dict) -> str:
    """'T=0.7', with top-p and top-k where they are not the defaults (settings as _settings gives)."""
    out = f"T={settings['temperature']:g}"
    if settings["top_p"] != 1:
        out += f", top-p={settings['top_p']:g}"
    if settings["top_k"]:
        out += f", top-k={settings['top_k']}"
    return out


def rescaled(ev: learning.Evidence, ratio: float) -> learning.Evidence:
    """`ev` with its rank-1 misses multiplied by `ratio` and the ranks after it scaled alike."""
    if not ev.trials:
        return ev
    t1, a1 = ev.trials[0], ev.accepts[0]
    miss = min(t1, (t1 - a1) * ratio)
    scale = miss / (t1 - a1) if t1 > a1 else 0.0
    accepts = [t1 - miss] + [min(t, a * scale) for t, a in zip(ev.trials[1:], ev.accepts[1:])]
    return learning.Evidence(list(ev.trials), accepts, ev.nodes, ev.runs)


_parsed: dict = {}   # path -> ((mtime_ns, size), the file's JSON): slider moves re-plan often


def _read_cached(path: Path):
    """A memory file's JSON, parsed again only when the file changed (None when unreadable)."""
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        hit = _parsed.get(path)
        if hit is None or hit[0] != stamp:
            hit = _parsed[path] = (stamp, json.loads(path.read_text()))
        return hit[1]
    except Exception:  # noqa: BLE001 - any unreadable file is skipped (OSError, ValueError, RecursionError, ...)
        return None


def _candidate(obj, prompt_digest: str, mine: str, here: dict):
    """(sort key, Remembered, its base miss, its settings) for one memory file's entry of this
    prompt when the file is of this family and the entry is sound; None otherwise."""
    if not isinstance(obj, dict) or obj.get("family") != mine or not isinstance(obj.get("prompts"), dict):
        return None
    entry = obj["prompts"].get(prompt_digest)
    got = _entry(obj["prompts"], prompt_digest)
    if got is None or not _miss_ok(entry.get("base_miss")):
        return None
    there = _settings(obj.get("settings") or {})
    distance = (round(abs(there["temperature"] - here["temperature"]), 6),   # 0.7 - 0.5 ties 0.5 - 0.3
                round(abs(there["top_p"] - here["top_p"]), 6), int(there["top_k"] != here["top_k"]))
    # nearest temperature, then top-p, then top-k; the most runs; then the lower temperature
    return (*distance, -got.runs, there["temperature"]), got, entry["base_miss"], there


def miss_ratio(miss_here, miss_there) -> float | None:
    """The factor a memory's rank-1 misses are carried by: the vectors' P(rank 1 missed) here over
    there; None when either is no miss rate (a vector whose rank 1 never misses)."""
    return miss_here / miss_there if _miss_ok(miss_here) and _miss_ok(miss_there) else None


def carried_to(memory: Remembered, ratio: float, carried_from: str) -> Remembered:
    """`memory` as evidence at other settings: its openings and rests rescaled by `ratio`."""
    return Remembered(rescaled(memory.head, ratio), rescaled(memory.tail, ratio), memory.runs, carried_from)


def carried(key: str, prompt_digest: str, meta: dict, base_miss: float) -> Remembered | None:
    """This prompt's memory at the nearest other settings of its family (nearest temperature, then
    top-p, then top-k; the most runs, then the lower temperature on a tie), rescaled to these
    settings; None when there is none, no measured miss to rescale by, or the prompt's domain is
    not carried (CARRIED_DOMAINS). A file or entry that cannot be read is skipped."""
    if not _miss_ok(base_miss) or meta.get("domain") not in CARRIED_DOMAINS:
        return None
    try:
        mine, here = family(meta), _settings(meta)
    except (TypeError, ValueError, OverflowError):
        return None
    found = []
    for path in sorted(path_for(key).parent.glob("*.json")):
        if path.stem == key:
            continue
        try:
            one = _candidate(_read_cached(path), prompt_digest, mine, here)
        except Exception:  # noqa: BLE001 - a damaged file must not cost a plan
            log.warning("ignoring prompt memory %s", path, exc_info=True)
            continue
        if one is not None:
            found.append(one)
    if not found:
        return None
    _, got, miss_there, there = min(found, key=lambda f: f[0])
    return carried_to(got, miss_ratio(base_miss, miss_there), settings_label(there))
