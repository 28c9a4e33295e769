"""What torch.compile or a leaner forward saves on the draft's per-forward cost (issue 14):

    nice .venv/bin/python bench/draft_overhead.py [--draft P --target P | --tiny] [--repeats 20]
        [--rows 1,2,4] [--variants eager,lean,lean-fused,compile,compile-opaque] [--threads N] [--recompile-limit N]
        [--json OUT]

The draft's forward of n = 1, 2, 4 tree tokens (a star: what one tree level feeds) on a cache that
holds a 128-token prefix, through attention.forward, the decoder's own path (4-D float tree mask,
explicit positions), timed by engine.profiler._time_forward. Variants (each caught: a failure is
recorded with its error and the rest still run):
  eager       the model as loaded (fast CPU kernels on a CPU);
  lean        the same modules and kernels, the llama/qwen2 layer loop written out here: none of
              transformers' per-call wrappers (kwarg deprecation, output capture, mask preparation,
              attention-interface lookup, nn.Module.__call__ of the leaves);
  lean-fused  lean with q/k/v and gate/up each one int8 packed linear (the same int8 rows and the
              same per-call activation scale, so the same numbers): 4 linear calls a layer, not 7;
  compile     torch.compile(model, dynamic=True) (inductor; graph breaks and recompile-limit hits
              are counted from torch._dynamo's counters; TORCH_LOGS=graph_breaks shows where);
              compile-opaque: the same, each packed linear wrapped as one custom op (the fbgemm
              ScriptObject it holds is what breaks the graph); compile-autotune (opt-in): compile
              with mode="max-autotune-no-cudagraphs".
For each: warm-up seconds (compiles included), median and IQR of the per-forward ms, the ratio to
eager, max |logit - eager logit| on the same inputs and whether every row's argmax agrees. eager is
timed again at the end ("eager-again") to show how much the machine drifted. Timings mean something
only on a quiet machine: the load average before and after is printed with them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import DynamicCache  # noqa: E402
from transformers.integrations.sdpa_attention import pack_gqa, repeat_kv  # noqa: E402
from transformers.models.llama.modeling_llama import rotate_half  # noqa: E402

from engine import attention, cpu_kernels, profiler  # noqa: E402
from engine.tree import Tree  # noqa: E402

VARIANTS = ("eager", "lean", "lean-fused", "compile", "compile-opaque", "compile-autotune")
PACKED: dict[str, cpu_kernels.PackedLinear] = {}  # compile-opaque's linears, by a key dynamo keeps constant


@torch.library.custom_op("draft_overhead::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, key: str) -> torch.Tensor:
    """A PackedLinear as one opaque op: dynamo cannot trace fbgemm's packed-weight ScriptObject."""
    return cpu_kernels.PackedLinear.forward(PACKED[key], x)


@packed_linear.register_fake
def _(x, key):
    return x.new_empty(*x.shape[:-1], PACKED[key].out_features)


def opaque_linears(model, on: bool) -> None:
    """Route every PackedLinear of `model` through packed_linear (on) or back to its own forward."""
    for name, m in model.named_modules():
        if isinstance(m, cpu_kernels.PackedLinear):
            if on:
                PACKED[name] = m
                m.forward = lambda x, key=name: torch.ops.draft_overhead.packed_linear(x, key)
            else:
                m.__dict__.pop("forward", None)


def tree_inputs(base: int, n: int, vocab: int):
    """The inputs _time_forward feeds: n tokens as a star (root + n-1 children) after `base`."""
    tree = Tree.star(n - 1) if n > 1 else Tree((-1,))
    visible = attention.tree_visibility(base, tree.ancestor_mask, list(range(n)), list(range(n)), "cpu")
    return [(7 * i + 3) % vocab for i in range(n)], [base + d for d in tree.depth_of], visible


def logits(model, prefix: list[int], n: int) -> torch.Tensor:
    cache = DynamicCache(config=model.config)
    attention.forward_causal(model, cache, prefix)
    ids, positions, visible = tree_inputs(len(prefix), n, model.config.vocab_size)
    return attention.forward(model, cache, ids, positions, visible)


def fuse_int8(linears: list) -> torch.nn.Module:
    """One int8 PackedLinear whose rows are those of `linears` in order (same weights, scales, biases)."""
    if not all(isinstance(m, cpu_kernels.PackedLinear) and m.kind == "int8" for m in linears):
        raise ValueError("lean-fused needs the draft's int8 packed linears (--cpu-kernels fast)")
    parts = [torch.ops.quantized.linear_unpack(m._packed) for m in linears]
    q = torch._make_per_channel_quantized_tensor(torch.cat([w.int_repr() for w, _ in parts]),
                                                 torch.cat([w.q_per_channel_scales() for w, _ in parts]),
                                                 torch.cat([w.q_per_channel_zero_points() for w, _ in parts]), 0)
    biases = [b if b is not None else torch.zeros(m.out_features) for (_, b), m in zip(parts, linears)]
    fused = cpu_kernels.PackedLinear(torch.nn.Linear(1, 1), "int8")  # then given the real blob
    fused.in_features, fused.out_features = linears[0].in_features, q.shape[0]
    fused._packed = torch.ops.quantized.linear_prepack(q, None if all(b is None for _, b in parts) else torch.cat(biases))
    return fused


