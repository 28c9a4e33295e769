"""Acceptance by replay (engine/replay.py): the same quantity as the on-policy star, computed at
every answer position from one forward of each model, with the engine's own verifiers."""
import json
import subprocess
import sys

import pytest
import torch

from engine import methods, profiler, replay, sampling
from engine.decoding import generate_ids
from engine.models import encode_prompt
from engine.settings import Settings
from tests.test_profiler import LONG_PROMPTS, SMALL
from tests.tiny import tiny_pair, tiny_pair_dirs

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _answers(pair, prompts, settings):
    """(prompt ids, answer ids) as the replay decodes them (seed + i per prompt)."""
    from dataclasses import replace
    out = []
    for i, text in enumerate(prompts):
        ids = encode_prompt(pair, text, None)
        answer, _ = generate_ids(pair, ids, methods.autoregressive(), replace(settings, seed=settings.seed + i))
        out.append((ids, answer))
    return out


def _logits_at(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].double()


def test_greedy_replay_is_the_rank_of_the_target_argmax_among_the_draft_top_k():
    """At T = 0 the replay is deterministic: it must equal, position by position, the rank of the
    target's argmax among the draft's top-4 computed from scratch (a shifted position fails)."""
    pair = tiny_pair("llama", chars=SMALL, noise=0.2)
    prompts = LONG_PROMPTS[:4]
    vec = replay.replay_acceptance(pair, prompts, 0.0, width=4, tokens_per_prompt=30)
    counts, positions, rows = [0] * 5, 0, []
    for ids, answer in _answers(pair, prompts, Settings(temperature=0.0, max_new_tokens=30)):
        own = [0] * 5
        for j in range(len(answer)):
            ctx = ids + answer[:j]
            best = int(torch.argmax(_logits_at(pair.target, ctx)))
            assert best == answer[j]  # the answer is the target's greedy text
            top = torch.topk(_logits_at(pair.draft, ctx).float(), 4).indices.tolist()
            own[top.index(best) if best in top else 4] += 1
        counts = [a + b for a, b in zip(counts, own)]
        positions += len(answer)
        rows.append([len(answer), *own])
    assert vec.positions == positions and vec.method == "replay" and vec.sampler == "greedy"
    assert [round(p * positions) for p in vec.probabilities] == counts[:4]
    assert round(vec.none * positions) == counts[4]
    # each prompt's own counts are kept (the interval over prompts, engine/intervals.py, rests on them)
    assert vec.prompt_counts == rows and vec.interval == "prompts"


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.5, 0.8)])
def test_sampled_replay_rank_one_is_the_mean_overlap_at_the_asked_settings(temperature, top_p, monkeypatch):
    """P(rank 1) of a Sequoia star is E[sum(min(p, q))] over the visited positions; the replay must
    find it at the asked T and top-p, and pass exactly those to the decoder and the verifier."""
    pair = tiny_pair("llama", chars=SMALL, noise=0.2)
    seen = []
    real = sampling.target_distribution

    def spy(logits, t, p=1.0, k=0):
        seen.append((t, p))
        return real(logits, t, p, k)

    decoded, real_generate = [], replay.generate_ids

    def spy_generate(pair_, ids, method, settings, **kw):
        answer, events = real_generate(pair_, ids, method, settings, **kw)
        decoded.append((list(ids), answer, settings))
        return answer, events

    monkeypatch.setattr(replay.sampling, "target_distribution", spy)
    monkeypatch.setattr(replay, "generate_ids", spy_generate)
    vec = replay.replay_acceptance(pair, LONG_PROMPTS, temperature, top_p, width=16, tokens_per_prompt=40,
                                   draws=8, seed=3)
    assert seen and set(seen) == {(temperature, top_p)}
    assert all((s.temperature, s.top_p) == (temperature, top_p) for _, _, s in decoded)
    monkeypatch.setattr(replay.sampling, "target_distribution", real)
    exact = []
    for ids, answer, _ in decoded:
        for j in range(len(answer)):
            ctx = ids + answer[:j]
            p = sampling.target_distribution(_logits_at(pair.target, ctx), temperature, top_p)
            q = sampling.draft_distribution(_logits_at(pair.draft, ctx), temperature)
            exact.append(float(torch.minimum(p, q).sum()))
    assert len(exact) == vec.positions
    mean = sum(exact) / len(exact)
    se = (mean * (1 - mean) / vec.positions) ** 0.5
    assert abs(vec.probabilities[0] - mean) < 3 * se + 0.01, (vec.probabilities[0], mean, se)
    assert vec.none == 0.0  # without replacement over the whole vocabulary some child is accepted


