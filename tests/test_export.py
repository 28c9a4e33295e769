"""Tree export (engine/export.py, `python -m engine export`, the Planner tab's files): every format
round-trips, the vLLM string obeys vLLM's rules, the growmap is what the original Sequoia code
writes and reads, and bad input fails loudly."""
import ast
import io
import json
import types

import pytest
import torch

from engine import export
from engine.cli import main
from engine.errors import UserError
from engine.planner import PlanTable
from engine.tree import Tree, TreeError

ACC = [0.45, 0.2, 0.1, 0.06, 0.04, 0.03, 0.02, 0.01]


def dp_tree(n: int, depth: int = 10) -> Tree:
    return PlanTable.build(ACC, n, depth).tree(n, depth)


def as_bytes(data) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


# ---------- the original Sequoia growmap, written independently of engine/export.py ----------
def original_growmap(children_counts: list[int]) -> dict:
    """The layout of Sequoia's tree_search.py: nodes numbered as its expansion loop numbers them
    (every active node of a level, in index order, appends its children), mask = 1 at a node and its
    ancestors, roots/branches = the nodes of each level and their child counts."""
    m = len(children_counts)
    successors, parents, depth = [[]], [-1], [0]
    mask = torch.zeros(m, m).long()
    active, roots, branches, num_nodes = [True], [], [], 1
    while True:
        expand, expand_branch = [], []
        for i, act in enumerate(active):
            if act:
                if parents[i] != -1:
                    mask[i] = mask[parents[i]]
                mask[i][i] = 1
                expand.append(i)
                active[i] = False
                z = children_counts[i]
                expand_branch.append(z)
                successors[i].extend(range(num_nodes, num_nodes + z))
                successors.extend([] for _ in range(z))
                parents.extend([i] * z)
                depth.extend([depth[i] + 1] * z)
                num_nodes += z
        if not expand:
            break
        roots.append(expand)
        branches.append(expand_branch)
        active.extend([True] * sum(expand_branch))
    assert num_nodes == m
    return {"roots": roots, "branches": branches, "Successors": successors, "mask": mask,
            "depth": torch.LongTensor(depth), "size": num_nodes}


def counts_of(tree: Tree) -> list[int]:
    return [len(c) for c in tree.children]