class Lean:
    """Duck-types the model for attention.forward / _time_forward: model.model's loop written out."""

    def __init__(self, model, fused: bool):
        if model.config.model_type not in ("llama", "qwen2") or set(attention.layer_types(model)) != {"full_attention"}:
            raise ValueError(f"the lean forward covers llama/qwen2 with full attention only, not {model.config.model_type}")
        self.config, self.dtype, self._sequoia_input_device = model.config, model.dtype, attention.input_device(model)
        inner = model.model
        self.embed, self.norm, self.rotary = inner.embed_tokens, inner.norm, inner.rotary_emb
        self.head = model.get_output_embeddings()
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            qkv = fuse_int8([a.q_proj, a.k_proj, a.v_proj]).forward if fused else None
            gate_up = fuse_int8([m.gate_proj, m.up_proj]).forward if fused else None
            self.layers.append(SimpleNamespace(
                ln1=layer.input_layernorm.forward, ln2=layer.post_attention_layernorm.forward, qkv=qkv,
                q=a.q_proj.forward, k=a.k_proj.forward, v=a.v_proj.forward, o=a.o_proj.forward,
                splits=(a.q_proj.out_features, a.k_proj.out_features, a.v_proj.out_features),
                gate_up=gate_up, gate=m.gate_proj.forward, up=m.up_proj.forward, down=m.down_proj.forward,
                act=m.act_fn, head_dim=a.head_dim, groups=a.num_key_value_groups, scale=a.scaling))

    def __call__(self, input_ids, position_ids, attention_mask, cache, use_cache=True):
        h = self.embed.forward(input_ids)
        cos, sin = (t.unsqueeze(1) for t in self.rotary(h, position_ids))
        rows = h.shape[1]
        for i, L in enumerate(self.layers):
            x = L.ln1(h)
            q, k, v = L.qkv(x).split(L.splits, dim=-1) if L.qkv else (L.q(x), L.k(x), L.v(x))
            q, k, v = (t.view(1, rows, -1, L.head_dim).transpose(1, 2) for t in (q, k, v))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = cache.update(k, v, i)
            if rows == 1:  # what transformers' sdpa path does for grouped heads
                o = torch.nn.functional.scaled_dot_product_attention(
                    pack_gqa(q, L.groups), k, v, attn_mask=pack_gqa(attention_mask, L.groups), scale=L.scale)
            else:
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, repeat_kv(k, L.groups), repeat_kv(v, L.groups), attn_mask=attention_mask, scale=L.scale)
            h = h + L.o(o.reshape(1, -1, rows, L.head_dim).transpose(1, 2).reshape(1, rows, -1))
            x = L.ln2(h)
            gate, up = L.gate_up(x).chunk(2, dim=-1) if L.gate_up else (L.gate(x), L.up(x))
            h = h + L.down(L.act(gate) * up)
        return SimpleNamespace(logits=self.head.forward(self.norm(h)))


def build(name: str, model):
    """The variant's model and notes; compile variants reset dynamo and its counters first."""
    if name in ("eager", "eager-again"):
        return model, {}
    if name.startswith("lean"):
        return Lean(model, fused=name == "lean-fused"), {}
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    mode = "max-autotune-no-cudagraphs" if name == "compile-autotune" else None
    opaque_linears(model, name == "compile-opaque")
    return torch.compile(model, dynamic=True, mode=mode), {"mode": mode or "default", "dynamic": True}


def dynamo_report() -> dict:
    """Graph breaks and skipped frames of the compiled runs so far, reasons cut to their gist."""
    def gist(counter) -> dict:
        out: dict = {}
        for k, v in counter.items():
            lines = k.split("\n")
            context = next((line.strip() for line in lines if "debug context" in line), "")
            key = f"{lines[0].strip()} | {context}"[:240]
            out[key] = out.get(key, 0) + v
        return out
    c = torch._dynamo.utils.counters
    return {"graph_breaks": sum(c["graph_break"].values()), "unique_graphs": c["stats"]["unique_graphs"],
            "recompile_limit": torch._dynamo.config.recompile_limit,
            "frames": dict(c["frames"]), "inductor_cache": {k: v for k, v in c["inductor"].items() if "cache" in k},
            "recompile_limit_hit": any("recompile limit" in k for k in c["unimplemented"]),
            "graph_break_reasons": gist(c["graph_break"]), "unimplemented": gist(c["unimplemented"])}


