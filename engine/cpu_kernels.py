"""How the models' linear layers run on a CPU (`--cpu-kernels fast|default`).

PyTorch's default fp32 CPU matmul re-packs the weight on every call with more than one row, so
a tree forward of 8 tokens costs about twice a 1-token forward although both are bound by
reading the weights. `fast` packs every linear once, at load time, keeping one copy:

- target: fbgemm's packed float16 weights with float32 activations and accumulation
  (`linear_prepack_fp16` / `linear_dynamic_fp16`, what `quantize_dynamic(dtype=float16)` uses),
  for every layer whose weights float16 holds exactly (checkpoints stored as float16, like the
  embedded pair); other layers get oneDNN's pre-packed float32 weights. Both keep a row's output
  independent of the other rows of the call (tests/test_cpu_kernels.py), which is what makes the
  tree forward score each token exactly as the autoregressive forward does (ALGORITHM.md §7);
  for float16 on CPUs whose micro-kernels round differently by row count (AVX2), only because
  calls are padded to row counts that agree (engine/fp16_rows.py).
- draft (`draft_weights`): 4-bit NF4 weights with bfloat16 activations where bitsandbytes' CPU
  kernel runs (AVX512-BF16; engine/nf4.py): half the int8 draft's bytes, and the draft is bound
  by the bytes it reads; else int8 weights with dynamically quantised activations (fbgemm), whose
  rows depend on each other through the per-call activation scale. Either is allowed for the
  draft, whose q is used exactly as computed (ALGORITHM.md §7), never for the target.
- embeddings: float16 storage when exact, looked up and widened to float32.

`default` leaves the models as loaded."""
from __future__ import annotations

import ctypes
import hashlib
import json
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from engine import fp16_rows, huge_pages, nf4, nf4_cache
from engine.errors import UserError

KERNEL_CHOICES = ("fast", "default")
DRAFT_WEIGHTS = ("auto", "nf4", "int8")  # auto: nf4 where its kernel runs, else int8
FREQUENT_TOKENS = Path(__file__).resolve().parents[1] / "assets" / "measured" / "frequent-tokens"
# Default K of the pruned draft head; 0 = the full head. Measured on the embedded pair
# (bench/draft_head.py, README "Fast CPU path"): K = 32768 covers 96.3 % of the target's greedy
# tokens, K = 49152 98.0 %; the acceptance lost roughly cancels the cheaper head, so it is opt-in.
DRAFT_HEAD_TOKENS = 0


def _fp16_exact(weight: torch.Tensor) -> bool:
    w = weight.detach()
    if w.dtype == torch.float16:
        return True
    return bool(torch.equal(w.to(torch.float16).to(w.dtype), w))


