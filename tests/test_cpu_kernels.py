"""The fast CPU path (engine/cpu_kernels.py): packed kernels keep a row's output independent of
the other rows (the target's part of exactness), loading reports what it did, and the output stays
exact (greedy equality and the chi-square tests run on both paths in tests/test_exactness.py)."""
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DynamicCache

from engine import attention, cpu_kernels, fp16_rows, methods, nf4, nf4_cache
from engine.decoding import generate_ids
from engine.errors import UserError
from engine.models import encode_prompt, load_pair
from engine.settings import Settings
from engine.tree import Tree
from tests.test_exactness import DIST_CHARS
from tests.tiny import tiny_pair, tiny_pair_dirs

# 7, 14, 31 and 32 rows: counts whose last rows fbgemm's AVX2 micro-kernels round differently
ROWS = (1, 2, 3, 4, 5, 7, 8, 14, 16, 31, 32, 33)


def _linear(in_features=96, out_features=80, fp16_weights=True):
    torch.manual_seed(0)
    linear = torch.nn.Linear(in_features, out_features)
    if fp16_weights:  # like a float16 checkpoint: every weight exactly representable
        with torch.no_grad():
            linear.weight.copy_(linear.weight.half().float())
    return linear.eval()


def _rows_together_and_alone(packed, linear, in_features):
    """For every row count: (m, the rows in one call, each row in its own call, the float layer)."""
    for m in ROWS:
        x = torch.randn(m, in_features)
        with torch.inference_mode():
            yield (m, packed(x), torch.cat([packed(x[i:i + 1]) for i in range(m)]),
                   torch.nn.functional.linear(x, linear.weight, linear.bias))


@pytest.mark.parametrize("kind", ["fp16", "onednn"])
def test_packed_target_linears_are_row_independent_bit_for_bit(kind):
    linear = _linear()
    packed = cpu_kernels.PackedLinear(linear, kind)
    for m, together, alone, plain in _rows_together_and_alone(packed, linear, 96):
        assert torch.equal(together, alone), (kind, m)
        torch.testing.assert_close(together, plain, atol=1e-5, rtol=1e-5)  # the same layer, other rounding


def test_huge_page_copies_pack_to_the_same_layer(monkeypatch):
    """The float32 source of the float16 packing on huge pages (engine/huge_pages.py): the same
    values, so the same packed layer, bit for bit, as from an ordinary copy."""
    from engine import huge_pages
    linear = _linear(in_features=1024, out_features=2048 + 7)  # 8 MB + odd rows: an unaligned end
    copy = huge_pages.float32_copy(linear.weight.half())
    assert copy.dtype == torch.float32 and copy.is_contiguous() and torch.equal(copy, linear.weight)
    x = torch.randn(5, 1024)
    monkeypatch.setattr(huge_pages, "MIN_BYTES", 1 << 62)  # never huge: the ordinary copy
    ordinary = cpu_kernels.PackedLinear(linear, "fp16")
    monkeypatch.setattr(huge_pages, "MIN_BYTES", 1)
    huge = cpu_kernels.PackedLinear(linear, "fp16")
    with torch.inference_mode():
        assert torch.equal(ordinary(x), huge(x))


def test_float16_calls_are_padded_to_row_counts_that_agree():
    """engine/fp16_rows.py: every count it runs is consistent (each row as in the reference call),
    and a padded count is the smallest such; on a CPU whose kernel needs none, nothing is padded."""
    assert fp16_rows.usable()
    for m in range(1, 65):
        rows = fp16_rows.padded_rows(m)
        assert rows is not None and rows >= m and fp16_rows.consistent(rows)
        assert all(not fp16_rows.consistent(k) for k in range(m, rows))
    linear = _linear(256, 48)
    packed = cpu_kernels.PackedLinear(linear, "fp16")
    x = torch.randn(40, 256)
    with torch.inference_mode():
        alone = torch.cat([packed(x[i:i + 1]) for i in range(40)])
        for m in range(1, 41):
            assert torch.equal(packed(x[:m]), alone[:m]), m
    report = tiny_pair("llama", kernels="fast").describe()["kernels"]
    assert report["target"]["fp16_row_padding"] == fp16_rows.padding_summary()


