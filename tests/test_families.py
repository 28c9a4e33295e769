"""Every model family people use, on tiny real HF models built in the tests: greedy output equals
the target's own generate() for every method; sliding-window (Mistral) and mixed sliding + full
(Gemma-2/3) models decode far past their window, exactly; top-k sampling and EOS exactly as
generate() does them; families that cannot do tree attention are refused at load with the reason."""
import collections
import copy
import dataclasses

import pytest
import torch

from engine import attention, methods, sampling
from engine.decoding import Decoder, generate_ids
from engine.errors import UserError
from engine.models import encode_prompt, eos_ids, generation_defaults
from engine.settings import Settings
from engine.tree import Tree
from tests.test_exactness import (DIST_CHARS, DIST_METHODS, assert_caches_hold, chi_square_pvalue,
                                  exact_two_token_distribution, fresh_logits, shapes,
                                  samples_until, two_token_samples)
from tests.tiny import MATRIX, REFUSED, WINDOW, greedy_reference, ids_tensor, load_tiny, save_pair, tiny_pair

MATRIX_TOKENS = 20
SLIDING = ("mistral", "gemma3", "gemma2")
LONG = 3 * WINDOW + 8  # generated tokens in the sliding-window tests: the context ends past 3 windows
DRAWS = 1000  # two-token samples per chi-square test here (the suite must stay fast on 2 cores)


def _first_difference(out, reference):
    return next((i for i, (a, b) in enumerate(zip(out, reference)) if a != b), min(len(out), len(reference)))


@pytest.mark.parametrize("family", MATRIX)
def test_family_matrix_greedy_equals_target_generate(family):
    pair = tiny_pair(family)
    ids = encode_prompt(pair, "hello world", chat=False)
    reference = greedy_reference(pair, ids, MATRIX_TOKENS)
    for name, method in shapes().items():
        out, _ = generate_ids(pair, ids, method, Settings(max_new_tokens=MATRIX_TOKENS, ignore_eos=True))
        assert out == reference, f"{family}/{name} diverged at {_first_difference(out, reference)}"


@pytest.mark.parametrize("family", ["mistral", "gemma3", "phi3"])
def test_family_greedy_on_fast_cpu_kernels(family):
    pair = tiny_pair(family, kernels="fast")
    ids = encode_prompt(pair, "tree decoding", chat=False)
    reference = greedy_reference(pair, ids, MATRIX_TOKENS)
    for name in ("sequoia-planner", "specinfer-wide", "chain-deep"):
        out, _ = generate_ids(pair, ids, shapes()[name], Settings(max_new_tokens=MATRIX_TOKENS, ignore_eos=True))
        assert out == reference, f"{family}/{name} (fast kernels) diverged at {_first_difference(out, reference)}"


@pytest.mark.parametrize("family", list(REFUSED))
def test_families_without_tree_attention_are_refused_at_load(family, tmp_path):
    draft, target = save_pair(tmp_path, family)
    with pytest.raises(UserError, match=REFUSED[family][1]):
        load_tiny(draft, target)


# ------------------------------------------------------------------ sliding windows
@pytest.mark.parametrize("family", SLIDING)
def test_sliding_window_models_decode_past_three_windows(family):
    """Mistral (every layer sliding) and Gemma-2/3 (sliding and full layers mixed): the whole output,
    over a context of more than 3 windows, equals generate(); the trees straddle the window edge
    at every step in between."""
    pair = tiny_pair(family)
    assert pair.kv_window == WINDOW and pair.context_limit > 4 * WINDOW
    ids = encode_prompt(pair, "hello world", chat=False)
    reference = greedy_reference(pair, ids, LONG)
    assert len(ids) + LONG > 3 * WINDOW
    steps = collections.Counter()
    for name, method in shapes().items():
        out, events = generate_ids(pair, ids, method, Settings(max_new_tokens=LONG, ignore_eos=True))
        assert out == reference, f"{family}/{name} diverged at {_first_difference(out, reference)}"
        assert events[-1].finish_reason == "max_new_tokens"
        steps[name] = events[-1].total_steps
    assert steps["sequoia-planner"] < 0.9 * steps["ar"]


