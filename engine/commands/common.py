"""Flags and helpers shared by the CLI commands."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from engine import export
from engine.errors import UserError
from engine.models import DEFAULT, load_pair
from engine.prompts import Prompt, default_prompts, prompt_set
from engine.settings import Settings
from engine.tree import Tree


def add_pair_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model pair")
    g.add_argument("--draft", default=DEFAULT, help="draft model: HF id, local folder, or 'default' (embedded)")
    g.add_argument("--target", default=DEFAULT, help="target model: HF id, local folder, or 'default' (embedded)")
    add_placement_args(g)


def add_placement_args(g) -> None:
    """Where and how the pair's models load (every command that loads one; plan and export too)."""
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto")
    g.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (fp32 on CPU, bf16 on GPU)")
    g.add_argument("--target-device-map", default=None,
                   help="accelerate device map for the target: auto, balanced, balanced_low_0, sequential "
                        "or a JSON file")
    g.add_argument("--draft-device-map", default=None, help="the same for the draft (default: one device)")
    g.add_argument("--max-memory", default=None, help="per-device limits for device maps, e.g. gpu0=20GiB,cpu=60GiB")
    g.add_argument("--offload-folder", default=None, help="where a device map may offload weights to disk")
    add_kernel_arg(g)


def add_kernel_arg(group) -> None:
    group.add_argument("--cpu-kernels", choices=["fast", "default"], default="fast",
                       help="on a CPU: fast = linears packed once (target float16 weights with float32 maths, "
                            "row-independent; draft 4-bit or int8), default = PyTorch's float32 path "
                            "(engine/cpu_kernels.py)")
    group.add_argument("--draft-weights", choices=["auto", "nf4", "int8"], default="auto",
                       help="fast kernels: the draft's weights; auto = nf4 (bitsandbytes, on CPUs with "
                            "AVX512-BF16) where it runs, else int8. Exactness does not depend on it")
    group.add_argument("--draft-head-tokens", type=int, default=None, metavar="K",
                       help="fast kernels: the draft's output head scores only the K most frequent tokens "
                            "(FR-Spec; exact, q = 0 elsewhere); 0 = full head; default: the shipped K")


def add_sampling_args(parser: argparse.ArgumentParser, max_new_tokens: int = 64) -> None:
    g = parser.add_argument_group("sampling")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (transformers' top_k, applied after temperature, before top-p); 0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1 = off)")
    g.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                   help=f"tokens to generate at most (default {max_new_tokens})")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the sampling (default 0): at T > 0 a seed repeats its text with the same "
                        "tree; generate's learning (on by default) and --auto's device profile may plan "
                        "another tree from what earlier runs stored, so use --no-learn and --budget/--depth "
                        "to repeat a text")
    g.add_argument("--ignore-eos", action="store_true", help="keep going past end-of-sequence tokens")
    g.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap prompts in the tokenizer's chat template (default: on when it has one)")


def settings_from_args(args) -> Settings:
    return Settings(temperature=args.temperature, top_p=args.top_p, top_k=getattr(args, "top_k", 0),
                    max_new_tokens=args.max_new_tokens,
                    seed=args.seed, ignore_eos=getattr(args, "ignore_eos", False))


def pair_from_args(args):
    return load_pair(args.draft, args.target, device=args.device, dtype=args.dtype,
                     target_device_map=args.target_device_map, draft_device_map=args.draft_device_map,
                     max_memory=args.max_memory, offload_folder=args.offload_folder,
                     cpu_kernels=getattr(args, "cpu_kernels", None),
                     draft_head_tokens=getattr(args, "draft_head_tokens", None),
                     draft_weights=getattr(args, "draft_weights", None))


def read_prompts(path: str | None) -> list[str]:
    """One prompt per line; the two characters \\n stand for a newline. Blank lines are skipped."""
    if path is None:
        return default_prompts()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read prompts file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    prompts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if not prompts:
        raise UserError(f"prompts file {path} has no prompts")
    return prompts


def read_prompt_set(path: str) -> list[Prompt]:
    """A JSON prompt set (engine.prompts.prompt_set), or one `error:` line for a file it cannot use."""
    try:
        prompts = prompt_set(path)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else
                  str(exc) if type(exc) is ValueError else f"{type(exc).__name__}: {exc}")   # (prompt_set's own words)
        raise UserError(f"cannot read prompt set {path}: {reason}") from None
    if not prompts:
        raise UserError(f"prompt set {path} has no prompts")
    return prompts


def flags_given(args, defaults: dict) -> list[str]:
    """The flags among `defaults` (dest -> its value when not given) that the command line set, as
    typed: a command refusing options of another mode names them."""
    return [f"--{name.replace('_', '-')}" for name, default in defaults.items() if getattr(args, name, default) != default]


def check_flag(value: int, flag: str, low: int, high: int | None = None, unit: str = "") -> None:
    """A number flag checked by its own name before the pair loads (the library's message names
    the quantity, "max new tokens", not the flag the user typed, and comes after the load)."""
    if value < low or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise UserError(f"{flag} must be {bounds}{unit} (got {value})")


def print_json(obj) -> None:
    json.dump(obj, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()


def writable(path: str | None, flag: str) -> Path | None:
    """An output file checked before minutes of work, not after it (only a missing folder is
    made before the file is written)."""
    if path is None:
        return None
    out = Path(path)
    if out.is_dir():
        raise UserError(f"cannot write {flag} {path}: it is a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:   # a file where a folder must be: mkdir says only "File exists"
        blocking = next((folder for folder in out.parents if folder.is_file()), None)
        why = f"{blocking} is a file, not a folder" if blocking is not None else exc.strerror
        raise UserError(f"cannot write {flag} {path}: {why}") from None
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"cannot write {flag} {path}: Permission denied")
    return out


def load_tree_file(path: str) -> Tree:
    """A tree in any format `export` writes (tree JSON, growmap .pt, vLLM or Medusa JSON),
    detected as `export --tree` detects it: an export fed back said "tree parents must be
    integers" (Medusa) or "tree JSON must be {"parents": ...}" (vLLM)."""
    return export.read_tree_file(path, f"--tree {path}")
