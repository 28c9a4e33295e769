"""The structure section: tree-mask probes of both models, tokenizer and vocabulary sizes, dtype/device/eval
mode, and the KV-commit check (after a few speculative steps the committed caches give the same logits
as a fresh plain forward over the committed sequence)."""
from __future__ import annotations

import copy
import math

import torch

from engine import attention, sampling
from engine.check.config import KV_ROUNDING_STEPS, KV_TOLERANCE
from engine.check.context import CheckContext, Stopped, error_text
from engine.check.reference import plain_logits
from engine.check.stepping import seeded_generator
from engine.decoding import Decoder
from engine.errors import UserError
from engine.models import check_same_tokenizer, probe_tree_mask
from engine.settings import Settings


def run_structure(ctx: CheckContext, prompts: list[list[int]]) -> None:
    """Probes, tokenizer, vocabulary sizes, dtype/device, then the KV commit on the first prompt."""
    pair = ctx.pair
    for role in ("draft", "target"):
        probe = (pair.probe or {}).get(role)
        if probe is None:
            try:
                probe = probe_tree_mask(getattr(pair, role), getattr(pair, f"{role}_name"))
            except UserError as exc:
                ctx.add("structure", f"tree-mask probe ({role})", "fail", str(exc))
                continue
        status = "pass" if probe.get("passed") else "fail"
        ctx.add("structure", f"tree-mask probe ({role})", status,
                f"custom 4-D mask honoured: tree logits off by {probe.get('max_error', float('nan')):.2g}, "
                f"mask effect {probe.get('mask_effect', float('nan')):.2g}", **probe)
    _tokenizers(ctx)
    _dtype_device(ctx)
    ctx.check_stop()
    _kv_commit(ctx, prompts[0])


def _tokenizers(ctx: CheckContext) -> None:
    pair = ctx.pair
    from transformers import AutoTokenizer
    sources = {role: getattr(getattr(pair, role), "name_or_path", "") or "" for role in ("draft", "target")}
    draft_v = pair.draft.get_output_embeddings().weight.shape[0]
    target_v = pair.target.get_output_embeddings().weight.shape[0]
    sizes = {"tokenizer": len(pair.tokenizer), "draft_logits": draft_v, "target_logits": target_v}
    try:
        toks = {role: AutoTokenizer.from_pretrained(src, local_files_only=True) for role, src in sources.items()}
    except Exception as exc:  # noqa: BLE001 - e.g. a model built in memory
        ctx.add("structure", "tokenizer", "pass", "same vocabulary (checked by load_pair, which refuses "
                f"different vocabularies; not re-loaded here: {error_text(exc)})", sources=sources, **sizes)
    else:
        try:
            check_same_tokenizer(toks["draft"], toks["target"], pair.draft_name, pair.target_name)
        except UserError as exc:
            ctx.add("structure", "tokenizer", "fail", str(exc), sources=sources, **sizes)
        else:
            ctx.add("structure", "tokenizer", "pass", f"draft and target tokenizers have the same "
                    f"{len(toks['target'].get_vocab())}-entry vocabulary", sources=sources, **sizes)
    note = []
    if draft_v != target_v:
        note.append(f"draft logits cover {draft_v} ids, target {target_v}: the engine pads/trims the draft "
                    "to the target's space (ids the draft lacks get draft probability 0)")
    if len(pair.tokenizer) > target_v:
        note.append(f"the tokenizer has {len(pair.tokenizer)} entries but the target only {target_v} logits")
    ctx.add("structure", "vocabulary sizes", "warn" if len(pair.tokenizer) > target_v else "pass",
            "; ".join(note) or f"draft and target both score {target_v} ids", **sizes)


