"""Tree shape: constructors, validation, masks, JSON and growmap import (incl. hostile files)."""
import io
import os

import pytest
import torch

from engine.tree import MAX_TREE_NODES, Tree, TreeError


def test_json_round_trip():
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3])
    back = Tree.from_json(tree.to_json())
    assert back == tree and back.parents == tree.parents
    assert Tree.from_json("[-1, 0, 0]") == Tree.star(2)
    for bad in ["not json", '{"nodes": [1]}', '{"parents": [-1, 0.5]}', '{"parents": [-1, true]}']:
        with pytest.raises(TreeError):
            Tree.from_json(bad)


def test_from_parents_reorders_breadth_first_keeping_sibling_order():
    # siblings keep their input index order as rank: the root's children are old 1 (rank 1)
    # and old 3 (rank 2); old 2 hangs under old 3, so it lands under new node 2
    tree = Tree.from_parents([-1, 0, 3, 0])
    assert tree.parents == (-1, 0, 0, 2)
    assert tree.children[0] == (1, 2) and tree.children[2] == (3,)
    # root given last, siblings given in reverse index order
    tree = Tree.from_parents([3, 3, 0, -1])
    assert tree.parents == (-1, 0, 0, 1)  # old 0 (rank 1) has child old 2
    assert tree.rank == (0, 1, 2, 1)


@pytest.mark.parametrize("parents, fragment", [
    ([0, 1, 0], "root"),  # no root
    ([-1, -1, 0], "exactly one root"),  # two roots
    ([-1, 2, 1], "cycle"),  # 1 <-> 2 never reach the root
    ([-1, 5], "not a node"),
    ([], "empty"),
])
def test_bad_parent_lists(parents, fragment):
    with pytest.raises(TreeError, match=fragment):
        Tree.from_parents(parents)


def test_a_tree_json_without_one_root_shows_the_shape_it_wants():
    """A file holding [1, 2] read "found 0" and left the expected shape to guess."""
    for text in ("[1, 2]", '{"parents": [0, 0]}'):
        with pytest.raises(TreeError, match=r'found 0: a tree JSON lists each node.s parent.*"parents": \[-1, 0'):
            Tree.from_json(text)


def test_too_many_nodes():
    Tree.from_parents([-1] + [0] * (MAX_TREE_NODES - 1))
    with pytest.raises(TreeError, match="at most"):
        Tree.from_parents([-1] + [0] * MAX_TREE_NODES)


def test_constructor_rejects_non_canonical_order():
    with pytest.raises(TreeError):
        Tree((-1, 0, 1, 0))  # level 2 node before a level 1 node


def test_chain_and_k_ary_chains_shapes():
    chain = Tree.chain(4)
    assert chain.parents == (-1, 0, 1, 2) and chain.depth == 4 and chain.level_widths == [1, 1, 1, 1]
    assert Tree.chain(1).size == 1
    kc = Tree.k_ary_chains(3, 4)
    assert kc.size == 10 and kc.depth == 4 and kc.level_widths == [1, 3, 3, 3]
    assert kc.children[0] == (1, 2, 3) and all(len(kc.children[v]) == 1 for v in range(1, 7))
    assert kc.expanding_widths == [1, 3, 3, 0]
    assert [kc.rank[v] for v in range(1, 10)] == [1, 2, 3, 1, 1, 1, 1, 1, 1]
    assert Tree.k_ary_chains(5, 1).size == 1
    assert Tree.star(4).level_widths == [1, 4]
    with pytest.raises(TreeError):
        Tree.chain(0)
    with pytest.raises(TreeError):
        Tree.k_ary_chains(0, 3)


def test_ancestor_mask_and_paths():
    tree = Tree.from_parents([-1, 0, 0, 1, 2])
    want = torch.tensor([[1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0],
                         [1, 0, 1, 0, 0],
                         [1, 1, 0, 1, 0],
                         [1, 0, 1, 0, 1]], dtype=torch.bool)
    assert torch.equal(tree.ancestor_mask, want)
    assert tree.path_to(4) == [0, 2, 4]