def test_the_sliding_window_really_matters(monkeypatch):
    """Teeth: with the window taken out of the mask (and nothing forgotten), the output leaves generate()'s."""
    pair = tiny_pair("mistral")
    ids = encode_prompt(pair, "hello world", chat=False)
    reference = greedy_reference(pair, ids, LONG)
    monkeypatch.setattr(attention, "in_window", lambda keys, queries, window: torch.ones(
        queries.numel(), keys.numel(), dtype=torch.bool, device=keys.device))
    monkeypatch.setattr(attention.TreeWindowLayer, "trim", lambda self: None)
    out, _ = generate_ids(pair, ids, shapes()["sequoia-planner"], Settings(max_new_tokens=LONG, ignore_eos=True))
    assert out != reference


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_sliding_caches_hold_exactly_the_committed_sequence(family, temperature):
    """After every commit, on every layer type: feeding the root gives the logits of a fresh forward
    over the committed sequence, and sliding layers keep only window - 1 committed columns."""
    pair = tiny_pair(family)
    ids = encode_prompt(pair, "hello world", chat=False)
    method = methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1, 1]))
    decoder = Decoder(pair, method, Settings(temperature=temperature, max_new_tokens=LONG, ignore_eos=True, seed=4))
    checked = 0
    for event in decoder.run(ids):
        if event.done:
            break
        seq = ids + event.token_ids
        for layer in decoder.target_cache.layers:
            if isinstance(layer, attention.TreeWindowLayer):
                assert layer.keys.shape[-2] == min(len(seq) - 1, WINDOW - 1) and not layer.pending
        assert_caches_hold(pair, decoder, seq)
        checked += 1
    assert checked > 5 and len(seq) > 3 * WINDOW


@pytest.mark.parametrize("family,prompt_len,name", [("gemma3", WINDOW - 1, "sequoia"),
                                                    ("gemma3", 3 * WINDOW + 1, "specinfer"),
                                                    ("mistral", 3 * WINDOW + 1, "sequoia")])
def test_sliding_window_sampling_follows_target(family, prompt_len, name):
    """Chi-square over two-token continuations on sliding-window pairs (a draft far from the
    target): with the tree straddling the window edge, and three windows in."""
    pair = tiny_pair(family, chars=DIST_CHARS, noise=0.8, seed=3)
    ids = encode_prompt(pair, ("abcaedbecd" * 8)[:prompt_len], chat=False)
    assert len(ids) == prompt_len
    settings = Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True, seed=5)
    samples = two_token_samples(pair, ids, DIST_METHODS[name], settings, DRAWS)
    assert chi_square_pvalue(samples, exact_two_token_distribution(pair, ids, 1.0, 1.0)) > 1e-3


# ------------------------------------------------------------------ top-k
TOP_K = 5  # of a 7-token vocabulary (eos + 5 letters + unk)


@pytest.fixture(scope="module")
def topk_pair():
    return tiny_pair("llama", chars=DIST_CHARS, noise=0.8, seed=3)


def exact_topk_distribution(pair, ids, temperature, top_k):
    first = sampling.target_distribution(fresh_logits(pair.target, ids), temperature, 1.0, top_k)
    table = {}
    for a in range(len(first)):
        if first[a] == 0:
            continue
        second = sampling.target_distribution(fresh_logits(pair.target, ids + [a]), temperature, 1.0, top_k)
        for b in range(len(second)):
            table[(a, b)] = float(first[a] * second[b])
    return table


def test_target_distribution_is_what_generate_samples_from(topk_pair):
    """Temperature, top-k, top-p in generate()'s order: generate()'s own processed scores."""
    pair = topk_pair
    ids = encode_prompt(pair, "abca", chat=False)
    for t, k, p in ((0.7, TOP_K, 1.0), (1.3, 3, 0.8), (1.0, 0, 0.9), (0.5, 4, 0.6)):
        out = pair.target.generate(ids_tensor(pair, ids), max_new_tokens=1, do_sample=True, temperature=t, top_k=k,
                                   top_p=p, output_scores=True, output_logits=True, return_dict_in_generate=True,
                                   eos_token_id=None, pad_token_id=0)
        want = torch.softmax(out.scores[0][0].double(), -1)
        got = sampling.target_distribution(out.logits[0][0], t, p, k)
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-6)
        if k:
            assert int((got > 0).sum()) <= max(k, 1)


