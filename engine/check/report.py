"""The check's results: one CheckItem per finding, the time estimate, and the report with its verdict,
summary, full text and JSON form."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from engine.check.config import ALPHA, SECTIONS
from engine.wording import plural


@dataclass
class CheckItem:
    section: str      # greedy | sampling | structure
    name: str
    status: str       # pass | fail | warn | skip
    message: str      # one line for people
    details: dict = field(default_factory=dict)


@dataclass
class CheckEstimate:
    seconds: float
    sections: dict            # section -> seconds
    samples: int              # N per (method, setting) the run will use
    samples_auto: bool
    timings: dict             # what was measured
    measured_seconds: float   # time the timing itself took

    def message(self) -> str:
        parts = ", ".join(f"{k} {duration_text(v)}" for k, v in self.sections.items())
        step = self.timings.get("sample_step_seconds", {})
        step_txt = ", ".join(f"{k} {v:.2g} s" for k, v in step.items())
        # N and a sampling step only where the sampling section runs (a greedy check printed N = 30)
        sampling = ("sampling" in self.sections
                    and f"N = {self.samples} samples per method and setting{' (auto)' if self.samples_auto else ''}; "
                    f"one speculative step: {step_txt}; ") or ""
        return (f"estimated time: about {duration_text(self.seconds)} ({parts}); {sampling}"
                f"one target token: {self.timings.get('target_token_seconds', 0):.2g} s")

    def to_dict(self) -> dict:
        return asdict(self)


EXPLANATION = ("Greedy: the speculative output must equal the target's own greedy generate() token for token. "
               "Sampling: a test FAILs when its p-value is below {alpha:g}. If decoding is exact every p-value is "
               "uniform on [0, 1], so a single test fails by chance once in {inv:,} runs ({tests} here: about "
               "one run in {family:,}); a FAIL at this level is strong evidence of a real difference (re-run with "
               "another seed to confirm). A PASS means no difference was detected with these samples: each line "
               "states the chi-square distance detected with 90% probability; smaller deviations can go unnoticed. "
               "Structure: tree-attention probes, tokenizer, dtype/device and the KV-cache commit must all hold.")


@dataclass
class CheckReport:
    pair: dict
    config: dict
    items: list[CheckItem] = field(default_factory=list)
    estimate: CheckEstimate | None = None
    seconds: float = 0.0
    stopped: bool = False

    @property
    def verdict(self) -> str:
        statuses = [i.status for i in self.items]
        if "fail" in statuses:
            return "FAIL"
        if self.stopped:
            return "STOPPED"
        if "warn" in statuses:
            return "WARN"
        return "PASS"

    @property
    def passed(self) -> bool:
        return self.verdict in ("PASS", "WARN")

    def section_counts(self) -> dict:
        out: dict = {}
        for item in self.items:
            c = out.setdefault(item.section, {"pass": 0, "fail": 0, "warn": 0, "skip": 0})
            c[item.status] += 1
        return out

    def explanation(self) -> str:
        alpha = float(self.config.get("alpha", ALPHA))
        tests = max(1, sum(1 for i in self.items if i.section == "sampling" and i.status != "skip"))
        return EXPLANATION.format(alpha=alpha, inv=round(1 / alpha), tests=plural(tests, "test"),
                                  family=max(1, round(1 / (1 - (1 - alpha) ** tests))))

    def summary(self) -> str:
        """Two or three lines for people: the verdict, per-section counts, the first problems."""
        names = f"{self.pair.get('draft', '?')} → {self.pair.get('target', '?')}"
        head = {"PASS": f"PASS: speculative decoding on {names} reproduced the target exactly, "
                        "as far as this check can tell.",
                "WARN": f"PASS with warnings: no losslessness failure on {names}; see the warnings.",
                "FAIL": f"FAIL: speculative decoding on {names} does NOT reproduce the target.",
                "STOPPED": f"STOPPED: the check of {names} was interrupted; no problem found in what ran "
                           "(a section not counted below did not finish)."}[self.verdict]
        counts = []
        for section, c in self.section_counts().items():
            total = sum(c.values())
            extra = "".join(f", {c[s]} {s}" for s in ("fail", "warn", "skip") if c[s])
            counts.append(f"{section} {c['pass']}/{total} ok{extra}")
        # the whole check's time (timing estimate included), not the last section's
        lines = [head, ("; ".join(counts) + ". " if counts else "") + f"{duration_text(self.seconds)} in all."]
        problems = [i for i in self.items if i.status == "fail"] or [i for i in self.items if i.status == "warn"]
        for item in problems[:3]:
            lines.append(f"- {item.section} / {item.name}: {item.message}")
        if len(problems) > 3:
            lines.append(f"- ... and {len(problems) - 3} more")
        return "\n".join(lines)

    def text(self) -> str:
        """The full report for the terminal."""
        lines = [self.summary(), ""]
        for section in SECTIONS:
            items = [i for i in self.items if i.section == section]
            if not items:
                continue
            lines.append(f"{section}:")
            for i in items:
                lines.append(f"  [{i.status.upper():4}] {i.name}: {i.message}")
        lines += ["", self.explanation()]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "passed": self.passed, "summary": self.summary(),
                "explanation": self.explanation(), "pair": self.pair, "config": self.config,
                "sections": self.section_counts(), "items": [asdict(i) for i in self.items],
                "estimate": self.estimate.to_dict() if self.estimate else None,
                "seconds": self.seconds, "stopped": self.stopped}


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"
