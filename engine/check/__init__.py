"""Losslessness self-check for a draft/target pair (`python -m engine check`, the "Check this pair" button).

Three sections, each a list of CheckItems with status pass / fail / warn / skip:

greedy     For each prompt and method, the speculative greedy output must equal the target's own greedy
           output token for token. The reference is transformers' `generate(do_sample=False)` on the target
           alone, with the model's generation config swapped for a neutral one for the call (a checkpoint's
           repetition_penalty or no_repeat_ngram_size would change "greedy"). A difference is a FAIL, shown
           with the first differing token; it is only a WARN when the two tokens' target logits there are
           within the dtype's rounding (a near tie: both paths are right up to rounding).
sampling   For each method and each sampling setting (T=1, and T=0.7 with top-p 0.9), N speculative steps
           from a few prefixes (positions along the prompts' greedy continuations where the target's
           distribution is most spread out); each sample is one real engine step (Decoder._step from
           caches prefilled once per prefix: its own draft forwards and one target tree forward), so the
           sampling part costs N x methods x settings steps. The emitted tokens are compared with the
           target's exact next-token distribution by a chi-square test:
             - "next token": the first token of the step, against p(. | prefix);
             - "after an accepted draft token": when the first token was an accepted draft node, the
               token after it (verified one tree level deeper, or the bonus there), against
               p(. | prefix + that token). Conditioning on which token was accepted is exact: the
               verification below a node uses fresh randomness, so it must reproduce p(. | prefix + a).
           The reference distributions come from plain transformers forwards (no tree mask, no engine
           code): one forward per prefix, plus one batched single-token forward on its cache for the
           accepted first tokens. Temperature and top-p are transformers' own logits warpers.
           Statistic (sample_test): per group (a prefix, or a prefix + accepted token) one bin per token
           whose expected count is >= 5 and the tail in an "other" bin (merged into the smallest bin when
           "other" itself would expect < 5); groups too small for two such bins are pooled by the
           randomised probability integral transform (each sample -> a uniform draw inside its token's
           slice of the group's probability-ordered CDF; Uniform(0, 1) under exactness, whatever the
           group) into equal bins. All pieces cover disjoint samples, so their chi-squares add up into
           one test. A sampled token that the target cannot produce (probability 0, e.g. outside the
           top-p nucleus) fails the test outright.
           Verdict: FAIL when p < alpha (default 0.001). Each p-value is uniform under exactness, so one
           test fails by chance once in 1000 runs: a FAIL is strong evidence (re-run with another seed to
           confirm). Each PASS line states the smallest deviation (chi-square distance over its bins)
           that the test detects with 90 % probability at that N.
structure  The tree-mask probes of both models (ModelPair.probe), tokenizer equality (re-loaded from the
           model folders), vocabulary sizes, dtype/device/eval mode, and the KV-commit check: after each
           of a few greedy speculative steps (the draft's top tokens, accepted most often, so accepted
           paths get committed), the logits from the committed caches equal those of a fresh plain
           forward over the committed sequence (target and draft).

Trees used (fixed shapes, so that the check does not depend on measuring acceptance first; all of depth
3 so that a sample costs 2 draft forwards + 1 target forward; deeper shapes are exercised by the test suite):
    sequoia    Tree.from_branching([3, 2, 1]): root with 3 children (drawn without replacement),
               the rank-1 child with 2, the rank-2 child with 1: 7 nodes, 3 levels
    specinfer  SpecInfer 3x3: 3 i.i.d. chains of 2 tokens: 7 nodes, 3 levels
    chain      a chain of 2 drafted tokens: 3 nodes, 3 levels
    ar         plain autoregressive decoding through the engine (optional)
Pass Method objects in CheckConfig.methods to check other shapes.

Timing: `estimate_check` times one prefill and one speculative step per method on the first prompt and
extrapolates; with `samples=None` it also picks N so that the sampling part takes about
`sample_budget_seconds` (between MIN_AUTO_SAMPLES and MAX_AUTO_SAMPLES).

Layout of this package (one concern per module):
    config.py           CheckConfig, method names and their fixed shapes, thresholds, the encoded prompts
    report.py           CheckItem, CheckEstimate, CheckReport (verdict, summary, text, JSON)
    stats.py            the chi-square tests (chi_square, pit_chi_square, sample_test, detectable_distance)
    reference.py        what the target does by plain transformers (hf_greedy, reference_distribution, ...)
    stepping.py         single engine steps from prefilled caches, seeded generators, a GPU-synced clock
    context.py          CheckContext: what every section shares (report, progress, stop, greedy references)
    greedy_check.py     the greedy section
    sampling_check.py   the sampling section
    structure_check.py  the structure section (probes, tokenizer, dtype/device, KV commit)
    estimate.py         estimate_check
    runner.py           run_check
"""
from engine.check.config import (ALPHA, CHECK_METHOD_NAMES, DEFAULT_METHODS, KV_ROUNDING_STEPS, KV_TOLERANCE,
                                  MAX_AUTO_SAMPLES, MAX_CONTINUATIONS, MIN_AUTO_SAMPLES, MIN_EXPECTED, NUCLEUS_TOLERANCE,
                                  POWER, SAMPLING_SETTINGS, SECTIONS, TIE_TOLERANCE, CheckConfig, Progress, check_method,
                                  parse_methods)
from engine.check.estimate import estimate_check
from engine.check.reference import hf_greedy, reference_distribution
from engine.check.report import EXPLANATION, CheckEstimate, CheckItem, CheckReport
from engine.check.runner import run_check
from engine.check.stats import ChiSquare, chi_square, detectable_distance, pit_chi_square, sample_test
from engine.errors import UserError  # callers catch check.UserError, as when this was one module

__all__ = ["ALPHA", "CHECK_METHOD_NAMES", "DEFAULT_METHODS", "KV_ROUNDING_STEPS", "KV_TOLERANCE", "MAX_AUTO_SAMPLES",
           "MAX_CONTINUATIONS", "MIN_AUTO_SAMPLES", "MIN_EXPECTED", "NUCLEUS_TOLERANCE", "POWER", "SAMPLING_SETTINGS",
           "SECTIONS", "TIE_TOLERANCE", "CheckConfig", "Progress", "check_method", "parse_methods", "estimate_check",
           "hf_greedy", "reference_distribution", "EXPLANATION", "CheckEstimate", "CheckItem", "CheckReport",
           "run_check", "ChiSquare", "chi_square", "detectable_distance", "pit_chi_square", "sample_test",
           "UserError"]