@pytest.mark.parametrize("name", list(DIST_METHODS))
def test_top_k_sampling_follows_target(topk_pair, name):
    ids = encode_prompt(topk_pair, "abca", chat=False)
    settings = Settings(temperature=1.0, top_k=TOP_K, max_new_tokens=2, ignore_eos=True, seed=11)
    samples = two_token_samples(topk_pair, ids, DIST_METHODS[name], settings, DRAWS)
    assert chi_square_pvalue(samples, exact_topk_distribution(topk_pair, ids, 1.0, TOP_K)) > 1e-3


def test_top_k_test_fails_for_a_verifier_that_ignores_top_k(topk_pair, monkeypatch):
    """Teeth: a verifier whose p ignores top-k samples tokens top-k forbids (or at least the wrong mix)."""
    ids = encode_prompt(topk_pair, "abca", chat=False)
    exact = exact_topk_distribution(topk_pair, ids, 1.0, TOP_K)
    original = sampling.target_distribution
    monkeypatch.setattr(sampling, "target_distribution",
                        lambda logits, temperature, top_p=1.0, top_k=0: original(logits, temperature, top_p, 0))
    settings = Settings(temperature=1.0, top_k=TOP_K, max_new_tokens=2, ignore_eos=True, seed=11)

    def impossible(samples):  # outside the top-k
        return sum(1 for s in samples if exact.get(tuple(s), 0.0) == 0.0)
    samples = samples_until(topk_pair, ids, DIST_METHODS["sequoia"], settings, DRAWS, impossible, every=50)
    assert impossible(samples) > 0  # exact decoding never samples one (chi_square_pvalue refuses them outright)


def test_top_k_settings_are_validated():
    assert Settings(temperature=1.0, top_k=5).top_k == 5
    for bad in (-1, 2.5, True, "5"):
        with pytest.raises(UserError, match="top-k"):
            Settings(temperature=1.0, top_k=bad)


# ------------------------------------------------------------------ EOS
def test_stops_on_the_generation_config_eos_like_generate(tmp_path):
    """A checkpoint whose generation config names another EOS than its tokenizer: decoding stops
    where generate() stops, on the generation config's id only."""
    draft, target = save_pair(tmp_path, "llama")
    base = load_tiny(draft, target)
    ids = encode_prompt(base, "hello world", chat=False)
    free = greedy_reference(base, ids, 40)
    stop = free[12]  # a token of the reference continuation, not the tokenizer's eos (0)
    assert stop != base.tokenizer.eos_token_id
    for path in (draft, target):
        from transformers import GenerationConfig
        config = GenerationConfig.from_pretrained(path)
        config.eos_token_id = stop
        config.save_pretrained(path)
    pair = load_tiny(draft, target)
    assert pair.eos_ids == frozenset({stop}) == eos_ids(pair.target, pair.tokenizer)
    want = pair.target.generate(ids_tensor(pair, ids), max_new_tokens=40, do_sample=False, pad_token_id=0)
    want = want[0, len(ids):].tolist()
    assert want[-1] == stop and len(want) < 40
    for name in ("sequoia-planner", "chain-deep", "ar"):
        out, events = generate_ids(pair, ids, shapes()[name], Settings(max_new_tokens=40))
        assert out == want and events[-1].finish_reason == "eos"


def test_eos_falls_back_to_the_tokenizer_only_without_a_generation_config_eos():
    pair = tiny_pair("llama")
    target = copy.deepcopy(pair.target)
    target.generation_config.eos_token_id = [3, 4]
    assert eos_ids(target, pair.tokenizer) == frozenset({3, 4})
    target.generation_config.eos_token_id = None
    target.config.eos_token_id = None
    assert eos_ids(target, pair.tokenizer) == frozenset({pair.tokenizer.eos_token_id})


