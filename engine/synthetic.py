"""Synthetic device profiles: random-weight models of realistic sizes, timed like a real pair.

Timing needs no trained weights: a forward over n tokens costs the same whatever the weights
hold. So `python -m engine profile --synthetic --draft-config 68m --target-config 7b` builds a
Llama-68M-shaped draft and a Llama-2-7B-shaped target with random weights directly on the device
(bfloat16 on a GPU by default), measures t(n) and the draft cost per width with the same code as
the real profiler (engine.profiler.profile_device), and writes the profile JSON and a plot. With
`--acceptance` it also shows the hardware-aware (n, d) that profile leads to.

Sizes are presets (`68m`, `160m`, `1.1b`, `7b`, `13b`, `70b`, and `tiny`/`tiny-target` for tests)
or a config.json file / model folder, each optionally followed by `:key=value,...` overrides,
e.g. `7b:num_hidden_layers=2`."""
from __future__ import annotations

import difflib
import json
import logging
import time
from pathlib import Path

import torch

from engine import profiler
from engine.errors import UserError
from engine.models import ModelPair, probe_tree_mask, resolve_device, resolve_dtype

log = logging.getLogger(__name__)

_LLAMA = dict(model_type="llama", hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False,
              bos_token_id=1, eos_token_id=2, vocab_size=32000)
PRESETS: dict[str, dict] = {
    # shapes of public checkpoints (from their config.json); weights are random here
    "68m": dict(_LLAMA, hidden_size=768, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=12,
                num_key_value_heads=12, max_position_embeddings=2048, rms_norm_eps=1e-6),   # JackFram/llama-68m
    "160m": dict(_LLAMA, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12, max_position_embeddings=2048, rms_norm_eps=1e-6),  # JackFram/llama-160m
    "1.1b": dict(_LLAMA, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, max_position_embeddings=2048),                       # TinyLlama-1.1B
    "7b": dict(_LLAMA, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, max_position_embeddings=4096),                        # Llama-2-7b
    "13b": dict(_LLAMA, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                num_key_value_heads=40, max_position_embeddings=4096),                       # Llama-2-13b
    "70b": dict(_LLAMA, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, max_position_embeddings=4096),                        # Llama-2-70b
    # for tests: seconds on a CPU
    "tiny": dict(_LLAMA, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512, vocab_size=512),
    "tiny-target": dict(_LLAMA, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=512, vocab_size=512),
}


# ------------------------------------------------------------------ configs and models
def parse_size(spec: str) -> tuple[str, dict]:
    """'7b' | '7b:num_hidden_layers=2' | 'path/config.json[:k=v]' -> (display name, config dict)."""
    spec = (spec or "").strip()
    if not spec:
        raise UserError("empty model size: give a preset (" + ", ".join(PRESETS) + ") or a config.json")
    base, _, over = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
    key = base.lower()
    if key in PRESETS:
        cfg = dict(PRESETS[key])
    else:
        path = Path(base)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise UserError(f"unknown model size '{base}': use one of {', '.join(PRESETS)} or a config.json file")
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read {path}: {exc}") from None
        if "model_type" not in cfg:
            raise UserError(f"{path} has no model_type")
    overridden = []
    for item in (x for x in over.split(",") if x.strip()):
        k, eq, v = item.partition("=")
        if not eq:
            raise UserError(f"override '{item}' must look like key=value")
        cfg[k.strip()] = _value(v.strip())
        overridden.append(k.strip())
    _refuse_misspelt_keys(cfg, overridden)
    return spec, cfg


def _refuse_misspelt_keys(cfg: dict, keys: list[str]) -> None:
    """An override the config keeps as a key of its own, neither one of its model type's fields
    nor an alias of one, close to one of them, is taken for a typo and refused
    (`num_hiden_layers=2` built the full depth, silently). Keys the config turns into others
    (rope_theta → rope_parameters in transformers 5) are not kept as themselves and pass; a key
    close to no field is kept, with a warning (a model may read keys its defaults lack)."""
    if not keys:
        return
    from transformers import AutoConfig
    try:
        defaults = AutoConfig.for_model(cfg["model_type"])
    except Exception:  # noqa: BLE001 - an unknown model type: make_config says so
        return
    fields = set(defaults.to_dict()) | set(type(defaults).attribute_map)
    kept = set(make_config(cfg).to_dict())
    for key in (k for k in keys if k not in fields and k in kept):
        close = difflib.get_close_matches(key, sorted(fields), n=1, cutoff=0.8)
        if close:
            raise UserError(f"override '{key}' is not a {cfg['model_type']} config field: did you mean '{close[0]}'?")
        log.warning("override %r is not among a %s config's defaults; kept as given (a model may still read it)",
                    key, cfg["model_type"])


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def make_config(cfg: dict):
    from transformers import AutoConfig
    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path"):
        cfg.pop(k, None)
    # transformers 5 takes any key, and turns older ones (rope_theta) into newer ones
    # (rope_parameters): an override's typo is caught by parse_size, which knows the overrides
    try:
        return AutoConfig.for_model(model_type, **cfg)
    except Exception as exc:  # noqa: BLE001 - the config's own checks (a value of the wrong type, ...)
        raise UserError(f"cannot build a '{model_type}' config: {' '.join(str(exc).split())}") from None


def parameter_count(config) -> int:
    """Parameters of a config, counted on the meta device (no memory used)."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def build_model(config, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """Random weights, created directly on the device (a 7B model never passes through host memory)."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


class SyntheticTokenizer:
    """Just enough tokenizer for the step loop's text bookkeeping: token ids shown as <id>."""
    chat_template = None
    eos_token_id = None

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(f"<{int(i)}>" for i in ids)

    def batch_decode(self, batch, skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids) for ids in batch]


