"""The `python -m engine generate` contract, and one-line errors (exit 2) for bad input."""
import json
import subprocess
import sys

import pytest
import torch

from tests.tiny import tiny_pair_dirs

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def engine(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dirs():
    return tiny_pair_dirs("llama")


def test_generate_json_contract_and_greedy_equality(dirs):
    draft, target = dirs
    out = engine("generate", "--draft", draft, "--target", target, "--prompt", "hello world", "--method",
                 "specinfer", "--width", "3", "--depth", "4", "--max-new-tokens", "24", "--ignore-eos", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # stdout is exactly one JSON object
    for key in ("token_ids", "text", "steps", "tokens_per_step", "seconds"):
        assert key in result
    assert len(result["token_ids"]) == 24
    assert sum(s["tokens"] for s in result["steps"]) == 24
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target)
    ids = tok("hello world")["input_ids"]
    ref = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert result["token_ids"] == ref[0, len(ids):].tolist()


def test_generate_num_samples(dirs):
    draft, target = dirs
    out = engine("generate", "--draft", draft, "--target", target, "--prompt", "ab", "--method", "chain",
                 "--depth", "3", "--temperature", "1", "--max-new-tokens", "4", "--num-samples", "3", "--json")
    assert out.returncode == 0, out.stderr
    samples = json.loads(out.stdout)["samples"]
    assert len(samples) == 3 and all(1 <= len(s) <= 4 for s in samples)


def test_generate_auto_plans_for_this_device_and_stays_exact(dirs, capsys):
    """--auto: the app's default method (hardware-aware Sequoia) from the CLI; the device is
    profiled first when no profile is cached (each test process has its own cache)."""
    draft, target = dirs
    from engine.cli import main
    assert main(["generate", "--draft", str(draft), "--target", str(target), "--prompt", "hello world", "--auto",
                 "--budget", "8", "--depth", "4", "--max-new-tokens", "16", "--ignore-eos", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["method"] == "sequoia-auto" and "hardware-aware" in result["label"], result["label"]
    assert result["auto_bounds"] == {"budget": 8, "depth": 4}
    tree = result["tree"]
    assert len(tree) <= 8 and max(_depth(tree, i) for i in range(len(tree))) <= 4, tree
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok, model = AutoTokenizer.from_pretrained(target), AutoModelForCausalLM.from_pretrained(target)
    ids = tok("hello world")["input_ids"]
    ref = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert result["token_ids"] == ref[0, len(ids):].tolist()


def test_answer_stops_before_the_eos_token(dirs, capsys, monkeypatch):
    """The printed answer leaves out the end-of-sequence token that ended it (a chat model's
    `<|im_end|>` was printed); JSON keeps every token in `text` and the reader's text in `answer`."""
    from engine.cli import main
    from engine.commands import generate
    from engine.models import encode_prompt
    from tests.tiny import greedy_reference, with_eos
    draft, target = dirs
    real = generate.pair_from_args

    def eos_pair(args):  # the tiny pair never emits its own EOS: make a token of its answer the EOS
        pair = real(args)
        ids = encode_prompt(pair, "hello world", chat=False)
        reference = greedy_reference(pair, ids, 12)
        return with_eos(pair, reference[5])
    monkeypatch.setattr(generate, "pair_from_args", eos_pair)
    args = ["generate", "--draft", str(draft), "--target", str(target), "--prompt", "hello world",
            "--method", "chain", "--max-new-tokens", "12", "--no-learn"]
    assert main(args + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["finish_reason"] == "eos"
    tok = __import__("transformers").AutoTokenizer.from_pretrained(target)
    ids = result["token_ids"]
    assert result["text"] == tok.decode(ids) and result["answer"] == tok.decode(ids[:-1])
    assert main(args) == 0
    assert capsys.readouterr().out == tok.decode(ids[:-1]) + "\n"


def _depth(parents: list[int], node: int) -> int:
    """Levels from the root to `node`, both counted."""
    return 1 if parents[node] < 0 else 1 + _depth(parents, parents[node])


def test_tree_file(dirs, tmp_path):
    draft, target = dirs
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps({"parents": [-1, 0, 0, 1, 2]}))
    out = engine("generate", "--draft", draft, "--target", target, "--prompt", "ab", "--method", "sequoia",
                 "--tree", tree, "--max-new-tokens", "6", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tree"] == [-1, 0, 0, 1, 2]


BAD = [
    (["--prompt", "   "], "prompt is empty: give --prompt the text"),
    (["--prompt", "x", "--method", "sequoia", "--budget", "0"], "budget"),
    (["--prompt", "x", "--method", "sequoia", "--budget", "100000"], "budget"),
    (["--prompt", "x", "--temperature", "nan"], "temperature"),
    (["--prompt", "x", "--temperature", "-1"], "temperature"),
    (["--prompt", "x", "--top-p", "0"], "top-p"),
    (["--prompt", "x", "--top-p", "1.5"], "top-p"),
    (["--prompt", "x", "--max-new-tokens", "0"], "max new tokens"),
    (["--prompt", "x", "--seed", str(2**63)], "seed must be below 2^63 = 9,223,372,036,854,775,808 (got "),
    (["--prompt", "x", "--method", "chain", "--depth", "0"], "depth"),
    (["--prompt", "x", "--method", "chain", "--auto"], "--auto plans Sequoia trees"),
    # a budget a chain or SpecInfer tree does not fit (was ignored: an 8-node chain ran)
    (["--prompt", "x", "--method", "chain", "--budget", "4", "--depth", "8"], "chain with depth 8 needs 8 nodes, "
                                                                             "above the budget of 4"),
    (["--prompt", "x", "--method", "specinfer", "--width", "3", "--depth", "4", "--budget", "9"],
     "specinfer with depth 4 needs 10 nodes, above the budget of 9"),
    (["--prompt", "x", "--device", "meta"], "unknown device 'meta'"),
    (["--prompt", "x", "--tree", "t.json", "--auto"], "leave out --tree"),
]


def in_process(capsys, *args):
    """engine.cli.main in this process: same code path as the CLI, without a 5 s interpreter start."""
    from engine.cli import main
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra,needle", BAD)
def test_bad_input_is_one_line_exit_2(dirs, capsys, extra, needle):
    draft, target = dirs
    code, err = in_process(capsys, "generate", "--draft", draft, "--target", target, *extra)
    assert code == 2, err
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and needle in error_lines[0], err


def test_bad_input_from_a_real_process(dirs):
    draft, target = dirs
    out = engine("generate", "--draft", draft, "--target", target, "--prompt", "x", "--temperature", "nan")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: temperature")


def test_unknown_model_and_mismatched_tokenizers(dirs, tmp_path, capsys):
    draft, target = dirs
    code, err = in_process(capsys, "generate", "--draft", "no-such-org/no-such-model", "--target", target, "--prompt", "x")
    assert code == 2 and "no-such-org/no-such-model" in err and "error:" in err
    code, err = in_process(capsys, "generate", "--draft", tmp_path / "missing-folder", "--target", target, "--prompt", "x")
    assert code == 2 and "error:" in err
    from tests.tiny import save_pair
    other_draft, _ = save_pair(tmp_path, chars="xyz0123")
    code, err = in_process(capsys, "generate", "--draft", other_draft, "--target", target, "--prompt", "x")
    assert code == 2 and "tokenizers differ" in err


def test_bad_tree_files(dirs, tmp_path, capsys):
    draft, target = dirs
    cases = {"notjson.json": "{not json", "cycle.json": json.dumps({"parents": [1, 0]}),
             "noroot.json": json.dumps({"parents": [0, 0]}), "missing.json": None}
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        code, err = in_process(capsys, "generate", "--draft", draft, "--target", target, "--prompt", "x", "--tree", path)
        assert code == 2 and "error:" in err, (name, err)


@pytest.mark.parametrize("mix,needle", [("code=2,poetry=1", "kinds code, prose"), ("prose=99", "has 12 prose"),
                                        ("code=0", "counts >= 1"), (",", "empty")])
def test_bench_prompt_mix_bad_values_are_one_line_exit_2(dirs, capsys, mix, needle):
    draft, target = dirs
    code, err = in_process(capsys, "bench", "--quick", "--draft", draft, "--target", target, "--prompt-mix", mix)
    assert code == 2, err
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and needle in error_lines[0], err


def _bench_args(*argv):
    import argparse
    from engine.commands.bench import register
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_bench_prompts_come_from_the_held_out_set_unless_told():
    from engine.commands.bench import bench_prompts
    from engine.prompts import HELDOUT_PROMPTS, asset_prompts, prompt_set
    held_out, examples = prompt_set(HELDOUT_PROMPTS), asset_prompts()
    first = {kind: [p.title for p in held_out if p.kind == kind] for kind in ("code", "prose")}

    prompts, source = bench_prompts(_bench_args())      # no flags: 2 code + 2 prose of the held-out set
    assert [p.title for p in prompts] == first["code"][:2] + first["prose"][:2]
    assert source == "assets/heldout-prompts.json, code=2,prose=2"
    prompts, source = bench_prompts(_bench_args("--quick"))
    assert [p.title for p in prompts] == first["code"][:1] + first["prose"][:1]
    assert source == "assets/heldout-prompts.json, code=1,prose=1"
    prompts, _ = bench_prompts(_bench_args("--prompt-mix", "code=1,prose=3"))
    assert [p.title for p in prompts] == first["code"][:1] + first["prose"][:3]
    # a mix picks from the set it is given: the app's examples
    prompts, source = bench_prompts(_bench_args("--prompt-set", "assets/prompts.json", "--prompt-mix", "prose=2"))
    assert [p.title for p in prompts] == [p.title for p in examples if p.kind == "prose"][:2]
    assert source == "assets/prompts.json, prose=2"
    prompts, source = bench_prompts(_bench_args("--prompt-set", "assets/prompts.json"))
    assert [p.title for p in prompts] == [p.title for p in examples] and source == "assets/prompts.json"


def test_bench_prompt_set_bad_files_are_one_line_exit_2(dirs, capsys, tmp_path):
    draft, target = dirs
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "no-prompt.json").write_text(json.dumps([{"title": "x"}]))
    (tmp_path / "strings.json").write_text(json.dumps(["a", "b"]))
    (tmp_path / "number.json").write_text(json.dumps({"prompts": 3}))
    # said in the file's terms (they were "KeyError: 'prompt'", "AttributeError: 'str' object has no
    # attribute 'get'", "TypeError: 'int' object is not iterable")
    entry = 'entry 1 is not an object with a "prompt" string'
    cases = {tmp_path / "missing.json": "cannot read prompt set", tmp_path / "broken.json": "cannot read prompt set",
             tmp_path / "no-prompt.json": entry, tmp_path / "strings.json": entry,
             tmp_path / "number.json": 'it must hold a list of prompts, or {"prompts": [...]}',
             tmp_path / "empty.json": "has no prompts"}
    for path, needle in cases.items():
        code, err = in_process(capsys, "bench", "--quick", "--draft", draft, "--target", target, "--prompt-set", path)
        error_lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(error_lines) == 1 and needle in error_lines[0], (path, err)
    (tmp_path / "lines.txt").write_text("one prompt\n")
    code, err = in_process(capsys, "bench", "--quick", "--draft", draft, "--target", target,
                           "--prompts", tmp_path / "lines.txt", "--prompt-mix", "code=1")
    assert code == 2 and "--prompts is a whole list" in err


def test_bench_lanes_can_leave_out_chains_and_specinfer():
    import argparse
    from engine.commands.bench import config_from_args, register
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    config = config_from_args(parser.parse_args(["bench", "--chain-depths", "none", "--specinfer", "None"]))
    assert config.chain_depths == () and config.specinfer == ()
    config = config_from_args(parser.parse_args(["bench", "--chain-depths", "3,5"]))
    assert config.chain_depths == (3, 5) and config.specinfer == ((2, 4), (5, 4))


def test_profile_writes_out_and_refuses_a_synthetic_only_flag(dirs, tmp_path, capsys, monkeypatch):
    """`profile --out FILE` for a pair wrote nothing (the flag belonged to --synthetic) and exited 0;
    --acceptance, --draft-config and --target-config, which only a synthetic profile reads, were
    ignored the same way."""
    draft, target = dirs
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path / "cache"))  # this 2-size profile stays out of the shared cache
    out = tmp_path / "sub" / "profile.json"
    code, err = in_process(capsys, "profile", "--draft", draft, "--target", target, "--max-budget", "2",
                           "--repeats", "1", "--prefix", "8", "--out", out)
    assert code == 0, err
    written = json.loads(out.read_text())
    assert sorted(written["target_seconds"]) == ["1", "2"] and written["repeats"] == 1
    code, err = in_process(capsys, "profile", "--draft", draft, "--target", target, "--acceptance", "0.8,0.1")
    assert code == 2 and "--acceptance goes with --synthetic" in err, err
    code, err = in_process(capsys, "profile", "--draft", draft, "--target", target, "--draft-config", "1b",
                           "--target-config", "7b")
    assert code == 2 and "--draft-config, --target-config go with --synthetic" in err, err
    code, err = in_process(capsys, "profile", "--draft", draft, "--target", target, "--out", tmp_path)
    assert code == 2 and "cannot write --out" in err, err


def test_a_synthetic_profile_refuses_a_pairs_flags_and_an_unwritable_out_before_it_builds(tmp_path, capsys,
                                                                                       monkeypatch):
    """`profile --synthetic` ignored --draft/--target (it profiled the random models and said
    nothing), and an --out it could not write (a folder, a path under a file) ended in a traceback
    after the whole profile had been timed."""
    from engine.commands import synthetic
    monkeypatch.setattr(synthetic, "synthetic_profile", lambda *a, **k: pytest.fail("the profile was built"))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    tiny = ["profile", "--synthetic", "--draft-config", "tiny", "--target-config", "tiny-target"]
    for extra, needle in ((["--draft", "some/model"], "--draft goes with a model pair's profile"),
                          (["--target", "x", "--drop-page-cache"], "--target, --drop-page-cache go with"),
                          (["--out", tmp_path], f"cannot write --out {tmp_path}: it is a folder"),
                          (["--out", a_file / "p.json"], f"{a_file} is a file, not a folder"),
                          (["--max-budget", "0"], "--max-budget must be between 1 and 1024")):
        code, err = in_process(capsys, *tiny, *extra)
        assert code == 2 and needle in err and "Traceback" not in err, (extra, err)


def test_bench_refuses_an_output_it_cannot_write_before_it_runs(tmp_path, capsys, monkeypatch):
    """`bench --json OUT` and `--plot OUT` were written only after every run: a path under a
    file ended minutes of benchmark in a traceback and lost the report. They are checked first."""
    from engine import bench
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: pytest.fail("the bench ran"))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for flag in ("--json", "--plot"):
        code, err = in_process(capsys, "bench", flag, a_file / "report.json")
        assert code == 2 and f"cannot write {flag} {a_file / 'report.json'}" in err, err


