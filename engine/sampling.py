"""Distributions, draws and the verifiers: pure tensor functions, no models.

Everything here works in float64 on probability vectors over the target's vocabulary
(ALGORITHM.md §3). float16 probabilities underflow, and an underflowed draft
probability of 0 would wave through a token the draft could never have proposed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from engine.errors import UserError

log = logging.getLogger(__name__)

PROB_DTYPE = torch.float64


def warped_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int | None = 0) -> torch.Tensor:
    """Temperature, then top-k, then top-p: transformers' warpers in generate()'s order (on float32
    logits). top_k 0 or None is off, as in generate()."""
    scores = logits.float()
    squeeze = scores.dim() == 1
    if squeeze:
        scores = scores[None]
    scores = TemperatureLogitsWarper(float(temperature))(None, scores)
    if top_k:
        scores = TopKLogitsWarper(int(top_k))(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(float(top_p))(None, scores)
    return scores[0] if squeeze else scores


def target_distribution(logits: torch.Tensor, temperature: float, top_p: float = 1.0,
                        top_k: int | None = 0) -> torch.Tensor:
    """p: what plain sampling from the target would use. NaN or infinite logits leave p undefined
    (generate() refuses to sample from them too): an error, not a token drawn from NaNs."""
    p = torch.softmax(warped_logits(logits, temperature, top_p, top_k).to(PROB_DTYPE), dim=-1)
    if bool(torch.isnan(p).any()):
        raise UserError("the target model returned NaN or infinite logits, so its distribution is undefined "
                        "(an overflow in its dtype? load it in float32 or bfloat16)")
    return p


def draft_distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """q: softmax(draft_logits / T). Any q keeps the output exact; no top-p needed. A row of
    NaN or infinite logits (a draft overflowing its dtype) gives a uniform q: it proposes
    nothing useful, but what is drawn from it and verified against it stays exact."""
    q = torch.softmax(logits.to(PROB_DTYPE) / float(temperature), dim=-1)
    broken = torch.isnan(q).any(dim=-1, keepdim=True)
    if bool(broken.any()):
        if not _said["broken draft"]:   # once per process: a broken draft would say it at every node
            _said["broken draft"] = True
            log.warning("the draft returned NaN or infinite logits: drafting from a uniform distribution there")
        q = torch.where(broken, torch.full_like(q, 1.0 / q.shape[-1]), q)
    return q


_said = {"broken draft": False}


def _inverse_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Indices i with cdf[i-1] <= u < cdf[i]: tokens of zero mass (flat steps) are never hit."""
    return torch.searchsorted(cdf, u, right=True).clamp_max(cdf.numel() - 1)


def sample_token(dist: torch.Tensor, generator: torch.Generator) -> int:
    """One draw from dist by inverting its CDF: exact like torch.multinomial, ~10x cheaper on a
    150k vocabulary (one cumulative sum instead of multinomial's general machinery)."""
    cdf = torch.cumsum(dist, 0)
    u = torch.rand((1,), generator=generator, device=dist.device, dtype=PROB_DTYPE) * cdf[-1]
    return int(_inverse_cdf(cdf, u))


def _uniform(generator: torch.Generator, device) -> float:
    return float(torch.rand((), generator=generator, device=device, dtype=PROB_DTYPE))


BLOCK = 512   # tokens per block of draw_without_replacement's two-level draw
TINY, SCALE_UP = 2.0 ** -500, 2.0 ** 1000   # a mass left below TINY is multiplied by SCALE_UP first


def draw_without_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """k successive draws without replacement from q, in draw order: each from q with the tokens
    drawn before it removed, renormalised, which is the D the verifier tests that child against
    (ALGORITHM.md section 3).

    Every draw is exact to float rounding relative to the mass still left. One CDF over q cannot
    be: it resolves about 1e-16 of q's total, so after a confident draft's first child (1e-13 of
    the mass left at a logit lead of 30, or of 9 at T = 0.25) the next child's draw was far from
    that remainder, and the output far from the target's distribution. So two levels: the tokens
    in blocks of BLOCK, a block picked by the blocks' masses, a token by its block's own CDF; a
    drawn token's block sums its remaining tokens again (no subtraction from a larger total).
    Once q's support is used up, later draws are uniform over the tokens not drawn yet, exactly
    the fallback the verifier applies when D runs out of mass."""
    if k == 1:
        return [sample_token(q, generator)]
    size = q.numel()
    blocks = q.new_zeros(-(-size // BLOCK) * BLOCK)   # q padded to whole blocks; drawn tokens zeroed here
    blocks[:size] = q
    blocks = blocks.view(-1, BLOCK)
    mass = blocks.sum(1)
    drawn: list[int] = []
    for i in range(k):
        block_cdf = torch.cumsum(mass, 0)
        left = float(block_cdf[-1])
        if left <= 0:
            return drawn + _uniform_rest(size, drawn, k - i, generator, q.device)
        if left < TINY:   # subnormal masses come in steps of 5e-324: scale by a power of two (exact)
            blocks.mul_(SCALE_UP)
            mass.mul_(SCALE_UP)
            block_cdf = torch.cumsum(mass, 0)
        u = torch.rand((2,), generator=generator, device=q.device, dtype=PROB_DTYPE)
        b = _draw_index(block_cdf, u[0])
        row = blocks[b]
        j = _draw_index(torch.cumsum(row, 0), u[1])
        drawn.append(b * BLOCK + j)
        row[j] = 0.0
        mass[b] = row.sum()
    return drawn


def _draw_index(cdf: torch.Tensor, u: torch.Tensor) -> int:
    """The entry of positive mass that u (uniform on [0, 1)) picks by inverting cdf."""
    total = cdf[-1]
    x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))  # u * total may round up to it
    return int(_inverse_cdf(cdf, x.reshape(1)))


