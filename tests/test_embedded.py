"""The embedded default pair: chunk lookup, verified assembly, crash-safe conversion.

Fast tests use tiny fake chunk packages and a fake converter (tests/embedded_fakes.py where child
processes prepare both models at once); the `slow` test uses the real installed packages (minutes
on a cold cache, seconds once converted)."""
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine import embedded
from engine.embedded import DRAFT, SOURCE_FILE, TARGET, ModelSpec, UserError
from tests import embedded_fakes

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]
BLOB = b"".join(PARTS)


def make_packages(root, prefix, parts):
    """Importable-looking packages <prefix>1..N, each with data/partNN.bin (never imported)."""
    for i, data in enumerate(parts, 1):
        pkg = root / f"{prefix.replace('-', '_')}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('chunk packages must not be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A spec over fake packages on sys.path, an empty cache, and a fake converter."""
    prefix = f"sequoia-fake-{tmp_path.name[-12:].replace('-', '_').lower()}-part"
    make_packages(tmp_path / "site", prefix, PARTS)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_export(gguf, out, progress):
        calls.append(gguf.read_bytes())
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(embedded, "_export_hf", fake_export)
    spec = ModelSpec(role="draft", repo="Test/Fake-Model", package_prefix=prefix, version="1.0", count=len(PARTS),
                     size=len(BLOB), sha256=hashlib.sha256(BLOB).hexdigest(), gguf_name="fake.gguf",
                     folder_bytes=1000)
    return spec, calls


def test_specs_are_pinned():
    assert (DRAFT.size, DRAFT.count, TARGET.size, TARGET.count) == (491_400_064, 6, 1_117_320_768, 22)
    assert DRAFT.sha256.startswith("1d961463") and TARGET.sha256.startswith("cc324af0")
    assert DRAFT.folder_name != TARGET.folder_name


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    assert embedded.cache_dir() == tmp_path
    monkeypatch.delenv("SEQUOIA_CACHE")
    assert embedded.cache_dir().name == "sequoia-live"


def test_locate_chunks_finds_without_importing(fake):
    spec, _ = fake
    chunks = embedded.locate_chunks(spec)
    assert [c.read_bytes() for c in chunks] == PARTS
    assert not any(m.startswith(spec.package_prefix.replace("-", "_")) for m in sys.modules)


def test_missing_package_names_the_fix(fake, tmp_path):
    spec, _ = fake
    (tmp_path / "site" / f"{spec.package_prefix.replace('-', '_')}2" / "data" / "part02.bin").unlink()
    bigger = replace(spec, count=4)  # part 4 was never installed
    with pytest.raises(UserError) as err:
        embedded.locate_chunks(bigger)
    msg = str(err.value)
    assert f"{spec.package_prefix}2" in msg and f"{spec.package_prefix}4" in msg
    assert f"{spec.package_prefix}1," not in msg
    assert "pip install" in msg and f"{spec.package_prefix}4==1.0" in msg


def test_assemble_verifies_and_writes(fake, tmp_path):
    spec, _ = fake
    seen = []
    dest = embedded.assemble(embedded.locate_chunks(spec), tmp_path / "out.gguf", spec.size, spec.sha256,
                             lambda *a: seen.append(a))
    assert dest.read_bytes() == BLOB
    assert seen[-1][:2] == ("assemble", 1.0)
    mark = json.loads((tmp_path / "out.gguf.verified.json").read_text())
    assert mark["sha256"] == spec.sha256 and mark["size"] == len(BLOB)


def test_assemble_default_progress(fake, tmp_path, caplog):
    spec, _ = fake
    with caplog.at_level("INFO"):
        embedded.assemble(embedded.locate_chunks(spec), tmp_path / "out.gguf", spec.size, spec.sha256)
    assert "assembling out.gguf" in caplog.text


def test_assemble_refuses_corrupt_chunk(fake, tmp_path):
    spec, _ = fake
    chunks = embedded.locate_chunks(spec)
    bad = tmp_path / "bad.bin"
    data = bytearray(chunks[1].read_bytes())
    data[100] ^= 1  # same size, one flipped bit
    bad.write_bytes(bytes(data))
    with pytest.raises(UserError) as err:
        embedded.assemble([chunks[0], bad, chunks[2]], tmp_path / "out.gguf", spec.size, spec.sha256,
                          lambda *a: None, fix="Reinstall them.")
    msg = str(err.value)
    assert "out.gguf" in msg and "hash" in msg and spec.sha256 in msg
    assert hashlib.sha256(PARTS[0] + bytes(data) + PARTS[2]).hexdigest() in msg  # the actual hash
    assert "Reinstall" in msg
    assert not list(tmp_path.glob("*out.gguf*"))  # nothing half-written is left behind