def test_int8_draft_linears_couple_rows_and_say_so():
    """Dynamic int8 quantises each call's activations with one scale: rows depend on each other.
    That is allowed for the draft only, and the load report says so."""
    linear = _linear(fp16_weights=False)
    packed = cpu_kernels.PackedLinear(linear, "int8")
    x = torch.randn(8, 96)
    x[0] *= 50  # one large row changes the scale every other row is quantised with
    with torch.inference_mode():
        together, alone = packed(x), torch.cat([packed(x[i:i + 1]) for i in range(8)])
        plain = torch.nn.functional.linear(x, linear.weight, linear.bias)
    assert not torch.equal(together[1:], alone[1:])
    assert float((alone - plain).norm() / plain.norm()) < 0.05  # still a close approximation
    assert cpu_kernels.couples_rows({"linears": {"int8": 3}})
    assert not cpu_kernels.couples_rows({"linears": {"fp16": 3, "onednn": 1}})


def test_fast_load_packs_every_linear_once_and_reports_it():
    fast, default = tiny_pair("llama", kernels="fast"), tiny_pair("llama")
    n_linears = sum(type(m) is torch.nn.Linear for m in default.target.modules())
    assert n_linears > 0
    report = fast.describe()
    assert report["cpu_kernels"] == "fast" and default.describe()["cpu_kernels"] == "default"
    assert report["kernels"]["target"]["linears"] == {"fp16": n_linears}  # float16 checkpoint: all exact
    assert report["kernels"]["draft"]["linears"] == {"int8": n_linears}
    assert report["kernels"]["target"]["embedding"] == "float16"
    assert not any(type(m) is torch.nn.Linear for m in fast.target.modules())  # one copy: the packed one
    assert fast.target.dtype == torch.float32 and fast.rows_coupled("draft") and not fast.rows_coupled("target")
    assert fast.model_bytes() < default.model_bytes()
    # the probe ran before packing, on the models as stored, and passed
    assert fast.probe["target"]["passed"] and fast.probe["draft"]["passed"]


def test_float32_checkpoints_keep_exact_weights_on_onednn_and_stay_greedy_exact():
    draft, target = tiny_pair_dirs("qwen2")  # float32 weights: float16 would round them
    pair = load_pair(str(draft), str(target), device="cpu", dtype="float32", cpu_kernels="fast")
    assert set(pair.cpu_kernels["target"]["linears"]) == {"onednn"}
    assert pair.cpu_kernels["target"]["embedding"] == "unchanged"
    ids = encode_prompt(pair, "tree decoding", chat=False)
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(ids):].tolist()
    settings = Settings(max_new_tokens=24, ignore_eos=True)
    for method in (methods.chain(4), methods.sequoia(Tree.from_branching([3, 2, 1, 0, 1]))):
        assert generate_ids(pair, ids, method, settings)[0] == ref, method.label


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_tree_forward_scores_each_token_as_its_own_causal_forward(family):
    """Row independence at the model level: a tree node's logits equal those of a plain causal
    forward over prefix + its root path, fed one token at a time (the autoregressive target)."""
    pair = tiny_pair(family, kernels="fast")
    model = pair.target
    prefix = encode_prompt(pair, "hello there", chat=False)
    tree = Tree.from_branching([3, 2, 1, 0, 1, 0])
    tokens = [prefix[-1]] + [(5 * i + 2) % pair.vocab_size for i in range(1, tree.size)]
    base = len(prefix) - 1
    cache = DynamicCache(config=model.config)
    attention.forward_causal(model, cache, prefix[:-1])
    visible = attention.tree_visibility(base, tree.ancestor_mask, list(range(tree.size)), list(range(tree.size)),
                                        pair.device)
    tree_logits = attention.forward(model, cache, tokens, [base + d for d in tree.depth_of], visible)
    worst = 0.0
    for node in range(tree.size):
        single = DynamicCache(config=model.config)
        attention.forward_causal(model, single, prefix[:-1])
        for v in tree.path_to(node):
            logits = attention.forward_causal(model, single, [tokens[v]])[-1]
        worst = max(worst, float((tree_logits[node] - logits).abs().max()))
    # the linears are bitwise row-independent (test above); attention's softmax over a longer or
    # shorter masked row may round differently in the last bits, nothing more
    assert worst < 1e-4, worst


def test_cli_takes_cpu_kernels_and_refuses_others(capsys):
    from engine.cli import build_parser
    args = build_parser().parse_args(["generate", "--prompt", "x", "--cpu-kernels", "default"])
    assert args.cpu_kernels == "default"
    assert build_parser().parse_args(["profile"]).cpu_kernels == "fast"
    assert build_parser().parse_args(["plan", "--cpu-kernels", "default"]).cpu_kernels == "default"
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["generate", "--prompt", "x", "--cpu-kernels", "turbo"])
    assert exc.value.code == 2 and "turbo" in capsys.readouterr().err


