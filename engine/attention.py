"""Tree attention on top of a Hugging Face KV cache (ALGORITHM.md §5).

Layout during a step (both models): cache columns [0, base) hold the committed prefix
except its last token; tree node i sits at column base + i (node 0 = the root = the last
committed token). The draft only feeds the nodes that have children, so it keeps its own
column map. After verification `commit` keeps the accepted path's rows and drops the rest.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from engine.errors import UserError


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool [q, k] -> float [1, 1, q, k]: 0 where visible, the dtype's most negative value elsewhere.
    A boolean mask is silently wrong on the eager path of transformers 5.x, so always float."""
    neg = torch.finfo(dtype).min
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, neg)
    return mask[None, None]


def causal_visibility(cache_len: int, new: int, device) -> torch.Tensor:
    """Plain causal rows for `new` tokens appended after `cache_len` cached ones."""
    cols = torch.arange(cache_len + new, device=device)
    rows = torch.arange(new, device=device)[:, None] + cache_len
    return cols[None, :] <= rows


def tree_visibility(prefix_len: int, ancestors: torch.Tensor, rows: list[int], columns: list[int],
                    device) -> torch.Tensor:
    """Rows for tree nodes `rows` on a cache holding the prefix then tree nodes `columns`
    (in cache order, the new rows last): see the whole prefix, ancestors and self only."""
    tree_part = ancestors[rows][:, columns].to(device)
    prefix_part = torch.ones(len(rows), prefix_len, dtype=torch.bool, device=device)
    return torch.cat([prefix_part, tree_part], dim=1)


def input_device(model) -> torch.device:
    """Where a model's inputs go. For an accelerate device map that is the embedding's device
    (weights offloaded to disk or cpu run on the cpu); otherwise the model's own device."""
    cached = getattr(model, "_sequoia_input_device", None)
    if cached is not None:
        return cached
    device = model.device
    device_map = getattr(model, "hf_device_map", None)
    if device_map:
        embedding = model.get_input_embeddings()
        name = next((n for n, m in model.named_modules() if m is embedding), "")
        owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
        place = device_map[max(owners, key=len)] if owners else next(iter(device_map.values()))
        if isinstance(place, int):
            device = torch.device("cuda", place)
        elif place in ("disk", "meta", "cpu"):
            device = torch.device("cpu")
        else:
            device = torch.device(place)
    model._sequoia_input_device = device
    return device


@torch.inference_mode()
def forward(model, cache: DynamicCache, input_ids: list[int], position_ids: list[int],
            visible: torch.Tensor) -> torch.Tensor:
    """One forward of new tokens with an explicit mask and positions; returns float32 logits [m, V]."""
    device = input_device(model)
    ids = torch.tensor([input_ids], device=device)
    pos = torch.tensor([position_ids], device=device)
    mask = additive_mask(visible.to(device), model.dtype)
    out = model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache, use_cache=True)
    return out.logits[0].float()


def forward_causal(model, cache: DynamicCache, input_ids: list[int]) -> torch.Tensor:
    start = cache.get_seq_length()
    visible = causal_visibility(start, len(input_ids), input_device(model))
    return forward(model, cache, input_ids, list(range(start, start + len(input_ids))), visible)


@torch.inference_mode()  # the cache tensors were made in inference mode; in-place writes need it too
def commit(cache: DynamicCache, prefix: int, rows: list[int]) -> None:
    """Keep cache rows [0, prefix) and then `rows` (absolute indices >= prefix, in order) on the
    sequence axis of every layer; drop everything else. Only the tail is moved."""
    index = None
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            raise UserError(f"{type(layer).__name__} caches are not supported by tree decoding")
        if index is None or index.device != layer.keys.device:  # accelerate may split layers over devices
            index = torch.tensor(rows, device=layer.keys.device, dtype=torch.long)
        end = prefix + len(rows)
        if isinstance(layer, DynamicSlidingWindowLayer):
            # These layers count tokens themselves; only valid while the context fits the window
            # (the decoder keeps it so).
            if layer.keys.shape[-2] != layer.cumulative_length:
                raise UserError("the context outgrew the model's sliding window")
            layer.cumulative_length = end
        layer.keys[..., prefix:end, :] = layer.keys.index_select(-2, index)
        layer.values[..., prefix:end, :] = layer.values.index_select(-2, index)
        layer.keys, layer.values = layer.keys[..., :end, :], layer.values[..., :end, :]
