"""bench/path_tilt.py (issue 15): whether acceptance one level down an accepted path differs from
the replay's rate. Its measurement steps both models one token at a time and rolls their caches
back after each side branch; these tests hold it to fresh forwards on a tiny pair, and its
arithmetic to hand-made chances (the measuring run on the embedded pair is committed under bench/)."""
import importlib.util
from pathlib import Path

import pytest
import torch

from engine import attention, sampling
from tests.tiny import tiny_pair

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("path_tilt", ROOT / "bench" / "path_tilt.py")
path_tilt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(path_tilt)


def _chance(pair, context: list[int], temperature: float) -> float:
    """sum(min(p, q)) after `context`, from fresh causal forwards of both models."""
    p = attention.forward_causal(pair.target, attention.new_cache(pair.target), context)[-1]
    q = attention.forward_causal(pair.draft, attention.new_cache(pair.draft), context)[-1]
    return float(torch.minimum(sampling.target_distribution(p, temperature),
                               sampling.draft_distribution(q, temperature)).sum())


def test_each_chance_is_the_one_after_its_own_context(monkeypatch):
    """a_j after prompt + answer[:j], c_j after that and the tilted x, e_j after x and x2: a cache
    not rolled back after a side branch would put x (and x2) before later answer tokens."""
    pair = tiny_pair()
    prompt, answer, positions, temperature = [3, 5, 7, 2], [4, 9, 6, 8, 1, 5, 3], 5, 0.7
    drawn = []
    real_draw = sampling.sample_token

    def recording_draw(dist, generator):
        drawn.append(real_draw(dist, generator))
        return drawn[-1]

    monkeypatch.setattr(sampling, "sample_token", recording_draw)
    with torch.inference_mode():
        got = path_tilt.measure_answer(pair, prompt, answer, positions, temperature, torch.Generator().manual_seed(3))
        assert len(got["a"]) == positions + 2 and len(got["c"]) == len(got["e"]) == positions
        for j in range(positions):
            x, x2 = drawn[2 * j], drawn[2 * j + 1]
            context = prompt + answer[:j]
            assert got["a"][j] == pytest.approx(_chance(pair, context, temperature), abs=2e-5)
            assert got["c"][j] == pytest.approx(_chance(pair, context + [x], temperature), abs=2e-5)
            assert got["e"][j] == pytest.approx(_chance(pair, context + [x, x2], temperature), abs=2e-5)
        for j in (positions, positions + 1):   # the untilted arms' a_{j+1} and a_{j+2} of the last positions
            assert got["a"][j] == pytest.approx(_chance(pair, prompt + answer[:j], temperature), abs=2e-5)
    assert any(x != answer[j] for j, x in enumerate(drawn[::2]))   # some side branches left the answer


def test_the_continuations_weigh_each_position_by_its_chance_of_acceptance():
    # two positions per row; the answer's next chances a[j+1] play the untilted level 2
    rows = [{"a": [0.5, 1.0, 1.0, 1.0], "c": [0.8, 0.6], "e": [1.0, 0.5]},
            {"a": [1.0, 0.0, 1.0, 1.0], "c": [0.4, 1.0], "e": [0.5, 1.0]}]
    got = path_tilt.continuations(rows)
    assert got["marginal"] == pytest.approx((0.5 + 1 + 1 + 0) / 4)
    # level 2 given level 1: sum a_j * next / sum a_j over the four (row, j) positions
    assert got["level2_untilted"] == pytest.approx((0.5 * 1 + 1 * 1 + 1 * 0 + 0 * 1) / 2.5)
    assert got["level2_tilted"] == pytest.approx((0.5 * 0.8 + 1 * 0.6 + 1 * 0.4 + 0 * 1) / 2.5)
    assert got["level3_tilted"] == pytest.approx((0.4 * 1 + 0.6 * 0.5 + 0.4 * 0.5) / (0.4 + 0.6 + 0.4))
    # level 3 untilted: sum a_j a_{j+1} a_{j+2} / sum a_j a_{j+1}; only row 1 reaches level 2
    assert got["level3_untilted"] == pytest.approx((0.5 * 1 * 1 + 1 * 1 * 1) / (0.5 + 1))
    assert path_tilt.chain_tokens(0.5, 0.5, 0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert path_tilt.chain_tokens(0.5, 1.0, 0.0, 3) == pytest.approx(1 + 0.5 + 0.5)
    same = {"marginal": 0.8, "level2_tilted": 0.9, "level2_untilted": 0.9, "level3_tilted": 0.7, "level3_untilted": 0.7}
    assert path_tilt.tilt_effect(same, 12) == pytest.approx(0.0)
    assert path_tilt.tilt_effect({**same, "level2_tilted": 1.0}, 2) == pytest.approx((1 + 0.8 + 0.8) / (1 + 0.8 + 0.72) - 1)