def test_generation_defaults_as_generate_resolves_them():
    pair = tiny_pair("llama")
    target = copy.deepcopy(pair.target)
    target.generation_config.do_sample, target.generation_config.temperature = True, 0.6
    target.generation_config.top_k, target.generation_config.top_p = None, 0.95
    rec = generation_defaults(target)
    assert (rec["do_sample"], rec["temperature"], rec["top_k"], rec["top_p"]) == (True, 0.6, 50, 0.95)
    assert "top_k" not in rec["set_by_checkpoint"]
    from app.models_tab import pair_markdown, recommended_values
    assert recommended_values(rec) == (0.6, 50, 0.95)
    assert recommended_values({**rec, "do_sample": False}) == (0.0, 0, 1.0)   # greedy: no truncation set
    info = dataclasses.replace(pair, target=target).describe()
    assert "top-k **50**" in pair_markdown(info)


# ------------------------------------------------------------------ top-k reaches every knob
def test_acceptance_keys_are_unchanged_with_top_k_off():
    """Shipped acceptance files (written before top-k existed) are still found; top-k on is another key."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from engine import profiler
    files = sorted(Path(profiler.SHIPPED, "acceptance").glob("*.json"))
    assert files
    for path in files:
        vec = profiler.AcceptanceVector(**json.loads(path.read_text()))
        assert vec.top_k == 0
        pair = SimpleNamespace(draft_name=vec.draft, target_name=vec.target, vocab_size=151936,
                               cpu_kernels={"draft": {"mode": vec.draft_kernels}})
        for off in (0, None):
            assert profiler.acceptance_key(pair, vec.sampler, vec.temperature, vec.top_p, vec.width, off,
                                           vec.domain) == path.stem
        if vec.temperature:
            assert profiler.acceptance_key(pair, vec.sampler, vec.temperature, vec.top_p, vec.width, 5,
                                           vec.domain) != path.stem


def test_top_k_on_the_command_line_and_in_the_check():
    import argparse

    from engine.check import CheckConfig
    from engine.check.config import sampling_triple
    from engine.check.reference import reference_distribution
    from engine.commands.common import add_sampling_args, settings_from_args
    parser = argparse.ArgumentParser()
    add_sampling_args(parser)
    assert settings_from_args(parser.parse_args(["--temperature", "0.8", "--top-k", "7"])).top_k == 7
    assert settings_from_args(parser.parse_args([])).top_k == 0
    with pytest.raises(UserError, match="top-k"):
        settings_from_args(parser.parse_args(["--temperature", "1", "--top-k", "-2"]))
    config = CheckConfig(sampling_settings=((1.0, 1.0, 5), (0.7, 0.9)))
    config.validate()
    assert [sampling_triple(s) for s in config.sampling_settings] == [(1.0, 1.0, 5), (0.7, 0.9, 0)]
    logits = torch.randn(40)
    torch.testing.assert_close(reference_distribution(logits, 0.7, 0.9, 5),
                               sampling.target_distribution(logits, 0.7, 0.9, 5))


def test_the_models_tab_says_why_an_untied_head_counts_apart():
    """The embedded pair read "630.2M" beside a "0.5b" name: its GGUF files keep an output head of
    their own, untied from the embedding, and the count says so."""
    from app.models_tab import pair_markdown
    info = {"draft": "d", "target": "t", "draft_parameters": 630_200_000, "target_parameters": 1_800_000_000,
            "device": "cpu", "dtype": "float32"}
    assert "output head" not in pair_markdown({**info, "untied_heads": []})
    assert "the draft's output head is a matrix of its own" in pair_markdown({**info, "untied_heads": ["draft"]})
    assert "both models' output heads" in pair_markdown({**info, "untied_heads": ["draft", "target"]})
    pair = tiny_pair("llama")
    untied, tied = copy.deepcopy(pair.draft), copy.deepcopy(pair.target)
    untied.config.tie_word_embeddings, tied.config.tie_word_embeddings = False, True
    assert dataclasses.replace(pair, draft=untied, target=tied).describe()["untied_heads"] == ["draft"]