# ------------------------------------------------------------------ the pruned draft head (FR-Spec)
def _pair_with_pruned_head(tmp_path, monkeypatch, keep_share=0.5, **tiny):
    from tests.tiny import tiny_pair_dirs as dirs
    draft, target = dirs("llama", stored="float16", **tiny)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(draft)
    ids = list(range(len(tok)))[::-1][:max(2, int(len(tok) * keep_share))]  # a made-up frequency order
    table = {"ids": ids, "counts": [1] * len(ids)}
    (tmp_path / f"{cpu_kernels.vocabulary_hash(tok)}.json").write_text(__import__("json").dumps(table))
    monkeypatch.setattr(cpu_kernels, "FREQUENT_TOKENS", tmp_path)
    pair = load_pair(str(draft), str(target), device="cpu", dtype="float32", cpu_kernels="fast",
                     draft_head_tokens=len(ids))
    return pair, set(ids) | set(tok.all_special_ids)


def test_pruned_head_scores_only_the_kept_tokens_exactly_like_the_full_int8_head(tmp_path, monkeypatch):
    pair, kept = _pair_with_pruned_head(tmp_path, monkeypatch, chars=DIST_CHARS)
    head = pair.draft.get_output_embeddings()
    assert isinstance(head, cpu_kernels.PrunedHead) and "of" in pair.cpu_kernels["draft"]["head"]
    full = cpu_kernels.PackedLinear(_unpruned_copy(head, pair), "int8")
    x = torch.randn(3, head.in_features)
    with torch.inference_mode():
        pruned, reference = head(x), full(x)
    keep = head.keep
    assert set(keep.tolist()) == {i for i in kept if i < head.out_features}
    assert torch.equal(pruned[:, keep], reference[:, keep])  # per-row int8 scales: the same rows
    others = torch.ones(head.out_features, dtype=torch.bool)
    others[keep] = False
    assert torch.isinf(pruned[:, others]).all() and (pruned[:, others] < 0).all()


def _unpruned_copy(head, pair):
    """A full-size nn.Linear whose kept rows are the pruned head's source rows (read back from
    the checkpoint) - the reference the pruned head must agree with on those rows."""
    from transformers import AutoModelForCausalLM
    src = AutoModelForCausalLM.from_pretrained(pair.draft.name_or_path, dtype=torch.float32)
    return src.get_output_embeddings()


def test_pruned_head_keeps_decoding_exact(tmp_path, monkeypatch):
    pair, _ = _pair_with_pruned_head(tmp_path, monkeypatch, keep_share=0.4)
    ids = encode_prompt(pair, "hello world", chat=False)
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(ids):].tolist()
    settings = Settings(max_new_tokens=24, ignore_eos=True)
    for method in (methods.chain(4), methods.specinfer(3, 3), methods.sequoia(Tree.from_branching([3, 2, 1, 0, 1]))):
        assert generate_ids(pair, ids, method, settings)[0] == ref, method.label
    # sampling: the distribution test of tests/test_exactness.py on this pair
    from tests.test_exactness import (DIST_METHODS, SAMPLES, chi_square_pvalue, exact_two_token_distribution,
                                      two_token_samples)
    ids = encode_prompt(pair, "abca", chat=False)
    settings = Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True, seed=11)
    samples = two_token_samples(pair, ids, DIST_METHODS["sequoia"], settings, SAMPLES)
    assert chi_square_pvalue(samples, exact_two_token_distribution(pair, ids, 1.0, 1.0)) > 1e-3


# ------------------------------------------------------------------ the NF4 draft (engine/nf4.py)
needs_nf4 = pytest.mark.skipif(not nf4.available(), reason="no bitsandbytes NF4 kernel on this CPU (AVX512-BF16)")


@needs_nf4
def test_nf4_linear_approximates_the_layer_and_keeps_rows_independent():
    linear = _linear(in_features=128, out_features=96, fp16_weights=False)
    packed = nf4.Nf4Linear(linear)
    assert packed.packed_bytes < linear.weight.numel()  # under a byte per weight: half of int8
    for m, together, alone, plain in _rows_together_and_alone(packed, linear, 128):
        assert torch.equal(together, alone), m
        assert float((together - plain).norm() / plain.norm()) < 0.15, m  # 4-bit weights: close, not equal
    # the direct call into bitsandbytes' library is what its registered op computes
    x = torch.randn(5, 128).to(torch.bfloat16)
    op = torch.ops.bitsandbytes.gemv_4bit(x, packed.packed, [96, 128], packed.absmax, packed.code, nf4.BLOCK)
    assert torch.equal(packed.forward_bf16(x), op)