def _dtype_device(ctx: CheckContext) -> None:
    pair = ctx.pair
    info, problems = {}, []
    for role in ("draft", "target"):
        model = getattr(pair, role)
        params = list(model.parameters())
        dtypes = sorted({_dtype_name(p.dtype) for p in params})
        devices = sorted({str(p.device) for p in params})
        info[role] = {"dtypes": dtypes, "devices": devices, "training": bool(model.training),
                      "device_map": bool(getattr(model, "hf_device_map", None))}
        if model.training:
            problems.append(f"the {role} is in training mode (dropout makes outputs random)")
    prob = _dtype_name(sampling.PROB_DTYPE)
    if sampling.PROB_DTYPE not in (torch.float32, torch.float64):
        problems.append(f"probabilities are computed in {prob}; float16 underflows (ALGORITHM.md §3)")
    msg = (f"pair dtype {_dtype_name(pair.dtype)} on {pair.device}; draft "
           f"{'/'.join(info['draft']['dtypes'])} on {'/'.join(info['draft']['devices'])}, target "
           f"{'/'.join(info['target']['dtypes'])} on {'/'.join(info['target']['devices'])}; "
           f"probabilities in {prob}")
    ctx.add("structure", "dtype and device", "fail" if problems else "pass",
            "; ".join(problems) if problems else msg, probability_dtype=prob, **info)