class PackedLinear(torch.nn.Module):
    """nn.Linear with its weight packed once for one CPU kernel; inference only."""

    def __init__(self, linear: torch.nn.Linear, kind: str):
        super().__init__()
        self.in_features, self.out_features, self.kind = linear.in_features, linear.out_features, kind
        # fp16: fbgemm packs column by column, much faster from huge pages (engine/huge_pages.py)
        weight = huge_pages.float32_copy(linear.weight) if kind == "fp16" else linear.weight.detach().float()
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.bias = bias  # oneDNN takes it per call; fbgemm keeps its own copy in the packed blob
        if kind == "fp16":
            self._packed = torch.ops.quantized.linear_prepack_fp16(weight, bias)
            self.packed_bytes = weight.numel() * 2
        elif kind == "int8":
            scale = weight.abs().amax(dim=1).clamp_min(1e-8) / 127
            with warnings.catch_warnings():  # quantized tensors are deprecated but fbgemm's int8 path needs them
                warnings.simplefilter("ignore")
                q = torch.quantize_per_channel(weight, scale.double(), torch.zeros_like(scale, dtype=torch.long),
                                               0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(q, bias)
            self.packed_bytes = weight.numel()
        elif kind == "onednn":
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
            self.packed_bytes = weight.numel() * 4
        else:
            raise ValueError(f"unknown packed kind {kind!r}")

    @property
    def weight(self) -> torch.Tensor:
        """Shape and dtype only (the values live in the packed blob), for code that asks for them."""
        return torch.empty(self.out_features, self.in_features, device="meta")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float().contiguous()
        if self.kind == "fp16":
            out = fp16_rows.linear(self._packed, flat)  # padded where the CPU's micro-kernels differ by rows
        elif self.kind == "int8":
            out = torch.ops.quantized.linear_dynamic(flat, self._packed, True)  # reduce_range: safe on AVX2
        else:
            out = torch.ops.mkldnn._linear_pointwise(flat, self._packed, self.bias, "none", [], "")
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, kind={self.kind}"


class PrunedHead(torch.nn.Module):
    """The draft's output head over `keep` token ids only (FR-Spec): int8 rows for those ids,
    every other logit -inf, so q is exactly zero there. Lossless (ALGORITHM.md §7): the draft
    simply never proposes those tokens; the head costs K/V of the full one."""

    def __init__(self, linear: torch.nn.Linear, keep: torch.Tensor):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("keep", keep.to(torch.long), persistent=False)
        rows = torch.nn.Linear(linear.in_features, len(keep), bias=linear.bias is not None)
        with torch.no_grad():
            rows.weight.copy_(linear.weight.detach()[keep].float())
            if linear.bias is not None:
                rows.bias.copy_(linear.bias.detach()[keep].float())
        self.rows = PackedLinear(rows, "int8")
        self.packed_bytes = self.rows.packed_bytes

    @property
    def weight(self) -> torch.Tensor:
        return torch.empty(self.out_features, self.in_features, device="meta")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.rows(x)
        out = scores.new_full((*scores.shape[:-1], self.out_features), float("-inf"))
        out[..., self.keep] = scores
        return out


def vocabulary_hash(tokenizer) -> str:
    """Names a vocabulary: frequency tables apply to every tokenizer with exactly these entries."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


def frequent_ids(tokenizer, k: int) -> tuple[list[int], str] | None:
    """The k most frequent ids of the shipped table for this vocabulary, plus every special and
    added token (the draft must still be able to propose an end of turn); None without a table."""
    path = FREQUENT_TOKENS / f"{vocabulary_hash(tokenizer)}.json"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    keep = list(dict.fromkeys([*table["ids"][:k], *tokenizer.all_special_ids,
                               *tokenizer.get_added_vocab().values()]))
    return keep, str(path)


class HalfEmbedding(torch.nn.Module):
    """An embedding table kept in float16 (exact for float16 checkpoints), rows widened on lookup."""

    def __init__(self, embedding: torch.nn.Embedding, dtype: torch.dtype):
        super().__init__()
        # a buffer, not a parameter: transformers reads a model's dtype from its first parameter
        # a copy: a float16 checkpoint's tensor may be a view of the memory-mapped file, which would
        # keep every weight of the file mapped (and resident) for the model's lifetime
        self.register_buffer("weight", embedding.weight.detach().to(torch.float16, copy=True), persistent=False)
        self.padding_idx, self.out_dtype = embedding.padding_idx, dtype
        self.num_embeddings, self.embedding_dim = embedding.num_embeddings, embedding.embedding_dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, self.weight).to(self.out_dtype)


@dataclass
class KernelReport:
    """What `apply` did to one model, for describe(), profiles and the bench JSON."""
    role: str
    mode: str
    linears: dict  # kind -> count
    embedding: str = "unchanged"
    packed_bytes: int = 0
    packed_parameters: int = 0  # weights now held outside model.parameters()
    head: str = "full"          # or how the draft's output head was pruned
    head_tokens: int | None = None  # tokens the pruned head scores (None: the full head)
    nf4_cache: str | None = None    # NF4 draft: 'read' from disk, 'stored' after quantising, 'none' (not writable)
    fp16_row_padding: str | None = None  # float16 linears: which row counts are padded (engine/fp16_rows.py)

    def to_dict(self) -> dict:
        return {"role": self.role, "mode": self.mode, "linears": dict(self.linears), "embedding": self.embedding,
                "packed_bytes": self.packed_bytes, "packed_parameters": self.packed_parameters, "head": self.head,
                "head_tokens": self.head_tokens, "nf4_cache": self.nf4_cache, "fp16_row_padding": self.fp16_row_padding}


def couples_rows(report: dict) -> bool:
    """True when a model's kernels make a row's output depend on the other rows of the call."""
    return bool(report.get("linears", {}).get("int8"))


def rounds_to(report: dict) -> torch.dtype | None:
    """bfloat16 when a model's NF4 linears round its activations and outputs to it (engine/nf4.py:
    the kernel takes and gives bfloat16), else None (its linears keep the model's dtype)."""
    return torch.bfloat16 if report.get("linears", {}).get("nf4") else None


def couples_rows_when_packed(role: str) -> bool:
    """pack() may give the draft int8 linears, whose per-call activation scale couples the rows of
    a call (its NF4 kernel does not: tests/test_cpu_kernels.py); the target's never do."""
    return role == "draft"


def check_draft_weights(value: str | None) -> str:
    """The value (None -> 'auto'), or a UserError naming the choices."""
    value = value or "auto"
    if value not in DRAFT_WEIGHTS:
        raise UserError(f"unknown draft weights '{value}' (use {', '.join(DRAFT_WEIGHTS)})")
    return value


def resolve_draft_weights(value: str | None) -> str:
    """'auto' (or None) -> 'nf4' where bitsandbytes' NF4 kernel runs on this CPU, else 'int8'."""
    value = check_draft_weights(value)
    if value == "auto":
        return "nf4" if nf4.available() else "int8"
    if value == "nf4" and not nf4.available():
        raise UserError("NF4 draft weights need bitsandbytes and a CPU with AVX512-BF16; this machine has "
                        "no such kernel (use --draft-weights int8 or auto)")
    return value


def draft_weights_of(report: dict) -> str | None:
    """'nf4' or 'int8' for a packed draft's report (by the kind most of its linears got), else None."""
    linears = report.get("linears", {}) if report.get("role") == "draft" else {}
    kinds = [k for k in ("nf4", "int8") if linears.get(k)]
    return max(kinds, key=lambda k: linears[k]) if kinds else None


def _replace(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def applies(mode: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Packed kernels run float32 activations on a CPU; elsewhere the models load as usual."""
    return mode == "fast" and torch.device(device).type == "cpu" and dtype == torch.float32


def stored_dtype(source: str) -> torch.dtype | None:
    """torch.float16 when a local checkpoint says it is stored as float16 (then it is read as
    stored and packed without a float32 copy), else None."""
    path = Path(source) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return torch.float16 if (config.get("dtype") or config.get("torch_dtype")) == "float16" else None


def release_freed_memory() -> None:
    """Hand the heap that the unpacked weights used back to the OS (glibc keeps it otherwise)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _kind(linear: torch.nn.Linear, role: str, draft_weights: str) -> str:
    if role == "draft":
        return "nf4" if draft_weights == "nf4" and nf4.fits(linear) else "int8"
    return "fp16" if _fp16_exact(linear.weight) and fp16_rows.usable() else "onednn"


def _packed(linear: torch.nn.Linear, kind: str, parts: dict | None = None) -> torch.nn.Module:
    return nf4.Nf4Linear(linear, parts) if kind == "nf4" else PackedLinear(linear, kind)


def _cached_nf4(linears, kinds) -> tuple[str | None, dict]:
    """(cache key, {name: packed tensors}) for the linears packed as NF4 (engine/nf4_cache.py);
    the dict is empty when nothing is stored yet, the key None when no linear is NF4."""
    named = [(name, linear) for (name, linear), kind in zip(linears, kinds) if kind == "nf4"]
    if not named:
        return None, {}
    key = nf4_cache.key(named)
    return key, nf4_cache.load(key, {name: (linear.out_features, linear.in_features) for name, linear in named}) or {}


def pack(model: torch.nn.Module, role: str, head_ids: tuple[list[int], str] | None = None,
         draft_weights: str = "int8") -> KernelReport:
    """Pack `model`'s linears for the CPU (role 'target' or 'draft'), in place; the rest of the
    model runs in float32. head_ids (draft only): prune the output head to these ids (FR-Spec).
    draft_weights (draft only, resolved): 'nf4' (linears whose shape the kernel takes) or 'int8'."""
    report = KernelReport(role, "fast", {})
    # a head tied to the input embedding shares its weight: count those parameters once (there)
    embedding_weight = getattr(model.get_input_embeddings(), "weight", None)
    if head_ids is not None and role == "draft":
        head = model.get_output_embeddings()
        keep, source = head_ids
        if type(head) is torch.nn.Linear and len(keep) < head.out_features:
            pruned = PrunedHead(head, torch.tensor([i for i in keep if i < head.out_features]))
            model.set_output_embeddings(pruned)
            report.packed_bytes += pruned.packed_bytes
            report.packed_parameters += 0 if head.weight is embedding_weight else head.weight.numel()
            report.head = f"{len(pruned.keep)} of {head.out_features} tokens ({Path(source).name})"
            report.head_tokens = len(pruned.keep)
    linears = [(n, m) for n, m in model.named_modules() if type(m) is torch.nn.Linear]
    kinds = [_kind(m, role, draft_weights) for _, m in linears]
    # fbgemm's packing runs on one thread (12 s of the target's load here): pack several at once,
    # largest first, so the output head (4.5 s alone for the target's) does not start last
    largest_first = sorted(range(len(linears)), key=lambda i: -linears[i][1].weight.numel())
    nf4_key, stored = _cached_nf4(linears, kinds)
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        done = dict(zip(largest_first, pool.map(_packed, [linears[i][1] for i in largest_first],
                                                [kinds[i] for i in largest_first],
                                                [stored.get(linears[i][0]) for i in largest_first])))
    packs = [done[i] for i in range(len(linears))]
    if nf4_key is not None and stored:
        report.nf4_cache = "read"
    elif nf4_key is not None:
        quantised = {name: packed for (name, _), packed in zip(linears, packs) if isinstance(packed, nf4.Nf4Linear)}
        report.nf4_cache = "stored" if nf4_cache.store(nf4_key, quantised) else "none"
    for (name, linear), kind, packed in zip(linears, kinds, packs):
        _replace(model, name, packed)
        report.linears[kind] = report.linears.get(kind, 0) + 1
        report.packed_bytes += packed.packed_bytes
        report.packed_parameters += ((0 if linear.weight is embedding_weight else linear.weight.numel())
                                     + (0 if linear.bias is None else linear.bias.numel()))
    if report.linears.get("fp16"):
        report.fp16_row_padding = fp16_rows.padding_summary()
    embedding = model.get_input_embeddings()
    half = type(embedding) is torch.nn.Embedding and _fp16_exact(embedding.weight)
    with torch.no_grad():  # norms, biases, rotary tables...: float32 like the activations
        for tensor in (*model.parameters(), *model.buffers()):
            if tensor.is_floating_point() and tensor.dtype != torch.float32 and not (half and tensor is embedding.weight):
                tensor.data = tensor.data.float()
    if half:
        model.set_input_embeddings(HalfEmbedding(embedding, torch.float32))
        report.embedding = "float16"
        report.packed_bytes += embedding.weight.numel() * 2
        report.packed_parameters += embedding.weight.numel()
    model.config.dtype = torch.float32
    return report