def save(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


ORIGINAL_SHAPES = {  # children per node, breadth-first, as the DP's branch map would give them
    "chain": [1, 1, 1, 0],
    "star": [5, 0, 0, 0, 0, 0],
    "lopsided": [3, 2, 1, 0, 1, 0, 0, 0],
    "deep": [2, 2, 1, 1, 0, 1, 0, 1, 0],
}


# ---------- round trips ----------
@pytest.mark.parametrize("n", [2, 8, 32, 128])
@pytest.mark.parametrize("fmt", export.FORMATS)
def test_every_format_round_trips_dp_trees(n, fmt):
    tree = dp_tree(n)
    assert tree.size == n
    data = as_bytes(export.export_tree(tree, fmt))
    for back in (export.import_tree(data, fmt), export.import_tree(data)):  # named and detected format
        assert back.parents == tree.parents and back.rank == tree.rank


@pytest.mark.parametrize("name", sorted(ORIGINAL_SHAPES))
@pytest.mark.parametrize("fmt", export.FORMATS)
def test_imported_original_growmaps_round_trip(name, fmt):
    tree = Tree.from_growmap(save(original_growmap(ORIGINAL_SHAPES[name])))
    assert counts_of(tree) == ORIGINAL_SHAPES[name]
    back = export.import_tree(as_bytes(export.export_tree(tree, fmt)))
    assert back.parents == tree.parents and back.rank == tree.rank


def test_paths_are_zero_based_ranks_breadth_first():
    tree = Tree((-1, 0, 0, 1, 1, 2))  # root: 2 children; first child: 2; second child: 1
    assert export.tree_paths(tree) == [(0,), (1,), (0, 0), (0, 1), (1, 0)]
    assert export.to_medusa(tree) == [[0], [1], [0, 0], [0, 1], [1, 0]]


# ---------- vLLM ----------
def test_vllm_string_satisfies_vllms_documented_rules():
    """vLLM's speculative_config.speculative_token_tree (SpeculativeConfig, tree attention backend
    TREE_ATTN, EAGLE-family tree drafter) is read with ast.literal_eval as a list of tuples, one per
    drafted node, root excluded, and:
      1. each tuple is the node's path of 0-based child ranks from the root;
      2. the list is sorted by depth, then by ranks (vLLM re-sorts with key=(len(t), t), so ours is
         already in its order: its node i is our node i + 1);
      3. every prefix of a path is present (the tree-attention bias looks each one up by value);
      4. no path appears twice;
      5. num_speculative_tokens == len(list) >= 1;
      6. siblings' ranks are 0..k-1 without gaps (the drafter takes a node's top-k children);
      7. the last path is a deepest one (vLLM takes the tree depth from it)."""
    for n in (2, 8, 32, 128):
        tree = dp_tree(n)
        out = export.to_vllm(tree, draft="org/draft", target="org/target", tensor_parallel_size=8)
        config = out["speculative_config"]
        choices = ast.literal_eval(config["speculative_token_tree"])
        assert isinstance(choices, list) and all(isinstance(t, tuple) for t in choices)
        assert all(isinstance(r, int) and r >= 0 for t in choices for r in t)                   # 1
        assert choices == sorted(choices, key=lambda t: (len(t), t))                          # 2
        assert all(t[:k] in choices for t in choices for k in range(1, len(t)))               # 3
        assert len(set(choices)) == len(choices)                                              # 4
        assert config["num_speculative_tokens"] == len(choices) == tree.size - 1 >= 1         # 5
        assert all(t[:-1] + (t[-1] - 1,) in choices for t in choices if t[-1] > 0)            # 6
        assert len(choices[-1]) == max(map(len, choices)) == tree.depth - 1                    # 7
        # the attention mask vLLM builds from the list (root column, diagonal, each prefix) is ours
        mask = torch.zeros(tree.size, tree.size, dtype=torch.bool)
        mask[:, 0] = True
        for i, t in enumerate(choices, start=1):
            mask[i, i] = True
            for k in range(1, len(t)):
                mask[i, choices.index(t[:k]) + 1] = True
        assert torch.equal(mask, tree.ancestor_mask)
        assert config["method"] == "draft_model" and config["model"] == "org/draft"
        assert out["command"].startswith("vllm serve org/target --tensor-parallel-size 8")
        assert "--speculative-config" in out["command"] and json.dumps(config) in out["command"]


def test_vllm_notes_flag_trees_its_drafter_cannot_follow():
    # vLLM's drafter gives every node of a level (nodes at level l+1) // (nodes at level l) children
    def vllm_drafted(choices):
        counts = [sum(len(t) == d for t in choices) for d in range(1, len(choices[-1]) + 1)]
        per_node = [counts[0]] + [counts[d] // counts[d - 1] for d in range(1, len(counts))]
        paths, level = [], [()]
        for k in per_node:
            level = [p + (r,) for p in level for r in range(k)]
            paths += level
        return sorted(paths, key=lambda t: (len(t), t))

    even = Tree.from_branching([3, 2, 2, 2])  # every node of a level has the same number of children
    choices = ast.literal_eval(export.vllm_tree_string(even))
    assert vllm_drafted(choices) == choices
    assert not any("levels" in note for note in export.vllm_notes(even, "eagle"))
    uneven = dp_tree(32)
    choices = ast.literal_eval(export.vllm_tree_string(uneven))
    assert vllm_drafted(choices) != choices
    assert any("not draft this tree as planned" in note for note in export.vllm_notes(uneven, "eagle"))


def test_vllm_import_accepts_the_config_or_the_bare_string():
    tree = dp_tree(8)
    text = export.vllm_tree_string(tree)
    assert export.import_tree(text.encode()) == tree
    assert export.from_vllm({"speculative_token_tree": text, "num_speculative_tokens": 7}) == tree


# ---------- growmap ----------
@pytest.mark.parametrize("n", [2, 8, 32, 128])
def test_growmap_matches_the_original_layout(n):
    tree = dp_tree(n)
    ours, original = export.to_growmap(tree), original_growmap(counts_of(tree))
    assert set(ours) == set(original) == {"roots", "branches", "Successors", "mask", "depth", "size"}
    for key in ("roots", "branches", "Successors", "size"):
        assert ours[key] == original[key], key
    for key in ("mask", "depth"):
        assert ours[key].dtype == original[key].dtype == torch.long and torch.equal(ours[key], original[key])


def test_growmap_reads_as_the_original_loader_reads_it():
    tree = dp_tree(32)
    grow_map = torch.load(io.BytesIO(export.growmap_bytes(tree)), weights_only=True)
    # tests/run_sequoia.py and Tree/SpecTree.py: one draft step per level but the last
    size, roots, branches = grow_map["size"], grow_map["roots"], grow_map["branches"]
    draft_step = len(roots)
    assert draft_step == tree.depth and sum(branches[-1]) == 0
    capture = [sum(x) for x in branches] + [1]
    assert capture[:-2] == tree.level_widths[1:]
    num_nodes = 1
    for i in range(draft_step - 1):  # collective_grow_static: children of roots[i] get the next indices
        gather = torch.cat([torch.arange(b) + j * max(branches[i]) for j, b in enumerate(branches[i])])
        assert len(gather) == sum(branches[i])
        new = list(range(num_nodes, num_nodes + len(gather)))
        assert new == [c for v in roots[i] for c in grow_map["Successors"][v]]
        num_nodes += len(gather)
    assert num_nodes == size
    assert grow_map["mask"].shape == (size, size) and grow_map["depth"][1:].shape == (size - 1,)
    assert torch.equal((grow_map["mask"] == 0), ~tree.ancestor_mask)


def test_growmap_whose_branches_disagree_is_refused():
    bad = original_growmap([2, 1, 0, 0])
    bad["branches"][1] = [0, 1]
    with pytest.raises(TreeError, match="branches says node 1"):
        export.import_tree(save(bad))


# ---------- validation ----------
@pytest.mark.parametrize("paths, message", [
    ([[1], [0]], "sorted by depth"),
    ([[0, 0], [0]], "sorted by depth"),
    ([[0], [0, 0], [1]], "sorted by depth"),
    ([[0], [1, 0]], "prefix \\(1,\\) is missing"),
    ([[0], [0], [1]], "duplicate"),
    ([[0], [2]], "sibling rank 1 is missing"),
    ([[0], [0, 1]], "sibling rank 0 is missing"),
    ([[0], [-1]], "integers >= 0"),
    ([[0], [True]], "integers >= 0"),
    ([[0], [0.5]], "integers >= 0"),
    ([[0], []], "non-empty"),
    ({"a": 1}, "must be a list"),
])
def test_bad_paths_fail_loudly(paths, message):
    with pytest.raises(TreeError, match=message):
        export.from_medusa(paths)


def test_other_import_errors():
    with pytest.raises(TreeError, match="num_speculative_tokens is 3 but"):
        export.from_vllm({"speculative_config": {"speculative_token_tree": "[(0,), (1,)]",
                                                 "num_speculative_tokens": 3}})
    with pytest.raises(TreeError, match="not a Python list"):
        export.import_tree(b'{"speculative_token_tree": "[(0,), (1,"}')
    with pytest.raises(TreeError, match="sorted by depth"):
        export.import_tree(b'{"speculative_token_tree": "[(1,), (0,)]"}')
    with pytest.raises(UserError, match="empty"):
        export.import_tree(b"")
    with pytest.raises(UserError, match="unknown"):
        export.export_tree(dp_tree(2), "onnx")
    with pytest.raises(UserError, match="method"):
        export.to_vllm(dp_tree(2), method="ngram")


@pytest.mark.parametrize("fmt", ["vllm", "medusa"])
def test_root_only_tree_is_a_clear_error_where_a_format_cannot_express_it(fmt):
    root = Tree((-1,))
    with pytest.raises(TreeError, match="root-only tree drafts no token"):
        export.export_tree(root, fmt)
    for other in ("json", "growmap"):
        assert export.import_tree(as_bytes(export.export_tree(root, other))) == root


# ---------- CLI ----------
def run_cli(capsys, *args):
    code = main(["export", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_plans_exports_and_reimports_every_format(capsys, tmp_path):
    plan_args = ["--acceptance", "0.6,0.2,0.1", "--budget", 16, "--depth", 6]
    assert main(["plan", *map(str, plan_args), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["parents"]
    for fmt in export.FORMATS:
        out_file = tmp_path / f"tree{export.SUFFIX[fmt]}"
        code, _, err = run_cli(capsys, "--format", fmt, *plan_args, "--out", out_file)
        assert code == 0 and "wrote" in err
        assert list(export.import_tree(out_file.read_bytes()).parents) == planned
        code, stdout, _ = run_cli(capsys, "--format", "json", "--tree", out_file)
        assert code == 0 and json.loads(stdout)["parents"] == planned


def test_cli_vllm_to_stdout(capsys):
    code, stdout, err = run_cli(capsys, "--format", "vllm", "--acceptance", "0.6,0.2,0.1", "--budget", 8,
                                "--depth", 5, "--draft", "org/small", "--target", "org/big",
                                "--tensor-parallel-size", 4, "--method", "eagle3")
    assert code == 0
    result = json.loads(stdout)
    assert result["speculative_config"]["num_speculative_tokens"] == 7
    assert result["speculative_config"]["method"] == "eagle3"
    assert result["command"].startswith("vllm serve org/big --tensor-parallel-size 4")
    assert "note: vLLM reads speculative_token_tree only with" in err


@pytest.mark.parametrize("args, message", [
    (["--format", "growmap", "--acceptance", "0.6", "--budget", 4, "--depth", 3], "give --out"),
    (["--format", "vllm", "--acceptance", "0.6", "--budget", 1, "--depth", 1], "root-only"),
    (["--format", "json", "--acceptance", "0.6"], "--budget"),
    (["--format", "json", "--tree", "/no/such/tree.json"], "cannot read --tree"),
    (["--format", "json", "--tree", "{tree}", "--acceptance", "0.6"], "either --tree"),
    (["--format", "json", "--tree", "{bad}"], "prefix"),
])
def test_cli_bad_input_is_one_error_line_and_exit_2(capsys, tmp_path, args, message):
    (tmp_path / "t.json").write_text('{"parents": [-1, 0]}')
    (tmp_path / "bad.json").write_text("[[0], [1, 0]]")
    args = [str(a).format(tree=tmp_path / "t.json", bad=tmp_path / "bad.json") for a in args]
    code, stdout, err = run_cli(capsys, *args)
    assert code == 2 and stdout == ""
    assert err.startswith("error: ") and message in err


def test_cli_pair_options_use_the_plan_commands_library_call(capsys, monkeypatch):
    """--temperature plans through engine.planning.dp_plan on the loaded pair, as `plan` does."""
    import engine.commands.common
    import engine.planning
    calls = []
    pair = types.SimpleNamespace(draft_name="org/small", target_name="org/big")
    monkeypatch.setattr(engine.commands.common, "load_pair", lambda *a, **k: pair)

    def fake_dp_plan(p, settings, budget, depth, **kw):
        calls.append((p, settings.temperature, budget, depth))
        return types.SimpleNamespace(tree=dp_tree(budget, depth))
    monkeypatch.setattr(engine.planning, "dp_plan", fake_dp_plan)
    code, stdout, _ = run_cli(capsys, "--format", "vllm", "--temperature", 0.7, "--budget", 8, "--depth", 5)
    assert code == 0 and calls == [(pair, 0.7, 8, 5)]
    config = json.loads(stdout)["speculative_config"]
    assert config["model"] == "org/small" and config["num_speculative_tokens"] == 7


def test_exports_name_the_models_as_loaded():
    """A serving engine must find the models: the id or folder the pair was loaded from (for the
    embedded pair its converted folders: the slow test in test_embedded.py), not a display name."""
    from engine.models import servable_name
    from tests.tiny import load_tiny, tiny_pair_dirs
    draft, target = tiny_pair_dirs("llama")
    pair = load_tiny(draft, target)
    assert (servable_name(pair, "draft"), servable_name(pair, "target")) == (str(draft.resolve()),
                                                                             str(target.resolve()))
    # a pair object without sources (an older caller's) falls back to its names
    assert servable_name(types.SimpleNamespace(draft_name="org/small"), "draft") == "org/small"


# ---------- Planner tab files ----------
def test_planner_tab_writes_every_format_it_offers(tmp_path, monkeypatch):
    from app import planner_tab
    monkeypatch.setattr(planner_tab, "EXPORT_DIR", tmp_path)
    tree = dp_tree(8)
    files, cannot = planner_tab.write_exports(tree, "t", {"label": "Sequoia"}, draft="org/small", target="org/big")
    assert set(files) == set(export.FORMATS) and cannot == {}
    assert json.loads(files["json"].read_text())["label"] == "Sequoia"
    assert json.loads(files["vllm"].read_text())["speculative_config"]["model"] == "org/small"
    for path in files.values():
        assert export.import_tree(path.read_bytes()) == tree
    choice = {"format": "growmap", "stem": "t", "cannot": cannot}
    assert planner_tab._export_path(choice) == str(tmp_path / "t.pt")
    root_files, root_cannot = planner_tab.write_exports(Tree((-1,)), "r", {})
    assert set(root_files) == {"json", "growmap"}  # vllm and medusa cannot express a root-only tree
    assert set(root_cannot) == {"vllm", "medusa"}
    # and the button says so, greyed, instead of a click that downloaded nothing and said nothing
    for fmt in ("vllm", "medusa"):
        button = planner_tab._export_button({"format": fmt, "stem": "r", "cannot": root_cannot})
        assert button["interactive"] is False and button["value"] is None
        assert button["label"].startswith(f"Not as {fmt}: a root-only tree drafts no token"), button["label"]
    button = planner_tab._export_button({"format": "growmap", "stem": "r", "cannot": root_cannot})
    assert button["interactive"] is True and button["value"] == str(tmp_path / "r.pt")
    assert planner_tab._export_button({"format": "json", "stem": None, "cannot": {}})["interactive"] is False


def test_a_broken_tree_json_is_said_to_be_one():
    """A truncated tree JSON was taken for a bare vLLM string and refused as "speculative_token_tree
    is not a Python list of tuples"; it is refused as the tree JSON it was meant to be."""
    from engine import export
    from engine.tree import TreeError
    with pytest.raises(TreeError) as refused:
        export.import_tree(b'{"parents": [-1, 0')
    assert "speculative_token_tree" not in str(refused.value), refused.value
    # plain text that is no JSON is told so too, and a tree JSON saved with a BOM (Windows editors) reads
    with pytest.raises(TreeError, match="not valid JSON"):
        export.import_tree(b"hello")
    assert export.import_tree(b'\xef\xbb\xbf{"parents": [-1, 0, 0]}').parents == (-1, 0, 0)
    assert export.detect_format(b"[(0,), (1,)]") == "vllm"   # a bare vLLM string still is one
    # binary that is no growmap is none of the formats (it was refused as "a vllm tree file must be UTF-8 text")
    with pytest.raises(TreeError, match="neither a tree file"):
        export.import_tree(b"\xff\xfe\x00binary", name="tree.json")
