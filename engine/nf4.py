"""The draft's linears as 4-bit NF4 weights, run by bitsandbytes' CPU kernel (AVX512-BF16).

The int8 draft reads ~0.49 GB of weights per forward and is bound by those bytes (README "Draft
forward overhead"); NF4 halves them. The draft's numerics never touch exactness (its q is used
exactly as computed, ALGORITHM.md §7), so only speed and acceptance decide, and both are measured
(README "Fast CPU path"). Only for the draft: 4-bit weights would change the target's outputs.

bitsandbytes ships the kernel (`gemv_4bit_inference_cpu_nf4_bf16`) for CPUs with AVX512-BF16 and
registers it as `torch.ops.bitsandbytes.gemv_4bit`; this module calls the library's own function
directly, because the op's Python dispatch cost ~40 µs per call, ~7 ms over the draft's ~170
linears per forward. At load, one probe checks that the direct call gives bitwise what the op
gives (`available()`); otherwise the draft stays int8."""
from __future__ import annotations

import ctypes
import functools
import logging

import torch

BLOCK = 64        # weights per absmax scale (bitsandbytes' default for 4-bit)
ROW_BLOCK = 32    # the CPU kernel packs output features in blocks of 32


def fits(linear: torch.nn.Linear) -> bool:
    """The kernel's layout needs whole blocks: out features by 32, in features by 64."""
    return linear.out_features % ROW_BLOCK == 0 and linear.in_features % BLOCK == 0


@functools.cache
def _library():
    """(bitsandbytes.functional, the native library), or None where the kernel cannot run."""
    # it warns, when its CPU backend loads, that an optional GEMM package (`kernels`) is missing:
    # that package serves batched GEMMs; the draft's calls use the GEMV kernel below
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        import bitsandbytes.functional as F
        from bitsandbytes.cextension import lib
    except Exception:  # noqa: BLE001 - not installed, or no native library for this platform
        return None
    try:
        if not (F.has_avx512bf16() and hasattr(lib, "gemv_4bit_inference_cpu_nf4_bf16")):
            return None
    except Exception:  # noqa: BLE001 - the library's CPU feature probe failed
        return None
    return F, lib


@functools.cache
def available() -> bool:
    """True when this CPU runs bitsandbytes' NF4 kernel and the direct call matches the op."""
    if _library() is None:
        return False
    gen = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(2 * BLOCK, 2 * ROW_BLOCK, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * 0.05)
    layer = Nf4Linear(linear)
    x = torch.randn(3, linear.in_features, generator=gen)
    direct = layer.forward_bf16(x.to(torch.bfloat16))
    op = torch.ops.bitsandbytes.gemv_4bit(x.to(torch.bfloat16), layer.packed, [layer.out_features, layer.in_features],
                                          layer.absmax, layer.code, BLOCK)
    return bool(torch.equal(direct, op))


# gemv_4bit_inference_cpu_nf4_bf16(M, N, K, x, packed weights, absmax, out, blocksize, x stride, out stride)
_GEMV = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


class Nf4Linear(torch.nn.Module):
    """nn.Linear with NF4 weights (blocks of 64, bfloat16 scales) and bfloat16 activations;
    float32 in and out like the rest of the packed model. Inference only."""

    def __init__(self, linear: torch.nn.Linear, parts: dict[str, torch.Tensor] | None = None):
        """parts: this linear's packed, absmax and code tensors from an earlier packing of the same
        weights (engine/nf4_cache.py) instead of quantising again."""
        super().__init__()
        library = _library()
        if library is None:
            raise RuntimeError("bitsandbytes' NF4 CPU kernel is not available on this machine (see available())")
        F, self._lib = library
        self.in_features, self.out_features = linear.in_features, linear.out_features
        if parts is None:
            weight = linear.weight.detach().to(torch.bfloat16)
            packed, state = F.quantize_4bit(weight, blocksize=BLOCK, quant_type="nf4", compress_statistics=False)
            packed, state = F._convert_weight_packed_for_cpu(packed, state)
            parts = {"packed": packed, "absmax": state.absmax, "code": state.code}
        self.packed, self.absmax, self.code = parts["packed"], parts["absmax"], parts["code"]
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        self.packed_bytes = self.packed.numel() + self.absmax.numel() * 2
        # the kernel through a typed prototype of our own, its weight pointers taken once: building
        # ten ctypes objects per call cost ~3 us of a ~25 us call, ~170 calls per draft forward
        self._gemv = _GEMV(ctypes.cast(self._lib.gemv_4bit_inference_cpu_nf4_bf16, ctypes.c_void_p).value)
        self._weights = (self.packed.data_ptr(), self.absmax.data_ptr())

    @property
    def weight(self) -> torch.Tensor:
        """Shape and dtype only (the values live in the packed blob), for code that asks for them."""
        return torch.empty(self.out_features, self.in_features, device="meta")

    def forward_bf16(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.contiguous()
        out = torch.empty(rows.shape[0], self.out_features, dtype=torch.bfloat16)
        packed, absmax = self._weights
        self._gemv(rows.shape[0], self.out_features, self.in_features, rows.data_ptr(), packed, absmax,
                   out.data_ptr(), BLOCK, rows.stride(0), out.stride(0))
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.forward_bf16(x.reshape(-1, self.in_features).to(torch.bfloat16)).float()
        if self.bias is not None:
            out.add_(self.bias)  # in place: `out` is this call's own fresh tensor
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, kind=nf4"
