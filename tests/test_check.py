"""The losslessness self-check (engine/check/, `python -m engine check`): it passes on a correct tiny
pair and fails when the verifier or the cache commit is deliberately broken."""
import collections
import json

import numpy as np
import pytest
import torch

from engine import attention, check, cli, sampling
from tests.broken_verifiers import verify_without_residual
from tests.tiny import DEVICE, tiny_pair, tiny_pair_dirs

PAIR = dict(family="llama", chars="abcde", noise=0.8, seed=3)  # vocab 7; a draft far from the target
PROMPTS = ["abca", "bead"]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(**PAIR)


def config(**kw):
    base = dict(prompts=PROMPTS, greedy_tokens=10, samples=90, kv_steps=3, seed=1)
    base.update(kw)
    return check.CheckConfig(**base)


# ------------------------------------------------------------------ statistics, no models
def test_chi_square_accepts_exact_samples_and_rejects_shifted_ones():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.04, 0.01, 0.0])
    good = collections.Counter(rng.choice(6, size=400, p=p).tolist())
    result = check.chi_square([(good, p)])
    assert result.pvalue > 1e-3 and result.impossible == 0
    # bins: tokens 0..2 (expected >= 5 at n=400: 200, 120, 60), token 3 (16), "other" = token 4 (4 < 5)
    # is merged into the smallest bin -> 4 bins, df 3
    assert result.df == 3 and result.bins == 4 and result.samples == 400
    shifted = collections.Counter(rng.choice(6, size=400, p=[0.4, 0.4, 0.15, 0.04, 0.01, 0.0]).tolist())
    assert check.chi_square([(shifted, p)]).pvalue < 1e-4


def test_chi_square_groups_add_up_and_impossible_tokens_fail():
    p = np.array([0.6, 0.4, 0.0])
    a = collections.Counter({0: 30, 1: 20})
    one = check.chi_square([(a, p)])
    two = check.chi_square([(a, p), (a, p)])
    assert two.df == 2 * one.df and two.statistic == pytest.approx(2 * one.statistic)
    bad = check.chi_square([(collections.Counter({0: 30, 1: 19, 2: 1}), p)])
    assert bad.pvalue == 0.0 and bad.impossible == 1
    assert check.chi_square([(collections.Counter({0: 3}), p)]).pvalue is None  # too few to form two bins


def test_pit_chi_square_is_calibrated_and_pools_small_groups():
    rng = np.random.default_rng(1)
    vocab = 12
    pvalues = []
    for _ in range(300):  # many groups of 1-3 samples each, every group with its own distribution
        groups = []
        for _ in range(20):
            probs = rng.dirichlet(np.full(vocab, 0.5))
            groups.append((collections.Counter(rng.choice(vocab, size=rng.integers(1, 4), p=probs).tolist()), probs))
        pvalues.append(check.pit_chi_square(groups, rng).pvalue)
    assert 0.02 < np.mean(np.array(pvalues) < 0.1) < 0.2  # about 10 % below 0.1 when exact
    # the same groups, sampled from a distorted distribution (mass pushed to unlikely tokens), fail
    groups = []
    for _ in range(60):
        probs = rng.dirichlet(np.full(vocab, 0.5))
        wrong = (probs + 0.15) / (probs + 0.15).sum()
        groups.append((collections.Counter(rng.choice(vocab, size=2, p=wrong).tolist()), probs))
    assert check.pit_chi_square(groups, rng).pvalue < 1e-3
    assert check.pit_chi_square(groups[:5], rng).pvalue is None  # 10 samples: too few for two bins


def test_detectable_distance_shrinks_with_samples():
    d100, d400 = check.detectable_distance(3, 100), check.detectable_distance(3, 400)
    assert d400 == pytest.approx(d100 / 4)
    assert 0.1 < d100 < 1


def test_reference_distribution_matches_transformers_sampling_definition():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
    p = check.reference_distribution(logits, 0.7, 0.9)
    assert float(p.sum()) == pytest.approx(1.0)
    assert p[-1] == 0 and p[0] > 0.5
    torch.testing.assert_close(p, sampling.target_distribution(logits, 0.7, 0.9))


def test_config_is_validated():
    for bad in (dict(samples=0), dict(alpha=2.0), dict(sections=("greedy", "nope")), dict(methods=("beam",)),
                dict(sampling_settings=((0.0, 1.0),)), dict(prompts=[])):
        with pytest.raises(check.UserError):
            config(**bad).validate()
    assert check.parse_methods("chain, sequoia") == ("chain", "sequoia")


