"""Load a draft/target pair (Hugging Face id, local folder, or the embedded default) and check
that the pair can do exact tree decoding: same tokenizer, custom 4-D masks honoured."""
from __future__ import annotations

import gc
import json
import logging
import os
import socket
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import attention
from engine import cpu_kernels as cpu_kernels_mod
from engine.errors import UserError

log = logging.getLogger(__name__)

DEFAULT = "default"


def resolve_kernels(value: str | None) -> str:
    """'auto'/None -> 'fast' (it only takes effect on a CPU); otherwise 'fast' or 'default'."""
    if value in (None, "", "auto"):
        return "fast"
    if value not in cpu_kernels_mod.KERNEL_CHOICES:
        raise UserError(f"unknown CPU kernels '{value}' (use {' or '.join(cpu_kernels_mod.KERNEL_CHOICES)})")
    return value


@dataclass
class ModelPair:
    draft: torch.nn.Module
    target: torch.nn.Module
    tokenizer: object
    draft_name: str
    target_name: str
    device: torch.device
    dtype: torch.dtype
    eos_ids: frozenset[int]
    context_limit: int
    vocab_size: int                      # size of the target's logits: the space p and q live in
    probe: dict = field(default_factory=dict)  # tree-mask probe results, shown by `check`
    kv_window: int | None = None         # smallest sliding window of either model's cache, if any
    cpu_kernels: dict = field(default_factory=dict)  # role -> what engine.cpu_kernels did to that model
    # what another program loads for each model (exports): the id or folder as given; for the
    # embedded pair its converted folder, since its display names are no hub ids
    draft_source: str | None = None
    target_source: str | None = None

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def parameter_count(self, role: str) -> int:
        """The parameters of the `role` ("draft" or "target") model, packed CPU weights included
        (they live outside parameters())."""
        model = getattr(self, role)
        return sum(p.numel() for p in model.parameters()) + self.cpu_kernels.get(role, {}).get("packed_parameters", 0)

    def describe(self) -> dict:
        count = self.parameter_count

        def untied(role):  # its output head is a matrix of its own, counted beside the embedding
            config = getattr(self, role).config
            try:
                config = config.get_text_config()
            except (AttributeError, ValueError):   # none, or several text sub-configs: the top one says
                pass
            return getattr(config, "tie_word_embeddings", True) is False
        return {"draft": self.draft_name, "target": self.target_name,
                "draft_parameters": count("draft"), "target_parameters": count("target"),
                "untied_heads": [role for role in ("draft", "target") if untied(role)],
                "device": str(self.device), "dtype": str(self.dtype).replace("torch.", ""),
                "context_limit": self.context_limit, "vocab_size": self.vocab_size,
                "target_device_map": _summarise_map(self.target), "draft_device_map": _summarise_map(self.draft),
                "cpu_kernels": self.cpu_kernels_mode, "kernels": self.cpu_kernels,
                "eos_ids": sorted(self.eos_ids), "kv_window": self.kv_window,
                "generation_defaults": generation_defaults(self.target)}

    @cached_property
    def cuda_devices(self) -> tuple[int, ...]:
        """The CUDA devices (indices) the pair's models sit on; a device map can use several.
        Found once per pair: a decoder is built for every run, and the scan reads every parameter."""
        places = {torch.device(self.device)} | {p.device for m in (self.draft, self.target) for p in m.parameters()}
        return tuple(sorted({d.index if d.index is not None else torch.cuda.current_device()
                             for d in places if d.type == "cuda"}))

    @property
    def cpu_kernels_mode(self) -> str:
        """'fast' when either model runs on packed CPU kernels, else 'default'."""
        return "fast" if any(r.get("mode") == "fast" for r in self.cpu_kernels.values()) else "default"

    def rows_coupled(self, role: str) -> bool:
        """Does this model's output for a token depend on the other rows of its forward? (Allowed
        for the draft only; see engine/cpu_kernels.py.)"""
        return cpu_kernels_mod.couples_rows(self.cpu_kernels.get(role, {}))

    def precision(self, role: str) -> torch.dtype:
        """The dtype whose rounding this model's outputs carry: bfloat16 for a draft on the NF4
        kernel (engine/nf4.py), else the pair's dtype. Checks comparing two ways of computing the
        same logits allow for it (engine/check/structure_check.py)."""
        return cpu_kernels_mod.rounds_to(self.cpu_kernels.get(role, {})) or self.dtype

    def model_bytes(self) -> int:
        """Bytes of weights held: parameters, buffers and packed CPU weights."""
        total = 0
        for model in (self.draft, self.target):
            total += sum(t.numel() * t.element_size() for t in model.parameters() if t.device.type != "meta")
        return total + sum(r.get("packed_bytes", 0) for r in self.cpu_kernels.values())


