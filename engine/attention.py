"""Tree attention on top of a Hugging Face KV cache (ALGORITHM.md §5).

Layout during a step (both models): cache columns [0, base) hold the committed prefix
except its last token; tree node i sits at column base + i (node 0 = the root = the last
committed token). The draft only feeds the nodes that have children, so it keeps its own
column map. After verification `commit` keeps the accepted path's rows and drops the rest.

Sliding-window layers (Mistral; Gemma-2/3 mix them with full layers) use transformers' own
layer-type machinery: `new_cache` builds the model's DynamicCache from its config and swaps each
DynamicSlidingWindowLayer for a TreeWindowLayer, which holds the last window-1 committed tokens
plus every uncommitted (tree) column until the commit, and reports them through the standard
`get_mask_sizes` (kv length, kv offset). `forward` then passes one mask per layer type (a dict
{layer_type: mask} when a model mixes types, as transformers' own `create_masks_for_generate`
does): the tree mask sliced to what that layer type holds and, for sliding types, cut to keys
less than `window` positions behind each query, exactly transformers' `sliding_window_overlay`.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, get_layer_types_and_kwargs

from engine.errors import UserError


class TreeWindowLayer(DynamicSlidingWindowLayer):
    """A sliding-window cache layer that tree decoding can commit into.

    Keeps the last `sliding_window - 1` committed tokens (all a later query can see) plus every
    column appended since the last commit, and returns all of them to the attention: a tree's
    nodes are not a line, so transformers' "last window-1+q columns" would drop prefix tokens a
    deep node still sees. `offset` = absolute position of stored column 0; `cumulative_length`
    (the sequence length, as in the parent class) counts committed plus pending columns."""

    def __init__(self, sliding_window: int, **kwargs):
        super().__init__(sliding_window=sliding_window, **kwargs)
        self.offset = 0
        self.pending: list[int] = []  # positions of the columns appended since the last commit

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        stored = self.keys.shape[-2] if self.is_initialized else 0
        return stored + query_length, self.offset

    def key_positions(self, device) -> torch.Tensor:
        """Position of every stored column: committed ones sit at their index, pending ones where fed."""
        committed = self.cumulative_length - len(self.pending)
        return torch.cat([torch.arange(self.offset, committed, device=device),
                          torch.tensor(self.pending, dtype=torch.long, device=device)])

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("tree decoding commits with attention.commit, not crop")

    def trim(self) -> None:
        """Drop committed columns no later query can see (all but the last window - 1)."""
        drop = self.keys.shape[-2] - len(self.pending) - (self.sliding_window - 1)
        if drop > 0:
            self.keys, self.values = self.keys[..., drop:, :], self.values[..., drop:, :]
            self.offset += drop


SUPPORTED_LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_types(model) -> list[str]:
    """transformers' per-layer attention types for this model ('full_attention', 'sliding_attention', ...)."""
    config = model.config.get_text_config(decoder=True)
    return list(get_layer_types_and_kwargs(config)[0])


def new_cache(model) -> DynamicCache:
    """The model's own DynamicCache (layer types from its config), sliding layers made committable."""
    types = layer_types(model)
    unsupported = sorted(set(types) - set(SUPPORTED_LAYER_TYPES))
    if unsupported:
        raise UserError(f"{type(model).__name__} has {', '.join(unsupported)} layers; tree decoding supports "
                        "full and sliding-window attention only")
    cache = DynamicCache(config=model.config)
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicSlidingWindowLayer:
            cache.layers[i] = TreeWindowLayer(sliding_window=layer.sliding_window)
    cache._sequoia_layer_types = types
    return cache


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


def in_window(keys: torch.Tensor, queries: torch.Tensor, window: int) -> torch.Tensor:
    """[q, k]: key position within `window` of the query position, as transformers'
    sliding_window_overlay has it (kv_idx > q_idx - sliding_window)."""
    return keys[None, :] > queries[:, None] - window


