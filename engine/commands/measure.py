"""`python -m engine measure`: the acceptance vector of a pair, measured on-policy (ALGORITHM.md §2)."""
from __future__ import annotations

from engine.commands.common import add_pair_args, pair_from_args, print_json, read_prompts
from engine.profiler import measure_acceptance, save_acceptance
from engine.settings import Settings


def register(sub) -> None:
    p = sub.add_parser("measure", help="measure the pair's acceptance vector at a temperature")
    add_pair_args(p)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (transformers' top_k, applied after temperature, before top-p); 0 = off")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--width", type=int, default=16, help="children of the star tree (ranks measured)")
    p.add_argument("--sampler", choices=["sequoia", "specinfer"], default="sequoia")
    p.add_argument("--prompts", default=None, help="one prompt per line (\\n = newline); default: assets/prompts.json")
    p.add_argument("--tokens-per-prompt", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    Settings(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.tokens_per_prompt,
             seed=args.seed)
    prompts = read_prompts(args.prompts)
    pair = pair_from_args(args)
    vec = measure_acceptance(pair, prompts, args.temperature, args.top_p, args.sampler, args.width,
                             tokens_per_prompt=args.tokens_per_prompt, seed=args.seed, top_k=args.top_k)
    vec.source = str(save_acceptance(pair, vec))
    if args.json:
        print_json(vec.to_dict())
        return 0
    print(f"{vec.positions} positions over {vec.prompts} prompts in {vec.seconds:.1f} s "
          f"({vec.sampler}, T={vec.temperature}, top-k={vec.top_k}, top-p={vec.top_p}); cached at {vec.source}")
    for k, (p, ci) in enumerate(zip(vec.probabilities, vec.ci95), start=1):
        print(f"  rank {k:2d}: {p:.3f} ± {ci:.3f}")
    print(f"  none   : {vec.none:.3f}")
    return 0
