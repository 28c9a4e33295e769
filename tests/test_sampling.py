"""Verifier units on hand-made distributions (ALGORITHM.md §3), no models."""
import collections
import itertools
import math

import pytest
import torch
from scipy.stats import chisquare

from engine import sampling
from engine.errors import UserError
from tests.broken_verifiers import verify_without_residual


def t(*xs):
    return torch.tensor(xs, dtype=torch.float64)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def acceptance_rate(verify, draw, p, q, k, trials=4000, seed=0):
    g = gen(seed)
    hits = 0
    for _ in range(trials):
        children = draw(q, k, g)
        hits += verify(p, q, children, g).accepted is not None
    return hits / trials


def test_sequoia_covers_support_specinfer_does_not():
    p, q = t(1, 0, 0), t(0.5, 0.5, 0)
    seq = acceptance_rate(sampling.verify_sequoia, sampling.draw_without_replacement, p, q, 2)
    spec = acceptance_rate(sampling.verify_specinfer, sampling.draw_with_replacement, p, q, 2)
    assert seq == 1.0
    assert abs(spec - 0.75) < 0.03


def test_zero_draft_probability_is_never_auto_accepted():
    # token 2 has q = 0 (as if float16 underflowed); even with p putting all mass there,
    # it must not pass the test r * q < p.
    p, q = t(0, 0, 1), t(0.5, 0.5, 0)
    for seed in range(50):
        verdict = sampling.verify_sequoia(p, q, [2], gen(seed))
        assert verdict.accepted is None
        verdict = sampling.verify_specinfer(p, q, [2], gen(seed))
        assert verdict.accepted is None


def test_exhausted_draft_mass_falls_back_to_uniform_and_stays_exact():
    # q has support {0}; with 3 children, children 2 and 3 come from the uniform fallback.
    p, q = t(0.2, 0.3, 0.5, 0.0), t(1.0, 0, 0, 0)
    g = gen(1)
    counts = collections.Counter()
    n = 6000
    for _ in range(n):
        children = sampling.draw_without_replacement(q, 3, g)
        assert children[0] == 0 and len(set(children)) == 3
        verdict = sampling.verify_sequoia(p, q, children, g)
        if verdict.accepted is not None:
            counts[children[verdict.accepted]] += 1
        else:
            assert torch.isfinite(verdict.residual).all() and abs(float(verdict.residual.sum()) - 1) < 1e-9
            counts[sampling.sample_token(verdict.residual, g)] += 1
    observed = [counts[i] for i in range(3)]
    assert counts[3] == 0
    assert chisquare(observed, [n * x for x in (0.2, 0.3, 0.5)]).pvalue > 1e-3


def test_greedy_verifier_accepts_only_the_argmax():
    assert sampling.verify_greedy(5, [3, 5, 7]).accepted == 1
    v = sampling.verify_greedy(5, [3, 7])
    assert v.accepted is None and v.tried == [False, False]


def test_draws_without_replacement_follow_successive_conditionals():
    q = t(0.5, 0.3, 0.2)
    g = gen(3)
    first, second = collections.Counter(), collections.Counter()
    n = 6000
    for _ in range(n):
        a, b = sampling.draw_without_replacement(q, 2, g)
        first[a] += 1
        if a == 0:
            second[b] += 1
    assert chisquare([first[i] for i in range(3)], [n * x for x in (0.5, 0.3, 0.2)]).pvalue > 1e-3
    m = sum(second.values())
    assert chisquare([second[1], second[2]], [m * 0.6, m * 0.4]).pvalue > 1e-3


def confident_draft(size: int, lead: float, tail: dict[int, float]) -> tuple[int, torch.Tensor]:
    """q over `size` tokens: one token (`lead` logits ahead, the first of them) holds all but
    about e^-lead of the mass, the `tail` tokens share the rest in the given ratios, every other
    token has none. Returns (the confident token, q)."""
    logits = torch.full((size,), float("-inf"), dtype=torch.float64)
    for token, weight in tail.items():
        logits[token] = math.log(weight)
    top = min(set(range(size)) - set(tail))
    logits[top] = lead
    return top, sampling.draft_distribution(logits, 1.0)


