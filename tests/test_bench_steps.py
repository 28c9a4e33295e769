"""The bench counts a step cut by max-new-tokens with its full verified yield (engine/bench.py)."""
from engine import bench
from engine import methods as M
from engine.models import encode_prompt
from engine.settings import Settings
from tests.tiny import tiny_pair


def test_a_cut_last_step_counts_its_full_yield():
    pair = tiny_pair("llama", noise=0.0)  # draft = target: every chain step yields depth tokens
    spec = bench.MethodSpec("chain", M.chain(5), width=1)
    r = bench.run_once(pair, encode_prompt(pair, "hello world", False), spec,
                       Settings(temperature=0.0, max_new_tokens=7, ignore_eos=True))
    assert r["tokens"] == 7 and r["steps"] == 2          # 5 + 2 of 5 kept
    assert r["step_tokens"] == 10 and r["truncated_tokens"] == 3
    assert r["tokens_per_step"] == 5.0                   # the old count said 3.5
    runs = [{**r, "temperature": 0.0, "method": "chain", "key": spec.key, "prompt": 0, "kind": "code"}]
    entry = bench.aggregate(runs, {0.0: [spec]})[0]
    assert entry["tokens_per_step"] == 5.0 and entry["tokens"] == 7 and entry["truncated_tokens"] == 3
    assert entry["by_kind"]["code"]["tokens_per_step"] == 5.0