def run_variant(name, model, prefix, rows, repeats, reference) -> dict:
    result = {"name": name, "ok": False}
    try:
        runner, notes = build(name, model)
        result.update(notes)
        t0 = time.perf_counter()
        outs = {n: logits(runner, prefix, n) for n in rows}  # compiles every shape it will be timed on
        result["warmup_s"] = round(time.perf_counter() - t0, 3)
        if name.startswith("compile"):
            result["dynamo"] = dynamo_report()
        per = {}
        for n in rows:
            spreads: dict = {}
            med = profiler._time_forward(runner, prefix, n, repeats, time.perf_counter, lambda: False, spreads=spreads)
            ref = reference.get(n, outs[n])
            diff = (outs[n] - ref).abs().masked_fill(outs[n] == ref, 0)  # -inf == -inf (a pruned head) is 0
            per[str(n)] = {"median_ms": med * 1e3, "iqr_ms": spreads[n] * med * 1e3,
                           "max_abs_dlogit": float(diff.max()),
                           "argmax_match": bool(torch.equal(outs[n].argmax(-1), ref.argmax(-1)))}
        result.update(ok=True, rows=per)
        reference.update({n: o for n, o in outs.items() if n not in reference})
    except Exception as exc:  # an honest record, never a crash
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        result["traceback_tail"] = traceback.format_exc()[-1500:]
    finally:
        if name.startswith("compile"):
            torch._dynamo.reset()
            opaque_linears(model, False)
    return result


def show(r: dict, eager: dict) -> None:
    """Print one variant's rows (adding each row's ratio to eager) and, for a compile, its graph breaks."""
    if not r["ok"]:
        print(f"{r['name']:<17} FAILED: {r['error'][:300]}", flush=True)
        return
    for n, row in r["rows"].items():
        row["ratio_to_eager"] = row["median_ms"] / eager[n]["median_ms"] if n in eager else None
        print(f"{r['name']:<17}{r['warmup_s']:>10.2f}{n:>3}{row['median_ms']:>11.3f}{row['iqr_ms']:>9.3f}"
              f"{row['ratio_to_eager'] or float('nan'):>7.3f}{row['max_abs_dlogit']:>13.2e}  {row['argmax_match']}")
    if d := r.get("dynamo"):
        print(f"  {r['name']}: {d['graph_breaks']} graph breaks, {d['unique_graphs']} graphs, recompile limit "
              f"{'HIT' if d['recompile_limit_hit'] else 'not hit'}; graph breaks, then frames left to eager:")
        for reason, count in [*d["graph_break_reasons"].items(), *d["unimplemented"].items()]:
            print(f"    {count:>4} x {reason}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draft", default="default")
    p.add_argument("--target", default="default")
    p.add_argument("--tiny", action="store_true", help="tests.tiny's qwen2 pair (fast kernels): a quick check")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rows", default="1,2,4")
    p.add_argument("--prefix", type=int, default=128)
    p.add_argument("--variants", default="eager,lean,lean-fused,compile,compile-opaque")
    p.add_argument("--recompile-limit", type=int, help="torch._dynamo.config.recompile_limit (default: torch's)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    p.add_argument("--json", dest="json_out")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.recompile_limit:
        torch._dynamo.config.recompile_limit = args.recompile_limit
    names = [v for v in args.variants.split(",") if v]
    names = ["eager", *[v for v in names if v != "eager"]]  # the reference comes first
    if unknown := set(names) - set(VARIANTS):
        p.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    rows = [int(n) for n in args.rows.split(",")]
    load_before = profiler.load_average()
    if args.tiny:
        from tests.tiny import tiny_pair
        pair = tiny_pair("qwen2", kernels="fast")
    else:
        from engine.models import load_pair
        pair = load_pair(args.draft, args.target, device="cpu")
    prefix = [(31 * i + 11) % pair.vocab_size for i in range(args.prefix)]
    layers = getattr(pair.draft.config.get_text_config(decoder=True), "num_hidden_layers", None)
    print(f"draft {pair.draft_name}: {layers} layers, prefix {args.prefix}, {args.repeats} repeats, "
          f"{torch.get_num_threads()} threads, load average {load_before}", flush=True)
    print(f"{'variant':<17}{'warm-up s':>10}{'n':>3}{'median ms':>11}{'IQR ms':>9}{'ratio':>7}{'max|dlogit|':>13}  argmax")
    reference: dict = {}
    results = []
    for name in [*names, "eager-again"]:
        results.append(r := run_variant(name, pair.draft, prefix, rows, args.repeats, reference))
        show(r, results[0].get("rows", {}))
    eager = results[0].get("rows", {})
    report = {"draft": pair.draft_name, "tiny": args.tiny, "layers": layers,
              "prefix_tokens": args.prefix, "repeats": args.repeats, "rows": rows,
              "machine": profiler.machine_description(pair.device), "draft_kernels": pair.cpu_kernels.get("draft"),
              "load_average_before": load_before, "load_average_after": profiler.load_average(),
              "eager_drift": {n: results[-1]["rows"][n]["median_ms"] / eager[n]["median_ms"] for n in eager}
              if results[-1]["ok"] and eager else None,
              "median_ratio": {r["name"]: statistics.median(x["ratio_to_eager"] for x in r["rows"].values())
                               for r in results if r["ok"] and eager},
              "variants": results}
    print("median ratio to eager: " + ", ".join(f"{k} {v:.3f}" for k, v in report["median_ratio"].items()))
    print(f"load average before {load_before}, after {report['load_average_after']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
