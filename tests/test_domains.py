"""Code and prose acceptance kept apart (engine/domains.py) and the planner's choice between them."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from engine import domains, planning, profiler
from engine.prompts import HELDOUT_PROMPTS, MEASUREMENT_PROMPTS, asset_prompts, prompt_set
from engine.settings import Settings
from tests.tiny import tiny_pair


def test_every_shipped_prompt_is_classified_as_its_kind():
    shipped = prompt_set(MEASUREMENT_PROMPTS) + prompt_set(HELDOUT_PROMPTS) + asset_prompts()
    assert len(prompt_set(MEASUREMENT_PROMPTS)) >= 24 and len(prompt_set(HELDOUT_PROMPTS)) >= 24
    wrong = [(p.title, p.kind, domains.prompt_domain(p.text)) for p in shipped
             if domains.prompt_domain(p.text) != p.kind]
    assert not wrong


def test_the_held_out_prompts_were_not_measured_on():
    measured = {p.text for p in prompt_set(MEASUREMENT_PROMPTS)} | {p.text for p in asset_prompts()}
    held_out = prompt_set(HELDOUT_PROMPTS)
    assert not measured & {p.text for p in held_out}
    assert {p.kind for p in held_out} == {"code", "prose"}


def test_everyday_english_is_not_taken_for_code():
    """A walk-through's prompt of everyday words was "a code prompt": "go" counted as the language
    (Go, capitalised, still does: "Write a Go program")."""
    text = "Let us go to the sea and go for a walk along the shore before the sun sets over the hills."
    assert domains.prompt_domain(text) == "prose"
    assert domains.prompt_domain("Write a golang program that reads stdin.") == "code"
    assert domains.prompt_domain("Write a Go program with four goroutines.") == "code"


def test_short_or_empty_prompts_are_unsure():
    for text in ("", "   ", "hello", "What is 2+2?"):
        assert domains.prompt_domain(text) is None


def _vec(pair, probs, positions, domain, width=16):
    probs = list(probs) + [0.0] * (width - len(probs))  # the planner looks vectors up at width 16
    ci = [1.96 * (p * (1 - p) / positions) ** 0.5 for p in probs]
    return profiler.AcceptanceVector(list(probs), 1 - sum(probs), positions, ci, pair.draft_name, pair.target_name,
                                     "greedy", 0.0, 1.0, len(probs), 12, domain=domain, method="replay")


def test_pooled_vector_is_position_weighted():
    pair = tiny_pair("llama")
    a, b = _vec(pair, [0.8, 0.1], 300, "code", 2), _vec(pair, [0.5, 0.2], 100, "prose", 2)
    pooled = domains.pooled_vector([a, b])
    assert pooled.domain == "" and pooled.positions == 400
    assert abs(pooled.probabilities[0] - 0.725) < 1e-12 and abs(pooled.probabilities[1] - 0.125) < 1e-12
    assert domains.differ(a, b) and not domains.differ(a, dataclasses.replace(a, domain="prose"))


def _store(pair, code, prose):
    for vec in (code, prose, domains.pooled_vector([code, prose])):
        profiler.save_acceptance(pair, vec)


def test_the_plan_uses_the_prompt_domain_vector_where_code_and_prose_differ(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    _store(pair, _vec(pair, [0.85, 0.08, 0.03], 2000, "code"), _vec(pair, [0.55, 0.15, 0.08], 2000, "prose"))
    spec, s = planning.MethodSpec("sequoia", 16, 6), Settings(temperature=0.0)
    code = planning.build_plan(pair, spec, s, measure=False, prompt="Write a Python function `f(x)` that sorts x.")
    prose = planning.build_plan(pair, spec, s, measure=False, prompt="Tell me a story about a quiet lighthouse keeper")
    unsure = planning.build_plan(pair, spec, s, measure=False, prompt="hi")
    assert (code.domain, prose.domain, unsure.domain) == ("code", "prose", "")
    assert code.acceptance.probabilities[0] == 0.85 and prose.acceptance.probabilities[0] == 0.55
    assert abs(unsure.acceptance.probabilities[0] - 0.70) < 1e-12
    assert "code vector" in code.acceptance_note and "unsure" in unsure.acceptance_note
    assert code.expected_tokens > prose.expected_tokens  # the trees are planned for what each prompt accepts
    assert code.summary()["acceptance_domain"] == "code"
    # learning keeps code and prose evidence apart
    assert planning.learning_key(pair, s, domain="code") != planning.learning_key(pair, s, domain="prose")
    assert planning.learner_for(pair, code, s).key == planning.learning_key(pair, s, domain="code")


def test_the_pooled_vector_stands_where_code_and_prose_agree(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    _store(pair, _vec(pair, [0.70, 0.10, 0.05], 2000, "code"), _vec(pair, [0.71, 0.10, 0.05], 2000, "prose"))
    plan = planning.build_plan(pair, planning.MethodSpec("sequoia", 16, 6), Settings(temperature=0.0),
                               measure=False, prompt="Write a Python function `f(x)` that sorts x.")
    assert plan.domain == "" and "agree" in plan.acceptance_note
    assert abs(plan.acceptance.probabilities[0] - 0.705) < 1e-12


def test_the_nearest_vector_stand_in_keeps_the_prompt_domains_vector(tmp_path, monkeypatch):
    """At top-k 40 no vector is measured; the nearest (top-k 0) stands in, and on a code prompt it
    is the code vector where code and prose differ there, as at the measured settings (the page
    planned from the pooled one: n=8 d=4 against n=8 d=6)."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    at = dict(sampler="sequoia", temperature=0.7, top_p=0.9)
    _store(pair, dataclasses.replace(_vec(pair, [0.85, 0.08, 0.03], 2000, "code"), **at),
           dataclasses.replace(_vec(pair, [0.55, 0.15, 0.08], 2000, "prose"), **at))
    spec = planning.MethodSpec("sequoia", 16, 6)
    code_prompt = "Write a Python function `f(x)` that sorts x."
    measured = planning.build_plan(pair, spec, Settings(temperature=0.7, top_p=0.9), measure=False, prompt=code_prompt)
    near = planning.build_plan(pair, spec, Settings(temperature=0.7, top_p=0.9, top_k=40), measure=False,
                               allow_nearest=True, prompt=code_prompt)
    assert measured.domain == near.domain == "code"
    assert near.acceptance.probabilities[0] == 0.85 and "nearest" in near.acceptance_note
    assert "code vector" in near.acceptance_note
    assert near.tree.parents == measured.tree.parents
    unsure = planning.build_plan(pair, spec, Settings(temperature=0.7, top_p=0.9, top_k=40), measure=False,
                                 allow_nearest=True, prompt="hi")
    assert unsure.domain == "" and abs(unsure.acceptance.probabilities[0] - 0.70) < 1e-12


def test_the_plan_command_plans_for_a_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    pair = tiny_pair("llama")
    _store(pair, _vec(pair, [0.85, 0.08, 0.03], 2000, "code"), _vec(pair, [0.55, 0.15, 0.08], 2000, "prose"))
    draft, target = pair.draft_name, pair.target_name  # the folders the pair was loaded from
    out = subprocess.run([sys.executable, "-m", "engine", "plan", "--draft", draft, "--target", target,
                          "--temperature", "0", "--budget", "8", "--depth", "4", "--json", "--cpu-kernels", "default",
                          "--for-prompt", "Write a Python function `f(x)` that sorts x."],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "SEQUOIA_CACHE": str(tmp_path)},
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["acceptance_domain"] == "code" and got["acceptance"][0] == 0.85
