"""Lanes interleaved step by step (engine/interleave.py): the bench's methods and the Race."""
from types import SimpleNamespace

from engine import bench, interleave
from engine import methods as M
from engine.models import encode_prompt
from engine.settings import Settings
from tests.tiny import tiny_pair


def test_lanes_run_interleaved_and_give_what_they_give_alone():
    """run_together advances the lane furthest behind: a lane that steps is never ahead of a
    running one, and each lane's tokens are those of a run on its own (its own seeded generator),
    greedy and sampled."""
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", False)
    specs = [bench.MethodSpec("ar", M.autoregressive()), bench.MethodSpec("chain", M.chain(4), width=1)]
    for temperature in (0.0, 0.7):
        settings = Settings(temperature=temperature, max_new_tokens=24, ignore_eos=True, seed=3)
        lanes = [bench.new_lane(pair, ids, s, settings) for s in specs]
        order = []
        for lane, event in interleave.run_together(lanes):
            order.append((lane.name, event.total_tokens, [other.share_done for other in lanes]))
        assert all(lane.finished for lane in lanes)
        names = [name for name, _, _ in order]
        assert names[:2] == ["ar", specs[1].key]  # the first tie goes to the first lane
        shares_before = [0.0, 0.0]
        for name, tokens, shares in order:  # the lane that stepped was not ahead of a running one
            me = [s.key for s in specs].index(name)
            assert all(shares_before[me] <= other or other >= 1.0
                       for k, other in enumerate(shares_before) if k != me)
            shares_before = shares
        chain_at = [i for i, name in enumerate(names) if name == specs[1].key]
        assert chain_at[0] < len(names) // 4 and chain_at[-1] > len(names) // 2  # spread over the run
        for spec, lane in zip(specs, lanes):
            alone = bench.run_once(pair, ids, spec, settings)
            together = bench.lane_result(pair, lane)
            assert together["token_ids"] == alone["token_ids"], (spec.key, temperature)
            assert together["steps"] == alone["steps"] and together["seconds"] > 0


def test_twin_lanes_take_turns_stepping_first():
    """Two lanes gaining the same tokens per step tie before every pair of steps: each goes first at
    half the ties, so neither always steps right after the other (a Race's chain lane and a
    hardware-aware plan of the same chain; in list order the second lane always followed the first
    and took whatever the first one's page update cost)."""
    def steps(per_step: int, max_new: int):
        total = 0
        while total < max_new:
            total += per_step
            yield SimpleNamespace(total_tokens=total)

    lanes = [interleave.Lane(name, steps(3, 60), 60) for name in ("chain", "auto")]
    names = [lane.name for lane, _ in interleave.run_together(lanes)]
    firsts = names[0::2]  # each pair of steps starts at a tie
    assert len(names) == 40
    assert all(a != b for a, b in zip(names[0::2], names[1::2]))  # each pair is one step of each
    assert firsts.count("chain") == firsts.count("auto") == 10
    assert firsts[:4] == ["chain", "auto", "chain", "auto"]


def test_interleaved_lanes_keep_their_speed_ratio_when_the_machine_slows_down(monkeypatch):
    """A machine that runs at half speed after a while: run one after the other, the lane that ran
    second looks slower than it is; interleaved, both see the same mix of speeds."""
    clock = {"t": 0.0}

    def steps(per_step: int, cost: float, max_new: int):
        total = 0
        while total < max_new:
            clock["t"] += cost * (1.0 if clock["t"] < 100.0 else 2.0)  # half speed after 100 s
            total += per_step
            yield SimpleNamespace(total_tokens=total)

    monkeypatch.setattr(interleave.time, "perf_counter", lambda: clock["t"])
    monkeypatch.setattr(interleave.time, "process_time", lambda: clock["t"])

    def ratio(lanes):  # tokens/s of the tree lane over the plain one's; truly (3 / 2) / (1 / 1) = 1.5
        a, b = (lane.events[-1].total_tokens / lane.wall for lane in lanes)
        return b / a

    def lanes():
        return [interleave.Lane("plain", steps(1, 1.0, 120), 120), interleave.Lane("tree", steps(3, 2.0, 120), 120)]

    one_after_the_other = lanes()
    for lane in one_after_the_other:
        list(interleave.run_together([lane]))
    clock["t"] = 0.0
    together = lanes()
    list(interleave.run_together(together))
    assert abs(ratio(one_after_the_other) / 1.5 - 1) > 0.4   # 0.875: the tree lane ran in the slow minutes
    assert abs(ratio(together) / 1.5 - 1) < 0.05
