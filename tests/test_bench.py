"""`python -m engine bench --quick` on the tiny pair: the report's structure (not its speed);
the synthetic GPU profile on CPU with tiny sizes. (The fast CPU kernels: tests/test_cpu_kernels.py.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import tiny_pair_dirs

ROOT = Path(__file__).resolve().parents[1]
RESULT_KEYS = {"method", "temperature", "nodes", "depth", "width", "tokens_per_second", "tokens_per_step",
               "speedup_vs_ar", "predicted_tokens_per_step", "draft_seconds", "verify_seconds", "other_seconds",
               "peak_memory_bytes"}


def engine(*args, timeout=240):
    # one thread: tiny forwards are dominated by thread hand-offs, which stall when other
    # processes share the cores; the test checks structure, not speed
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_bench_quick_structure(tmp_path):
    draft, target = tiny_pair_dirs("llama")
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    run = engine("bench", "--quick", "--draft", draft, "--target", target, "--json", out, "--plot", png)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tok/s" in run.stdout and "speedup" in run.stdout  # the table
    report = json.loads(out.read_text())
    assert png.stat().st_size > 10_000
    assert {"machine", "results"} <= set(report)
    machine = report["machine"]
    for key in ("processor", "torch_threads", "torch", "transformers", "load_average_start", "load_average_end"):
        assert key in machine, key
    results = report["results"]
    assert {r["method"] for r in results} == {"ar", "chain", "specinfer", "sequoia", "sequoia-auto"}
    assert {r["temperature"] for r in results} == {0.0, 0.7}
    for r in results:
        assert RESULT_KEYS <= set(r), RESULT_KEYS - set(r)
        assert r["tokens_per_second"] > 0 and r["tokens_per_step"] >= 1
        assert r["draft_seconds"] >= 0 and r["verify_seconds"] > 0 and r["other_seconds"] >= 0
        assert r["peak_memory_bytes"] > 0
        if r["method"] in ("sequoia", "sequoia-auto"):
            assert r["predicted_tokens_per_step"] >= 1
            low, high = r["predicted_tokens_per_step_range"]  # rank 1 at the edges of its interval
            assert low <= r["predicted_tokens_per_step"] <= high, r["label"]
            for kind in r["by_kind"].values():  # and per kind of prompt
                assert kind["predicted_tokens_per_step_range"][0] <= kind["predicted_tokens_per_step"]
            # for a run of so few prompts: None where the vector was measured on these very prompts
            # (--quick measures its own) or recorded fewer than 3 prompts
            few = r["predicted_tokens_per_step_range_these_prompts"]
            vector = report["acceptance"]["0" if r["temperature"] == 0 else "0.7"]
            assert vector["measured_in_run"] and few is None, (few, vector["interval"])
        if r["method"] == "specinfer":
            assert r["width"] == 2 and r["nodes"] == 2 * (r["depth"] - 1) + 1
        if r["method"] == "ar":
            # no draft forward (one would cost about what the verify does); a few ms of bookkeeping
            # may read as draft time on a loaded machine (2.8 against 37.8 ms once in CI)
            assert r["speedup_vs_ar"] == pytest.approx(1.0) and r["draft_seconds"] < 0.25 * r["verify_seconds"]
        if r["temperature"] == 0:
            assert r["matches_ar"], r["label"]  # greedy: every method reproduces autoregressive
    # one Sequoia tree at the SpecInfer node count, so the two can be compared
    for t in (0.0, 0.7):
        si = [r["nodes"] for r in results if r["method"] == "specinfer" and r["temperature"] == t]
        assert set(si) <= {r["nodes"] for r in results if r["method"] == "sequoia" and r["temperature"] == t}
    # acceptance vectors and the profile say whether this run measured them
    assert set(report["acceptance"]) == {"0", "0.7"}
    assert all("measured_in_run" in a and a["source"] for a in report["acceptance"].values())
    assert "measured_in_run" in report["profile"]
    assert report["goals"] and all({"goal", "measured", "met"} <= set(g) for g in report["goals"])
    # every counted run is in the JSON: methods x prompts x temperatures
    n_methods = len(results) // 2
    assert len(report["runs"]) == n_methods * len(report["prompts"]) * 2
    # predicted tokens/s use only the step costs of the warm-up and of earlier prompts' runs (a
    # prompt's lanes run interleaved): the warm-up's for the first prompt, then more after every
    # prompt (each run's first step pays one-off costs and is not counted; the default-kernel lane
    # runs on other kernels and is left out)
    runs = report["runs"]
    groups: dict = {}
    for r in runs:
        groups.setdefault((r["temperature"], r["prompt"]), []).append(r)
    counts, before = [], 0
    for (t, prompt), group in groups.items():  # in the order they ran
        seen = {r["cost_model_observed_steps"] for r in group if "cost_model_observed_steps" in r}
        assert len(seen) == 1
        counts.append(seen.pop())
        if prompt == 0:
            before += report["warmup"][f"{t:g}"]["observed_steps"]
        assert counts[-1] <= before
        before += sum(r["steps"] for r in group if r["method"] != "ar-default-kernels")
    assert report["warmup"]["0"]["observed_steps"] > 0 and counts[0] == report["warmup"]["0"]["observed_steps"]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    # the profile's quantities as the interleaved lanes saw them
    costs = machine["observed_costs"]
    assert costs["t1_seconds"] > 0 and costs["target_over_t1"]["1"] == 1.0 and costs["draft_level_over_t1"] > 0
    # a 95 % interval of tokens/step for every lane that ran more than one block of steps
    for r in results:
        span = r["tokens_per_step_interval_95"]
        assert span is None or span[0] <= r["tokens_per_step"] <= span[1], r["label"]
    assert all(r["tokens_per_step_interval_95"] for r in results if r["method"] == "ar")
    # the hardware-aware lane is planned per prompt: each run carries the tree it ran
    for t in (0.0, 0.7):
        auto = next(r for r in results if r["method"] == "sequoia-auto" and r["temperature"] == t)
        ran = sorted(p for tree in auto["trees_by_prompt"] for p in tree["prompts"])
        assert ran == list(range(len(report["prompts"])))
        assert auto["label"].startswith("sequoia-auto") and "chosen_budget" not in auto


def test_bench_rejects_bad_flags():
    draft, target = tiny_pair_dirs("llama")
    run = engine("bench", "--quick", "--draft", draft, "--target", target, "--specinfer", "2by4")
    assert run.returncode == 2 and "error:" in run.stderr and "Traceback" not in run.stderr


def test_synthetic_profile_on_cpu(tmp_path):
    out = tmp_path / "syn.json"
    run = engine("profile", "--synthetic", "--draft-config", "tiny", "--target-config",
                 "tiny-target:num_hidden_layers=2", "--device", "cpu", "--max-budget", "8", "--repeats", "1",
                 "--prefix", "16", "--acceptance", "0.6,0.2,0.1", "--out", out)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    prof = report["profile"]
    assert sorted(map(int, prof["target_seconds"])) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sorted(map(int, prof["draft_seconds"])) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert prof["dtype"] == "float32" and prof["device"] == "cpu"
    assert report["pair"]["target_parameters"] > report["pair"]["draft_parameters"]
    assert 1 <= report["hardware_aware"]["n"] <= 8
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_synthetic_presets_have_realistic_sizes():
    from engine.synthetic import make_config, parameter_count, parse_size
    assert 60e6 < parameter_count(make_config(parse_size("68m")[1])) < 75e6
    assert 6.5e9 < parameter_count(make_config(parse_size("7b")[1])) < 7e9


def test_bench_times_the_default_kernels_in_the_same_run_when_asked(tmp_path):
    draft, target = tiny_pair_dirs("llama")
    out = tmp_path / "bench.json"
    run = engine("bench", "--quick", "--draft", draft, "--target", target, "--compare-default-kernels",
                 "--temperatures", "0", "--json", out)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["machine"]["cpu_kernels"]["mode"] == "fast"
    base = [r for r in report["results"] if r["method"] == "ar-default-kernels"]
    assert len(base) == 1 and base[0]["tokens_per_second"] > 0
    # interleaved with the other methods: one run per prompt, like every method
    assert sum(r["method"] == "ar-default-kernels" for r in report["runs"]) == len(report["prompts"])
    goals = {g["goal"]: g for g in report["goals"]}
    fast_vs_default = [g for name, g in goals.items() if "fast CPU path" in name]
    assert fast_vs_default and fast_vs_default[0]["measured"] > 0
    assert any(name.startswith("loaded pair <= 6 GB") for name in goals)
    refused = engine("bench", "--quick", "--draft", draft, "--target", target, "--compare-default-kernels",
                     "--cpu-kernels", "default")
    assert refused.returncode == 2 and "fast" in refused.stderr


def test_bench_applies_top_k_to_its_runs_and_vectors(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path / "cache"))  # measured here, kept out of the user cache
    draft, target = tiny_pair_dirs("llama")
    out = tmp_path / "bench.json"
    run = engine("bench", "--quick", "--draft", draft, "--target", target, "--temperatures", "0.7", "--top-k", "3",
                 "--json", out)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["config"]["top_k"] == 3
    assert report["acceptance"]["0.7"]["top_k"] == 3


def test_bench_on_a_prompt_set_with_only_the_sequoia_lanes(tmp_path):
    # the held-out check's shape (bench/predictions-and-learning.md): a titled prompt set, no chain or SpecInfer lanes
    held_out = json.loads((ROOT / "assets" / "heldout-prompts.json").read_text())["prompts"]
    chosen = [held_out[0], next(p for p in held_out if p["kind"] == "prose")]
    (tmp_path / "set.json").write_text(json.dumps({"prompts": chosen}))
    draft, target = tiny_pair_dirs("llama")
    out = tmp_path / "bench.json"
    run = engine("bench", "--quick", "--draft", draft, "--target", target, "--prompt-set", tmp_path / "set.json",
                 "--chain-depths", "none", "--specinfer", "none", "--temperatures", "0", "--json", out)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [p["title"] for p in report["prompts"]] == [p["title"] for p in chosen]
    assert report["prompt_source"] == str(tmp_path / "set.json")
    assert {r["method"] for r in report["results"]} == {"ar", "sequoia", "sequoia-auto"}
    assert report["config"]["chain_depths"] == [] and report["config"]["specinfer"] == []


def test_bench_predicts_a_range_for_its_few_prompts_from_a_vector_that_recorded_its_own(tmp_path):
    """A vector measured beforehand on 3 code + 3 prose prompts records them (engine/intervals.py):
    a bench on 2 other prompts then gives each Sequoia prediction the range a run of so few
    prompts can expect, which holds the range rank 1's interval alone allows."""
    draft, target = tiny_pair_dirs("llama")
    measured = [{"kind": "code", "title": f"c{i}", "prompt": text} for i, text in
                enumerate(["def f(x): return x", "x = [i for i in y]", "for k in range(3): print(k)"])]
    measured += [{"kind": "prose", "title": f"p{i}", "prompt": text} for i, text in
                 enumerate(["the cat sat on the mat", "a quiet evening by the sea", "she walked home slowly"])]
    (tmp_path / "measured.json").write_text(json.dumps({"prompts": measured}))
    benched = [{"kind": "code", "title": "b0", "prompt": "while n > 0: n -= 1"},
               {"kind": "prose", "title": "b1", "prompt": "the rain fell all night long"}]
    (tmp_path / "bench.json").write_text(json.dumps({"prompts": benched}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "SEQUOIA_CACHE": str(tmp_path / "cache")}

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                              text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stderr[-3000:]

    run("measure", "--draft", draft, "--target", target, "--replay", "--prompt-set", tmp_path / "measured.json",
        "--by-domain", "--temperature", "0", "--width", "8", "--tokens-per-prompt", "12")
    out = tmp_path / "report.json"
    run("bench", "--quick", "--draft", draft, "--target", target, "--prompt-set", tmp_path / "bench.json",
        "--chain-depths", "none", "--specinfer", "none", "--temperatures", "0", "--json", out)
    report = json.loads(out.read_text())
    assert not report["acceptance"]["0"]["measured_in_run"]
    rows = [r for r in report["results"] if r["method"] == "sequoia"]
    assert rows
    for r in rows:
        low, high = r["predicted_tokens_per_step_range"]
        few = r["predicted_tokens_per_step_range_these_prompts"]
        assert few is not None and few[0] <= low <= r["predicted_tokens_per_step"] <= high <= few[1], r["label"]


def test_a_synthetic_configs_bad_override_is_one_user_error():
    """`profile --synthetic --target-config tiny-target:num_hidden_layers=abc` ended in a 49-line
    traceback (the config's own type check). Keys the defaults lack stay allowed (rope_theta
    becomes rope_parameters in transformers 5)."""
    from engine.errors import UserError
    from engine.synthetic import make_config, parse_size
    with pytest.raises(UserError, match="expected int, got str") as refused:
        make_config(parse_size("tiny-target:num_hidden_layers=abc")[1])
    assert "\n" not in str(refused.value)
    assert make_config(parse_size("tiny-target:rope_theta=500000")[1]).rope_parameters["rope_theta"] == 500000
    assert make_config(parse_size("tiny-target:num_hidden_layers=2")[1]).num_hidden_layers == 2


def test_a_misspelt_synthetic_override_is_refused_with_the_field_meant(caplog, tmp_path):
    """`tiny-target:num_hiden_layers=2` built the preset's full depth and timed it as asked,
    silently (transformers 5 keeps any key). A key close to a field is refused; an alias
    (gpt2's num_hidden_layers → n_layer) and a key transformers turns into another pass; a key
    close to no field is kept with a warning."""
    from engine.errors import UserError
    from engine.synthetic import make_config, parse_size
    with pytest.raises(UserError, match="'num_hiden_layers' is not a llama config field: did you mean 'num_hidden_layers'"):
        parse_size("tiny-target:num_hiden_layers=2")
    gpt2 = tmp_path / "config.json"
    gpt2.write_text('{"model_type": "gpt2", "n_layer": 4, "n_embd": 64, "n_head": 4, "vocab_size": 100}')
    assert make_config(parse_size(f"{gpt2}:num_hidden_layers=2")[1]).n_layer == 2
    assert make_config(parse_size("tiny-target:rope_theta=500000")[1]).rope_parameters["rope_theta"] == 500000
    with caplog.at_level("WARNING", logger="engine.synthetic"):
        assert make_config(parse_size("tiny-target:some_new_field=3")[1]).some_new_field == 3
    assert "'some_new_field' is not among a llama config's defaults" in caplog.text