def test_assemble_refuses_wrong_size(fake, tmp_path):
    spec, _ = fake
    chunks = embedded.locate_chunks(spec)
    with pytest.raises(UserError, match="add up to"):
        embedded.assemble(chunks[:2], tmp_path / "out.gguf", spec.size, spec.sha256, lambda *a: None)


def test_ensure_model_converts_once_and_cleans_up(fake):
    spec, calls = fake
    out = embedded.ensure_model(spec, lambda *a: None)
    assert calls == [BLOB] and embedded.is_ready(out, spec)
    source = json.loads((out / SOURCE_FILE).read_text())
    assert source["sha256"] == spec.sha256 and source["size"] == spec.size
    assert set(source["packages"]) == set(spec.packages)
    assert not (out.parent / spec.gguf_name).exists()  # the gguf is dropped after conversion
    assert embedded.ensure_model(spec, lambda *a: None) == out and len(calls) == 1  # warm: no work


def test_interrupted_conversion_is_redone(fake, monkeypatch):
    spec, calls = fake
    root = embedded.cache_dir() / embedded.DEFAULT_NAME

    def crash(gguf, out, progress):
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed midway")

    good = embedded._export_hf
    monkeypatch.setattr(embedded, "_export_hf", crash)
    with pytest.raises(RuntimeError, match="midway"):
        embedded.ensure_model(spec, lambda *a: None)
    out = root / spec.folder_name
    assert not out.exists()
    assert (root / spec.gguf_name).read_bytes() == BLOB  # verified gguf kept for the retry

    # what a hard kill would leave: a temp folder and a final-looking folder without marker
    (root / f".{spec.folder_name}.tmp-99999").mkdir()
    out.mkdir()
    (out / "config.json").write_text("{}")
    assert not embedded.is_ready(out, spec)

    stages = []
    monkeypatch.setattr(embedded, "_export_hf", good)
    assert embedded.ensure_model(spec, lambda s, f, m: stages.append(s)) == out
    assert embedded.is_ready(out, spec) and (out / "model.safetensors").exists()
    assert "assemble" not in stages  # the verified gguf was reused, not re-hashed
    assert not list(root.glob(".*.tmp-*"))


def test_changed_gguf_is_reassembled(fake, monkeypatch):
    spec, calls = fake
    root = embedded.cache_dir() / embedded.DEFAULT_NAME

    def stop(*args):
        raise RuntimeError("stop")

    good = embedded._export_hf
    monkeypatch.setattr(embedded, "_export_hf", stop)
    with pytest.raises(RuntimeError):
        embedded.ensure_model(spec, lambda *a: None)
    gguf = root / spec.gguf_name
    gguf.write_bytes(b"x" * len(BLOB))  # same size, new mtime: no longer the verified file
    assert not embedded._verified(gguf, spec)
    monkeypatch.setattr(embedded, "_export_hf", good)
    embedded.ensure_model(spec, lambda *a: None)
    assert calls == [BLOB]  # rebuilt from the chunks before converting


def test_stale_marker_for_other_hash_is_not_ready(fake):
    spec, _ = fake
    out = embedded.ensure_model(spec, lambda *a: None)
    assert not embedded.is_ready(out, replace(spec, sha256="0" * 64))


def test_default_pair_fails_fast_on_missing_package(fake, monkeypatch):
    spec, calls = fake
    missing = replace(spec, role="target", package_prefix="sequoia-never-installed-part")
    monkeypatch.setattr(embedded, "DEFAULT_PAIR", (spec, missing))
    with pytest.raises(UserError, match="sequoia-never-installed-part1"):
        embedded.ensure_default_pair(lambda *a: None)
    assert calls == []  # nothing converted before the error


# ---- both models at once: one child process each (spawn), the parent holding the lock

PARTS2 = [b"GGUF" + b"t" * 2000, b"u" * 300]


