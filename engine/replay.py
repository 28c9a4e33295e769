"""Acceptance vectors measured by replay (issue 15): thousands of positions in minutes.

For each prompt: decode the answer once with an exact method (the text is what the target alone
samples, whatever method made it: only the speed differs), then run the draft and the target over
prompt + answer in one causal forward each. At every answer position the target's p and the
draft's q are then known, and the verifier of a `width`-child star is replayed there with the
engine's own functions (sampling.top_tokens + verify_greedy at T = 0; draw_without_replacement or
draw_with_replacement + verify_sequoia / verify_specinfer at T > 0, `draws` times per position).

Why this measures the same P(rank k accepted) as the on-policy star (profiler.measure_acceptance):
which child a star accepts at a position depends only on p and q there and on the verifier's own
random draws, and the positions are those target sampling visits. It differs in two stated ways:
every answer position is measured (the star skips the position after each accepted child), and at
T > 0 each position is replayed `draws` times (the mean of the draws is counted, so the interval
below, computed with one observation per position, is conservative). A position's logits come from
a plain causal forward instead of a tree forward: the same maths up to float rounding; except for
a model whose rows are coupled (the int8 draft of the fast CPU path quantises each forward's
activations with one scale), whose q is computed one position at a time, as a decoding step's
one-token root forward computes it (a 240-row forward would share one coarser scale and
understate acceptance: at T = 0.7 on two prompts here, mean sum(min(p, q)) 0.75 and 0.70 with a
shared scale, 0.87 and 0.80 one row at a time).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from engine import attention, intervals, methods, sampling
from engine.decoding import fit_vocab, generate_ids, make_generator
from engine.errors import UserError
from engine.models import ModelPair, encode_prompt
from engine.profiler import AcceptanceVector, Progress, Stopped, draft_kernels, machine_description, measurable_width
from engine.settings import Settings

DECODE_METHOD = methods.chain(4)  # how the answers are decoded: any exact method, a chain is fast on a CPU
DRAWS = 4                          # replays per position at T > 0
RESUMED_SEED_STEP = 7919           # a resumed answer's sampling seed: its prompt's, moved on by this per resume


@dataclass
class AnswerSoFar:
    """A prompt's answer as far as it was decoded (replay_acceptance's `answers`): a measurement
    stopped while decoding it keeps these tokens, and the next one continues from them. The answer
    is still the target's own sample (each token is drawn from the target given what precedes it);
    only the random stream differs from an answer decoded in one go (another seed per resume)."""
    tokens: list[int] = field(default_factory=list)
    complete: bool = False
    resumes: int = 0
    seconds: float = 0.0   # spent decoding it in tries that were stopped (the vector's time counts them)


def _decoded_answer(pair: ModelPair, ids: list[int], settings: Settings, so_far: AnswerSoFar,
                    should_stop: Callable[[], bool]) -> list[int]:
    """The prompt's answer: `so_far`'s tokens, continued up to settings.max_new_tokens in all.
    Raises Stopped when a stop came, with what was decoded kept in `so_far`."""
    if not so_far.complete:
        left = settings.max_new_tokens - len(so_far.tokens)
        if left > 0:
            more = replace(settings, max_new_tokens=left, seed=settings.seed + RESUMED_SEED_STEP * so_far.resumes)
            began = time.perf_counter()
            tokens, events = generate_ids(pair, ids + so_far.tokens, DECODE_METHOD, more, should_stop=should_stop)
            so_far.tokens = so_far.tokens + list(tokens)
            if events and events[-1].finish_reason == "stopped":
                so_far.resumes += 1
                so_far.seconds += time.perf_counter() - began
                raise Stopped("measurement stopped")
        so_far.complete = True
    return so_far.tokens


@torch.inference_mode()
def _logits(model, ids: list[int], start: int = 0, one_row_at_a_time: bool = False) -> torch.Tensor:
    """The logits of positions start-1 .. len(ids)-2 (those whose next token is ids[start:]): one
    causal forward over ids, or, for a model whose rows are coupled (the int8 draft: its dynamic
    activation scale is shared by the rows of a forward), ids[:start] and then one row at a time,
    as a decoding step's one-token forward computes them."""
    cache = attention.new_cache(model)
    if not one_row_at_a_time:
        return attention.forward_causal(model, cache, ids)[start - 1:len(ids) - 1]
    rows = [attention.forward_causal(model, cache, ids[:start])[-1:]]
    rows += [attention.forward_causal(model, cache, [token])[-1:] for token in ids[start:-1]]
    return torch.cat(rows)


