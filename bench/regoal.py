"""Re-judge the goals of a saved benchmark report with the current engine/bench_goals.py, from the
figures the report recorded (nothing is re-measured). Goals that need the loaded pair or the
learning check's runs (profile, loaded pair, learning after 64 tokens) are not re-judged: the
report's own lines for them stand.

    .venv/bin/python bench/regoal.py bench/results-cpu-xeon.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import bench_goals  # noqa: E402
from engine.bench_report import format_goals  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="JSON written by python -m engine bench --json")
    for path in parser.parse_args().reports:
        report = json.loads(Path(path).read_text())
        print(f"# {path} (measured {report.get('started_at', '?')}), goals re-judged from its results")
        print(format_goals({"goals": bench_goals.evaluate_goals(report["results"])}))


if __name__ == "__main__":
    main()
