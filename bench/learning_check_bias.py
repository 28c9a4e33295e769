"""The mean error of the committed learning checks' first runs, per temperature and kind (issue 15).

    .venv/bin/python bench/learning_check_bias.py bench/learning-check-*.json

Each committed check (python -m engine bench --learning-check ...) predicted, after an answer's
first 64 tokens, its rest's tokens/step; a row's `error` is predicted / observed - 1. This reads
the first runs only (not a repeated or carried run, which remembers an earlier one; not the running
twin of --learning-check-running) and prints, per check and over all of them, the mean error and its
spread per temperature and prompt kind: a rule that is biased shows as a mean away from 0, its
spread is the answers'. Checks on one machine with one seed repeat some runs (the same prompt,
tree and seed give the same answer at T = 0), so the runs are not all independent.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def first_runs(check: dict) -> list[dict]:
    return [r for r in check["learning_check"]["runs"]
            if r.get("error") is not None and not r.get("remembered") and r.get("frozen") is not False]


def line(errors: dict) -> str:
    return ", ".join(f"T={t:g} {kind} {statistics.mean(e):+.1%} (sd {statistics.pstdev(e):.1%}, {len(e)} runs)"
                     for (t, kind), e in sorted(errors.items()))


def main(*paths: str) -> int:
    total: dict = {}
    for path in sorted(paths):
        mine: dict = {}
        for r in first_runs(json.loads(Path(path).read_text())):
            for errors in (mine, total):
                errors.setdefault((r["temperature"], r["kind"]), []).append(r["error"])
        print(f"{Path(path).name}: {line(mine)}")
    print(f"all {len(paths)} checks: {line(total)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