def _uniform_rest(size: int, drawn: list[int], k: int, generator: torch.Generator, device) -> list[int]:
    """k draws without replacement, uniform over the tokens not in `drawn`."""
    mask = torch.ones(size, dtype=torch.bool, device=device)
    mask[drawn] = False
    rest = mask.nonzero().flatten()
    order = torch.randperm(rest.numel(), generator=generator, device=device)[:k]
    return rest[order].tolist()


def draw_with_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """k independent draws from q (SpecInfer), by inverting its CDF."""
    cdf = torch.cumsum(q, 0)
    u = torch.rand((k,), generator=generator, device=q.device, dtype=PROB_DTYPE) * cdf[-1]
    return _inverse_cdf(cdf, u).tolist()


def top_tokens(logits: torch.Tensor, k: int) -> list[int]:
    """Greedy drafting: the k most likely tokens, best first."""
    return torch.topk(logits.float(), k).indices.tolist()


@dataclass
class Verdict:
    """What happened at one accepted node: which child (position in the child list) was
    accepted, if any, and the distribution to draw the bonus token from otherwise."""
    accepted: int | None
    residual: torch.Tensor | None  # R after all rejections; None when a child was accepted
    tried: list[bool] = field(default_factory=list)  # per child tried, in rank order: accepted?


def _normalised(x: torch.Tensor) -> torch.Tensor | None:
    total = x.sum()
    return x / total if total > 0 else None


def verify_sequoia(p: torch.Tensor, q: torch.Tensor, children: list[int],
                   generator: torch.Generator) -> Verdict:
    """Sequoia's verifier for children drawn without replacement from q (ALGORITHM.md §3)."""
    return _verify(p, q, children, generator, without_replacement=True)


def verify_specinfer(p: torch.Tensor, q: torch.Tensor, children: list[int],
                     generator: torch.Generator) -> Verdict:
    """SpecInfer: children drawn i.i.d. from q; D is never changed after a rejection."""
    return _verify(p, q, children, generator, without_replacement=False)


def _verify(p, q, children, generator, without_replacement: bool) -> Verdict:
    residual, draft = p.clone(), q.clone()
    rejected = torch.zeros_like(p, dtype=torch.bool)
    tried: list[bool] = []
    for position, token in enumerate(children):
        r = _uniform(generator, p.device)
        d_x, r_x = float(draft[token]), float(residual[token])
        # d_x == 0: the token could not have been drafted from D; never wave it through.
        if d_x > 0 and r * d_x < r_x:
            tried.append(True)
            return Verdict(accepted=position, residual=None, tried=tried)
        tried.append(False)
        rejected[token] = True
        new_residual = _normalised((residual - draft).clamp_min(0))
        if new_residual is None:  # R <= D everywhere: only reachable through rounding
            new_residual = _normalised(torch.where(rejected, 0.0, p))
        residual = new_residual if new_residual is not None else residual
        if without_replacement:
            draft[token] = 0.0
            new_draft = _normalised(draft)
            # The paper's fallback: no draft mass left -> uniform over tokens not yet rejected.
            draft = new_draft if new_draft is not None else _normalised((~rejected).to(PROB_DTYPE))
    return Verdict(accepted=None, residual=residual, tried=tried)


def verify_greedy(target_argmax: int, children: list[int]) -> Verdict:
    """T = 0: the child equal to the target's argmax is accepted; the bonus is that argmax."""
    tried = []
    for position, token in enumerate(children):
        tried.append(token == target_argmax)
        if token == target_argmax:
            return Verdict(accepted=position, residual=None, tried=tried)
    return Verdict(accepted=None, residual=None, tried=tried)
