"""Exactness on tiny real HF models: greedy output equals the target's own greedy generate(),
sampled output follows the target's distribution, and the caches hold exactly the committed text."""
import collections
import copy

import pytest
import torch
from scipy.stats import chisquare
from transformers import DynamicCache

from engine import attention, methods, sampling
from engine.decoding import Decoder, generate_ids, make_generator
from engine.models import encode_prompt
from engine.planning import table_for
from engine.settings import Settings
from engine.tree import Tree
from tests.broken_verifiers import verify_without_residual
from tests.tiny import greedy_reference, load_tiny, tiny_pair, tiny_pair_dirs, with_eos

GREEDY_TOKENS = 48


def shapes():
    planner_tree = table_for([0.55, 0.2, 0.1, 0.05], 24, 7).tree(24, 7)
    return {
        "chain-deep": methods.chain(9),
        "specinfer-wide": methods.specinfer(6, 3),
        "sequoia-wide": methods.sequoia(Tree.star(12)),
        "sequoia-planner": methods.sequoia(planner_tree),
        "sequoia-irregular": methods.sequoia(Tree.from_branching([3, 2, 1, 0, 1, 2, 0, 1])),
        "ar": methods.autoregressive(),
    }


@pytest.mark.parametrize("kernels", ["default", "fast"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_greedy_equals_target_generate(family, kernels):
    pair = tiny_pair(family, kernels=kernels)
    steps = collections.Counter()
    for prompt in ("hello world", "zebra", "tree decoding"):
        ids = encode_prompt(pair, prompt, chat=False)
        reference = greedy_reference(pair, ids, GREEDY_TOKENS)
        for name, method in shapes().items():
            out, events = generate_ids(pair, ids, method, Settings(max_new_tokens=GREEDY_TOKENS, ignore_eos=True))
            assert out == reference, f"{family}/{name} diverged at {next(i for i, (a, b) in enumerate(zip(out, reference)) if a != b)}"
            steps[name] += events[-1].total_steps
    for name, method in shapes().items():
        if method.uses_draft:
            # the trees must really have accepted drafted tokens, or equality proves little
            assert steps[name] < 0.9 * steps["ar"], (name, steps[name], steps["ar"])


def fresh_logits(model, seq):
    return attention.forward_causal(model, DynamicCache(config=model.config), seq)[-1]


def assert_caches_hold(pair, decoder, seq):
    """After a step, both caches hold exactly the committed sequence (copies are probed)."""
    # target: cache holds seq[:-1]; feeding the root must give the fresh forward's logits
    cache = copy.deepcopy(decoder.target_cache)
    assert cache.get_seq_length() == len(seq) - 1
    got = attention.forward(pair.target, cache, [seq[-1]], [len(seq) - 1],
                            attention.causal_visibility(len(seq) - 1, 1, pair.device))[-1]
    torch.testing.assert_close(got, fresh_logits(pair.target, seq), atol=1e-4, rtol=1e-4)
    # draft: cache holds a prefix of seq; feeding the rest must match too
    cache = copy.deepcopy(decoder.draft_cache)
    held = cache.get_seq_length()
    assert held == decoder.draft_len and held < len(seq)
    got = attention.forward_causal(pair.draft, cache, seq[held:])[-1]
    torch.testing.assert_close(got, fresh_logits(pair.draft, seq), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_hold_exactly_the_committed_sequence(temperature):
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", chat=False)
    method = methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1, 1]))
    decoder = Decoder(pair, method, Settings(temperature=temperature, max_new_tokens=30, ignore_eos=True, seed=4))
    steps = 0
    for event in decoder.run(ids):
        if event.done:
            break
        assert_caches_hold(pair, decoder, ids + event.token_ids)
        steps += 1
    assert steps > 5


# ------------------------------------------------------------------ distribution tests
DIST_CHARS = "abcde"  # vocab: eos + 5 letters + unk = 7, so 49 two-token continuations
SAMPLES = 1500


def exact_two_token_distribution(pair, ids, temperature, top_p):
    first = sampling.target_distribution(fresh_logits(pair.target, ids), temperature, top_p)
    table = {}
    for a in range(len(first)):
        if first[a] == 0:
            continue
        second = sampling.target_distribution(fresh_logits(pair.target, ids + [a]), temperature, top_p)
        for b in range(len(second)):
            table[(a, b)] = float(first[a] * second[b])
    return table


