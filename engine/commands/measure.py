"""`python -m engine measure`: the acceptance vector of a pair, measured on-policy (ALGORITHM.md §2)
with a star, or by replay (engine/replay.py: thousands of positions in minutes), pooled or per prompt
domain (code / prose)."""
from __future__ import annotations

import sys

from engine.commands.common import (add_pair_args, check_flag, pair_from_args, print_json, read_prompt_set,
                                    read_prompts)
from engine.errors import UserError
from engine.profiler import cached_acceptance, measure_acceptance, save_acceptance, shipped_hidden_by
from engine.domains import differ, pooled_vector
from engine.replay import DRAWS, extended, prompts_already_measured, replay_acceptance
from engine.settings import MAX_NEW_TOKENS, Settings
from engine.wording import hides_words, plural


def register(sub) -> None:
    p = sub.add_parser("measure", help="measure the pair's acceptance vector at a temperature")
    add_pair_args(p)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (transformers' top_k, applied after temperature, before top-p); 0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1 = off)")
    p.add_argument("--width", type=int, default=16, help="children of the star tree (ranks measured; default 16, at most 64)")
    p.add_argument("--sampler", choices=["sequoia", "specinfer"], default="sequoia",
                   help="the verifier whose acceptance is measured (default sequoia)")
    p.add_argument("--prompts", default=None, help="one prompt per line (\\n = newline); default: assets/prompts.json")
    p.add_argument("--prompt-set", default=None, metavar="JSON",
                   help="a JSON prompt set with a kind per prompt, e.g. assets/measurement-prompts.json")
    p.add_argument("--by-domain", action="store_true",
                   help="with --prompt-set: one vector per prompt kind (code, prose) and the pooled one, all cached")
    p.add_argument("--replay", action="store_true",
                   help="decode each answer once, then replay the star's verifier at every position (engine/replay.py)")
    p.add_argument("--extend", action="store_true",
                   help="with --replay: keep the vector measured at these settings and measure only the prompts "
                        "added to the end of the set since (same seed, tokens and draws)")
    p.add_argument("--draws", type=int, default=None,
                   help=f"with --replay: verifier replays per position at T > 0 (default {DRAWS})")
    p.add_argument("--tokens-per-prompt", type=int, default=48, help="tokens decoded per prompt (default 48)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled answers and draws (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _groups(args) -> list[tuple[str, list[str]]]:
    """(domain, prompts) to measure: one pooled group, or one per prompt kind."""
    if args.prompt_set is None:
        if args.by_domain:
            raise UserError("--by-domain needs --prompt-set (a JSON set that says each prompt's kind)")
        return [("", read_prompts(args.prompts))]
    if args.prompts is not None:
        raise UserError("give --prompts or --prompt-set, not both")
    prompts = read_prompt_set(args.prompt_set)
    if not args.by_domain:
        return [("", [p.text for p in prompts])]
    kinds = sorted({p.kind for p in prompts if p.kind in ("code", "prose")})
    if not kinds:
        raise UserError(f"{args.prompt_set} has no prompt of kind code or prose")
    return [(k, [p.text for p in prompts if p.kind == k]) for k in kinds]


def run(args) -> int:
    # what needs no models is refused before the pair loads, by the flags' own names
    check_flag(args.width, "--width", 1, 64)
    if args.draws is not None and not args.replay:   # refused, not ignored (README, Command line)
        raise UserError("--draws is for --replay (a star measurement verifies each position once)")
    if args.extend and not args.replay:
        raise UserError("--extend is for --replay (a replay measurement records which prompts it counted)")
    draws = DRAWS if args.draws is None else args.draws
    check_flag(draws, "--draws", 1)
    check_flag(args.tokens_per_prompt, "--tokens-per-prompt", 1, MAX_NEW_TOKENS)
    Settings(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.tokens_per_prompt,
             seed=args.seed)
    groups = _groups(args)
    pair = pair_from_args(args)
    vectors = []
    for domain, prompts in groups:
        if args.replay:
            have, done = None, 0
            if args.extend:
                have = cached_acceptance(pair, args.temperature, args.top_p, args.sampler, args.width, args.top_k,
                                         domain)
                done = prompts_already_measured(have, prompts, args.seed, args.tokens_per_prompt, draws)
                print(f"{domain or 'pooled'}: {plural(done, 'prompt')} measured before ({have.source}), "
                      f"{len(prompts) - done} to add", file=sys.stderr)
            if done == len(prompts):
                vec = have
            else:   # the prompts not yet counted, each with the seed of its place in the set
                vec = replay_acceptance(pair, prompts[done:], args.temperature, args.top_p, args.sampler, args.width,
                                        tokens_per_prompt=args.tokens_per_prompt, seed=args.seed + done, draws=draws,
                                        top_k=args.top_k, domain=domain)
                if have is not None:
                    vec = extended(have, vec)
        else:
            vec = measure_acceptance(pair, prompts, args.temperature, args.top_p, args.sampler, args.width,
                                     tokens_per_prompt=args.tokens_per_prompt, seed=args.seed, top_k=args.top_k)
            vec.domain = domain
        vectors.append(vec)
    if len(vectors) > 1:
        vectors.append(pooled_vector(vectors))
    for vec in vectors:
        vec.source = str(save_acceptance(pair, vec))
    hidden = [shipped_hidden_by(pair, vec) for vec in vectors]   # shipped vectors these now hide
    domains = [v for v in vectors if v.domain]
    apart = differ(*domains) if len(domains) == 2 else None
    if args.json:
        print_json({"vectors": [v.to_dict() for v in vectors], "domains_differ": apart} if len(vectors) > 1
                   else vectors[0].to_dict())
        for vec, shipped in zip(vectors, hidden):
            if shipped is not None:
                print(f"note: {hides_words(vec, shipped)}", file=sys.stderr)
        return 0
    for vec, shipped in zip(vectors, hidden):
        print(f"{vec.domain or 'pooled'}: {plural(vec.positions, 'position')} over {plural(vec.prompts, 'prompt')} in "
              f"{vec.seconds:.1f} s "
              f"({vec.method}, {vec.sampler}, T={vec.temperature}, top-k={vec.top_k}, top-p={vec.top_p}); "
              f"cached at {vec.source}")
        counted = sum(1 for row in vec.prompt_counts if row[0] > 0)
        basis = f"its {counted} prompts (each one draw)" if vec.interval == "prompts" else "positions"
        print(f"  ± is the 95 % interval over {basis}")
        for k, (p, ci) in enumerate(zip(vec.probabilities, vec.ci95), start=1):
            print(f"  rank {k:2d}: {p:.3f} ± {ci:.3f}")
        print(f"  none   : {vec.none:.3f}")
        if shipped is not None:
            print(f"  note: {hides_words(vec, shipped)}")
    if apart is not None:
        print("code and prose " + ("differ beyond their 95 % intervals: planning uses the prompt's own vector"
                                   if apart else "agree within their 95 % intervals: planning uses the pooled one"))
    return 0