def test_generate_refuses_what_needs_no_models_before_loading_them(tmp_path, capsys, monkeypatch):
    """An empty prompt, a budget or depth of 0, --auto with a chain and an unreadable tree file
    were said only after the pair's half a minute of loading."""
    from engine.commands import generate
    monkeypatch.setattr(generate, "pair_from_args", lambda args: pytest.fail("the pair was loaded"))
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps({"parents": [-1, 0, 0, 1, 2, 3]}))
    (tmp_path / "empty.json").write_text("")
    for extra, needle in ((["--prompt", "  "], "prompt is empty"),
                          (["--prompt", "x", "--tree", tmp_path / "empty.json"], f"--tree {tmp_path / 'empty.json'} is empty"),
                          (["--prompt", "x", "--budget", "0"], "budget"),
                          (["--prompt", "x", "--depth", "0"], "depth"),
                          (["--prompt", "x", "--method", "chain", "--auto"], "--auto plans Sequoia trees"),
                          (["--prompt", "x", "--tree", tmp_path / "missing.json"], "cannot read --tree"),
                          (["--prompt", "x", "--method", "chain", "--depth", "40"], "depth"),
                          (["--prompt", "x", "--method", "specinfer", "--width", "64", "--depth", "8"], "449 nodes"),
                          (["--prompt", "x", "--tree", tree, "--budget", "3"], "has 6 nodes, more than --budget 3"),
                          # another method's options are refused, not ignored
                          (["--prompt", "x", "--method", "chain", "--tree", tree], "--tree runs the given tree"),
                          (["--prompt", "x", "--method", "chain", "--width", "3"], "--width sets SpecInfer's"),
                          (["--prompt", "x", "--method", "ar", "--width", "3"], "--width sets SpecInfer's"),
                          (["--prompt", "x", "--method", "ar", "--budget", "8"], "--budget shapes a draft tree"),
                          (["--prompt", "x", "--tree", tree, "--depth", "3"], "leave out --depth")):
        code, err = in_process(capsys, "generate", *extra)
        assert code == 2 and needle in err, (extra, err)