def answer_logits(pair: ModelPair, prompt_ids: list[int], answer: list[int], device: torch.device | None = None,
                  should_stop: Callable[[], bool] = lambda: False) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q) logits at every answer position (the rows whose next token is an answer token): one
    causal forward of the target, then of the draft (_logits: one row at a time where its rows are
    coupled), over prompt + answer; on `device` (default: the pair's), the draft's fitted to the
    target's vocabulary. `should_stop` is asked between the two forwards."""
    device = device or pair.device
    seq = prompt_ids + answer
    p = _logits(pair.target, seq, len(prompt_ids), pair.rows_coupled("target")).to(device)
    _stop_if_asked(should_stop)
    q = fit_vocab(_logits(pair.draft, seq, len(prompt_ids), pair.rows_coupled("draft")), pair.vocab_size, device)
    return p, q


def _replay(p_logits, q_logits, settings: Settings, sampler: str, width: int, draws: int,
            generator: torch.Generator) -> list[float]:
    """Per rank, the share of `draws` replays of a star at one position that accepted it."""
    got = [0.0] * (width + 1)  # last entry: no child accepted
    if settings.greedy:
        verdict = sampling.verify_greedy(int(torch.argmax(p_logits)), sampling.top_tokens(q_logits, width))
        got[width if verdict.accepted is None else verdict.accepted] = 1.0
        return got
    p = sampling.target_distribution(p_logits, settings.temperature, settings.top_p, settings.top_k)
    q = sampling.draft_distribution(q_logits, settings.temperature)
    draw = sampling.draw_without_replacement if sampler == "sequoia" else sampling.draw_with_replacement
    verify = sampling.verify_sequoia if sampler == "sequoia" else sampling.verify_specinfer
    for _ in range(draws):
        verdict = verify(p, q, draw(q, width, generator), generator)
        got[width if verdict.accepted is None else verdict.accepted] += 1.0 / draws
    return got


def _stop_if_asked(should_stop: Callable[[], bool]) -> None:
    if should_stop():
        raise Stopped("measurement stopped")


def replay_acceptance(pair: ModelPair, prompts: list[str], temperature: float, top_p: float = 1.0,
                      sampler: str = "sequoia", width: int = 16, tokens_per_prompt: int = 160, seed: int = 0,
                      chat: bool | None = None, draws: int = DRAWS, top_k: int | None = 0, domain: str = "",
                      progress: Progress | None = None,
                      should_stop: Callable[[], bool] = lambda: False,
                      answers: list[AnswerSoFar] | None = None) -> AcceptanceVector:
    """`answers` (one per prompt): answers decoded so far by a measurement that was stopped, continued
    here and kept up to date (engine/refine.py: a background unit a job stopped keeps its answer)."""
    if not 1 <= width <= 64:
        raise UserError(f"width must be between 1 and 64 (got {width})")
    if draws < 1:
        raise UserError(f"draws must be at least 1 (got {draws})")
    width = measurable_width(pair, width)
    settings = Settings(temperature=temperature, top_p=top_p, max_new_tokens=tokens_per_prompt, seed=seed,
                        top_k=int(top_k or 0))
    prob_device = torch.device("cpu") if pair.device.type == "mps" else pair.device
    counts, positions, start = [0.0] * (width + 1), 0, time.perf_counter()
    prompt_counts = []   # each prompt's counts, for the interval over prompts (engine/intervals.py)
    for i, prompt in enumerate(prompts):
        _stop_if_asked(should_stop)
        ids = encode_prompt(pair, prompt, chat)
        if progress:   # its answer is decoded first (most of a prompt's time): said before, not only after
            progress(i / len(prompts), f"replaying acceptance: prompt {i + 1}/{len(prompts)}, decoding its answer "
                                       f"({positions} positions so far)")
        so_far = answers[i] if answers is not None else AnswerSoFar()
        answer = _decoded_answer(pair, ids, replace(settings, seed=seed + i), so_far, should_stop)
        if not answer:
            prompt_counts.append(intervals.prompt_row([0.0] * (width + 1), 0))   # a prompt, no positions
            continue
        # a stop lands between the forwards and between positions too
        p_all, q_all = answer_logits(pair, ids, answer, prob_device, should_stop)
        # each prompt's replays draw from their own generator, apart from the decoding's: a prompt's
        # counts do not depend on the prompts measured before it, so a set measured in parts (one
        # prompt per background unit, `measure --extend`) counts what one measurement counts
        generator = make_generator(pair.device, seed + i + 1)
        own = [0.0] * (width + 1)
        for j in range(len(answer)):
            _stop_if_asked(should_stop)
            for k, share in enumerate(_replay(p_all[j], q_all[j], settings, sampler, width, draws, generator)):
                own[k] += share
        counts = [a + b for a, b in zip(counts, own)]
        positions += len(answer)
        prompt_counts.append(intervals.prompt_row(own, len(answer)))
        if progress:
            progress((i + 1) / len(prompts), f"replaying acceptance: prompt {i + 1}/{len(prompts)}, "
                                             f"{positions} positions")
    if positions == 0:
        raise UserError("no positions measured (every answer was empty)")
    probs = [c / positions for c in counts[:width]]
    ci, basis = intervals.vector_ci(probs, positions, prompt_counts)
    return AcceptanceVector(probs, counts[width] / positions, positions, ci, pair.draft_name, pair.target_name,
                            "greedy" if temperature == 0 else sampler, float(temperature), float(top_p), width,
                            len(prompts), time.strftime("%Y-%m-%dT%H:%M:%S"),
                            time.perf_counter() - start + sum(a.seconds for a in answers or ()),
                            draft_kernels=draft_kernels(pair), top_k=int(top_k or 0) if temperature else 0,
                            domain=domain, method="replay", machine=machine_description(pair.device),
                            prompt_counts=prompt_counts, interval=basis,
                            recipe=recipe(prompts, seed, tokens_per_prompt, draws))


def recipe(prompts: list[str], seed: int, tokens_per_prompt: int, draws: int) -> dict:
    """What a replay measurement repeats for a prompt added later (`measure --extend`): each prompt
    by its digest with the seed its answer and replays drew from, the answer tokens and draws."""
    return {"tokens_per_prompt": int(tokens_per_prompt), "draws": int(draws),
            "prompts": [[prompt_digest(text), seed + i] for i, text in enumerate(prompts)]}


def prompt_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def prompts_already_measured(have: AcceptanceVector | None, prompts: list[str], seed: int, tokens_per_prompt: int,
                             draws: int) -> int:
    """How many of `prompts` (from the first) the cached vector `have` counts, measured as this
    measurement would measure them; a UserError saying why where it cannot be extended."""
    if have is None:
        raise UserError("no vector is measured at these settings yet: measure them without --extend first")
    wanted = recipe(prompts, seed, tokens_per_prompt, draws)
    got = getattr(have, "recipe", None) or {}
    if have.method != "replay" or not got.get("prompts"):
        raise UserError(f"the vector at these settings ({have.source}) does not record which prompts it was measured "
                        "on: measure the whole set again without --extend")
    asked = {k: wanted[k] for k in ("tokens_per_prompt", "draws")}
    used = {k: got.get(k) for k in asked}
    if used != asked:
        raise UserError(f"the vector at these settings was measured with --tokens-per-prompt {used['tokens_per_prompt']}"
                        f" and --draws {used['draws']}: extend it with the same")
    done = len(got["prompts"])
    if [list(row) for row in got["prompts"]] != wanted["prompts"][:done]:
        raise UserError(f"the vector at these settings was measured on {done} prompts that are not this set's first "
                        f"{done} (with --seed {seed}): a prompt was changed, removed or reordered, or the seed differs; "
                        "measure the whole set again without --extend")
    return done


def extended(have: AcceptanceVector, added: AcceptanceVector) -> AcceptanceVector:
    """`have` with the prompts of `added` counted too: what one measurement over all of them gives."""
    from engine.domains import pooled_vector
    return pooled_vector([have, added], have.domain)