def _nf4_pair(weights="nf4"):
    draft, target = tiny_pair_dirs("llama64", DIST_CHARS, 0.15, 0, "float16")
    return load_pair(str(draft), str(target), device="cpu", dtype="float32", cpu_kernels="fast",
                     draft_weights=weights)


@needs_nf4
def test_nf4_draft_keeps_decoding_exact_greedy_and_sampled():
    pair = _nf4_pair()
    draft = pair.cpu_kernels["draft"]
    # every linear the kernel takes is NF4; the head (out = vocabulary, not a multiple of 32) is int8
    assert draft["linears"]["nf4"] == 14 and draft["linears"]["int8"] == 1, draft["linears"]
    assert cpu_kernels.draft_weights_of(draft) == "nf4" and set(pair.cpu_kernels["target"]["linears"]) == {"fp16"}
    ids = encode_prompt(pair, "abcab", chat=False)
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(ids):].tolist()
    settings = Settings(max_new_tokens=24, ignore_eos=True)
    accepted = 0
    for method in (methods.chain(4), methods.specinfer(3, 3), methods.sequoia(Tree.from_branching([3, 2, 1, 0, 1]))):
        out, events = generate_ids(pair, ids, method, settings)
        assert out == ref, method.label
        accepted += sum(len(e.accepted_path) - 1 for e in events)
    assert accepted > 0  # the NF4 draft's proposals were accepted: it really drafted
    from tests.test_exactness import (DIST_METHODS, SAMPLES, chi_square_pvalue, exact_two_token_distribution,
                                      two_token_samples)
    settings = Settings(temperature=1.0, max_new_tokens=2, ignore_eos=True, seed=5)
    samples = two_token_samples(pair, ids, DIST_METHODS["sequoia"], settings, SAMPLES)
    assert chi_square_pvalue(samples, exact_two_token_distribution(pair, ids, 1.0, 1.0)) > 1e-3


def _draft_logits(pair, ids):
    with torch.inference_mode():
        return pair.draft(torch.tensor([ids])).logits