def chi_square_pvalue(samples, exact):
    counts = collections.Counter(tuple(s) for s in samples)
    n = len(samples)
    observed, expected, other_obs, other_exp = [], [], 0, 0.0
    for key, prob in sorted(exact.items(), key=lambda kv: -kv[1]):
        if prob * n >= 5:
            observed.append(counts.pop(key, 0))
            expected.append(prob * n)
        else:
            other_obs += counts.pop(key, 0)
            other_exp += prob * n
    assert not counts, f"impossible continuations sampled: {list(counts)[:5]}"
    if other_exp > 0:
        observed.append(other_obs)
        expected.append(other_exp)
    else:
        assert other_obs == 0
    scale = sum(observed) / sum(expected)
    return chisquare(observed, [e * scale for e in expected]).pvalue


def two_token_samples(pair, ids, method, settings, n):
    return samples_until(pair, ids, method, settings, n, caught=lambda samples: False)


def samples_until(pair, ids, method, settings, n, caught, every=250):
    """n continuations drawn with one generator seeded by settings.seed, stopping early as soon as
    caught(samples so far) holds (looked at every `every` samples, and at n). For the tests with
    teeth: a wrong verifier is usually caught long before n, and what they assert (caught within n
    samples) is unchanged."""
    g = make_generator(pair.device, settings.seed)
    samples = []
    while len(samples) < n:
        samples += [generate_ids(pair, ids, method, settings, generator=g)[0]
                    for _ in range(min(every, n - len(samples)))]
        if caught(samples):
            break
    return samples


DIST_METHODS = {
    "sequoia": methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1])),
    "specinfer": methods.specinfer(3, 3),
    "chain": methods.chain(3),
}


@pytest.fixture(scope="module")
def dist_pair(request):
    # a draft far from the target, so rejections and residuals matter; on both CPU kernel paths
    return tiny_pair("llama", chars=DIST_CHARS, noise=0.8, seed=3, kernels=request.param)


def _on_kernels(cases, default_in_suite, fast_in_suite):
    """In the default suite: `fast_in_suite` on the fast CPU kernels (the default path) and
    `default_in_suite` on the default kernels; every other case under -m slow (CI runs both). The
    verifier's maths is the same code on both paths and at every temperature (the kernels only
    change the logits; T = 1 is also the wrong-verifier test's setting), so the default suite keeps
    Sequoia at T = 0.7 / top-p 0.9 on both paths; the chain and SpecInfer samplers are checked in
    the default suite by tests/test_families.py (top-k at T = 1, and SpecInfer on a sliding-window
    pair), here under -m slow, to keep the suite under 10 minutes on two cores."""
    out = []
    for kernels in ("default", "fast"):
        for case in cases:
            slow = case not in (default_in_suite if kernels == "default" else fast_in_suite)
            out.append(pytest.param(kernels, *case, marks=[pytest.mark.slow] if slow else [],
                                    id="-".join(map(str, (kernels, *case)))))
    return out


DIST_CASES = [(name, t, top_p) for name in DIST_METHODS for t, top_p in ((1.0, 1.0), (0.7, 0.9))]


@pytest.mark.parametrize("dist_pair,name,temperature,top_p", _on_kernels(DIST_CASES, [("sequoia", 0.7, 0.9)],
                                                                            [("sequoia", 0.7, 0.9)]),
                         indirect=["dist_pair"])
def test_sampled_continuations_follow_target(dist_pair, name, temperature, top_p):
    ids = encode_prompt(dist_pair, "abca", chat=False)
    settings = Settings(temperature=temperature, top_p=top_p, max_new_tokens=2, ignore_eos=True, seed=11)
    samples = two_token_samples(dist_pair, ids, DIST_METHODS[name], settings, SAMPLES)
    assert chi_square_pvalue(samples, exact_two_token_distribution(dist_pair, ids, temperature, top_p)) > 1e-3


@pytest.mark.parametrize("dist_pair", [pytest.param("default", marks=pytest.mark.slow), "fast"], indirect=True)
def test_distribution_test_fails_for_a_wrong_verifier(dist_pair, monkeypatch):
    """The same test with the residual update removed must fail: the test has teeth."""
    monkeypatch.setattr(sampling, "verify_sequoia", verify_without_residual)
    ids = encode_prompt(dist_pair, "abca", chat=False)
    settings = Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True, seed=11)
    exact = exact_two_token_distribution(dist_pair, ids, 1.0, 1.0)
    samples = samples_until(dist_pair, ids, DIST_METHODS["sequoia"], settings, SAMPLES,
                            lambda s: chi_square_pvalue(s, exact) < 1e-4)
    assert chi_square_pvalue(samples, exact) < 1e-4  # within the SAMPLES the real test draws