def _layer_masks(cache: DynamicCache, types: list[str], visible: torch.Tensor, position_ids: list[int],
                 dtype: torch.dtype):
    """One additive mask per layer type from the tree visibility `visible` [q, kv], whose columns
    are the whole sequence as a full-attention layer holds it (committed prefix, pending columns,
    the new rows). A single tensor when every layer has the same type; else {type: mask}."""
    q = visible.shape[0]
    masks = {}
    for kind in dict.fromkeys(types):
        if kind not in SUPPORTED_LAYER_TYPES:
            raise UserError(f"'{kind}' attention layers are not supported by tree decoding")
        layer = cache.layers[types.index(kind)] if len(cache.layers) == len(types) else None
        if not getattr(layer, "is_sliding", False):
            masks[kind] = additive_mask(visible, dtype)
            continue
        if not isinstance(layer, DynamicSlidingWindowLayer):
            raise UserError(f"{type(layer).__name__} caches are not supported by tree decoding")
        kv_length, kv_offset = layer.get_mask_sizes(q)
        rows = visible[:, kv_offset:kv_offset + kv_length]
        if isinstance(layer, TreeWindowLayer):
            keys = torch.cat([layer.key_positions(visible.device),
                              torch.tensor(position_ids, dtype=torch.long, device=visible.device)])
        else:  # a stock layer only ever holds a plain causal sequence
            keys = torch.arange(kv_offset, kv_offset + kv_length, device=visible.device)
        if rows.shape[1] != keys.numel():
            raise UserError("the sliding-window cache does not hold the columns the mask describes")
        queries = torch.tensor(position_ids, dtype=torch.long, device=visible.device)
        rows = rows & in_window(keys, queries, layer.sliding_window)
        masks[kind] = additive_mask(rows, dtype)
    return next(iter(masks.values())) if len(masks) == 1 else masks


@torch.inference_mode()
def forward(model, cache: DynamicCache, input_ids: list[int], position_ids: list[int],
            visible: torch.Tensor) -> torch.Tensor:
    """One forward of new tokens with an explicit mask and positions; returns float32 logits [m, V]."""
    device = input_device(model)
    ids = torch.tensor([input_ids], device=device)
    pos = torch.tensor([position_ids], device=device)
    types = getattr(cache, "_sequoia_layer_types", None) or layer_types(model)
    mask = _layer_masks(cache, types, visible.to(device), position_ids, model.dtype)
    out = model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache, use_cache=True)
    for layer in cache.layers:
        if isinstance(layer, TreeWindowLayer):
            layer.pending.extend(position_ids)
    return out.logits[0].float()


def forward_causal(model, cache: DynamicCache, input_ids: list[int]) -> torch.Tensor:
    start = cache.get_seq_length()
    visible = causal_visibility(start, len(input_ids), input_device(model))
    return forward(model, cache, input_ids, list(range(start, start + len(input_ids))), visible)


@torch.inference_mode()  # the cache tensors were made in inference mode; in-place writes need it too
def commit(cache: DynamicCache, prefix: int, rows: list[int]) -> None:
    """Keep sequence positions [0, prefix) and then `rows` (absolute indices >= prefix, in order) on
    every layer; drop everything else. Only the tail is moved. Sliding-window layers (which hold
    columns from their `offset` on) then forget what no later query can see."""
    end = prefix + len(rows)
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer, TreeWindowLayer):
            raise UserError(f"{type(layer).__name__} caches are not supported by tree decoding")
        offset = getattr(layer, "offset", 0)
        if type(layer) is DynamicSlidingWindowLayer:
            # a stock layer drops columns itself: only valid while the context fits the window
            if layer.keys.shape[-2] != layer.cumulative_length:
                raise UserError("the context outgrew the model's sliding window (use attention.new_cache)")
            layer.cumulative_length = end
        if prefix < offset:
            raise UserError("commit below the sliding-window cache's first column")
        index = torch.tensor([r - offset for r in rows], device=layer.keys.device, dtype=torch.long)
        start, stop = prefix - offset, end - offset
        layer.keys[..., start:stop, :] = layer.keys.index_select(-2, index)
        layer.values[..., start:stop, :] = layer.values.index_select(-2, index)
        layer.keys, layer.values = layer.keys[..., :stop, :], layer.values[..., :stop, :]
        if isinstance(layer, TreeWindowLayer):
            layer.cumulative_length = end
            layer.pending = []
            layer.trim()
