"""The greedy section: for each prompt and method, the speculative greedy output must equal the target's
own greedy generate() token for token (a near tie within the dtype's rounding is a WARN, not a FAIL)."""
from __future__ import annotations

import math

from engine.check.config import TIE_TOLERANCE
from engine.check.context import CheckContext, Stopped, error_text
from engine.decoding import Decoder
from engine.settings import Settings


def run_greedy(ctx: CheckContext, prompts: list[list[int]]) -> None:
    """One item per (prompt, method): identical to the target's greedy reference, a near tie, or a failure."""
    timings = ctx.estimate.timings
    tie = TIE_TOLERANCE.get(ctx.pair.dtype, 2e-3)
    for i, ids in enumerate(prompts):
        ctx.check_stop()
        try:
            ref, ref_logits = ctx.reference(i, ids)
        except Exception as exc:  # noqa: BLE001 - a model that cannot generate is a finding
            ctx.add("greedy", f"prompt {i + 1} reference", "fail",
                    f"transformers generate() failed on the target: {error_text(exc)}")
            continue
        ctx.advance(timings["reference_seconds"][i], f"greedy: target reference for prompt {i + 1}", True)
        for method in ctx.methods:
            ctx.check_stop()
            name = f"prompt {i + 1} / {method.name}"
            settings = Settings(temperature=0.0, max_new_tokens=len(ref), ignore_eos=True, seed=ctx.config.seed)
            try:
                events = list(Decoder(ctx.pair, method, settings).run(ids, ctx.should_stop))
            except Exception as exc:  # noqa: BLE001
                ctx.add("greedy", name, "fail", f"decoding raised {error_text(exc)}", method=method.name)
                continue
            last = events[-1]
            if last.finish_reason == "stopped":
                raise Stopped
            out = last.token_ids
            details = {"method": method.name, "prompt": i + 1, "tokens": len(ref), "steps": last.total_steps,
                       "tokens_per_step": last.tokens_per_step}
            if out == ref:
                note = ""
                if method.uses_draft and last.total_steps >= len(ref):
                    note = " (no draft token was accepted, so this says little about the tree)"
                ctx.add("greedy", name, "pass", f"identical, {len(ref)} tokens in {last.total_steps} steps "
                        f"({last.tokens_per_step:.2f} tokens/step){note}", **details)
            else:
                ctx.add("greedy", name, *_difference(ctx, ids, ref, ref_logits, out, tie), **details)
            ctx.advance(timings["greedy_run_seconds"][i][method.name], f"greedy: prompt {i + 1}, {method.name}")


def _difference(ctx: CheckContext, ids, ref, ref_logits, out, tie) -> tuple[str, str]:
    """Status and message for an output that differs from the reference: where, and whether a near tie."""
    j = next((k for k, (a, b) in enumerate(zip(out, ref)) if a != b), min(len(out), len(ref)))
    if j >= len(out) or j >= len(ref):
        return "fail", f"lengths differ: {len(out)} tokens against the target's {len(ref)}"
    tok = ctx.pair.tokenizer
    got, want = out[j], ref[j]
    logits = ref_logits[j]
    gap = float(logits[want] - logits[got]) if got < logits.shape[-1] else math.inf
    context = tok.decode(ref[max(0, j - 8):j])
    where = (f"first difference at token {j + 1}: speculative {got} {tok.decode([got])!r}, target {want} "
             f"{tok.decode([want])!r} after ...{context!r}; target logit gap {gap:.3g}")
    if gap <= tie:
        return "warn", where + f" <= {tie:g}: a near tie, rounding decides it (not a logic error)"
    return "fail", where
