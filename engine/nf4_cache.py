"""The draft's NF4 packing kept on disk, so a later start does not quantise again.

Quantising the embedded draft's 169 linears to NF4 (bitsandbytes' quantize_4bit) takes ~11 s here,
three times its int8 packing, on every start. The packed tensors (~0.26 GB for that draft) are
stored under cache_dir()/nf4/ and read back in well under a second.

The key is a SHA-256 of everything the packing depends on: every linear's name, shape and full
weight bytes, the block sizes and bitsandbytes' version (its CPU layout could change). Different
weights, a new checkpoint or another library version give another key, never a stale packing. The
draft's numerics do not touch exactness anyway (ALGORITHM.md §7); the cache only saves time.
A file that cannot be read is ignored (the draft is quantised as without a cache) and a cache that
cannot be written only logs a warning. The newest KEEP files are kept."""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from engine import nf4
from engine.paths import cache_dir

log = logging.getLogger(__name__)

KEEP = 2      # packed drafts kept on disk (the newest by use)
PARTS = ("packed", "absmax", "code")


def folder():
    return cache_dir() / "nf4"


def _library_version() -> str:
    try:
        import bitsandbytes
        return str(bitsandbytes.__version__)
    except Exception:  # noqa: BLE001 - nothing to pack with: the key is never used
        return "none"


def _weight_digest(linear: torch.nn.Linear) -> bytes:
    weight = linear.weight.detach().contiguous()
    # hashlib releases the GIL on large buffers: the linears hash on both cores at once
    return hashlib.sha256(memoryview(weight.view(torch.uint8).numpy()).cast("B")).digest()


def key(linears: list[tuple[str, torch.nn.Linear]]) -> str:
    """SHA-256 over the library version, the block sizes and each linear's name, shape, dtype and weights."""
    head = hashlib.sha256(f"bitsandbytes {_library_version()} block {nf4.BLOCK} rows {nf4.ROW_BLOCK}".encode())
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        digests = list(pool.map(_weight_digest, [linear for _, linear in linears]))
    for (name, linear), digest in zip(linears, digests):
        head.update(f"|{name} {linear.out_features}x{linear.in_features} {linear.weight.dtype}|".encode())
        head.update(digest)
    return head.hexdigest()


def _fits(parts: dict[str, torch.Tensor], out_features: int, in_features: int) -> bool:
    """The shapes and dtypes a packing of an out x in linear has: the kernel reads by them, unchecked."""
    return (parts["packed"].dtype == torch.uint8 and parts["packed"].numel() * 2 == out_features * in_features
            and parts["absmax"].dtype == torch.bfloat16
            and parts["absmax"].numel() * nf4.BLOCK == out_features * in_features
            and parts["code"].dtype == torch.float32 and parts["code"].numel() == 16)


def load(cache_key: str, shapes: dict[str, tuple[int, int]]) -> dict[str, dict[str, torch.Tensor]] | None:
    """{linear name: its packed tensors} for the linears of `shapes` ({name: (out, in)}) from an
    earlier packing, or None (no file, or unreadable, or not what those linears pack to)."""
    from safetensors.torch import load_file
    path = folder() / f"{cache_key}.safetensors"
    if not path.is_file():
        return None
    try:
        tensors = load_file(path)
        # copies, because the file's tensors start 8-byte aligned and the kernel reads misaligned
        # weights ~15 % slower (a draft forward 28 vs 24 ms here); torch allocates 64-byte aligned
        parts = {name: {part: tensors.pop(f"{name}.{part}").clone() for part in PARTS} for name in shapes}
        wrong = [name for name, (out_features, in_features) in shapes.items()
                 if not _fits(parts[name], out_features, in_features)]
        if wrong:
            raise ValueError(f"{wrong[0]} does not have the packed shapes of a "
                             f"{shapes[wrong[0]][0]}x{shapes[wrong[0]][1]} linear")
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: quantise instead
        log.warning("ignoring the packed NF4 draft in %s (%s); quantising again", path, exc)
        return None
    log.info("read the draft's NF4 packing from %s", path)
    try:
        path.touch()  # the newest by use is kept
    except OSError:
        pass
    return parts


def store(cache_key: str, packed: dict[str, "nf4.Nf4Linear"]) -> bool:
    """Write the packed tensors (atomically: a partial file never has the final name); False on failure."""
    from safetensors.torch import save_file
    path = folder() / f"{cache_key}.safetensors"
    # a name of its own: an app and a CLI command starting at once must not write into one file
    partial = path.with_name(f"{cache_key}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # clone the 16-entry code tables: safetensors refuses tensors that share memory, and a
        # library may hand every linear the same one
        save_file({f"{name}.{part}": (layer.code.clone() if part == "code" else getattr(layer, part).contiguous())
                   for name, layer in packed.items() for part in PARTS}, partial)
        partial.replace(path)
    except Exception as exc:  # noqa: BLE001 - a read-only or full disk costs the next start its ~11 s, nothing else
        log.warning("could not store the packed NF4 draft in %s: %s", path.parent, exc)
        try:
            partial.unlink(missing_ok=True)
        except OSError:
            pass
        return False
    _keep_newest(KEEP)
    return True


def _keep_newest(keep: int) -> None:
    try:
        files = sorted(folder().glob("*.safetensors"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[keep:]:
            old.unlink(missing_ok=True)
    except OSError:  # another process pruning at the same time
        pass