@pytest.fixture
def pair(fake, tmp_path, monkeypatch):
    """A draft and a target over fake packages, as the default pair, with an export function that
    the child processes can import (tests/embedded_fakes.py)."""
    draft, _ = fake
    prefix = draft.package_prefix.replace("-part", "-tgt-part")
    make_packages(tmp_path / "site", prefix, PARTS2)
    blob = b"".join(PARTS2)
    target = ModelSpec(role="target", repo="Test/Fake-Target", package_prefix=prefix, version="1.0",
                       count=len(PARTS2), size=len(blob), sha256=hashlib.sha256(blob).hexdigest(),
                       gguf_name="fake-target.gguf", folder_bytes=1000)
    monkeypatch.setattr(embedded, "DEFAULT_PAIR", (draft, target))
    monkeypatch.setattr(embedded, "_export_hf", embedded_fakes.export)
    monkeypatch.setattr(embedded, "_usable_cpus", lambda: 2)  # side by side even on a 1-core runner
    monkeypatch.delenv(embedded.SERIAL_ENV, raising=False)
    return draft, target


def leftovers():
    root = embedded.cache_dir() / embedded.DEFAULT_NAME
    return list(root.glob(".*tmp*")) + list(root.glob("*.gguf"))


def pids(*folders):
    return [int((folder / "pid").read_text()) for folder in folders]


def test_default_pair_prepared_side_by_side(pair, tmp_path, monkeypatch):
    draft, target = pair
    (tmp_path / "meet").mkdir()
    monkeypatch.setenv(embedded_fakes.RENDEZVOUS, str(tmp_path / "meet"))  # each export waits for the other
    seen = []
    draft_dir, target_dir = embedded.ensure_default_pair(lambda *a: seen.append(a))
    assert embedded.is_ready(draft_dir, draft) and embedded.is_ready(target_dir, target)
    assert (draft_dir / "model.safetensors").read_bytes() == BLOB
    assert (target_dir / "model.safetensors").read_bytes() == b"".join(PARTS2)
    draft_pid, target_pid = pids(draft_dir, target_dir)
    assert len({draft_pid, target_pid, os.getpid()}) == 3  # two children, neither of them this process
    source = json.loads((target_dir / SOURCE_FILE).read_text())
    assert source["role"] == "target" and "assemble_s" in source and "convert_s" in source
    assert not leftovers()
    # the children's progress reached this callback: one assembly step for both files, then each conversion
    assembling = [a for a in seen if a[0] == "assemble"]
    assert assembling[-1][1] == 1.0 and "fake.gguf and fake-target.gguf" in assembling[-1][2]
    assert [f for _, f, _ in assembling] == sorted(f for _, f, _ in assembling)  # never goes back
    assert ("convert", 1.0, "converted fake.gguf") in seen and ("convert", 1.0, "converted fake-target.gguf") in seen
    assert seen[-1][0] == "ready"
    # warm: nothing to do, no process started
    monkeypatch.setattr(embedded, "_prepare_side_by_side", lambda *a: pytest.fail("started again"))
    assert embedded.ensure_default_pair(lambda *a: None) == (draft_dir, target_dir)


def test_draft_ready_while_the_target_converts_is_announced(pair, tmp_path, monkeypatch):
    """while_preparing lets the caller load the draft while the target still converts (side by side)."""
    draft, target = pair
    flag = tmp_path / "loaded"
    monkeypatch.setenv(embedded_fakes.LOADED, str(flag))
    monkeypatch.setattr(embedded, "_export_hf", embedded_fakes.target_waits_for_the_parent)
    heard = []

    def while_preparing(role, folder):
        heard.append((role, folder, embedded.is_ready(folder, draft)))
        flag.write_text(role)  # lets the target's export finish

    draft_dir, target_dir = embedded.ensure_default_pair(lambda *a: None, while_preparing)
    assert heard == [("draft", draft_dir, True)]  # once, for the draft, with its folder complete
    assert embedded.is_ready(target_dir, target)


def test_draft_ready_first_is_announced_when_prepared_one_after_the_other(pair, monkeypatch):
    draft, target = pair
    monkeypatch.setenv(embedded.SERIAL_ENV, "1")
    root = embedded.cache_dir() / embedded.DEFAULT_NAME
    heard = []
    embedded.ensure_default_pair(lambda *a: None, lambda role, folder: heard.append(
        (role, embedded.is_ready(folder, draft), embedded.is_ready(root / target.folder_name, target))))
    assert heard == [("draft", True, False)]  # the target not prepared yet
    heard.clear()
    embedded.ensure_default_pair(lambda *a: None, lambda *a: heard.append(a))
    assert heard == []  # both ready: nothing is prepared, nothing announced


