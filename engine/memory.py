"""Refuse work that would not fit in memory before trying it (an OOM kill takes the app down).

Estimate: KV cache rows for the whole context in both models, plus the logits and attention
of one tree forward. Weights are already loaded, so only what a run adds is counted."""
from __future__ import annotations

import psutil
import torch

from engine.errors import UserError

SAFETY = 0.8  # use at most this share of what is free now


def kv_bytes_per_token(model) -> int:
    cfg = model.config
    get = lambda *names: next((getattr(cfg, n) for n in names if getattr(cfg, n, None)), None)  # noqa: E731
    layers = get("num_hidden_layers", "n_layer") or 1
    heads = get("num_attention_heads", "n_head") or 1
    kv_heads = get("num_key_value_heads") or heads
    hidden = get("hidden_size", "n_embd") or 1
    head_dim = get("head_dim") or hidden // heads
    itemsize = torch.finfo(model.dtype).bits // 8 if model.dtype.is_floating_point else 4
    return 2 * layers * kv_heads * head_dim * itemsize


def run_bytes(pair, context_tokens: int, tree_nodes: int) -> int:
    kv = (kv_bytes_per_token(pair.target) + kv_bytes_per_token(pair.draft)) * (context_tokens + tree_nodes)
    heads = getattr(pair.target.config, "num_attention_heads", None) or getattr(pair.target.config, "n_head", 1)
    logits = tree_nodes * pair.vocab_size * 4 * 3  # fp32 logits + probability copies
    attention_scores = heads * tree_nodes * (context_tokens + tree_nodes) * 4
    return kv + logits + attention_scores


def free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return int(psutil.virtual_memory().available)


def check_fits(pair, context_tokens: int, tree_nodes: int) -> None:
    need, free = run_bytes(pair, context_tokens, tree_nodes), free_bytes(pair.device)
    if need > SAFETY * free:
        raise UserError(f"this run needs about {need / 2**30:.1f} GiB ({context_tokens} tokens of context, "
                        f"{tree_nodes}-node trees) but only {free / 2**30:.1f} GiB is free on {pair.device}; "
                        "use fewer new tokens or a smaller tree budget")