# the draft's remainder after its confident token, in ratios 1 : 2 : 3: in one block of q, and in several
TAILS = {4: {1: 1.0, 2: 2.0, 3: 3.0}, 1500: {200: 1.0, 900: 2.0, 1400: 3.0}}


@pytest.mark.parametrize("size", list(TAILS))   # one block, and several (sampling.BLOCK)
def test_after_a_confident_first_child_the_next_follows_the_tiny_remainder(size):
    """The draft holds all but ~1e-17 of its mass on one token, below what one CDF over q resolves
    next to 1: the second child must still follow the remainder (ratios 1 : 2 : 3), the D the
    verifier renormalises to. Drawn from one CDF it came out uniform over the vocabulary."""
    tail = TAILS[size]
    top, q = confident_draft(size, 40.0, tail)
    assert float(q[top]) == 1.0 and 0 < float(q[list(tail)].sum()) < 1e-16
    g, second = gen(5), collections.Counter()
    n = 3000
    for _ in range(n):
        children = sampling.draw_without_replacement(q, 2, g)
        assert children[0] == top
        second[children[1]] += 1
    assert set(second) <= set(tail), sorted(second)[:5]
    assert chisquare([second[t] for t in tail], [n * w / 6 for w in tail.values()]).pvalue > 1e-3


@pytest.mark.parametrize("size", list(TAILS))
def test_a_confident_draft_that_the_target_overrules_stays_exact(size):
    """The case above end to end: the target disagrees with the confident draft, so the emitted
    token comes from later children or the residual, and must follow p."""
    tail = TAILS[size]
    top, q = confident_draft(size, 40.0, tail)
    p = torch.zeros(size, dtype=torch.float64)
    for token, mass in zip([top, *tail], (0.1, 0.5, 0.3, 0.1)):
        p[token] = mass
    g, counts = gen(6), collections.Counter()
    n = 4000
    for _ in range(n):
        children = sampling.draw_without_replacement(q, 3, g)
        verdict = sampling.verify_sequoia(p, q, children, g)
        counts[children[verdict.accepted] if verdict.accepted is not None
               else sampling.sample_token(verdict.residual, g)] += 1
    support = [top, *tail]
    assert set(counts) <= set(support)
    assert chisquare([counts[t] for t in support], [n * float(p[t]) for t in support]).pvalue > 1e-3


def test_a_subnormal_remainder_is_drawn_in_its_own_ratios():
    """The draft's remaining tokens 745 * T logits behind (37 at T = 0.05) hold subnormal masses,
    which come in steps of 5e-324: 5e-324 and 1e-323 must still be drawn 1 : 2, as the verifier's
    renormalised D has them (u * mass rounded to those steps gave 1 : 3 for 1 : 1)."""
    q = torch.zeros(1500, dtype=torch.float64)
    q[0], q[700], q[701] = 1.0, 5e-324, 1e-323
    g, second = gen(8), collections.Counter()
    n = 3000
    for _ in range(n):
        second[sampling.draw_without_replacement(q, 2, g)[1]] += 1
    assert set(second) == {700, 701}
    assert chisquare([second[700], second[701]], [n / 3, 2 * n / 3]).pvalue > 1e-3