def test_child_user_error_surfaces_and_nothing_is_left(pair, tmp_path, monkeypatch):
    draft, target = pair
    (tmp_path / "meet").mkdir()
    monkeypatch.setenv(embedded_fakes.RENDEZVOUS, str(tmp_path / "meet"))
    monkeypatch.setattr(embedded, "_export_hf", embedded_fakes.target_fails)
    start = time.monotonic()
    with pytest.raises(UserError, match="fake target conversion failed on purpose"):
        embedded.ensure_default_pair(lambda *a: None)
    assert time.monotonic() - start < embedded_fakes.WAIT_S  # the draft's process was stopped, not awaited
    root = embedded.cache_dir() / embedded.DEFAULT_NAME
    assert not embedded.is_ready(root / draft.folder_name, draft)
    assert not embedded.is_ready(root / target.folder_name, target)
    assert not list(root.glob(".*.tmp-*"))  # both temp folders gone: the failed one and the stopped one


def test_child_hash_error_is_the_sequential_message(pair, tmp_path):
    draft, target = pair
    part = tmp_path / "site" / f"{target.package_prefix.replace('-', '_')}2" / "data" / "part02.bin"
    part.write_bytes(b"v" * len(PARTS2[1]))  # same size, other bytes
    with pytest.raises(UserError) as side_by_side:
        embedded.ensure_default_pair(lambda *a: None)
    msg = str(side_by_side.value)
    assert "fake-target.gguf failed its hash check" in msg and target.pip_command() in msg
    assert not list((embedded.cache_dir() / embedded.DEFAULT_NAME).glob(".*tmp*"))
    with pytest.raises(UserError) as alone:
        embedded.ensure_model(target, lambda *a: None)
    assert str(alone.value) == msg


def test_child_killed_midway_is_an_error_and_nothing_is_left(pair, monkeypatch):
    monkeypatch.setattr(embedded, "_export_hf", embedded_fakes.target_dies)
    with pytest.raises(RuntimeError, match="target model: its process ended unexpectedly"):
        embedded.ensure_default_pair(lambda *a: None)
    root = embedded.cache_dir() / embedded.DEFAULT_NAME
    assert not list(root.glob(".*.tmp-*"))
    assert (root / "fake-target.gguf").read_bytes() == b"".join(PARTS2)  # verified, kept for the next start


def test_serial_env_prepares_in_this_process(pair, monkeypatch):
    monkeypatch.setenv(embedded.SERIAL_ENV, "1")
    folders = embedded.ensure_default_pair(lambda *a: None)
    assert pids(*folders) == [os.getpid(), os.getpid()]
    assert not leftovers()


def test_only_one_missing_is_prepared_in_this_process(pair, monkeypatch):
    draft, target = pair
    draft_dir = embedded.ensure_model(draft, lambda *a: None)
    monkeypatch.setattr(embedded, "_prepare_side_by_side", lambda *a: pytest.fail("one model needs no processes"))
    assert embedded.ensure_default_pair(lambda *a: None) == (draft_dir, draft_dir.parent / target.folder_name)
    assert pids(draft_dir.parent / target.folder_name) == [os.getpid()]


def test_too_little_ram_for_both_goes_one_after_the_other(pair, monkeypatch, caplog):
    monkeypatch.setattr(embedded, "_available_ram", lambda: 1000)  # less than both conversions' estimate
    with caplog.at_level("INFO"):
        folders = embedded.ensure_default_pair(lambda *a: None)
    assert pids(*folders) == [os.getpid(), os.getpid()]
    assert "not enough free disk or RAM" in caplog.text


@pytest.mark.parametrize("how, why", [("start fails", "OSError: no more processes"),
                                      ("unpicklable export", "could not start the processes"),
                                      ("child dies at once", "exit code 3 before it began")])