def test_replay_agrees_with_the_on_policy_star():
    pair = tiny_pair("llama", chars=SMALL, noise=0.3)
    star = profiler.measure_acceptance(pair, LONG_PROMPTS, 1.0, width=4, tokens_per_prompt=60, ignore_eos=True)
    rep = replay.replay_acceptance(pair, LONG_PROMPTS, 1.0, width=4, tokens_per_prompt=60, draws=4)
    for k in range(3):
        assert abs(star.probabilities[k] - rep.probabilities[k]) < 2 * (star.ci95[k] + rep.ci95[k]) + 0.02, k


def test_the_cli_measures_code_prose_and_pooled_vectors(tmp_path):
    draft, target = tiny_pair_dirs("llama")
    prompts = tmp_path / "set.json"
    prompts.write_text(json.dumps({"prompts": [
        {"kind": "code", "title": "a", "prompt": "def f(x): return x"},
        {"kind": "code", "title": "b", "prompt": "x = [i for i in y]"},
        {"kind": "prose", "title": "c", "prompt": "the cat sat on the mat"},
        {"kind": "prose", "title": "d", "prompt": "a quiet evening by the sea"}]}))
    out = subprocess.run([sys.executable, "-m", "engine", "measure", "--draft", draft, "--target", target,
                          "--replay", "--prompt-set", prompts, "--by-domain", "--temperature", "0.7", "--width", "8",
                          "--tokens-per-prompt", "12", "--json"], cwd=ROOT, capture_output=True, text=True,
                         timeout=180, env={**__import__("os").environ, "SEQUOIA_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    code, prose, pooled = got["vectors"]
    assert (code["domain"], prose["domain"], pooled["domain"]) == ("code", "prose", "")
    assert pooled["positions"] == code["positions"] + prose["positions"]
    for k in range(8):
        mixed = (code["probabilities"][k] * code["positions"] + prose["probabilities"][k] * prose["positions"])
        assert abs(pooled["probabilities"][k] - mixed / pooled["positions"]) < 1e-12
    assert isinstance(got["domains_differ"], bool)
    # two prompts a kind: too few for a spread over prompts; the pooled four are enough
    assert (code["interval"], prose["interval"], pooled["interval"]) == ("positions", "positions", "prompts")
    assert pooled["prompt_counts"] == code["prompt_counts"] + prose["prompt_counts"] and len(pooled["prompt_counts"]) == 4
    files = list((tmp_path / "cache" / "acceptance").glob("*.json"))
    assert len(files) == 3  # three keys: code, prose and the pooled one (the key older files use)


def test_a_measurement_extended_by_prompts_counts_what_one_measurement_of_all_of_them_counts():
    """Each prompt's replays draw from their own generator (seeded by the prompt's place), so the
    last prompt measured alone, with the seed of its place, adds the counts it has in one
    measurement (one generator for the whole set gave it other draws)."""
    pair = tiny_pair("llama", chars=SMALL, noise=0.3)
    prompts = LONG_PROMPTS[:3]
    whole = replay.replay_acceptance(pair, prompts, 0.7, width=4, tokens_per_prompt=20, seed=5)
    first = replay.replay_acceptance(pair, prompts[:2], 0.7, width=4, tokens_per_prompt=20, seed=5)
    assert replay.prompts_already_measured(first, prompts, 5, 20, replay.DRAWS) == 2
    rest = replay.replay_acceptance(pair, prompts[2:], 0.7, width=4, tokens_per_prompt=20, seed=7)
    both = replay.extended(first, rest)
    assert both.prompt_counts == whole.prompt_counts and both.recipe == whole.recipe
    assert both.positions == whole.positions and both.prompts == 3
    assert all(abs(a - b) < 1e-12 for a, b in zip(both.probabilities, whole.probabilities))
    assert whole.recipe["prompts"] == [[replay.prompt_digest(p), 5 + i] for i, p in enumerate(prompts)]


def _measure(draft, target, prompt_set, cache, *more):
    return subprocess.run([sys.executable, "-m", "engine", "measure", "--draft", draft, "--target", target,
                           "--replay", "--prompt-set", prompt_set, "--by-domain", "--temperature", "0.7",
                           "--width", "8", "--tokens-per-prompt", "12", "--json", *more], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**__import__("os").environ, "SEQUOIA_CACHE": str(cache)})


def test_the_cli_extends_a_measurement_with_the_prompts_added_to_its_set(tmp_path):
    draft, target = tiny_pair_dirs("llama")
    rows = [{"kind": "code", "title": "a", "prompt": "def f(x): return x"},
            {"kind": "prose", "title": "c", "prompt": "the cat sat on the mat"},
            {"kind": "code", "title": "b", "prompt": "x = [i for i in y]"}]
    prompt_set = tmp_path / "set.json"
    prompt_set.write_text(json.dumps({"prompts": rows}))
    assert _measure(draft, target, prompt_set, tmp_path / "cache").returncode == 0
    rows.append({"kind": "code", "title": "d", "prompt": "for k in d: print(k)"})
    prompt_set.write_text(json.dumps({"prompts": rows}))
    out = _measure(draft, target, prompt_set, tmp_path / "cache", "--extend")
    assert out.returncode == 0, out.stderr
    assert "code: 2 prompts measured before" in out.stderr and "1 to add" in out.stderr
    assert "prose: 1 prompt measured before" in out.stderr and "0 to add" in out.stderr
    fresh = _measure(draft, target, prompt_set, tmp_path / "fresh")
    assert fresh.returncode == 0, fresh.stderr
    for got, whole in zip(json.loads(out.stdout)["vectors"], json.loads(fresh.stdout)["vectors"]):
        assert got["domain"] == whole["domain"] and got["prompts"] == whole["prompts"]
        assert got["prompt_counts"] == whole["prompt_counts"] and got["recipe"] == whole["recipe"]
        assert all(abs(a - b) < 1e-12 for a, b in zip(got["probabilities"], whole["probabilities"]))
    # what was measured differently is refused, by what differs, and the cached vectors are kept
    kept = sorted(p.read_text() for p in (tmp_path / "cache" / "acceptance").glob("*.json"))
    for more, said in ((["--tokens-per-prompt", "10"], "measured with --tokens-per-prompt 12"),
                       (["--seed", "1"], "not this set's first 3"),
                       (["--temperature", "0.3"], "no vector is measured at these settings yet")):
        refused = _measure(draft, target, prompt_set, tmp_path / "cache", "--extend", *more)
        assert refused.returncode == 2 and said in refused.stderr, (more, refused.stderr)
    rows[0]["prompt"] = "def g(y): return y"
    prompt_set.write_text(json.dumps({"prompts": rows}))
    refused = _measure(draft, target, prompt_set, tmp_path / "cache", "--extend")
    assert refused.returncode == 2 and "a prompt was changed, removed or reordered" in refused.stderr
    assert sorted(p.read_text() for p in (tmp_path / "cache" / "acceptance").glob("*.json")) == kept


def test_by_domain_without_a_prompt_set_is_a_clear_error():
    draft, target = tiny_pair_dirs("llama")
    out = subprocess.run([sys.executable, "-m", "engine", "measure", "--draft", draft, "--target", target,
                          "--by-domain"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--by-domain needs --prompt-set" in out.stderr


def test_one_row_at_a_time_gives_the_logits_of_one_forward():
    """The incremental path (for row-coupled drafts) computes the same logits as one causal
    forward on a model whose rows are independent."""
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "the cat sat on the mat", False)
    start = 4
    whole = replay._logits(pair.draft, ids, start)
    rows = replay._logits(pair.draft, ids, start, one_row_at_a_time=True)
    assert whole.shape == rows.shape == (len(ids) - start, pair.draft.config.vocab_size)
    assert torch.allclose(whole, rows, atol=1e-5)


def test_a_row_coupled_draft_is_replayed_one_row_at_a_time(monkeypatch):
    """The int8 draft of the fast CPU path shares one activation scale across a forward's rows:
    its q must be computed as a decoding step computes it, one position at a time."""
    pair = tiny_pair("llama", kernels="fast")
    assert pair.rows_coupled("draft") and not pair.rows_coupled("target")
    calls, real = [], replay._logits

    def spy(model, ids, start=0, one_row_at_a_time=False):
        calls.append((model is pair.draft, one_row_at_a_time))
        return real(model, ids, start, one_row_at_a_time)

    monkeypatch.setattr(replay, "_logits", spy)
    replay.replay_acceptance(pair, ["hello world"], 0.7, width=4, tokens_per_prompt=8)
    assert (True, True) in calls and (False, False) in calls and (True, False) not in calls