def test_other_commands_refuse_what_needs_no_models_before_loading_them(tmp_path, capsys, monkeypatch):
    """A CLI review found profile --repeats 0 crashing with a traceback after the load, measure,
    plan and export checking their numbers and output file only after it (by the library's names:
    "max new tokens" for --tokens-per-prompt, "budget" for --max-budget), and options of another
    mode ignored with exit code 0 (plan --acceptance with --auto or --temperature, export --method
    without --format vllm, bench --learning-check-tokens without --learning-check)."""
    from engine.commands import common, plan, profile
    for module in (common, plan, profile):
        monkeypatch.setattr(module, "pair_from_args", lambda args: pytest.fail("the pair was loaded"), raising=False)
    from engine.commands import check, measure
    for module in (check, measure):
        monkeypatch.setattr(module, "pair_from_args", lambda args: pytest.fail("the pair was loaded"))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps({"parents": [-1, 0, 0, 1]}))
    for args, needle in ((["profile", "--repeats", "0"], "--repeats must be at least 1 (got 0)"),
                         (["profile", "--prefix", "-5"], "--prefix must be at least 1"),
                         (["profile", "--max-budget", "2000"], "--max-budget must be between 1 and 1024"),
                         (["measure", "--width", "0"], "--width must be between 1 and 64"),
                         (["measure", "--replay", "--draws", "0"], "--draws must be at least 1"),
                         (["measure", "--draws", "3"], "--draws is for --replay"),   # was ignored
                         (["measure", "--extend"], "--extend is for --replay"),
                         (["measure", "--tokens-per-prompt", "0"], "--tokens-per-prompt must be between 1"),
                         (["measure", "--prompts", tmp_path / "missing"], "No such file or directory"),
                         (["plan", "--auto", "--max-budget", "-5"], "--max-budget must be between 1 and 256"),
                         (["plan", "--temperature", "0", "--budget", "2000", "--depth", "4"], "--budget must be"),
                         (["plan", "--temperature", "0", "--budget", "8", "--depth", "40"], "--depth must be"),
                         (["plan", "--temperature", "0", "--budget", "8"], "give --budget"),
                         (["plan", "--auto", "--budget", "8"], "leave out --budget"),
                         (["plan", "--acceptance", "0.6,0.2", "--budget", "4", "--depth", "3", "--auto"],
                          "--auto applies to a model pair's plan"),
                         (["plan", "--acceptance", "0.6,0.2", "--budget", "4", "--depth", "3", "--temperature", "0.7",
                           "--draft", "x/y"], "--draft, --temperature apply to a model pair's plan"),
                         (["check", "--prompts", a_file, "--num-prompts", "3"], "give one of them"),  # was ignored
                         (["check", "--sample-budget=-5"], "time budget (seconds) must be positive (got -5.0)"),
                         # were ignored: the synthetic vector's timing printed
                         (["plan", "--time-dp", "--depth", "0"], "--depth must be at least 1 (got 0)"),
                         (["plan", "--time-dp", "--budget", "2000"], "--budget must be between 1 and 1024 nodes"),
                         (["plan", "--time-dp", "--temperature", "0.7", "--auto"],
                          "--temperature, --auto apply to a model pair's plan: leave them out, or leave out --time-dp"),
                         (["export", "--format", "json", "--acceptance", "0.6", "--budget", "3", "--depth", "3",
                           "--method", "eagle"], "--method goes into a vLLM config"),
                         (["export", "--format", "json", "--tree", tree, "--top-p", "0.5"], "not both"),
                         (["export", "--format", "json", "--temperature", "0", "--budget", "8", "--depth", "4",
                           "--out", a_file / "x.json"], "cannot write --out"),
                         (["bench", "--learning-check-tokens", "5"], "--learning-check-tokens needs --learning-check"),
                         (["plan", "--acceptance", "-0.1,0.2", "--budget", "3", "--depth", "3"], "--flag=VALUE"),
                         (["plan", "--bogus", "3"], "--bogus 3 (see python -m engine plan --help)")):
        try:
            code, err = in_process(capsys, *args)
        except SystemExit as exc:   # argparse's own errors: one line too
            code, err = exc.code, capsys.readouterr().err
        assert code == 2 and needle in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err   # one line, no usage block, no traceback
    for args, needle in ((["plan", "--temperature", "0", "--budget", "8", "--depth", "4", "--max-budget", "64"],
                          "--max-budget bounds the search of --auto"),
                         (["export", "--format", "json", "--acceptance", "0.6", "--budget", "3", "--depth", "3",
                           "--draft", "x/y"], "the models of a vLLM config")):
        code, err = in_process(capsys, *args)
        assert code == 2 and needle in err, (args, err)
    # a refused export leaves no --out folder behind (its folder was made before the refusal)
    code, err = in_process(capsys, "export", "--format", "json", "--tree", tree, "--acceptance", "0.5",
                           "--out", tmp_path / "new" / "x.json")
    assert code == 2 and not (tmp_path / "new").exists(), err
    # export's own --draft names the vLLM draft beside a given vector
    code, err = in_process(capsys, "export", "--format", "vllm", "--acceptance", "0.6", "--budget", "3", "--depth", "3",
                           "--draft", "org/draft", "--out", tmp_path / "v.json")
    assert code == 0 and "org/draft" in (tmp_path / "v.json").read_text(), err


