"""What the target itself does, computed with plain transformers (no tree mask, no engine code), so that
the check does not trust the code it checks: greedy generate(), plain forwards, and the sampling
distribution after transformers' own temperature, top-k and top-p warpers, in generate()'s order."""
from __future__ import annotations

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from engine.models import ModelPair


def reference_distribution(logits: torch.Tensor, temperature: float, top_p: float, top_k: int = 0) -> torch.Tensor:
    """The distribution transformers' generate(do_sample=True) draws from: temperature, top-k (0 = off),
    then top-p warpers on the float32 logits (generate()'s order), softmax in float64. Written here, not taken from engine.sampling, so that the
    check does not trust the code it checks."""
    scores = logits.float()[None]
    scores = TemperatureLogitsWarper(float(temperature))(None, scores)
    if top_k:
        scores = TopKLogitsWarper(int(top_k))(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(float(top_p))(None, scores)
    return torch.softmax(scores[0].double(), dim=-1)


def near_nucleus(token: int, logits: torch.Tensor, temperature: float, top_p: float, tolerance: float,
                 top_k: int = 0) -> bool:
    """A token outside the reference top-p nucleus only because of rounding: the tempered mass of the
    tokens strictly more likely than it is within `tolerance` of top_p. Never a token top-k cut (k or
    more tokens strictly more likely): that one is impossible outright."""
    if top_p >= 1.0:
        return False
    if top_k and int((logits > logits[token]).sum()) >= top_k:
        return False
    if top_k:  # the nucleus is taken among the top-k tokens, renormalised
        kth = torch.topk(logits.float(), min(int(top_k), logits.numel())).values[-1]
        logits = logits.masked_fill(logits.float() < kth, float("-inf"))
    tempered = torch.softmax(logits.double() / temperature, -1)
    above = float(tempered[tempered > tempered[token]].sum())
    return above <= top_p + tolerance


def pad_id(pair: ModelPair) -> int:
    """The pad id generate() needs: the tokenizer's, else the smallest EOS id, else 0."""
    pad = getattr(pair.tokenizer, "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    return min(pair.eos_ids) if pair.eos_ids else 0


@torch.inference_mode()
def hf_greedy(pair: ModelPair, ids: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """The target's own greedy decoding by transformers' generate(): n tokens (EOS does not stop it)
    and the target's logits [n, V] before each of them. The model's generation config is swapped for a
    neutral one during the call: repetition penalties and the like are not part of "the target"."""
    model = pair.target
    saved = model.generation_config
    pad = pad_id(pair)
    model.generation_config = GenerationConfig(pad_token_id=pad)
    try:
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n, eos_token_id=None, pad_token_id=pad,
                                  output_logits=True, return_dict_in_generate=True)
        inputs = torch.tensor([ids], device=pair.device)
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config)
    finally:
        model.generation_config = saved
    tokens = out.sequences[0, len(ids):].tolist()
    logits = torch.stack([step[0] for step in out.logits]).float().cpu()
    return tokens, logits


@torch.inference_mode()
def plain_logits(model, seq: list[int]) -> torch.Tensor:
    """Last-position logits of a plain transformers forward (no custom mask, no cache)."""
    return model(input_ids=torch.tensor([seq], device=model.device)).logits[0, -1].float().cpu()


@torch.inference_mode()
def prefix_and_continuations(model, prefix: list[int], tokens: list[int]) -> tuple[torch.Tensor, dict]:
    """One plain forward over the prefix (logits of its next token) and one batched single-token
    forward on its cache for each continuation token: {token: logits of the token after it}."""
    device = model.device
    out = model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
    first = out.logits[0, -1].float().cpu()
    if not tokens:
        return first, {}
    # transformers 5.25 names the output's cache `cache` (reading past_key_values logs a deprecation)
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    cache.batch_repeat_interleave(len(tokens))
    nxt = model(input_ids=torch.tensor(tokens, device=device)[:, None],
                attention_mask=torch.ones(len(tokens), len(prefix) + 1, dtype=torch.long, device=device),
                cache=cache, use_cache=True).logits[:, -1].float().cpu()
    return first, dict(zip(tokens, nxt))
