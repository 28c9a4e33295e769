"""Distributions, draws and the verifiers: pure tensor functions, no models.

Everything here works in float64 on probability vectors over the target's vocabulary
(ALGORITHM.md §3). float16 probabilities underflow, and an underflowed draft
probability of 0 would wave through a token the draft could never have proposed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

PROB_DTYPE = torch.float64


def warped_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Temperature then top-p, exactly as transformers' warpers define them (on float32 logits)."""
    scores = logits.float()
    squeeze = scores.dim() == 1
    if squeeze:
        scores = scores[None]
    scores = TemperatureLogitsWarper(float(temperature))(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(float(top_p))(None, scores)
    return scores[0] if squeeze else scores


def target_distribution(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """p: what plain sampling from the target would use."""
    return torch.softmax(warped_logits(logits, temperature, top_p).to(PROB_DTYPE), dim=-1)


def draft_distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """q: softmax(draft_logits / T). Any q keeps the output exact; no top-p needed."""
    return torch.softmax(logits.to(PROB_DTYPE) / float(temperature), dim=-1)


def sample_token(dist: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(dist, 1, generator=generator))


def _uniform(generator: torch.Generator, device) -> float:
    return float(torch.rand((), generator=generator, device=device, dtype=PROB_DTYPE))


def draw_without_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """k successive draws without replacement from q (Gumbel-top-k), in draw order.

    Once q's support is used up, later draws are uniform over the tokens not drawn yet,
    which is exactly the fallback the verifier applies when D runs out of mass."""
    u = torch.rand(q.shape, generator=generator, device=q.device, dtype=PROB_DTYPE)
    u = u.clamp_min(torch.finfo(PROB_DTYPE).tiny)
    gumbel = -torch.log(-torch.log(u))
    # log q >= -745 for any positive float64, so -1e6 puts zero-mass tokens after all others
    # while their own Gumbel noise still orders them uniformly at random.
    keys = torch.where(q > 0, torch.log(q), torch.full_like(q, -1e6)) + gumbel
    return torch.topk(keys, k).indices.tolist()


def draw_with_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    return torch.multinomial(q, k, replacement=True, generator=generator).tolist()


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
