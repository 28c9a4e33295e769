"""How a benchmark report (engine.bench.run_bench's dict) is shown: terminal table, goals, machine line,
Markdown table for the README, JSON file and plot. Reads the report only; runs nothing."""
from __future__ import annotations

import json
import math
from pathlib import Path

FAMILY_ORDER = ("ar", "ar-default-kernels", "chain", "specinfer", "sequoia", "sequoia-auto")


def _fmt(x, spec=".2f", none="-"):
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def format_table(report: dict) -> str:
    head = (f"{'T':>4} {'method':<26} {'n':>3} {'d':>2} {'tok/s med [min-max]':>22} {'speedup':>7} "
            f"{'tok/step':>8} {'pred':>5} {'draft%':>6} {'verify%':>7} {'other%':>6} {'peakMB':>7} {'+runMB':>6}")
    lines = [head, "-" * len(head)]
    for r in report["results"]:
        spread = f"{r['tokens_per_second']:.2f} [{r['tokens_per_second_min']:.2f}-{r['tokens_per_second_max']:.2f}]"
        lines.append(
            f"{r['temperature']:>4g} {r['label']:<26} {r['nodes']:>3} {r['depth']:>2} {spread:>22} "
            f"{_fmt(r['speedup_vs_ar']):>7} {r['tokens_per_step']:>8.2f} {_fmt(r['predicted_tokens_per_step']):>5} "
            f"{_fmt(100 * (r['draft_fraction'] or 0), '.0f'):>6} {_fmt(100 * (r['verify_fraction'] or 0), '.0f'):>7} "
            f"{_fmt(100 * (r['other_fraction'] or 0), '.0f'):>6} "
            f"{_fmt(r['peak_memory_bytes'] / 2**20 if r['peak_memory_bytes'] else None, '.0f'):>7} "
            f"{_fmt(r['peak_memory_above_start_bytes'] / 2**20 if r.get('peak_memory_above_start_bytes') else None, '.0f'):>6}")
    return "\n".join(lines)


def format_goals(report: dict) -> str:
    lines = []
    for g in report["goals"]:
        m = g["measured"]
        shown = "not measured" if m is None else f"{m:+.1%}" if "within 10 %" in g["goal"] else (f"{m:.0%}" if "10 % of step" in g["goal"]
                                                               else (f"{m}" if isinstance(m, int) else f"{m:.2f}"))
        lines.append(f"[{'met' if g['met'] else 'NOT met'}] {g['goal']}: {shown}"
                     + (f" ({g['detail']})" if g.get("detail") else ""))
    return "\n".join(lines)


def format_observed_costs(report: dict) -> str:
    """One line: the profile's quantities as this run's interleaved lanes saw them."""
    c = report["machine"].get("observed_costs")
    if not c:
        return ""
    ratios = ", ".join(f"t({n})/t(1) {v:.2f}" for n, v in c["target_over_t1"].items() if n != "1")
    draft = (f"; a chain's draft level {c['draft_level_over_t1']:.2f} of t(1) ({c['draft_level_seconds'] * 1e3:.1f} ms)"
             if c.get("draft_level_over_t1") is not None else "")
    return f"observed in this run (interleaved lanes): t(1) {c['t1_seconds'] * 1e3:.1f} ms; {ratios}{draft}"


def format_machine(report: dict) -> str:
    m = report["machine"]
    la = m.get("load_average_1min_during_runs") or {}
    return (f"{m.get('processor')} ({m.get('cpu_count')} CPUs, {m.get('torch_threads')} torch threads)"
            + (f", GPU {m['gpu']}" if m.get("gpu") else "")
            + f"; torch {m.get('torch')}, transformers {m.get('transformers')}; device {m.get('device')} "
              f"{m.get('dtype')}; load average start {m.get('load_average_start')}, "
              f"during runs {la.get('min')}-{la.get('max')} (median {la.get('median')}), end {m.get('load_average_end')}")


def write_json(report: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=_json_default) + "\n", encoding="utf-8")
    return path


def _json_default(o):
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"cannot serialise {type(o).__name__}")


def plot(report: dict, path: str | Path) -> Path:
    """tokens/step vs nodes and tokens/s vs nodes, one column per temperature."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps = sorted({r["temperature"] for r in report["results"]})
    fig, axes = plt.subplots(2, len(temps), figsize=(6.2 * len(temps), 8.5), squeeze=False)
    style = {"ar": ("black", "s"), "ar-default-kernels": ("grey", "x"), "chain": ("tab:blue", "o"), "specinfer": ("tab:orange", "^"),
             "sequoia": ("tab:green", "D"), "sequoia-auto": ("tab:red", "*")}
    for j, t in enumerate(temps):
        rs = [r for r in report["results"] if r["temperature"] == t]
        for i, (field_, label) in enumerate((("tokens_per_step", "tokens / step"),
                                             ("tokens_per_second", "tokens / s"))):
            ax = axes[i][j]
            for fam in FAMILY_ORDER:
                fr = sorted((r for r in rs if r["method"] == fam), key=lambda r: r["nodes"])
                if not fr:
                    continue
                color, marker = style[fam]
                xs, ys = [r["nodes"] for r in fr], [r[field_] for r in fr]
                ax.plot(xs, ys, marker=marker, color=color, linestyle="-" if fam in ("chain", "sequoia") else "none",
                        markersize=11 if fam == "sequoia-auto" else 7, label=fam)
                if field_ == "tokens_per_second":
                    lo = [r["tokens_per_second_min"] for r in fr]
                    hi = [r["tokens_per_second_max"] for r in fr]
                    ax.vlines(xs, lo, hi, color=color, alpha=0.5)
                if fam == "specinfer":
                    for r in fr:
                        ax.annotate(f"{r['width']}x{r['depth']}", (r["nodes"], r[field_]), fontsize=8,
                                    xytext=(4, -10), textcoords="offset points", color=color)
                if fam == "sequoia":
                    pred_key = "predicted_tokens_per_step" if i == 0 else "predicted_tokens_per_second"
                    px = [r["nodes"] for r in fr if r.get(pred_key)]
                    py = [r[pred_key] for r in fr if r.get(pred_key)]
                    if py:
                        ax.plot(px, py, color=color, linestyle="--", alpha=0.7, label="sequoia predicted")
            ar_rows = [r for r in rs if r["method"] == "ar"]
            if ar_rows and field_ == "tokens_per_second":
                ax.axhline(ar_rows[0][field_], color="black", linewidth=0.8, linestyle=":", label="ar level")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tree nodes (root included; chain: depth)")
            ax.set_ylabel(label)
            ax.set_title(f"T = {t:g}: {label} vs tree size")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    m = report["machine"]
    names = [Path(str(report['pair'][k])).name for k in ("draft", "target")]
    fig.suptitle(f"{names[0]} -> {names[1]} on {m.get('gpu') or m.get('processor')} "
                 f"({m.get('device')}, {m.get('dtype')})", fontsize=10)
    return save_figure(fig, path)


def save_figure(fig, path: str | Path) -> Path:
    """Write a matplotlib figure as PNG (folders created) and free it; the bench and the
    synthetic profile plot the same way."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
