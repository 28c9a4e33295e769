"""Deliberately wrong verifiers, for tests that must fail on them (the statistics have teeth)."""
import torch

from engine import sampling


def verify_without_residual(p, q, children, generator):
    """Broken: a rejection updates neither the residual R nor the draft D (ALGORITHM.md section
    3), so every child is tested against p and q themselves and the bonus is drawn from p."""
    for position, token in enumerate(children):
        r = float(torch.rand((), generator=generator, dtype=torch.float64, device=p.device))
        if r * float(q[token]) < float(p[token]):
            return sampling.Verdict(position, None, [False] * position + [True])
    return sampling.Verdict(None, p.clone(), [False] * len(children))