# ------------------------------------------------------------------ the check on a tiny pair
def test_correct_pair_passes(pair, monkeypatch):
    import transformers.utils.generic as hf_generic
    said = []   # transformers' deprecation notices (it read a cache by its old name: logged once per process)
    monkeypatch.setattr(hf_generic.logger, "warning_once", lambda msg, *a, **k: said.append(str(msg)))
    seen = []
    report = check.run_check(pair, config(), progress=lambda f, m: seen.append((f, m)))
    assert not [m for m in said if "deprecated" in m], said
    assert report.verdict == "PASS", report.text()
    counts = report.section_counts()
    assert counts["greedy"]["pass"] == 6
    assert counts["sampling"]["fail"] == 0 and counts["sampling"]["pass"] >= 6
    assert counts["structure"]["fail"] == 0
    assert seen[1][0] == 0.0 and seen[1][1].startswith("estimated time")  # estimate before any work
    assert seen[-1][0] == 1.0 and all(0 <= f <= 1 for f, _ in seen)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["verdict"] == "PASS" and data["estimate"]["samples"] == 90
    assert report.summary().startswith("PASS")


def draft_as_target(p, q, children, generator):
    """Broken: verifies against the draft's own distribution, so every first child is accepted."""
    return ORIGINAL_SEQUOIA(q, q, children, generator)


ORIGINAL_SEQUOIA = sampling.verify_sequoia


@pytest.mark.parametrize("broken", [draft_as_target, verify_without_residual])
def test_broken_verifier_fails_the_sampling_check(pair, monkeypatch, broken):
    monkeypatch.setattr(sampling, "verify_sequoia", broken)
    report = check.run_check(pair, config(sections=("sampling",), methods=("sequoia",), samples=300,
                                          sampling_settings=((1.0, 1.0),)))
    assert report.verdict == "FAIL", report.text()
    failed = [i for i in report.items if i.status == "fail"]
    assert failed and all(i.section == "sampling" for i in failed)
    assert min(i.details["pvalue"] for i in failed) < 1e-3


def test_broken_cache_commit_fails(pair, monkeypatch):
    original = attention.commit

    def keep_first_rows(cache, prefix, rows):
        """Broken: keeps the first tree rows instead of the accepted path's."""
        return original(cache, prefix, list(range(prefix, prefix + len(rows))))

    monkeypatch.setattr(attention, "commit", keep_first_rows)
    report = check.run_check(pair, config(sections=("greedy", "structure"), methods=("sequoia",), greedy_tokens=16,
                                          kv_steps=6))
    assert report.verdict == "FAIL", report.text()
    failed = {i.section for i in report.items if i.status == "fail"}
    assert failed & {"greedy", "structure"}


def test_kv_steps_that_cannot_tell_a_wrong_commit_are_a_warning(pair):
    """Greedy steps on a tree with branches whose accepted paths are all the tree's first rows (or
    no path at all) would pass a commit of the wrong rows too: WARN, saying so, not PASS. A chain's
    path is always its first rows, so a chain is not warned about."""
    sequoia = dict(sections=("structure",), methods=("sequoia",), kv_steps=2)
    untold = check.run_check(pair, config(prompts=["abcde"], **sequoia))
    kv = _kv_item(untold)
    assert kv.status == "warn" and kv.details["steps_with_a_telling_path"] == 0, kv.message
    assert "no step accepted a path that a commit of the wrong rows would show" in kv.message
    assert untold.verdict == "WARN"
    told = _kv_item(check.run_check(pair, config(prompts=["ddcc"], **sequoia)))
    assert told.status == "pass" and told.details["steps_with_a_telling_path"] > 0, told.message
    chain = _kv_item(check.run_check(pair, config(prompts=["abcde"], sections=("structure",), methods=("chain",))))
    assert chain.status == "pass", chain.message


def test_commit_that_crashes_is_a_failure_not_a_crash(pair, monkeypatch):
    original = attention.commit
    monkeypatch.setattr(attention, "commit", lambda cache, prefix, rows: original(cache, prefix, rows[:-1]))
    report = check.run_check(pair, config(sections=("greedy", "structure"), methods=("chain",)))
    assert report.verdict == "FAIL"
    assert any(i.name == "KV commit" and i.status == "fail" for i in report.items)


def test_stop_returns_a_partial_report(pair):
    calls = iter(range(10**6))
    report = check.run_check(pair, config(), should_stop=lambda: next(calls) > 5)
    assert report.stopped and report.verdict == "STOPPED"
    assert report.summary().startswith("STOPPED")
    # what did not finish is said, and the time is the check's, not the last section's
    lines = report.summary().splitlines()
    assert "a section not counted below did not finish" in lines[0] and " → " in lines[0]
    assert lines[1].endswith(" in all.") and "(" not in lines[1] and not lines[1].startswith(".")


