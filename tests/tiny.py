"""Tiny random-weight model pairs built in-process, saved as real HF folders so the real
loading code (engine.models.load_pair) is what the tests exercise. No hub, no downloads."""
from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

from engine.models import load_pair

EOS = "<eos>"
PROSE_CHARS = "abcdefghijklmnopqrstuvwxyz .,"
WINDOW = 16  # sliding window of the tiny mistral / gemma pairs: tests run past 3x this
# SEQUOIA_TEST_DEVICE=cuda runs the model tests on a GPU (bench/gpu_checks.sh); CI runs them on the CPU.
DEVICE = os.environ.get("SEQUOIA_TEST_DEVICE", "cpu")


def make_tokenizer(chars: str) -> PreTrainedTokenizerFast:
    """Character-level tokenizer; id 0 is EOS."""
    vocab = {EOS: 0, **{c: i + 1 for i, c in enumerate(chars)}, "<unk>": len(chars) + 1}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, unk_token="<unk>", pad_token=EOS)


FAMILIES = {
    "llama": dict(model_type="llama", hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    "qwen2": dict(model_type="qwen2", hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    # widths the NF4 draft kernel takes (in features by 64, out by 32): engine/nf4.py
    "llama64": dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    "gpt2": dict(model_type="gpt2", n_embd=48, n_layer=2, n_head=4, n_positions=256),
    "phi3": dict(model_type="phi3", hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, max_position_embeddings=256),
    # sliding-window families: every layer sliding (mistral) or sliding and full layers mixed (gemma)
    "mistral": dict(model_type="mistral", hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                    sliding_window=WINDOW),
    "gemma3": dict(model_type="gemma3_text", hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=12, query_pre_attn_scalar=12,
                   max_position_embeddings=256, sliding_window=WINDOW,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"], tie_word_embeddings=False),
    "gemma2": dict(model_type="gemma2", hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=12, query_pre_attn_scalar=12,
                   max_position_embeddings=256, sliding_window=WINDOW,
                   layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False),
}
MATRIX = ("llama", "qwen2", "gpt2", "mistral", "gemma3", "phi3", "gpt_neox")
# families whose attention cannot do exact tree decoding: load_pair must refuse them, with the reason
REFUSED = {
    "bloom": (dict(model_type="bloom", hidden_size=48, n_layer=2, n_head=4), "cannot run a forward with a custom 4-D"),
    "mpt": (dict(model_type="mpt", d_model=48, n_layers=2, n_heads=4), "ignores custom 4-D attention masks"),
    "rwkv": (dict(model_type="rwkv", hidden_size=48, num_hidden_layers=2, attention_hidden_size=48,
                  context_length=256), "ignores custom 4-D attention masks"),
    "mamba": (dict(model_type="mamba", hidden_size=48, num_hidden_layers=2, state_size=4),
              "supports full and sliding-window attention only"),
}
FAMILIES.update({name: spec for name, (spec, _) in REFUSED.items()})


def make_model(family: str, vocab_size: int, seed: int, init_scale: float = 0.4, **overrides):
    spec = dict(FAMILIES[family])
    model_type = spec.pop("model_type")
    config = AutoConfig.for_model(model_type, vocab_size=vocab_size, initializer_range=init_scale,
                                  bos_token_id=0, eos_token_id=0, pad_token_id=0, **spec, **overrides)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def perturbed_copy(model, noise: float, seed: int):
    """A draft that agrees with the target often but not always: its weights plus noise."""
    draft = type(model)(model.config).eval()
    draft.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * noise * (p.std() if p.numel() > 1 else 1.0))
    return draft


def save_pair(root: Path, family: str = "llama", chars: str = PROSE_CHARS, noise: float = 0.15,
              seed: int = 0, draft_family: str | None = None, stored: str = "float32") -> tuple[Path, Path]:
    """stored='float16' saves the weights as float16, like the embedded pair (the fast CPU
    kernels then pack the target's linears as float16, exactly)."""
    tok = make_tokenizer(chars)
    vocab = len(tok)
    target = make_model(family, vocab, seed)
    draft = (perturbed_copy(target, noise, seed + 1) if draft_family is None
             else make_model(draft_family, vocab, seed + 7))
    paths = []
    for name, model in (("draft", draft), ("target", target)):
        path = root / f"{family}-{name}"
        if stored == "float16":
            model = model.half()
        model.save_pretrained(path)
        tok.save_pretrained(path)
        paths.append(path)
    return paths[0], paths[1]


@functools.lru_cache(maxsize=None)
def tiny_pair_dirs(family: str = "llama", chars: str = PROSE_CHARS, noise: float = 0.15, seed: int = 0,
                   stored: str = "float32"):
    root = Path(tempfile.mkdtemp(prefix=f"sequoia-tiny-{family}-"))
    return save_pair(root, family, chars, noise, seed, stored=stored)


@functools.lru_cache(maxsize=None)
def tiny_pair(family: str = "llama", chars: str = PROSE_CHARS, noise: float = 0.15, seed: int = 0,
              kernels: str = "default"):
    """kernels='fast': the CPU fast path (engine/cpu_kernels.py) on a pair stored as float16;
    'default': PyTorch's own float32 kernels."""
    if kernels == "fast" and DEVICE != "cpu":
        import pytest
        pytest.skip("the fast kernels are the CPU's; on another device they are the default ones")
    stored = "float16" if kernels == "fast" else "float32"
    draft, target = tiny_pair_dirs(family, chars, noise, seed, stored)
    return load_tiny(draft, target, cpu_kernels=kernels)


def load_tiny(draft, target, **kwargs):
    """load_pair on the test device, in float32 (the exactness tests compare against generate())."""
    return load_pair(str(draft), str(target), **{"device": DEVICE, "dtype": "float32", "cpu_kernels": "default",
                                                 **kwargs})


def ids_tensor(pair, ids) -> torch.Tensor:
    """A batch of one prompt on the pair's device, for the target's own generate()."""
    return torch.tensor([ids], device=pair.target.device)


def greedy_reference(pair, ids, n: int) -> list[int]:
    """The target's own greedy continuation (transformers' generate(), no EOS): what every
    method's greedy output must equal."""
    out = pair.target.generate(ids_tensor(pair, ids), max_new_tokens=n, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def with_eos(pair, token: int):
    """The pair with `token` as its only EOS. The tiny models never emit their own EOS, so a test
    of stopping at one makes a token of a known answer (greedy_reference) the EOS."""
    return dataclasses.replace(pair, eos_ids=frozenset({token}))

