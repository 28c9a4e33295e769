"""Engine steps for the check: single speculative steps from caches prefilled once per prefix, and
seeded generators (the clock that waits for the GPU is engine.models.synced_clock)."""
from __future__ import annotations

import copy

import torch

from engine import attention
from engine.decoding import Decoder, make_generator
from engine.methods import Method
from engine.models import ModelPair
from engine.settings import Settings


def seeded_generator(pair: ModelPair, seed: int) -> torch.Generator:
    """A generator on the pair's device (CPU for MPS) seeded with `seed`."""
    return make_generator(pair.device, int(seed) % (2**63))


class Prefilled:
    """Both caches filled with prefix[:-1], the state Decoder.run reaches after its prefill, so that
    many single steps from one prefix pay for the prefill once."""

    def __init__(self, pair: ModelPair, prefix: list[int], with_draft: bool):
        self.pair, self.prefix = pair, list(prefix)
        self.target = attention.new_cache(pair.target)
        self.draft = attention.new_cache(pair.draft)
        self.draft_len = 0
        if len(prefix) > 1:
            attention.forward_causal(pair.target, self.target, self.prefix[:-1])
            if with_draft:
                attention.forward_causal(pair.draft, self.draft, self.prefix[:-1])
                self.draft_len = len(prefix) - 1

    def step(self, method: Method, settings: Settings, generator: torch.Generator) -> dict:
        """One speculative step through the engine's Decoder; returns its new tokens and accepted ranks.
        (Uses Decoder._step: run() has no way to start from prefilled caches.)"""
        decoder = Decoder(self.pair, method, settings, generator=generator)
        decoder.target_cache = copy.deepcopy(self.target)
        if method.uses_draft:
            decoder.draft_cache = copy.deepcopy(self.draft)
            decoder.draft_len = self.draft_len
        tree = method.tree.truncated(self.pair.context_limit - len(self.prefix))
        parts = decoder.step(list(self.prefix), tree)
        return {"new_ids": parts["new_ids"], "accepted_ranks": parts["accepted_ranks"]}