def test_falls_back_to_one_after_the_other(pair, monkeypatch, caplog, how, why):
    calls = []
    if how == "start fails":
        def refuse(self):
            raise OSError("no more processes")
        monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", refuse)
    elif how == "unpicklable export":
        def closure(gguf, out, progress):  # what the `fake` fixture installs: cannot reach a child
            calls.append(gguf.name)
            embedded_fakes.export(gguf, out, progress)
        monkeypatch.setattr(embedded, "_export_hf", closure)
    else:
        monkeypatch.setattr(embedded, "_prepare_worker", embedded_fakes.worker_dies)
    with caplog.at_level("WARNING"):
        folders = embedded.ensure_default_pair(lambda *a: None)
    assert pids(*folders) == [os.getpid(), os.getpid()]
    assert why in caplog.text and "one after the other" in caplog.text
    assert calls == (["fake.gguf", "fake-target.gguf"] if how == "unpicklable export" else [])
    assert not leftovers()


@pytest.fixture
def real_cache(monkeypatch):
    """Where the slow test finds the real pair. A user cache that is already complete is only
    read (ensure_default_pair writes nothing then); otherwise the pair is converted into the
    test cache (about 2 minutes, 4.8 GB) and removed afterwards so temp dirs do not pile up."""
    user = Path.home() / ".cache" / "sequoia-live"
    if all(embedded.is_ready(user / embedded.DEFAULT_NAME / s.folder_name, s) for s in embedded.DEFAULT_PAIR):
        monkeypatch.setenv("SEQUOIA_CACHE", str(user))
        yield user
        return
    yield embedded.cache_dir()
    if embedded.cache_dir().resolve().is_relative_to(Path(tempfile.gettempdir()).resolve()):
        shutil.rmtree(embedded.cache_dir() / embedded.DEFAULT_NAME, ignore_errors=True)


@pytest.mark.slow
def test_real_default_pair(real_cache):
    from transformers import AutoTokenizer

    draft_dir, target_dir = embedded.ensure_default_pair()
    toks = []
    for spec, folder in ((DRAFT, draft_dir), (TARGET, target_dir)):
        source = json.loads((folder / SOURCE_FILE).read_text())
        assert (source["sha256"], source["size"]) == (spec.sha256, spec.size)
        assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors"))
        toks.append(AutoTokenizer.from_pretrained(folder))
    draft_tok, target_tok = toks
    assert draft_tok.get_vocab() == target_tok.get_vocab()
    for tok in toks:
        assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
        assert tok.pad_token == "<|endoftext|>"
        assert "<|im_start|>" in tok.chat_template
        ids = tok("def f(): pass")["input_ids"]
        assert ids == draft_tok("def f(): pass")["input_ids"] and ids[0] != 151643  # no BOS


@pytest.mark.slow
def test_real_default_pair_greedy_sequoia_equals_target(real_cache):
    """The embedded pair, loaded through load_pair('default', 'default'): 16 greedy tokens from a
    Sequoia tree equal the target's own greedy generate()."""
    import torch

    from engine import methods
    from engine.decoding import generate_ids
    from engine.models import encode_prompt, load_pair
    from engine.settings import Settings
    from engine.tree import Tree

    pair = load_pair("default", "default", device="cpu", dtype="float32")
    assert pair.probe["target"]["passed"] and pair.probe["draft"]["passed"]
    from engine.models import servable_name   # exports name the converted folders, not the display names
    assert all((Path(servable_name(pair, role)) / "config.json").is_file() for role in ("draft", "target"))
    ids = encode_prompt(pair, "Write a Python function that checks whether a string is a palindrome.")
    reference = pair.target.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0, len(ids):].tolist()
    tree = Tree.from_branching([4, 2, 1, 1, 1, 1, 1, 0, 0, 1])  # wide at the root, a chain under rank 1
    out, events = generate_ids(pair, ids, methods.sequoia(tree), Settings(max_new_tokens=16))
    assert out == reference
    assert events[-1].total_steps < len(out)  # the draft's tokens were really accepted
    # the same pair passes the structure part of "Check this pair" (masks, tokenizer, KV commit): with
    # the NF4 draft (AVX512-BF16 CPUs) its KV commit read FAIL, the draft's bfloat16 rounding judged
    # at float32's tolerance (tests/test_check.py)
    from engine import check
    report = check.run_check(pair, check.CheckConfig(num_prompts=1, sections=("structure",), methods=("sequoia",)))
    assert report.verdict == "PASS", report.text()