def test_draws_across_blocks_are_distinct_and_use_the_support_first():
    """A vocabulary of several blocks: k draws are distinct, in range, and reach tokens of no
    mass only once q's support is used up (then uniformly over the rest)."""
    g = gen(7)
    size = 3 * sampling.BLOCK + 17
    q = torch.zeros(size, dtype=torch.float64)
    support = [3, sampling.BLOCK + 5, 2 * sampling.BLOCK + 400, size - 1]
    q[support] = t(0.4, 0.3, 0.2, 0.1)
    beyond = collections.Counter()
    for _ in range(400):
        children = sampling.draw_without_replacement(q, 7, g)
        assert len(set(children)) == 7 and all(0 <= c < size for c in children)
        assert sorted(children[:4]) == sorted(support)
        beyond.update(children[4:])
    assert len(beyond) > 500   # the uniform rest spreads over the whole vocabulary


def test_a_draft_with_nan_logits_drafts_uniformly_and_stays_exact():
    """NaN or infinite draft logits (a draft overflowing float16) made q all NaN: every draw and
    test on it was garbage (token 0 emitted every time). Such a row drafts from uniform q."""
    logits = torch.tensor([1.0, float("nan"), 0.5, float("inf")])
    q = sampling.draft_distribution(logits, 0.7)
    assert torch.equal(q, torch.full((4,), 0.25, dtype=torch.float64))
    rows = sampling.draft_distribution(torch.stack([logits, torch.tensor([0.0, 1.0, 2.0, 3.0])]), 1.0)
    assert torch.equal(rows[0], q) and torch.allclose(rows[1], torch.softmax(torch.arange(4.0, dtype=torch.float64), 0))
    p = t(0.5, 0.3, 0.15, 0.05)
    assert emitted_distribution_pvalue(sampling.verify_sequoia, sampling.draw_without_replacement, p, q, k=2,
                                       n=3000) > 1e-3


def test_nan_target_logits_are_an_error_not_a_token():
    """generate() refuses to sample from NaN probabilities; the engine drew the last token instead."""
    with pytest.raises(UserError, match="NaN or infinite logits"):
        sampling.target_distribution(torch.tensor([1.0, float("nan"), 0.0]), 1.0)
    with pytest.raises(UserError):
        sampling.target_distribution(torch.tensor([1.0, float("inf"), 0.0]), 0.7, top_p=0.9)
    assert sampling.target_distribution(torch.tensor([1.0, float("-inf"), 0.0]), 1.0)[1] == 0   # -inf is no mass


def emitted_distribution_pvalue(verify, draw, p, q, k, n=8000, seed=0):
    g = gen(seed)
    counts = collections.Counter()
    for _ in range(n):
        children = draw(q, k, g)
        verdict = verify(p, q, children, g)
        token = children[verdict.accepted] if verdict.accepted is not None else sampling.sample_token(verdict.residual, g)
        counts[token] += 1
    return chisquare([counts[i] for i in range(len(p))], [n * float(x) for x in p]).pvalue


P = t(0.35, 0.25, 0.2, 0.1, 0.06, 0.04)
Q = t(0.05, 0.1, 0.15, 0.3, 0.25, 0.15)


@pytest.mark.parametrize("verify,draw", [
    (sampling.verify_sequoia, sampling.draw_without_replacement),
    (sampling.verify_specinfer, sampling.draw_with_replacement),
])
def test_emitted_token_follows_target(verify, draw):
    assert emitted_distribution_pvalue(verify, draw, P, Q, k=3) > 1e-3


def test_distribution_check_has_teeth():
    assert emitted_distribution_pvalue(verify_without_residual, sampling.draw_without_replacement, P, Q, k=3) < 1e-6


def test_top_p_matches_transformers_warper_definition():
    from transformers.generation.logits_process import TopPLogitsWarper
    logits = torch.tensor([2.0, 1.0, 0.5, 0.1, -1.0])
    p = sampling.target_distribution(logits, 0.7, 0.8)
    ref = torch.softmax(TopPLogitsWarper(0.8)(None, (logits / 0.7)[None])[0].double(), -1)
    assert torch.allclose(p, ref), (p - ref).abs().max()
    assert (p == 0).sum() >= 1  # top-p removed something