def test_cli_json_and_exit_status(tmp_path, capsys):
    draft, target = tiny_pair_dirs(**PAIR)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("abca\nbead\n")
    # on the test device in float32 (on a GPU 'auto' would load bfloat16, where near ties are WARNs)
    code = cli.main(["check", "--draft", str(draft), "--target", str(target), "--prompts", str(prompts),
                     "--device", DEVICE, "--dtype", "float32",
                     "--methods", "chain", "--samples", "40", "--greedy-tokens", "6", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert result["verdict"] == "PASS" and result["config"]["methods"] == ["chain"]
    assert "estimated time" in out.err
    assert cli.main(["check", "--methods", "beam"]) == 2
    assert "error:" in capsys.readouterr().err


# ------------------------------------------------------------------ a draft on the NF4 kernel
# 62 characters: vocabulary 64, so the NF4 kernel (out features by 32) takes the draft's head too and
# no int8 linear is left: its rows are independent and its KV commit is judged, as on the embedded pair
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _all_nf4_pair():
    from engine import nf4
    from engine.models import load_pair
    if DEVICE != "cpu" or not nf4.available():
        pytest.skip("no bitsandbytes NF4 kernel on this CPU (AVX512-BF16)")
    # a draft close to the target (its NF4 weights already differ): a broken commit shows only once
    # greedy steps accept paths of 2+ tokens
    draft, target = tiny_pair_dirs("llama64", ALNUM, 0.02, 0, "float16")
    pair = load_pair(str(draft), str(target), device="cpu", dtype="float32", cpu_kernels="fast", draft_weights="nf4")
    assert set(pair.cpu_kernels["draft"]["linears"]) == {"nf4"} and not pair.rows_coupled("draft")
    return pair


def _kv_item(report):
    return next(i for i in report.items if i.name == "KV commit")


def test_an_nf4_draft_is_judged_in_bfloat16_rounding_steps(monkeypatch):
    """The NF4 kernel rounds the draft's activations and logits to bfloat16, so a token's logits
    from the committed cache and from a fresh forward may land a bfloat16 step or two apart (on the
    embedded pair: 0.125-0.25, total variation 0.015-0.020, and "Check this pair" said the default
    pair was NOT lossless, judged at float32's 1e-3; that pair's own check is a slow test in
    test_embedded.py). Near an even pair of tokens one step is a total variation over any sensible
    bound, so the draft is judged in rounding steps; a broken commit still fails on its side."""
    pair = _all_nf4_pair()
    cfg = config(prompts=["abcABC0123", "the quick brown fox"], sections=("structure",), methods=("sequoia",),
                 kv_steps=8)
    kv = _kv_item(check.run_check(pair, cfg))
    assert kv.status == "pass", kv.message
    assert kv.details["steps_with_a_telling_path"] > 0   # paths a wrong commit would show (greedy: every run alike)
    assert kv.details["rounding_dtype"] == {"draft": "bfloat16"} and kv.details["tolerance_tv"] == 1e-3
    assert "bfloat16 rounding steps" in kv.message
    original = attention.commit
    monkeypatch.setattr(attention, "commit", lambda cache, prefix, rows: original(
        cache, prefix, list(range(prefix, prefix + len(rows)))))   # keeps the first tree rows
    broken = _kv_item(check.run_check(pair, cfg))
    assert broken.status == "fail" and "draft logits off by" in broken.message, broken.message
    assert broken.details["max_rounding_steps"]["draft"] > check.KV_ROUNDING_STEPS, broken.details


def test_one_bfloat16_step_near_an_even_pair_is_not_a_failed_commit():
    """What the total-variation bound got wrong, in numbers: two top tokens at 20.0 and 20.125
    (one bfloat16 step apart) swapped by one step each is a total variation of 0.06, over
    bfloat16's 0.05, yet it is 1 rounding step."""
    from engine.check.structure_check import rounding_step
    fresh = torch.tensor([20.0, 20.125, 5.0])
    got = torch.tensor([20.125, 20.0, 5.0])
    tv = 0.5 * float((torch.softmax(got.double(), -1) - torch.softmax(fresh.double(), -1)).abs().sum())
    assert tv > check.KV_TOLERANCE[torch.bfloat16]
    assert float((got - fresh).abs().max()) / rounding_step(20.125, torch.bfloat16) == 1.0


def test_the_estimate_names_samples_only_where_sampling_runs():
    """`check --sections structure,greedy` printed "N = 30 samples per method and setting"."""
    from engine.check.report import CheckEstimate
    timings = {"sample_step_seconds": {"sequoia": 0.1}, "target_token_seconds": 0.05}
    greedy = CheckEstimate(10.0, {"greedy": 8.0, "structure": 2.0}, 30, True, timings, 0.1)
    assert "N = " not in greedy.message() and "greedy" in greedy.message()
    both = CheckEstimate(20.0, {"greedy": 8.0, "sampling": 12.0}, 30, True, timings, 0.1)
    assert "N = 30 samples per method and setting (auto)" in both.message()