def test_truncated():
    tree = Tree.k_ary_chains(2, 5)
    cut = tree.truncated(3)
    assert cut.depth == 3 and cut.level_widths == [1, 2, 2]
    assert cut.parents == tree.parents[:5]
    assert tree.truncated(99) == tree


def test_expected_tokens_ranks_beyond_acceptance_count_zero():
    assert Tree.star(4).expected_tokens([0.5, 0.2]) == pytest.approx(1.7)
    assert Tree.chain(3).expected_tokens([0.5]) == pytest.approx(1.75)


def growmap_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_growmap_import_original_format(tmp_path):
    # Original Sequoia layout: node 0 is the root, Successors[v] = children of v (BFS numbering)
    successors = [[1, 2, 3], [4, 5], [6], [], [7], [], [], []]
    size = len(successors)
    mask = torch.zeros(size, size)
    parents = [-1, 0, 0, 0, 1, 1, 2, 4]
    for v in range(size):
        u = v
        while u != -1:
            mask[v, u] = 1
            u = parents[u]
    grow_map = {"roots": [[0], [1, 2, 3], [4, 5, 6], [7]], "branches": [[3], [2, 1, 0], [1, 0, 0], [0]],
                "Successors": successors, "mask": mask, "depth": torch.tensor([0, 1, 1, 1, 2, 2, 2, 3]),
                "size": size}
    data = growmap_bytes(grow_map)
    tree = Tree.from_growmap(data)
    assert tree.parents == tuple(parents)
    assert torch.equal(tree.ancestor_mask, mask.bool())
    path = tmp_path / "growmap.pt"
    path.write_bytes(data)
    assert Tree.from_growmap(str(path)) == tree


def test_growmap_wrong_contents():
    with pytest.raises(TreeError, match="Successors"):
        Tree.from_growmap(growmap_bytes({"roots": [[0]]}))
    with pytest.raises(TreeError, match="size"):
        Tree.from_growmap(growmap_bytes({"Successors": [[1], []], "size": 5}))
    with pytest.raises(TreeError, match="invalid or repeated"):
        Tree.from_growmap(growmap_bytes({"Successors": [[1], [1]]}))


class _Hostile:
    """Pickles to a call of os.system; loading it unsafely would create the marker file."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_growmap_with_pickled_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    data = growmap_bytes({"Successors": [[1], []], "payload": _Hostile(marker)})
    with pytest.raises(TreeError, match="refused: .*system.*nothing in it was run") as refused:
        Tree.from_growmap(data)
    assert not marker.exists()
    # what torch met, not its advice to load with weights_only=False (which would run the payload)
    assert "weights_only" not in str(refused.value) and "trust" not in str(refused.value)


def test_corrupt_growmap(tmp_path):
    good = growmap_bytes({"Successors": [[1], []]})
    for data in [b"", b"garbage bytes, not a torch file", good[: len(good) // 2]]:
        with pytest.raises(TreeError):
            Tree.from_growmap(data)
    with pytest.raises(TreeError):
        Tree.from_growmap(str(tmp_path / "missing.pt"))


def test_method_labels_say_what_runs():
    from engine import methods
    assert methods.autoregressive().label == "autoregressive"
    assert methods.chain(5).label == "chain d=5"
    assert methods.specinfer(2, 4).label == "SpecInfer 2x4"
    assert methods.sequoia(Tree.from_parents([-1, 0, 0, 1]), "sequoia-auto").label == "Sequoia (hardware-aware) n=4 d=3"
    # a plan of one node drafts nothing: its label says so instead of reading like a tree
    one = methods.sequoia(Tree((-1,)), "sequoia-auto").label
    assert one.startswith("Sequoia (hardware-aware) n=1") and "plain decoding" in one