def _kv_commit(ctx: CheckContext, ids: list[int]) -> None:
    pair, cfg = ctx.pair, ctx.config
    drafting = [m for m in ctx.methods if m.uses_draft]
    method = drafting[0] if drafting else ctx.methods[0]
    tol = KV_TOLERANCE.get(pair.dtype, 1e-3)
    # a model rounding more coarsely than the pair's dtype (a draft on the NF4 kernel: bfloat16) is
    # judged in its rounding steps: the cached and fresh forwards sum in different orders, and a
    # logit lands a step apart (0.125 or 0.25 by logit size on the embedded pair), which no TV bound survives
    # near an even pair of tokens; a wrong commit moves logits by whole units
    coarse = {role: dtype for role in ("target", "draft") if (dtype := pair.precision(role)) != pair.dtype}
    rounding = {role: 0.0 for role in coarse}
    # greedy: a draft's own top tokens are accepted far more often than its samples, and only an
    # accepted path of 2+ tokens tells a right commit from one keeping the tree's first rows (at
    # T = 1 a weak draft could go every step without one, and a broken commit passed)
    settings = Settings(temperature=0.0, max_new_tokens=cfg.kv_steps * method.tree.depth + 1, ignore_eos=True,
                        seed=cfg.seed)
    decoder = Decoder(pair, method, settings, generator=seeded_generator(pair, cfg.seed + 7))
    worst = {"target": 0.0, "draft": 0.0}
    logit_worst = {"target": 0.0, "draft": 0.0}
    steps = accepted = telling = 0   # telling: steps whose accepted path is not the tree's first rows
    try:
        for event in decoder.run(ids, ctx.should_stop):
            if event.finish_reason == "stopped":
                raise Stopped
            if event.done or steps >= cfg.kv_steps:
                break
            steps += 1
            accepted += len(event.accepted_ranks)
            telling += event.accepted_path != list(range(len(event.accepted_path)))
            seq = ids + event.token_ids
            # target: the cache holds seq[:-1]; the root's logits must match a fresh forward
            cache = copy.deepcopy(decoder.target_cache)
            if cache.get_seq_length() != len(seq) - 1:
                raise _CommitMismatch(f"target cache holds {cache.get_seq_length()} tokens after step {steps}, "
                                      f"expected {len(seq) - 1}")
            got = attention.forward(pair.target, cache, [seq[-1]], [len(seq) - 1],
                                    attention.causal_visibility(len(seq) - 1, 1, pair.device))[-1].cpu()
            _compare("target", got, plain_logits(pair.target, seq), worst, logit_worst, coarse, rounding)
            if method.uses_draft:
                cache = copy.deepcopy(decoder.draft_cache)
                held = cache.get_seq_length()
                if held != decoder.draft_len or not 0 < held < len(seq):
                    raise _CommitMismatch(f"draft cache holds {held} tokens after step {steps} "
                                          f"(decoder says {decoder.draft_len}, sequence {len(seq)})")
                got = attention.forward_causal(pair.draft, cache, seq[held:])[-1].cpu()
                _compare("draft", got, plain_logits(pair.draft, seq), worst, logit_worst, coarse, rounding)
            ctx.advance(ctx.estimate.timings["kv_step_seconds"], f"structure: KV commit, step {steps}")
    except Stopped:
        raise
    except _CommitMismatch as exc:
        ctx.add("structure", "KV commit", "fail", str(exc), method=method.name)
        return
    except Exception as exc:  # noqa: BLE001
        ctx.add("structure", "KV commit", "fail", f"decoding raised {error_text(exc)}", method=method.name)
        return
    details = {"method": method.name, "steps": steps, "accepted_draft_tokens": accepted,
               "steps_with_a_telling_path": telling, "tolerance_tv": tol,
               "max_tv": worst, "max_logit_diff": logit_worst}
    if coarse:
        details.update(rounding_dtype={r: _dtype_name(d) for r, d in coarse.items()},
                       max_rounding_steps=rounding, rounding_steps_allowed=KV_ROUNDING_STEPS)
    # a draft on row-coupled kernels (int8 with per-call activation scales) computes a token's KV
    # differently in a tree batch than alone; its q is used as computed, so only its cache length
    # is checked (above) and its difference is reported, not judged (ALGORITHM.md §7)
    coupled = pair.rows_coupled("draft")
    details["draft_rows_coupled"] = coupled
    def off(role) -> bool:
        if role == "draft" and coupled:
            return False
        return rounding[role] > KV_ROUNDING_STEPS if role in coarse else worst[role] > tol

    def said(role) -> str:
        if role in coarse:
            return (f"{role} logits within {rounding[role]:.2g} {_dtype_name(coarse[role])} rounding steps "
                    f"(<= {KV_ROUNDING_STEPS}; its kernels round to {_dtype_name(coarse[role])}; total variation "
                    f"{worst[role]:.2g})")
        return f"{role} total variation {worst[role]:.2g} (<= {tol:g})"

    bad = [role for role in worst if off(role)]
    if bad:
        ctx.add("structure", "KV commit", "fail", "logits after a commit differ from a fresh forward: "
                + ", ".join(f"{r} logits off by {logit_worst[r]:.3g}, "
                            + (f"{rounding[r]:.3g} {_dtype_name(coarse[r])} rounding steps > {KV_ROUNDING_STEPS}"
                               if r in coarse else f"total variation {worst[r]:.3g} > {tol:g}") for r in bad),
                **details)
    elif steps == 0:
        ctx.add("structure", "KV commit", "skip", "generation ended before a step could be checked", **details)
    else:
        # in a tree with branches, a step whose accepted path is the tree's first rows cannot tell a
        # right commit from one of the wrong rows (in a chain the path is always its first rows)
        branched = any(len(kids) > 1 for kids in method.tree.children)
        untold = branched and not telling
        ctx.add("structure", "KV commit", "warn" if untold else "pass",
                ("no step accepted a path that a commit of the wrong rows would show (use more KV steps, or "
                 "a draft closer to the target); " if untold else "")
                + f"after {steps} greedy {method.name} steps ({accepted} draft tokens accepted"
                + (f"; {telling} of the steps on a path other than the tree's first rows" if branched else "")
                + f") the cached logits equal a fresh forward: {said('target')}"
                + (f", {said('draft')}" if not coupled else
                   f"; draft total variation {worst['draft']:.2g}, not judged: its int8 kernels couple rows, "
                   "which changes acceptance only"), **details)


def _compare(role, got, fresh, worst, logit_worst, coarse, rounding) -> None:
    """Keep the worst total variation and logit difference seen so far for this model, and for a
    model in `coarse` the difference in rounding steps of its dtype at its largest logit."""
    tv = 0.5 * float((torch.softmax(got.double(), -1) - torch.softmax(fresh.double(), -1)).abs().sum())
    worst[role] = max(worst[role], tv)
    diff = float((got - fresh).abs().max())
    logit_worst[role] = max(logit_worst[role], diff)
    if role in coarse:
        rounding[role] = max(rounding[role], diff / rounding_step(float(fresh.abs().max()), coarse[role]))


def rounding_step(value: float, dtype: torch.dtype) -> float:
    """The spacing of `dtype`'s numbers at `value` (bfloat16 at 20: 0.125)."""
    info = torch.finfo(dtype)
    return info.eps * 2.0 ** math.floor(math.log2(value)) if value > 0 else info.tiny


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class _CommitMismatch(Exception):
    """A cache holds the wrong number of tokens after a step: the commit itself is wrong."""
