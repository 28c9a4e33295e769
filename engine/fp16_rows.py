"""Row counts at which fbgemm's float16 kernel computes every row the same way (the target's
row independence, ALGORITHM.md §7, on every CPU).

fbgemm splits a call's rows into blocks and runs one micro-kernel per block size. Where every
micro-kernel accumulates a row in the same order (CPUs with AVX512, as measured on earlier
machines of this project), a row's output never depends on how many rows share the call. On an
AVX2-only AMD EPYC (torch 2.13) blocks of 1 or 2 rows round differently from blocks of 3 to 6
in the last bit: a token alone (the autoregressive forward), and e.g. the last two rows of a
7-row call, differed from the same token in a 4-row call. A tree forward would then not score a
token exactly as the autoregressive target does.

So the kernel is probed once per process: a row count m is *consistent* when every row of an
m-row call equals that row computed at the front of a REFERENCE_ROWS-row call (the other rows
zero), bit for bit. The target's float16 linears pad each call with zero rows up to the next
consistent count (padded_rows); where every count is consistent nothing is padded. Should even
the reference call depend on a row's position (no consistent count), usable() is False and the
target gets oneDNN's packed float32 weights instead (engine/cpu_kernels.py)."""
from __future__ import annotations

import threading

import torch

REFERENCE_ROWS = 4
MAX_PADDING = 16          # look this many row counts past m for a consistent one
PROBE_SHAPE = (128, 64)   # in, out features of the probe layer: the blocking is by rows, not by shape

_lock = threading.Lock()
_probe: tuple | None = None            # (packed weight, random rows, each row's reference output)
_consistent: dict[int, bool] = {}
_padded: dict[int, int | None] = {}    # m -> padded_rows(m): looked up on every float16 call


def _run(packed, rows: torch.Tensor) -> torch.Tensor:
    return torch.ops.quantized.linear_dynamic_fp16(rows.contiguous(), packed)


def _reference(packed, rows: torch.Tensor) -> torch.Tensor:
    pad = torch.zeros(REFERENCE_ROWS - 1, rows.shape[1])
    return torch.cat([_run(packed, torch.cat([rows[i:i + 1], pad]))[:1] for i in range(rows.shape[0])])


def _get_probe(rows_needed: int) -> tuple:
    global _probe
    if _probe is None or _probe[1].shape[0] < rows_needed:
        generator = torch.Generator().manual_seed(0)
        k, n = PROBE_SHAPE
        weight = torch.randn(n, k, generator=generator).half().float()  # exact in float16, like the target's
        packed = torch.ops.quantized.linear_prepack_fp16(weight, torch.randn(n, generator=generator))
        # room for padded_rows' look-ahead and, doubling, for later longer calls: each growth
        # recomputes every row's reference, so a new prompt length must not cost one each time
        held = 0 if _probe is None else _probe[1].shape[0]
        rows = torch.randn(max(rows_needed + MAX_PADDING, 2 * held, 64), k, generator=generator)
        _probe = (packed, rows, _reference(packed, rows))
    return _probe


@torch.inference_mode()
def consistent(m: int) -> bool:
    """Whether every row of an m-row call equals its reference (memoised per process)."""
    with _lock:
        if m not in _consistent:
            packed, rows, reference = _get_probe(m)
            _consistent[m] = bool(torch.equal(_run(packed, rows[:m]), reference[:m]))
        return _consistent[m]


def usable() -> bool:
    """False when even the reference call depends on a row's position: no padding can help."""
    return consistent(REFERENCE_ROWS)


def padded_rows(m: int) -> int | None:
    """The smallest consistent row count >= m (m itself where the kernel is row-independent);
    None when none is found within MAX_PADDING (then linear() runs reference-sized blocks)."""
    if m not in _padded:
        _padded[m] = next((rows for rows in range(m, m + MAX_PADDING + 1) if consistent(rows)), None)
    return _padded[m]


def linear(packed, x: torch.Tensor) -> torch.Tensor:
    """linear_dynamic_fp16 over the rows of x (2-D, float32), each row computed as in any other
    consistent call: padded with zero rows, or in blocks of REFERENCE_ROWS where no count fits."""
    m = x.shape[0]
    rows = padded_rows(m) if m else 0
    if rows == m:
        return _run(packed, x)
    if rows is not None:
        return _run(packed, torch.cat([x, x.new_zeros(rows - m, x.shape[1])]))[:m]
    blocks = [x[i:i + REFERENCE_ROWS] for i in range(0, m, REFERENCE_ROWS)]
    return torch.cat([linear(packed, block) for block in blocks])


def padding_summary(limit: int = 64) -> str:
    """In words, which row counts are padded (for the load report)."""
    padded = [f"{m}->{padded_rows(m) or 'blocks'}" for m in range(1, limit + 1) if padded_rows(m) != m]
    if not padded:
        return "none (every row count is consistent)"
    return f"{len(padded)} of 1..{limit} row counts padded ({', '.join(padded[:6])}{', ...' if len(padded) > 6 else ''})"