def _as_loaded(source) -> str:
    """A local folder as an absolute path (an export's command may run elsewhere), else the id."""
    path = Path(str(source)).expanduser()
    return str(path.resolve()) if path.exists() else str(source)


def servable_name(pair, role: str) -> str | None:
    """What a serving engine should load for the pair's `role` model (exports): the id or folder it
    was loaded from; for the embedded pair its converted folder, since its display name is no id."""
    return getattr(pair, f"{role}_source", None) or getattr(pair, f"{role}_name", None)


def _summarise_map(model) -> dict | None:
    """{device: number of modules} for a model placed by accelerate, else None."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return None
    counts: dict[str, int] = {}
    for place in device_map.values():
        counts[str(place)] = counts.get(str(place), 0) + 1
    return counts


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "", "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):   # torch knows meta, xpu, ...: they do not run a pair here
        raise UserError(f"unknown device '{device}' (use cpu, cuda, cuda:N, mps or auto)")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError("device 'cuda' asked for, but no CUDA GPU is available here")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError("device 'mps' asked for, but MPS is not available here")
    return dev


def synced_clock(pair: ModelPair):
    """A perf_counter that first waits for the GPU work queued so far, so that timings cover the
    work and not only its launch. It waits on every CUDA device the pair runs on (pair.cuda_devices):
    a bare synchronize() waits for the current device only (cuda:0 unless set). Devices the pair
    does not use are left alone (a wait there would create a CUDA context on them)."""
    devices = pair.cuda_devices
    if not devices:
        return time.perf_counter

    def now() -> float:
        for index in devices:
            torch.cuda.synchronize(index)
        return time.perf_counter()
    return now


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    if dtype in (None, "", "auto"):
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise UserError(f"unknown dtype '{dtype}' (use float32, bfloat16, float16 or auto)")
    return table[dtype]


def _resolve_source(name: str) -> str:
    """'default' -> the embedded pair's converted folders are handled by load_pair."""
    name = (name or "").strip()
    if not name:
        raise UserError("model name is empty: give a Hugging Face id, a local folder, or 'default'")
    # a path (no hub id starts so) that is not there: said before anything loads or converts (the
    # embedded target was prepared first, then the message spoke of the hub being offline)
    if name.startswith(("/", "./", "../", "~", "\\")) and not _exists(name):
        raise UserError(f"no such folder: '{name}' (a local model is a folder with config.json and weights)")
    return name


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except RuntimeError:   # "~someone/x" with no user someone
        return False


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect, so an offline machine gets its answer in seconds, not after
    minutes of download retries."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


# transformers' from_pretrained sets torch's process-wide default dtype while it builds a model
# and then restores the one it found. Two builds at once (the embedded draft loads on a second
# thread while the target converts) interleave those two steps and can leave float16 as the
# default for the whole process. So models are built one at a time; packing runs outside.
MODEL_BUILD_LOCK = threading.Lock()


def _from_pretrained(loader, source: str, **kwargs):
    """Local folder or local HF cache first; the hub only when it can be reached."""
    with MODEL_BUILD_LOCK:
        try:
            return _without_missing_hub_kernels(loader, source, local_files_only=True, **kwargs)
        except (OSError, ValueError) as exc:
            if Path(source).exists() or not _hub_reachable():
                raise UserError(_not_found_message(source, exc)) from None
        try:
            return _without_missing_hub_kernels(loader, source, **kwargs)
        except (OSError, ValueError) as exc:
            raise UserError(_not_found_message(source, exc)) from None


def _without_missing_hub_kernels(loader, source: str, **kwargs):
    """from_pretrained; if the `kernels` package fails to fetch a layer kernel from the hub, load
    again with PyTorch's own layers. transformers swaps layers (rotary, norms) for hub kernels on
    the device a model is placed on; a CUDA device map offline failed this way on an H200
    (bench/gpu/tests-cuda.txt). Exactness does not depend on it: the verifier compares the target
    with itself."""
    try:
        return loader.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        if "use_kernels" in kwargs or not _raised_in_hub_kernels(exc):
            raise
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # outside the except block: its traceback holds the first, fully loaded model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    log.warning("hub kernels unavailable for %s (%s); loading it with PyTorch's own layers", source, reason)
    return loader.from_pretrained(source, use_kernels=False, **kwargs)


