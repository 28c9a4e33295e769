"""float32 copies of weights in memory advised for transparent huge pages, for fbgemm's packing.

fbgemm's `linear_prepack_fp16` converts the [out, in] float32 weight with a scalar loop that runs
over the out features innermost, reading the weight column by column: every read is `in` floats
(6 KB for the embedded target) from the last, on another 4 KB page. On a wide matrix the TLB
misses dominate (one Xeon thread: 8.5 ns a weight at 256 x 1536, 23 ns at 8960 x 1536, 58 ns for
the target's 151,936 x 1536 output head). With the source on 2 MB pages the same reads stay
within a few dozen pages: the head alone packed in 7.3-7.7 s instead of 11.0-11.7 s, the whole
target on two threads in 14.3-16.2 s instead of 19.0-19.5 s (bench/pack_weights.py,
bench/pack-weights-xeon.txt).
Linux only (madvise); elsewhere, or when the kernel declines, the copy is an ordinary one. The
copy's values are the same either way: only where its pages come from changes."""
from __future__ import annotations

import ctypes
import sys

import torch

HUGE_PAGE = 2 << 20          # bytes of an x86-64 / arm64 transparent huge page
MIN_BYTES = 8 << 20          # smaller weights pack fast enough from ordinary pages
MADV_HUGEPAGE = 14           # linux/mman.h

_madvise = None


def _libc_madvise():
    global _madvise
    if _madvise is None:
        try:
            fn = ctypes.CDLL("libc.so.6", use_errno=True).madvise
            fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
            _madvise = fn
        except (OSError, AttributeError):
            _madvise = False
    return _madvise


def float32_copy(weight: torch.Tensor) -> torch.Tensor:
    """weight as a new contiguous float32 tensor, on huge pages where the OS gives them."""
    weight = weight.detach()
    n, need = weight.numel(), weight.numel() * 4
    madvise = _libc_madvise() if sys.platform.startswith("linux") and need >= MIN_BYTES else None
    if not madvise:
        return weight.to(torch.float32, copy=True).contiguous()
    # room to start on a 2 MB boundary; advised before the copy first touches the pages
    raw = torch.empty(n + HUGE_PAGE // 4, dtype=torch.float32)
    start = -(-raw.data_ptr() // HUGE_PAGE) * HUGE_PAGE
    madvise(ctypes.c_void_p(start), need // HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE)  # advice: a refusal is harmless
    offset = (start - raw.data_ptr()) // 4
    out = raw[offset:offset + n].view(weight.shape)
    out.copy_(weight)
    return out