def test_generate_reads_every_format_export_writes(tmp_path):
    """`generate --tree` took tree JSON and growmaps only: a Medusa or vLLM export fed back said
    "tree parents must be integers" or "tree JSON must be {"parents": ...}"."""
    from engine import export
    from engine.commands.common import load_tree_file
    from engine.tree import Tree
    tree = Tree((-1, 0, 0, 1, 2, 3))
    for fmt, name in (("json", "t.json"), ("vllm", "v.json"), ("medusa", "m.json"), ("growmap", "g.pt")):
        path = tmp_path / name
        data = export.export_tree(tree, fmt)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        assert load_tree_file(str(path)).parents == tree.parents, fmt


def test_the_synthetic_profiles_refused_options_are_the_parsers_own_defaults():
    """profile --synthetic refuses a pair option given by comparing with synthetic.PAIR_ONLY's
    defaults, which must be the parser's; every other option of `profile` is named here, so a new
    one must be sorted into one side or the other (it would be ignored unsaid)."""
    from engine.cli import build_parser
    from engine.commands import synthetic
    parsed = vars(build_parser().parse_args(["profile"]))
    assert {name: parsed[name] for name in synthetic.PAIR_ONLY} == synthetic.PAIR_ONLY
    read_by_synthetic = {"command", "func", "synthetic", "draft_config", "target_config", "acceptance", "out", "json",
                         "max_budget", "prefix", "repeats", "device", "dtype"}
    assert set(parsed) - read_by_synthetic == set(synthetic.PAIR_ONLY)