@needs_nf4
def test_nf4_packing_is_stored_once_and_read_back_bit_for_bit(tmp_path, monkeypatch):
    """A later load reads the draft's NF4 tensors from disk instead of quantising (engine/nf4_cache.py):
    the same tensors, so the same logits bit for bit; garbage in the file means quantising again."""
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    first = _nf4_pair()
    assert first.cpu_kernels["draft"]["nf4_cache"] == "stored"
    assert first.cpu_kernels["target"]["nf4_cache"] is None  # the target is never NF4
    files = list((tmp_path / "nf4").glob("*.safetensors"))
    assert len(files) == 1
    later = _nf4_pair()
    assert later.cpu_kernels["draft"]["nf4_cache"] == "read"
    for layer in later.draft.modules():  # aligned as a fresh packing is: the kernel is slower otherwise
        if isinstance(layer, nf4.Nf4Linear):
            assert layer.packed.data_ptr() % 64 == 0 and layer.absmax.data_ptr() % 64 == 0
    ids = encode_prompt(first, "abcab", chat=False)
    assert torch.equal(_draft_logits(first, ids), _draft_logits(later, ids))
    files[0].write_bytes(b"not a safetensors file")
    again = _nf4_pair()
    assert again.cpu_kernels["draft"]["nf4_cache"] == "stored"
    assert torch.equal(_draft_logits(first, ids), _draft_logits(again, ids))
    # a readable file whose tensors are not what these linears pack to is not handed to the kernel
    tensors = load_file(files[0])
    name = next(k for k in tensors if k.endswith(".packed"))
    tensors[name] = tensors[name][: len(tensors[name]) // 2].clone()
    save_file(tensors, files[0])
    assert _nf4_pair().cpu_kernels["draft"]["nf4_cache"] == "stored"


@needs_nf4
def test_nf4_cache_key_changes_with_any_weight_and_the_library(monkeypatch):
    linears = [("a", _linear(128, 96, fp16_weights=False)), ("b", _linear(64, 32, fp16_weights=False))]
    key = nf4_cache.key(linears)
    assert nf4_cache.key(linears) == key and len(key) == 64
    with torch.no_grad():
        linears[1][1].weight[31, 63] += 1e-3
    changed = nf4_cache.key(linears)
    assert changed != key
    assert nf4_cache.key([("renamed", linears[0][1]), linears[1]]) != changed
    monkeypatch.setattr(nf4_cache, "_library_version", lambda: "0.0.0")
    assert nf4_cache.key(linears) != changed


@needs_nf4
def test_an_unwritable_nf4_cache_only_costs_time(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("SEQUOIA_CACHE", str(blocked))
    pair = _nf4_pair()
    assert pair.cpu_kernels["draft"]["nf4_cache"] == "none"
    assert pair.cpu_kernels["draft"]["linears"]["nf4"] == 14


def test_draft_weights_resolve_to_what_this_cpu_runs(monkeypatch):
    monkeypatch.setattr(nf4, "available", lambda: False)
    assert cpu_kernels.resolve_draft_weights("auto") == "int8" and cpu_kernels.resolve_draft_weights(None) == "int8"
    with pytest.raises(UserError, match="AVX512-BF16"):
        cpu_kernels.resolve_draft_weights("nf4")
    with pytest.raises(UserError, match="auto, nf4, int8"):
        cpu_kernels.resolve_draft_weights("int4")
    monkeypatch.setattr(nf4, "available", lambda: True)
    assert cpu_kernels.resolve_draft_weights("auto") == "nf4" and cpu_kernels.resolve_draft_weights("int8") == "int8"
    assert cpu_kernels.draft_weights_of({"role": "draft", "linears": {"nf4": 14, "int8": 1}}) == "nf4"
    assert cpu_kernels.draft_weights_of({"role": "draft", "linears": {"int8": 15}}) == "int8"
    assert cpu_kernels.draft_weights_of({"role": "target", "linears": {"fp16": 15}}) is None


def test_a_bad_draft_weights_value_is_refused_before_anything_loads():
    draft, target = tiny_pair_dirs("llama")
    with pytest.raises(UserError, match="unknown draft weights"):
        load_pair(str(draft), str(target), device="cpu", dtype="float32", cpu_kernels="default", draft_weights="int3")


def test_int8_draft_weights_on_request_and_in_keys():
    """--draft-weights int8 gives the int8 draft even where NF4 runs; the acceptance and profile
    keys tell an NF4 draft from an int8 one (they accept and cost differently)."""
    from engine import profiler
    int8 = _nf4_pair("int8")
    assert set(int8.cpu_kernels["draft"]["linears"]) == {"int8"}
    assert profiler.draft_kernels(int8) == "fast"
    if nf4.available():
        pair = _nf4_pair("nf4")
        assert profiler.draft_kernels(pair) == "fast+nf4"
        assert profiler.profile_key(pair) != profiler.profile_key(int8)
        assert profiler.acceptance_key(pair, "sequoia", 0.7, 1.0, 16) != profiler.acceptance_key(int8, "sequoia", 0.7,
                                                                                                  1.0, 16)


def test_cli_and_app_take_draft_weights(capsys):
    import importlib.util
    from pathlib import Path
    from engine.cli import build_parser
    assert build_parser().parse_args(["generate", "--prompt", "x"]).draft_weights == "auto"
    assert build_parser().parse_args(["bench", "--draft-weights", "int8"]).draft_weights == "int8"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "x", "--draft-weights", "int4"])
    spec = importlib.util.spec_from_file_location("app_script", Path(__file__).resolve().parents[1] / "app.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.parse_args([]).draft_weights == "auto"
    assert script.parse_args(["--draft-weights", "int8"]).draft_weights == "int8"
    with pytest.raises(SystemExit):
        script.parse_args(["--draft-weights", "fp4"])
    capsys.readouterr()


@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_head_tied_to_the_embedding_is_counted_once(role):
    """Qwen2.5's head shares the input embedding's weight: the parameter count after packing is
    the model's own (630 M was reported for the 494 M embedded draft before)."""
    from tests.tiny import make_model
    model = make_model("llama", 64, 0, tie_word_embeddings=True).half()
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    before = sum(p.numel() for p in model.parameters())  # parameters() lists a shared tensor once
    report = cpu_kernels.pack(model, role)
    assert report.packed_parameters + sum(p.numel() for p in model.parameters()) == before, report
