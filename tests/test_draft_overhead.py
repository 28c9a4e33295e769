"""bench/draft_overhead.py on the tiny qwen2 pair: every variant runs, and gives eager's logits."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "draft_overhead.py"
spec = importlib.util.spec_from_file_location("draft_overhead", SCRIPT)
draft_overhead = importlib.util.module_from_spec(spec)
sys.modules["draft_overhead"] = draft_overhead  # dynamo imports its custom op's module by name
spec.loader.exec_module(draft_overhead)


def run(tmp_path, variants: str) -> dict:
    out = tmp_path / "overhead.json"
    draft_overhead.main(["--tiny", "--repeats", "2", "--variants", variants, "--json", str(out)])
    return json.loads(out.read_text())


def check(report: dict, expected: list[str], must_succeed: list[str]) -> None:
    variants = {v["name"]: v for v in report["variants"]}
    assert list(variants) == [*expected, "eager-again"]
    assert report["rows"] == [1, 2, 4] and report["load_average_before"] is not None
    for name in ["eager", "eager-again", *must_succeed]:
        assert variants[name]["ok"], variants[name].get("error")
    for name, v in variants.items():
        if not v["ok"]:
            assert v["error"]  # a failure is recorded, never raised
            continue
        assert set(v["rows"]) == {"1", "2", "4"}
        for row in v["rows"].values():
            assert row["median_ms"] > 0 and row["iqr_ms"] >= 0
            assert row["max_abs_dlogit"] == 0 if name == "eager" else row["max_abs_dlogit"] < 1e-4
            assert row["argmax_match"]
            assert row["ratio_to_eager"] > 0
    assert report["median_ratio"]["eager"] == 1.0


def test_lean_variants_match_eager(tmp_path):
    report = run(tmp_path, "eager,lean,lean-fused")
    check(report, ["eager", "lean", "lean-fused"], ["lean", "lean-fused"])


@pytest.mark.slow  # ~1-2 min: inductor compiles the tiny draft twice
def test_compile_variants_are_measured_or_recorded(tmp_path):
    report = run(tmp_path, "eager,compile,compile-opaque")
    check(report, ["eager", "compile", "compile-opaque"], [])
    compiled = {v["name"]: v for v in report["variants"]}["compile"]
    if compiled["ok"]:
        assert compiled["dynamo"]["graph_breaks"] >= 0 and compiled["warmup_s"] > 0