def test_the_pair_only_options_are_the_parsers_own_defaults():
    """plan --acceptance and export --tree refuse a pair option given; they find it by comparing
    with PAIR_ONLY's defaults, which must be the parsers' (a new option would be ignored unsaid)."""
    from engine.cli import build_parser
    from engine.commands.plan import PAIR_ONLY
    # every other option of the command, named: a new one must be sorted into one side or the other
    own = {"plan": {"command", "func", "acceptance", "budget", "depth", "json", "time_dp"},
           "export": {"command", "func", "acceptance", "budget", "depth", "format", "tree", "out", "method",
                      "tensor_parallel_size"}}
    for command in (["plan"], ["export", "--format", "json"]):
        parsed = vars(build_parser().parse_args(command))
        assert {name: parsed[name] for name in PAIR_ONLY} == PAIR_ONLY, command
        assert set(parsed) - own[command[0]] == set(PAIR_ONLY), command


def test_generate_logs_how_far_it_read_a_long_prompt(dirs, capsys, monkeypatch, caplog):
    """The CLI says how far the prefill of a long prompt got, as the page's status line does."""
    import logging

    from engine import decoding
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", 8)
    draft, target = dirs
    with caplog.at_level(logging.INFO):
        code, err = in_process(capsys, "generate", "--draft", draft, "--target", target, "--device", "cpu",
                               "--prompt", "the quick brown fox jumps over the lazy dog " * 2, "--no-chat",
                               "--method", "chain", "--depth", "3", "--max-new-tokens", "4", "--no-learn")
    assert code == 0, err
    read = [r.getMessage() for r in caplog.records if "reading the prompt into the" in r.getMessage()]
    assert read and read[0].startswith("reading the prompt into the target: 8 of "), read
    assert read[-1].startswith("reading the prompt into the draft: "), read


def test_plan_auto_takes_depth_1_as_a_bound_like_generate_auto():
    """plan/export --auto --depth 1 was refused ("needs --depth of at least 2") where generate --auto
    and the page plan the root alone."""
    from types import SimpleNamespace
    from engine.commands.plan import MAX_BUDGET_DEFAULT, check_pair_shape
    from engine.errors import UserError
    check_pair_shape(SimpleNamespace(auto=True, max_budget=MAX_BUDGET_DEFAULT, budget=None, depth=1))
    with pytest.raises(UserError, match="at least 2"):
        check_pair_shape(SimpleNamespace(auto=False, max_budget=MAX_BUDGET_DEFAULT, budget=8, depth=1))