def test_a_confident_draft_the_target_overrules_stays_exact():
    """A draft whose output head is scaled up puts all but ~1e-15 of its mass on one token, and
    the target often disagrees: every later child is drawn from that tiny
    remainder. Drawn from one CDF over q, those children left the D the verifier renormalises to
    and the output left the target's distribution (chi-square p ~ 1e-170)."""
    pair = load_tiny(*tiny_pair_dirs("llama", chars=DIST_CHARS, noise=0.8, seed=3))   # its own copy: weights change
    head = pair.draft.get_output_embeddings()
    assert head.weight is not pair.draft.get_input_embeddings().weight
    with torch.no_grad():
        head.weight.mul_(150.0)
    ids = encode_prompt(pair, "abca", chat=False)
    q = sampling.draft_distribution(fresh_logits(pair.draft, ids), 1.0)
    top = int(q.argmax())
    assert 1.0 - float(q[top]) < 1e-12 and int((q > 0).sum()) > 1   # a remainder near 1's resolution
    assert float(sampling.target_distribution(fresh_logits(pair.target, ids), 1.0)[top]) < 0.5   # often overruled
    settings = Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True, seed=11)
    samples = two_token_samples(pair, ids, DIST_METHODS["sequoia"], settings, SAMPLES)
    assert chi_square_pvalue(samples, exact_two_token_distribution(pair, ids, 1.0, 1.0)) > 1e-3


# ------------------------------------------------------------------ EOS, vocabularies, draft masks
@pytest.mark.parametrize("name", ["chain-deep", "specinfer-wide", "sequoia-planner", "ar"])
def test_greedy_stops_at_eos_exactly_like_the_target(name):
    """Make a token of the reference continuation the EOS: the output must be the reference up
    to and including its first occurrence, whether it arrives as an accepted node or a bonus."""
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", chat=False)
    reference = greedy_reference(pair, ids, GREEDY_TOKENS)
    for k in (3, 11, 20):
        eos = reference[k]
        out, events = generate_ids(with_eos(pair, eos), ids, shapes()[name], Settings(max_new_tokens=GREEDY_TOKENS))
        assert out == reference[:reference.index(eos) + 1]
        assert events[-1].finish_reason == "eos"


def test_draft_and_target_with_different_vocabulary_sizes():
    """Real pairs pad their embeddings differently (Qwen2.5 0.5B: 151936 rows, 7B: 152064)."""
    import dataclasses
    base = tiny_pair("llama")
    ids = encode_prompt(base, "hello world", chat=False)
    reference = greedy_reference(base, ids, 32)
    method = methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1]))
    bigger_draft = copy.deepcopy(base.draft)
    bigger_draft.resize_token_embeddings(base.vocab_size + 5)
    for pair in (dataclasses.replace(base, draft=bigger_draft),):
        assert generate_ids(pair, ids, method, Settings(max_new_tokens=32, ignore_eos=True))[0] == reference
    bigger_target = copy.deepcopy(base.target)
    bigger_target.resize_token_embeddings(base.vocab_size + 7)  # new rows never win: the draft pads with -inf
    pair = dataclasses.replace(base, target=bigger_target, vocab_size=base.vocab_size + 7)
    ref_big = greedy_reference(pair, ids, 32)
    assert generate_ids(pair, ids, method, Settings(max_new_tokens=32, ignore_eos=True))[0] == ref_big
    settings = Settings(temperature=1.0, max_new_tokens=16, ignore_eos=True, seed=2)
    out, _ = generate_ids(pair, ids, method, settings)
    assert len(out) == 16


def test_every_draft_level_sees_exactly_its_ancestors(monkeypatch):
    """A wrong draft mask only slows decoding (greedy equality cannot see it): compare every
    expanded node's draft logits with a fresh draft forward over prefix + its path."""
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", chat=False)
    seen = []
    original = Decoder._draft

    def spy(self, seq, tree):
        drafted = original(self, seq, tree)
        seen.append((list(seq), drafted))
        return drafted
    monkeypatch.setattr(Decoder, "_draft", spy)
    tree = Tree.from_branching([3, 2, 1, 1, 0, 2, 1, 0, 1])
    generate_ids(pair, ids, methods.sequoia(tree), Settings(max_new_tokens=20, ignore_eos=True))
    checked = 0
    for seq, drafted in seen[:4]:
        for v, logits in drafted.draft_logits.items():
            path_tokens = [drafted.tokens[u] for u in tree.path_to(v)[1:]]
            torch.testing.assert_close(logits, fresh_logits(pair.draft, seq + path_tokens), atol=1e-4, rtol=1e-4)
            checked += 1
    assert checked >= 12
