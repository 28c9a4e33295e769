"""Targets placed by accelerate (device map, weights offloaded to disk) stay exact."""
import json

import pytest
import torch

from engine import methods
from engine.decoding import generate_ids
from engine.errors import UserError
from engine.models import encode_prompt, load_pair, parse_max_memory
from engine.settings import Settings
from engine.tree import Tree
from tests import test_exactness as ex
from tests.tiny import DEVICE, greedy_reference, tiny_pair, tiny_pair_dirs

TREES = {"sequoia": methods.sequoia(Tree.from_branching([3, 2, 1, 1, 0, 1, 1])),
         "specinfer": methods.specinfer(3, 4), "chain": methods.chain(5)}


def offloaded(tmp_path, family="llama", **kwargs):
    draft, target = tiny_pair_dirs(family, **kwargs)
    # a budget of a few KB of cpu memory forces nearly every layer of the target to disk; on a GPU
    # (SEQUOIA_TEST_DEVICE=cuda) it gets as little, so the target is offloaded there too
    gpu = torch.device(DEVICE)
    memory = "cpu=100KB" if gpu.type == "cpu" else f"gpu{gpu.index or 0}=100KB,cpu=100KB"
    return load_pair(str(draft), str(target), device=DEVICE, dtype="float32", target_device_map="auto",
                     max_memory=memory, offload_folder=str(tmp_path / "offload"))


def test_offloaded_target_really_is_on_disk(tmp_path):
    pair = offloaded(tmp_path)
    assert "disk" in pair.describe()["target_device_map"]


@pytest.mark.parametrize("name", list(TREES))
def test_greedy_equality_with_disk_offloaded_target(tmp_path, name):
    pair, reference = offloaded(tmp_path), tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", chat=False)
    out, events = generate_ids(pair, ids, TREES[name], Settings(max_new_tokens=40, ignore_eos=True))
    assert out == greedy_reference(reference, ids, 40)  # the in-memory target's own greedy generate()
    assert events[-1].total_steps < 40


@pytest.mark.slow  # ~2 min: every forward streams the weights from disk
def test_sampling_distribution_with_disk_offloaded_target(tmp_path):
    pair = offloaded(tmp_path, chars=ex.DIST_CHARS, noise=0.8, seed=3)
    ids = encode_prompt(pair, "abca", chat=False)
    settings = Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True, seed=5)
    samples = ex.two_token_samples(pair, ids, ex.DIST_METHODS["sequoia"], settings, 1200)
    assert ex.chi_square_pvalue(samples, ex.exact_two_token_distribution(pair, ids, 1.0, 1.0)) > 1e-3


def test_bad_device_maps_are_clear_errors(tmp_path):
    draft, target = tiny_pair_dirs("llama")
    with pytest.raises(UserError, match="device map"):
        load_pair(str(draft), str(target), device="cpu", target_device_map="everywhere")
    bad = tmp_path / "map.json"
    bad.write_text(json.dumps({"": "tpu7"}))
    with pytest.raises(UserError):
        load_pair(str(draft), str(target), device="cpu", target_device_map=str(bad))
    with pytest.raises(UserError, match="offload"):  # too little memory and nowhere to offload
        load_pair(str(draft), str(target), device="cpu", target_device_map="auto", max_memory="cpu=1KB")
    with pytest.raises(UserError, match="unknown device 'tpu' in max memory"):
        parse_max_memory("tpu=3GiB")
    for typo in ("cpu=abc", "cpu=-5GB", "cpu="):   # reached accelerate after the old pair was dropped
        with pytest.raises(UserError, match="a size: bytes, or a number with"):
            parse_max_memory(typo)
    with pytest.raises(UserError, match="look like gpu0=20GiB"):
        parse_max_memory("cpu")
    with pytest.raises(UserError, match="lowercase b means bits.*write 20GB for bytes"):
        parse_max_memory("cpu=20gb")
    assert parse_max_memory("gpu0=20GiB, cpu=2.5GB,mps=1000") == {0: "20GiB", "cpu": "2.5GB", "mps": 1000}
    assert parse_max_memory("gpu0=0,cpu=0GB") == {0: 0, "cpu": "0GB"}   # 0 keeps a device out
    with pytest.raises(UserError, match="device map"):
        load_pair(str(draft), str(target), device="cpu", max_memory="cpu=1GiB")