def _tiny_gguf(path: Path):
    import gguf
    import numpy as np
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_token_list(["a", "b", "c"])
    writer.add_tensor("blk.0.attn_q.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.add_tensor("token_embd.weight", np.linspace(-1, 1, 24, dtype=np.float16).reshape(3, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_one_gguf_reader_parses_once_into_plain_arrays(tmp_path):
    """The conversion's reader: one parse per file (transformers asks three times), fields and
    tensors equal to gguf-py's own reader, held as plain arrays; gguf's reader is restored after."""
    import gguf
    import numpy as np
    path = tmp_path / "tiny.gguf"
    _tiny_gguf(path)
    plain = gguf.GGUFReader(path)
    original = gguf.GGUFReader
    with embedded._one_gguf_reader():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is again
        assert type(first.data) is np.ndarray and type(plain.data) is np.memmap
        assert list(first.fields) == list(plain.fields)
        assert first.fields["general.name"].contents() == "tiny"
        assert first.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "c"]
        for mine, theirs in zip(first.tensors, plain.tensors, strict=True):
            assert mine.name == theirs.name and type(mine.data) is np.ndarray
            assert np.array_equal(gguf.dequantize(mine.data, mine.tensor_type),
                                  gguf.dequantize(theirs.data, theirs.tensor_type))
    assert gguf.GGUFReader is original


def test_one_gguf_reader_builds_each_tensor_name_map_once():
    """transformers asks for the name map once per module; inside the context the same map comes
    back (equal to a fresh one), and gguf's own function is restored after."""
    import gguf
    original = gguf.get_tensor_name_map
    fresh = original(gguf.MODEL_ARCH.QWEN2, 2)
    with embedded._one_gguf_reader():
        first = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 2) is first
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 3) is not first
        assert first.mapping == fresh.mapping
    assert gguf.get_tensor_name_map is original


def test_load_pair_loads_the_draft_while_the_target_is_prepared(monkeypatch):
    """The default pair's draft loads on a second thread as soon as it is ready; the pair that
    comes out is the same as when both load after preparation."""
    import threading

    from engine import models
    from tests.tiny import tiny_pair_dirs
    draft_dir, target_dir = tiny_pair_dirs("qwen2", stored="float16")
    seen, threads = [], {}
    real_load, real_tokenizer = models._load_model, models._load_tokenizer
    tokenizer_threads = {}

    def load_model(source, *args, **kwargs):
        threads[Path(source)] = threading.current_thread().name
        return real_load(source, *args, **kwargs)

    def load_tokenizer(source):
        tokenizer_threads[Path(source)] = threading.current_thread().name
        return real_tokenizer(source)

    def fake_default_pair(progress, while_preparing):
        while_preparing("draft", draft_dir)
        deadline = time.monotonic() + 30
        while draft_dir not in threads and time.monotonic() < deadline:  # the "target" still converts
            time.sleep(0.01)
        progress("convert", 1.0, "target converted")
        return draft_dir, target_dir

    monkeypatch.setattr(models, "_load_model", load_model)
    monkeypatch.setattr(models, "_load_tokenizer", load_tokenizer)
    monkeypatch.setattr(embedded, "ensure_default_pair", fake_default_pair)
    pair = models.load_pair(device="cpu", dtype="float32", cpu_kernels="fast",
                            progress=lambda stage, fraction, message: seen.append(message))
    assert threads[draft_dir].startswith("sequoia-load-draft") and threads[target_dir] == threading.current_thread().name
    # the draft's tokenizer too loads on that thread, off the critical path; the target's after its conversion
    assert tokenizer_threads[draft_dir].startswith("sequoia-load-draft")
    assert tokenizer_threads[target_dir] == threading.current_thread().name
    early = [m for m in seen if m.startswith("loading draft")]
    assert len(early) == 1 and "while the target converts" in early[0]
    assert seen.index(early[0]) < seen.index("target converted")  # announced before the target was ready
    assert pair.cpu_kernels["draft"]["linears"] == {"int8": pair.cpu_kernels["draft"]["linears"]["int8"]}
    assert pair.probe["draft"]["passed"] and pair.probe["target"]["passed"]
    reference = models.load_pair(str(draft_dir), str(target_dir), device="cpu", dtype="float32", cpu_kernels="fast")
    ids = torch.tensor([[1, 2, 3, 4]])
    for role in ("draft", "target"):
        assert torch.equal(getattr(pair, role)(ids).logits, getattr(reference, role)(ids).logits), role
