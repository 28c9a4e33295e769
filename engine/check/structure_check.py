"""The structure section: tree-mask probes of both models, tokenizer and vocabulary sizes, dtype/device/eval
mode, and the KV-commit check (after a few speculative steps the committed caches give the same logits
as a fresh plain forward over the committed sequence)."""
from __future__ import annotations

import copy

import torch

from engine import attention, sampling
from engine.check.config import KV_TOLERANCE
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
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
        devices = sorted({str(p.device) for p in params})
        info[role] = {"dtypes": dtypes, "devices": devices, "training": bool(model.training),
                      "device_map": bool(getattr(model, "hf_device_map", None))}
        if model.training:
            problems.append(f"the {role} is in training mode (dropout makes outputs random)")
    prob = str(sampling.PROB_DTYPE).replace("torch.", "")
    if sampling.PROB_DTYPE not in (torch.float32, torch.float64):
        problems.append(f"probabilities are computed in {prob}; float16 underflows (ALGORITHM.md §3)")
    msg = (f"pair dtype {str(pair.dtype).replace('torch.', '')} on {pair.device}; draft "
           f"{'/'.join(info['draft']['dtypes'])} on {'/'.join(info['draft']['devices'])}, target "
           f"{'/'.join(info['target']['dtypes'])} on {'/'.join(info['target']['devices'])}; "
           f"probabilities in {prob}")
    ctx.add("structure", "dtype and device", "fail" if problems else "pass",
            "; ".join(problems) if problems else msg, probability_dtype=prob, **info)


def _kv_commit(ctx: CheckContext, ids: list[int]) -> None:
    pair, cfg = ctx.pair, ctx.config
    drafting = [m for m in ctx.methods if m.uses_draft]
    method = drafting[0] if drafting else ctx.methods[0]
    # per model: a draft on the NF4 kernel rounds to bfloat16, and the cached and fresh forwards sum
    # in different orders, so a logit may land one bfloat16 step apart (0.125 at the embedded
    # pair's logit sizes: total variation ~0.015, measured); a wrong commit moves far more
    tol = {role: KV_TOLERANCE.get(pair.precision(role), 1e-3) for role in ("target", "draft")}
    settings = Settings(temperature=1.0, max_new_tokens=cfg.kv_steps * method.tree.depth + 1, ignore_eos=True,
                        seed=cfg.seed)
    decoder = Decoder(pair, method, settings, generator=seeded_generator(pair, cfg.seed + 7))
    worst = {"target": 0.0, "draft": 0.0}
    logit_worst = {"target": 0.0, "draft": 0.0}
    steps = accepted = 0
    try:
        for event in decoder.run(ids, ctx.should_stop):
            if event.finish_reason == "stopped":
                raise Stopped
            if event.done or steps >= cfg.kv_steps:
                break
            steps += 1
            accepted += len(event.accepted_ranks)
            seq = ids + event.token_ids
            # target: the cache holds seq[:-1]; the root's logits must match a fresh forward
            cache = copy.deepcopy(decoder.target_cache)
            if cache.get_seq_length() != len(seq) - 1:
                raise _CommitMismatch(f"target cache holds {cache.get_seq_length()} tokens after step {steps}, "
                                      f"expected {len(seq) - 1}")
            got = attention.forward(pair.target, cache, [seq[-1]], [len(seq) - 1],
                                    attention.causal_visibility(len(seq) - 1, 1, pair.device))[-1].cpu()
            _compare("target", got, plain_logits(pair.target, seq), worst, logit_worst)
            if method.uses_draft:
                cache = copy.deepcopy(decoder.draft_cache)
                held = cache.get_seq_length()
                if held != decoder.draft_len or not 0 < held < len(seq):
                    raise _CommitMismatch(f"draft cache holds {held} tokens after step {steps} "
                                          f"(decoder says {decoder.draft_len}, sequence {len(seq)})")
                got = attention.forward_causal(pair.draft, cache, seq[held:])[-1].cpu()
                _compare("draft", got, plain_logits(pair.draft, seq), worst, logit_worst)
            ctx.advance(ctx.estimate.timings["kv_step_seconds"], f"structure: KV commit, step {steps}")
    except Stopped:
        raise
    except _CommitMismatch as exc:
        ctx.add("structure", "KV commit", "fail", str(exc), method=method.name)
        return
    except Exception as exc:  # noqa: BLE001
        ctx.add("structure", "KV commit", "fail", f"decoding raised {error_text(exc)}", method=method.name)
        return
    details = {"method": method.name, "steps": steps, "accepted_draft_tokens": accepted, "tolerance_tv": tol,
               "max_tv": worst, "max_logit_diff": logit_worst}
    # a draft on row-coupled kernels (int8 with per-call activation scales) computes a token's KV
    # differently in a tree batch than alone; its q is used as computed, so only its cache length
    # is checked (above) and its difference is reported, not judged (ALGORITHM.md §7)
    coupled = pair.rows_coupled("draft")
    details["draft_rows_coupled"] = coupled
    bad = [role for role, tv in worst.items() if tv > tol[role] and not (role == "draft" and coupled)]
    if bad:
        ctx.add("structure", "KV commit", "fail", "logits after a commit differ from a fresh forward: "
                + ", ".join(f"{r} total variation {worst[r]:.3g} (logits off by {logit_worst[r]:.3g}) > "
                            f"{tol[r]:g}" for r in bad), **details)
    elif steps == 0:
        ctx.add("structure", "KV commit", "skip", "generation ended before a step could be checked", **details)
    else:
        draft_tol = f"<= {tol['draft']:g}" + (", its NF4 kernel's bfloat16 rounding"
                                              if pair.precision("draft") != pair.dtype else "")
        ctx.add("structure", "KV commit", "pass", f"after {steps} {method.name} steps at T=1 ({accepted} draft "
                f"tokens accepted) the cached logits equal a fresh forward: total variation "
                f"target {worst['target']:.2g} (<= {tol['target']:g})"
                + (f", draft {worst['draft']:.2g} ({draft_tol})" if not coupled else
                   f"; draft {worst['draft']:.2g}, not judged: its int8 kernels couple rows, which "
                   "changes acceptance only"), **details)


def _compare(role, got, fresh, worst, logit_worst) -> None:
    """Keep the worst total variation and logit difference seen so far for this model."""
    tv = 0.5 * float((torch.softmax(got.double(), -1) - torch.softmax(fresh.double(), -1)).abs().sum())
    worst[role] = max(worst[role], tv)
    logit_worst[role] = max(logit_worst[role], float((got - fresh).abs().max()))


class _CommitMismatch(Exception):
    """A cache holds the wrong number of tokens after a step: the commit itself is wrong."""