def _raised_in_hub_kernels(exc: BaseException) -> bool:
    """Whether the error (or one it was raised from) came out of the `kernels` package."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(frame.f_globals.get("__name__", "").split(".")[0] == "kernels"
               for frame, _ in traceback.walk_tb(exc.__traceback__)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _load_tokenizer(source: str):
    return _from_pretrained(AutoTokenizer, source)


def _load_model(source: str, device: torch.device, dtype: torch.dtype, placement: dict | None = None,
                role: str = "target", kernels: str = "default", name: str = "",
                head_ids=None, draft_weights: str = "int8") -> tuple[torch.nn.Module, dict]:
    """placement: accelerate's device_map / max_memory / offload_folder, or None for one device.
    kernels 'fast' on a CPU packs the linears (engine/cpu_kernels.py). Returns (model, what was done)."""
    if not placement:
        if cpu_kernels_mod.applies(kernels, device, dtype):
            # a float16 checkpoint is read as stored and packed from there: no float32 copy in between.
            # The draft's mask probe runs on the model as stored (packing couples its rows); the
            # target's after packing (rows stay independent), where it is seconds faster than the
            # stored float16's CPU matmuls
            stored = cpu_kernels_mod.stored_dtype(source)
            model = _from_pretrained(AutoModelForCausalLM, source, dtype=stored or dtype).eval()
            probe = probe_tree_mask(model, name) if cpu_kernels_mod.couples_rows_when_packed(role) else None
            report = cpu_kernels_mod.pack(model, role, head_ids, draft_weights).to_dict()
            return model, {**report, "probe": probe or probe_tree_mask(model, name)}
        model = _from_pretrained(AutoModelForCausalLM, source, dtype=dtype).to(device).eval()
        return model, {"role": role, "mode": "default"}
    try:
        model = _from_pretrained(AutoModelForCausalLM, source, dtype=dtype, **placement)
    except UserError:
        raise
    except (ValueError, RuntimeError, KeyError, TypeError, AssertionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot place {source} with device map {placement.get('device_map')!r}: {first}") from None
    places = set(map(str, getattr(model, "hf_device_map", {}).values()))
    if places == {"disk"} and "offload_folder" not in placement:
        raise UserError(f"max memory {placement.get('max_memory')} leaves no room for any part of {source} on "
                        "a device; raise it, or give an offload folder to run it entirely from disk")
    return model.eval(), {"role": role, "mode": "default", "why": "placed by a device map"}


DEVICE_MAP_NAMES = ("auto", "balanced", "balanced_low_0", "sequential")


def parse_device_map(value: str | dict | None):
    """'auto' | 'balanced' | 'balanced_low_0' | 'sequential' | a JSON file {module: device}."""
    if value is None or isinstance(value, dict) or value in DEVICE_MAP_NAMES:
        return value
    path = Path(value)
    if not path.is_file():
        raise UserError(f"device map must be one of {', '.join(DEVICE_MAP_NAMES)} or a JSON file; got {value!r}")
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"device map file {value} is not valid JSON: {exc}") from None
    if not isinstance(mapping, dict) or not all(isinstance(v, (str, int)) for v in mapping.values()):
        raise UserError(f"device map file {value} must map module names to devices (\"cpu\", \"disk\", 0, ...)")
    return mapping


def parse_max_memory(value: str | dict | None) -> dict | None:
    """'gpu0=20GiB,cpu=60GiB' -> {0: '20GiB', 'cpu': '60GiB'} (accelerate's max_memory)."""
    if value is None or isinstance(value, dict):
        return value
    out = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        key, sep, amount = part.partition("=")
        if not sep:
            raise UserError(f"max memory entries look like gpu0=20GiB or cpu=60GiB; got {part!r}")
        key, amount = key.strip().lower(), _memory_amount(amount.strip(), part)
        digits = key.removeprefix("gpu").removeprefix("cuda")
        if digits.isdigit():
            out[int(digits)] = amount
        elif key in ("cpu", "mps"):
            out[key] = amount
        else:
            raise UserError(f"unknown device {key!r} in max memory (use gpuN, cpu or mps)")
    return out or None


def _memory_amount(amount: str, part: str) -> int | str:
    """An amount accelerate can read (bytes as digits, or '20GiB', '2.5GB'; 0 keeps a device out),
    checked here: a typo reached accelerate only once the old pair had been unloaded to make room."""
    from accelerate.utils import convert_file_size_to_int
    if amount.isdigit():
        return int(amount)
    if amount[-1:] == "b" and amount[-2:-1].isalpha():
        # accelerate reads a lowercase b as bits: cpu=20gb would allow 2.5 GB
        raise UserError(f"max memory {part!r}: a lowercase b means bits to accelerate; write "
                        f"{amount.upper()} for bytes")
    try:
        if convert_file_size_to_int(amount) >= 0:
            return amount
    except ValueError:
        pass
    raise UserError(f"max memory entries look like gpu0=20GiB or cpu=60GiB (a size: bytes, or a number "
                    f"with KB/MB/GB/KiB/MiB/GiB); got {part!r}")


def placement(device_map=None, max_memory=None, offload_folder=None) -> dict | None:
    device_map = parse_device_map(device_map)
    if device_map is None:
        if max_memory or offload_folder:
            raise UserError("max memory and an offload folder need a device map (e.g. auto for the target)")
        return None
    out = {"device_map": device_map}
    if max_memory:
        out["max_memory"] = parse_max_memory(max_memory)
    if offload_folder:
        Path(offload_folder).mkdir(parents=True, exist_ok=True)
        out["offload_folder"] = str(offload_folder)
    return out


def _not_found_message(source: str, exc: Exception) -> str:
    folder = Path(source)
    if folder.exists():
        if folder.is_dir() and not (folder / "config.json").exists():
            # (transformers' own words here named no file: "… backend tokenizer from one of: .")
            return (f"'{source}' is a folder but not a model folder: it has no config.json (a Hugging Face "
                    "model folder holds config.json, the weights and the tokenizer's files)")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"'{source}' is a folder but not a loadable causal-LM: {first}"
    reach = "the hub has no such id" if _hub_reachable() else "the Hugging Face hub cannot be reached (offline?)"
    return (f"model '{source}' is neither a local folder nor a model in the local Hugging Face cache, and {reach}. "
            "Check the id, or name 'default' for the embedded default pair.")


def check_same_tokenizer(draft_tok, target_tok, draft_name: str, target_name: str) -> None:
    dv, tv = draft_tok.get_vocab(), target_tok.get_vocab()
    if dv != tv:
        only_d = len(set(dv.items()) - set(tv.items()))
        only_t = len(set(tv.items()) - set(dv.items()))
        raise UserError(f"the tokenizers differ: {draft_name} has {len(dv)} tokens, {target_name} has {len(tv)}; "
                        f"{only_d} entries only in the draft, {only_t} only in the target. "
                        "Speculative decoding needs the same vocabulary.")


def context_limit(model, tokenizer) -> int:
    cfg = model.config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < 10**8:
        return value
    raise UserError(f"cannot tell the context length of {type(model).__name__}")


def sliding_window(model) -> int | None:
    """The smallest sliding window among the layers of the cache this model builds, or None."""
    layers = attention.new_cache(model).layers
    windows = [layer.sliding_window for layer in layers if getattr(layer, "sliding_window", None)]
    return min(windows) if windows else None


def _ids(value) -> set[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, (list, tuple)):
        return {int(v) for v in value}
    if isinstance(value, torch.Tensor):
        return {int(v) for v in value.flatten().tolist()}
    return set()


def eos_ids(target, tokenizer) -> frozenset[int]:
    """The ids generate() stops on: the generation config's eos_token_id (generate() fills it from
    model.config when the generation config has none); the tokenizer's eos only when neither has one."""
    gen = getattr(target, "generation_config", None)
    ids = _ids(getattr(gen, "eos_token_id", None)) or _ids(getattr(target.config, "eos_token_id", None))
    return frozenset(ids or _ids(tokenizer.eos_token_id))


def generation_defaults(model) -> dict:
    """The sampling settings the checkpoint's generation_config asks for, as generate() resolves them
    (fields left unset take transformers' global defaults: temperature 1, top-k 50, top-p 1)."""
    gen = getattr(model, "generation_config", None)
    defaults = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
    try:
        from transformers import GenerationConfig
        defaults.update({k: v for k, v in GenerationConfig._get_default_generation_params().items() if k in defaults})
    except (ImportError, AttributeError):
        pass
    out = {}
    for key, fallback in defaults.items():
        value = getattr(gen, key, None)
        out[key] = fallback if value is None else value
    out["do_sample"] = bool(out["do_sample"])
    out["temperature"], out["top_p"], out["top_k"] = float(out["temperature"]), float(out["top_p"]), int(out["top_k"] or 0)
    out["set_by_checkpoint"] = sorted(k for k in defaults if getattr(gen, k, None) is not None)
    return out


def probe_tree_mask(model, name: str) -> dict:
    """Does this model honour a custom 4-D mask with explicit positions on top of its cache?

    Feeds [a] then [b, c] with c blind to b (both at position 1) and compares c's logits with a
    plain forward of [a, c]. A model that ignores the mask lets c see b and fails."""
    vocab = model.get_output_embeddings().weight.shape[0]
    a, b, c = 1 % vocab, 2 % vocab, 3 % vocab
    try:
        cache = attention.new_cache(model)
        attention.forward_causal(model, cache, [a])
        visible = torch.tensor([[True, True, False], [True, False, True]])
        tree = attention.forward(model, cache, [b, c], [1, 1], visible)
        right = attention.forward_causal(model, attention.new_cache(model), [a, c])[-1]
        wrong = attention.forward_causal(model, attention.new_cache(model), [a, b, c])[-1]
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure means the family cannot do tree attention
        raise UserError(f"{name} ({type(model).__name__}) cannot run a forward with a custom 4-D attention "
                        f"mask: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    error = float((tree[1] - right).abs().max())
    separation = float((wrong - right).abs().max())
    # Rounding between a batched and a single-row forward stays far below the mask's own effect; a
    # family that honours only part of the mask (ALiBi biases from the cache length, e.g. MPT) does not.
    floor = 1e-4 if next(model.parameters()).dtype == torch.float32 else 5e-3
    ok = error <= max(0.02 * separation, floor)
    result = {"model": name, "max_error": error, "mask_effect": separation, "passed": ok}
    if not ok:
        raise UserError(f"{name} ({type(model).__name__}) ignores custom 4-D attention masks "
                        f"(tree logits off by {error:.3g}, mask effect {separation:.3g}); it cannot verify trees")
    return result


def load_pair(draft: str = DEFAULT, target: str = DEFAULT, device: str | None = None,
              dtype: str | None = None, progress=None, target_device_map=None, draft_device_map=None,
              max_memory=None, offload_folder=None, cpu_kernels: str | None = None,
              draft_head_tokens: int | None = None, draft_weights: str | None = None) -> ModelPair:
    """Load and check a pair. `progress(stage, fraction, message)` is called between stages.
    cpu_kernels: 'fast' (the default on a CPU) or 'default' (engine/cpu_kernels.py).
    draft_head_tokens: with fast kernels, the draft's head scores only this many most frequent
    tokens (FR-Spec; None = the shipped default, 0 = the full head; needs a shipped frequency table).
    draft_weights: with fast kernels, 'auto' (None), 'nf4' or 'int8' (engine/cpu_kernels.py).

    With a device map (accelerate), the target - and the draft if it has its own map - is
    spread over GPUs, CPU and disk; `device` then only says where the draft goes otherwise."""
    def report(stage, fraction, message):
        log.info(message)
        if progress:
            progress(stage, fraction, message)

    draft, target = _resolve_source(draft), _resolve_source(target)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    kernels = resolve_kernels(cpu_kernels)
    cpu_kernels_mod.check_draft_weights(draft_weights)  # a typo is refused whatever the kernels
    weights = (cpu_kernels_mod.resolve_draft_weights(draft_weights)
               if cpu_kernels_mod.applies(kernels, dev, dt) else "int8")
    target_place = placement(target_device_map, max_memory, offload_folder)
    draft_place = (placement(draft_device_map, max_memory, offload_folder and str(Path(offload_folder) / "draft"))
                   if draft_device_map else None)
    draft_src, target_src = draft, target
    on = f"{dev} as {dt}" + (" (fast CPU kernels)" if cpu_kernels_mod.applies(kernels, dev, dt) else "")
    head_tokens = cpu_kernels_mod.DRAFT_HEAD_TOKENS if draft_head_tokens is None else int(draft_head_tokens)
    if head_tokens < 0:
        raise UserError(f"draft head tokens must be 0 (full head) or positive (got {head_tokens})")

    def load_draft(source: str, tokenizer=None, meanwhile: str = ""):
        report("draft", 0.6, f"loading draft {draft} on {on}{meanwhile}")
        if head_tokens and tokenizer is None:
            tokenizer = _load_tokenizer(source)
        head_ids = cpu_kernels_mod.frequent_ids(tokenizer, head_tokens) if head_tokens else None
        return _load_model(source, dev, dt, draft_place, "draft", kernels, draft, head_ids, weights)

    # the embedded draft converts in about half the target's time: it loads on a second thread
    # while the target is still being converted (a first start's cores are otherwise half idle then)
    with ThreadPoolExecutor(1, thread_name_prefix="sequoia-load-draft") as early:
        draft_loading = draft_tok_loading = None
        if DEFAULT in (draft, target):
            from engine.embedded import ensure_default_pair

            def while_preparing(role: str, folder: Path) -> None:
                nonlocal draft_loading, draft_tok_loading
                if role == "draft" and draft == DEFAULT:
                    draft_loading = early.submit(load_draft, str(folder), None, " (while the target converts)")
                    # then its tokenizer, on the same thread (~2 s off a first start's critical path)
                    draft_tok_loading = early.submit(_load_tokenizer, str(folder))

            default_draft, default_target = ensure_default_pair(progress=progress, while_preparing=while_preparing)
            draft_src = str(default_draft) if draft == DEFAULT else draft
            target_src = str(default_target) if target == DEFAULT else target
        report("tokenizers", 0.05, "loading tokenizers")
        draft_tok = draft_tok_loading.result() if draft_tok_loading is not None else _load_tokenizer(draft_src)
        target_tok = _load_tokenizer(target_src)
        check_same_tokenizer(draft_tok, target_tok, draft, target)
        report("target", 0.1, f"loading target {target} on {on}")
        target_model, target_kernels = _load_model(target_src, dev, dt, target_place, "target", kernels, target)
        draft_model, draft_kernels = (draft_loading.result() if draft_loading is not None
                                      else load_draft(draft_src, draft_tok))
    cpu_kernels_mod.release_freed_memory()
    report("probe", 0.9, "checking that both models honour tree attention masks")
    probe = {role: kernels_done.pop("probe", None) or probe_tree_mask(model, name)
             for role, model, name, kernels_done in (("draft", draft_model, draft, draft_kernels),
                                                      ("target", target_model, target, target_kernels))}
    pair = ModelPair(
        draft=draft_model, target=target_model, tokenizer=target_tok,
        draft_name=_display_name(draft, draft_src), target_name=_display_name(target, target_src),
        device=attention.input_device(target_model), dtype=dt, eos_ids=eos_ids(target_model, target_tok),
        context_limit=min(context_limit(target_model, target_tok), context_limit(draft_model, draft_tok)),
        vocab_size=target_model.get_output_embeddings().weight.shape[0], probe=probe,
        kv_window=min(filter(None, (sliding_window(target_model), sliding_window(draft_model))), default=None),
        cpu_kernels={"target": target_kernels, "draft": draft_kernels},
        draft_source=_as_loaded(draft_src), target_source=_as_loaded(target_src))
    report("ready", 1.0, f"pair ready: {pair.draft_name} -> {pair.target_name}")
    return pair


def _display_name(name: str, source: str) -> str:
    if name != DEFAULT:
        return name
    return Path(source).name


def prompt_is_blank(text) -> bool:
    """No prompt to run: None, not text, or only whitespace. One rule for the page's field check,
    its handlers, the CLI and the encoder (each says it in its own words)."""
    return not isinstance(text, str) or not text.strip()


def encode_prompt(pair: ModelPair, text: str, chat: bool | None = None) -> list[int]:
    """Token ids for a prompt; instruct models get their chat template (default when they have one)."""
    if prompt_is_blank(text):
        raise UserError("the prompt is empty")
    use_chat = pair.has_chat_template if chat is None else chat
    tok = pair.tokenizer
    if use_chat:
        if not pair.has_chat_template:
            raise UserError("chat mode asked for, but this tokenizer has no chat template")
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
    else:
        ids = tok(text, add_special_tokens=True)["input_ids"]
    ids = [int(i) for i in ids]
    if not ids:
        raise UserError("the prompt encodes to no tokens")
    return ids