def swapped_update_order(p, q, children, generator):
    """Broken: removes x from D before forming the residual (the order matters)."""
    residual, draft = p.clone(), q.clone()
    for position, token in enumerate(children):
        r = float(torch.rand((), generator=generator, dtype=torch.float64))
        if float(draft[token]) > 0 and r * float(draft[token]) < float(residual[token]):
            return sampling.Verdict(position, None)
        draft[token] = 0.0
        draft = draft / draft.sum()
        residual = (residual - draft).clamp_min(0)
        residual = residual / residual.sum()
    return sampling.Verdict(None, residual)


def test_distribution_check_catches_a_subtle_update_order_bug():
    assert emitted_distribution_pvalue(swapped_update_order, sampling.draw_without_replacement, P, Q, k=3) < 1e-4


def test_uniform_fallback_lets_later_children_be_accepted():
    # q covers only token 0; without the fallback only child 1 could ever pass (rate 0.2)
    p, q = t(0.2, 0.3, 0.5, 0.0), t(1.0, 0, 0, 0)
    rate = acceptance_rate(sampling.verify_sequoia, sampling.draw_without_replacement, p, q, 3)
    assert abs(rate - 0.9) < 0.03


def _ordered_draw_pvalue(draw, q, k, exact_prob, n=12000, seed=5):
    g = gen(seed)
    counts = collections.Counter(tuple(draw(q, k, g)) for _ in range(n))
    keys = [c for c in itertools.product(range(len(q)), repeat=k) if exact_prob(c) > 0]
    assert set(counts) <= set(keys), f"impossible draws: {set(counts) - set(keys)}"
    return chisquare([counts[c] for c in keys], [n * exact_prob(c) for c in keys]).pvalue


def test_every_ordered_draw_without_replacement_has_its_exact_probability():
    """All ordered triples, including a zero-mass token that may only come from the uniform
    fallback once the support is used up (q has 3 tokens of mass, 4 draws exhaust it)."""
    q = t(0.5, 0.0, 0.3, 0.15, 0.05)

    def successive(c):
        if len(set(c)) < len(c):
            return 0.0
        prob, left = 1.0, 1.0
        for x in c:
            if float(q[x]) == 0:
                return 0.0
            prob *= float(q[x]) / left
            left -= float(q[x])
        return prob
    assert _ordered_draw_pvalue(sampling.draw_without_replacement, q, 3, successive) > 1e-3
    g = gen(9)
    for _ in range(200):  # support of 4 used up by 4 draws: the 5th is the zero-mass token
        five = sampling.draw_without_replacement(q, 5, g)
        assert sorted(five) == [0, 1, 2, 3, 4] and five[4] == 1


def test_every_ordered_draw_with_replacement_has_its_exact_probability():
    q = t(0.5, 0.0, 0.3, 0.2)
    exact = lambda c: float(q[c[0]] * q[c[1]] * q[c[2]])  # noqa: E731
    assert _ordered_draw_pvalue(sampling.draw_with_replacement, q, 3, exact) > 1e-3


def test_a_sampler_that_ignores_the_drawn_mass_fails_the_ordered_test():
    """Teeth: successive draws that renormalise wrongly (uniform second draw) are caught."""
    q = t(0.5, 0.0, 0.3, 0.15, 0.05)

    def wrong(q, k, g):
        first = sampling.sample_token(q, g)
        rest = [i for i in range(len(q)) if i != first and float(q[i]) > 0]
        picks = torch.randperm(len(rest), generator=g)[:k - 1].tolist()
        return [first] + [rest[i] for i in picks]

    def successive(c):
        if len(set(c)) < len(c) or any(float(q[x]) == 0 for x in c):
            return 0.0
        prob, left = 1.0, 1.0
        for x in c:
            prob *= float(q[x]) / left
            left -= float(q[x])
        return prob
    assert _ordered_draw_pvalue(wrong, q, 3, successive) < 1e-4