def _free_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except ImportError:
        return None


def synthetic_pair(draft_size: str, target_size: str, device: str | None = "auto", dtype: str | None = "auto",
                   seed: int = 0) -> ModelPair:
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    (dname, dcfg), (tname, tcfg) = parse_size(draft_size), parse_size(target_size)
    draft_cfg, target_cfg = make_config(dcfg), make_config(tcfg)
    need = (parameter_count(draft_cfg) + parameter_count(target_cfg)) * torch.tensor([], dtype=dt).element_size()
    free = _free_bytes(dev)
    if free is not None and need * 1.15 > free:
        raise UserError(f"the synthetic pair needs about {need / 2**30:.1f} GiB of weights in {dt} but {dev} has "
                        f"{free / 2**30:.1f} GiB free; pick smaller sizes or a larger device")
    log.info("building random-weight %s target (%s) and %s draft on %s", tname, dt, dname, dev)
    target = build_model(target_cfg, dev, dt, seed)
    draft = build_model(draft_cfg, dev, dt, seed + 1)
    probe = {}
    for role, model, name in (("draft", draft, dname), ("target", target, tname)):
        try:  # random bf16 weights can make the mask's effect too small to tell apart: timing is still valid
            probe[role] = probe_tree_mask(model, f"synthetic {name}")
        except UserError as exc:
            log.warning("tree-mask probe inconclusive on random weights (timing unaffected): %s", exc)
            probe[role] = {"model": name, "passed": None, "note": str(exc)}
    limit = min(getattr(c, "max_position_embeddings", 2048) for c in (draft_cfg, target_cfg))
    return ModelPair(draft=draft, target=target, tokenizer=SyntheticTokenizer(),
                     draft_name=f"synthetic-{dname}", target_name=f"synthetic-{tname}", device=dev, dtype=dt,
                     eos_ids=frozenset(), context_limit=limit,
                     vocab_size=target.get_output_embeddings().weight.shape[0], probe=probe)


# ------------------------------------------------------------------ profile + outputs
def synthetic_profile(draft_size: str, target_size: str, device: str | None = "auto", dtype: str | None = "auto",
                      max_budget: int = 128, prefix_tokens: int = 128, repeats: int = 5,
                      acceptance: list[float] | None = None, max_depth: int = 16) -> dict:
    pair = synthetic_pair(draft_size, target_size, device, dtype)
    t0 = time.perf_counter()
    prof = profiler.profile_device(pair, max_budget=max_budget, prefix_tokens=prefix_tokens, repeats=repeats)
    prof.source = "synthetic (random weights), measured in this run"
    described = pair.describe()
    out = {"kind": "synthetic-profile", "draft_size": draft_size, "target_size": target_size, "pair": described,
           "profile": prof.to_dict(), "seconds": time.perf_counter() - t0,
           "t_ratio": {n: prof.target_seconds[n] / prof.target_seconds[1] for n in sorted(prof.target_seconds)},
           "draft_over_target": prof.draft_seconds[1] / prof.target_seconds[1],
           "knee": knee(prof.target_seconds)}
    if acceptance:
        from engine.planner import choose_shape
        from engine.planning import table_for
        table = table_for(acceptance, max_budget, max_depth)
        choice = choose_shape(table, prof.target_seconds, prof.draft_seconds, prof.overhead_seconds,
                              budgets=range(1, max_budget + 1), depths=range(1, max_depth + 1))
        out["hardware_aware"] = {"acceptance": list(acceptance), "n": choice.n, "d": choice.d,
                                 "tree_depth": choice.tree.depth, "level_widths": choice.tree.level_widths,
                                 "predicted_tokens_per_step": choice.predicted_tokens_per_step,
                                 "predicted_speedup": choice.predicted_speedup}
    del pair
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def knee(target_seconds: dict) -> int | None:
    """Largest measured n whose t(n) is still within 10 % of t(1): where the flat part ends."""
    t1 = target_seconds[min(target_seconds)]
    flat = [n for n in sorted(target_seconds) if target_seconds[n] <= 1.1 * t1]
    return flat[-1] if flat else None


def plot_profile(report: dict, path: str | Path) -> Path:
    from engine.bench_report import save_figure
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prof = report["profile"]
    ts = {int(k): v for k, v in prof["target_seconds"].items()}
    ds = {int(k): v for k, v in prof["draft_seconds"].items()}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    xs = sorted(ts)
    ax.plot(xs, [ts[n] * 1e3 for n in xs], "o-", label=f"target {report['target_size']}")
    xd = sorted(ds)
    ax.plot(xd, [ds[n] * 1e3 for n in xd], "s-", label=f"draft {report['draft_size']}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in one forward (tree nodes / level width)")
    ax.set_ylabel("ms per forward (median)")
    ax.set_title("forward time vs tokens")
    ax.grid(alpha=0.3)
    ax.legend()
    ax = axes[1]
    ax.plot(xs, [ts[n] / ts[xs[0]] for n in xs], "o-", label="target t(n)/t(1)")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tree nodes n")
    ax.set_ylabel("t(n) / t(1)")
    title = "verification cost (flat up to the knee)"
    if report.get("hardware_aware"):
        ha = report["hardware_aware"]
        title += f"\nhardware-aware: n={ha['n']}, depth {ha['tree_depth']}, predicted {ha['predicted_speedup']:.2f}x"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    dev = prof.get("machine", {}).get("gpu") or prof.get("machine", {}).get("processor") or prof.get("device")
    fig.suptitle(f"synthetic {report['draft_size']} -> {report['target_size']} ({prof['dtype']}) on {dev}; "
                 "random weights, timing only", fontsize=10)
    return save_figure(fig, path)


# ------------------------------------------------------------------ CLI glue for `profile`
