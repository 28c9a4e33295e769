"""Pair loading checks: the tree-mask probe, tokenizer comparison, devices, chat prompts."""
import re

import pytest
import torch

from engine.errors import UserError
from engine.models import check_same_tokenizer, encode_prompt, probe_tree_mask, resolve_device, resolve_dtype
from tests.tiny import make_model, make_tokenizer, tiny_pair


class IgnoresMask(torch.nn.Module):
    """A model family that silently drops custom masks (as some attention kernels do)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, attention_mask=None, **kwargs):
        return self.inner(**kwargs)

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    @property
    def device(self):
        return self.inner.device

    @property
    def dtype(self):
        return self.inner.dtype


class RefusesMask(IgnoresMask):
    def forward(self, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.dim() == 4:
            raise ValueError("custom 4D attention masks are not supported")
        return self.inner(**kwargs)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_probe_passes_for_families_that_honour_masks(family):
    result = probe_tree_mask(make_model(family, 31, seed=0), family)
    assert result["passed"] and result["max_error"] < 1e-3 < result["mask_effect"]


def test_probe_refuses_a_model_that_ignores_the_mask():
    with pytest.raises(UserError, match="ignores custom 4-D attention masks"):
        probe_tree_mask(IgnoresMask(make_model("llama", 31, seed=0)), "ignorer")


def test_probe_refuses_a_model_that_rejects_the_mask():
    with pytest.raises(UserError, match="cannot run a forward with a custom 4-D attention mask"):
        probe_tree_mask(RefusesMask(make_model("llama", 31, seed=0)), "refuser")


def test_a_path_that_is_not_there_is_refused_before_anything_loads(monkeypatch):
    """`generate --draft /nonexistent` prepared the embedded target first, then spoke of the hub
    being offline; a hub id (org/name) still goes to the hub's own checks."""
    from engine import models
    monkeypatch.setattr(models, "resolve_device", lambda d: pytest.fail("went on to load"))
    for path in ("/no/such/model", "./nowhere", "~/nowhere-at-all", "~no-such-user-here/x"):
        with pytest.raises(UserError, match=f"no such folder: '{re.escape(path)}'"):
            models.load_pair(path, "default")
    assert models._resolve_source("org/name") == "org/name"


def test_a_folder_that_holds_no_model_says_what_it_lacks(tmp_path):
    """A folder of tree JSON files loaded as a model said "not a loadable causal-LM: Couldn't
    instantiate the backend tokenizer from one of: ." (transformers named nothing)."""
    from transformers import AutoTokenizer
    from engine import models
    (tmp_path / "tree.json").write_text("[-1, 0]")
    with pytest.raises(UserError, match="not a model folder: it has no config.json"):
        models._from_pretrained(AutoTokenizer, str(tmp_path))


def test_tokenizer_comparison():
    check_same_tokenizer(make_tokenizer("abc"), make_tokenizer("abc"), "a", "b")
    with pytest.raises(UserError, match="tokenizers differ"):
        check_same_tokenizer(make_tokenizer("abc"), make_tokenizer("abd"), "a", "b")


def test_device_and_dtype_choices():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(UserError):
        resolve_device("tpu")
    with pytest.raises(UserError):
        resolve_dtype("int3", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA"):
            resolve_device("cuda")


def test_prompts_and_chat_mode():
    pair = tiny_pair("llama")
    assert encode_prompt(pair, "abc", chat=False) == [1, 2, 3]
    for bad in ("", "   \n"):
        with pytest.raises(UserError, match="empty"):
            encode_prompt(pair, bad)
    with pytest.raises(UserError, match="chat template"):
        encode_prompt(pair, "abc", chat=True)  # the tiny tokenizer has none


def test_models_are_built_one_at_a_time_so_the_default_dtype_survives_parallel_loads():
    """from_pretrained sets torch's process-wide default dtype while it builds a model and then
    restores what it found; two builds at once (the embedded draft loads on its own thread) could
    leave float16 as the default for everything after. Builds take turns; the dtype survives."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from engine import models
    inside, overlapped, entered = [0], [False], threading.Event()

    class SlowLoader:  # what from_pretrained does to the default dtype, slowly
        @staticmethod
        def from_pretrained(source, **kwargs):
            inside[0] += 1
            overlapped[0] |= inside[0] > 1
            found = torch.get_default_dtype()
            torch.set_default_dtype(torch.float16)
            entered.set()
            threading.Event().wait(0.2)
            torch.set_default_dtype(found)
            inside[0] -= 1
            return source

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(models._from_pretrained, SlowLoader, "a")
        entered.wait(5)
        second = pool.submit(models._from_pretrained, SlowLoader, "b")
        assert (first.result(), second.result()) == ("a", "b")
    assert not overlapped[0]
    assert torch.get_default_dtype() == torch.float32


def test_a_hub_kernel_that_cannot_be_fetched_falls_back_to_pytorch_layers(tmp_path):
    """transformers swaps layers for kernels from the hub on the model's device; offline, fetching
    one fails inside the `kernels` package (seen on an H200 with a device map). The model then
    loads with PyTorch's own layers; any other error stays an error."""
    import types
    from engine import models
    fake = types.ModuleType("kernels._fetch")  # errors raised from code in the kernels package
    exec("def fetch(name):\n    raise ValueError(f'Version 2 of {name!r} is not available in the local cache')",
         fake.__dict__)
    calls = []

    class Loader:
        @staticmethod
        def from_pretrained(source, **kwargs):
            calls.append(kwargs)
            if kwargs.get("use_kernels") is not False:
                fake.fetch("kernels-community/rotary")
            return source

    assert models._from_pretrained(Loader, str(tmp_path), dtype=torch.float32) == str(tmp_path)
    assert [c.get("use_kernels") for c in calls] == [None, False] and calls[1]["dtype"] == torch.float32

    class Wrapping(Loader):  # the kernels error re-raised by transformers as another error
        @staticmethod
        def from_pretrained(source, **kwargs):
            try:
                return Loader.from_pretrained(source, **kwargs)
            except ValueError as exc:
                raise OSError("could not kernelize") from exc
    calls.clear()
    assert models._from_pretrained(Wrapping, str(tmp_path)) == str(tmp_path)
    assert [c.get("use_kernels") for c in calls] == [None, False]

    class Broken:  # a ValueError from anywhere else is the checkpoint's problem: reported, not retried
        @staticmethod
        def from_pretrained(source, **kwargs):
            calls.append(kwargs)
            raise ValueError("not a causal LM")
    calls.clear()
    (tmp_path / "config.json").write_text("{}")   # a model folder (one without is said so before this)
    with pytest.raises(UserError, match="not a causal LM"):
        models._from_pretrained(Broken, str(tmp_path))
    assert len(calls) == 1


def test_the_synced_clock_waits_for_every_cuda_device_the_pair_uses(monkeypatch):
    """Timings on CUDA must cover the queued work on every GPU the pair's models sit on (a device
    map may spread them), not only the current device, and leave other GPUs alone; on a CPU the
    clock is perf_counter itself."""
    import time
    from types import SimpleNamespace
    from engine.models import ModelPair, synced_clock

    def model_on(*devices):
        return SimpleNamespace(parameters=lambda: [SimpleNamespace(device=torch.device(d)) for d in devices])

    def pair_of(device, draft, target):
        return ModelPair(draft=draft, target=target, tokenizer=None, draft_name="d", target_name="t",
                         device=torch.device(device), dtype=torch.float32, eos_ids=frozenset(), context_limit=8,
                         vocab_size=4)
    assert synced_clock(pair_of("cpu", model_on("cpu"), model_on("cpu", "meta"))) is time.perf_counter
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda index=None: waited.append(index))
    pair = pair_of("cuda:1", model_on("cuda:1"), model_on("cuda:1", "cuda:3", "cpu", "meta"))
    now = synced_clock(pair)
    assert isinstance(now(), float) and waited == [1, 3] and pair.cuda_devices == (1, 3)


def test_a_device_torch_knows_but_that_runs_no_pair_is_refused_up_front():
    """`generate --device meta` loaded the pair and then failed in a traceback ("Tensor.item()
    cannot be called on meta tensors"): a device other than cpu, cuda[:N] or mps is refused first."""
    from engine.errors import UserError
    from engine.models import resolve_device
    for name in ("meta", "xpu", "nonsense"):
        with pytest.raises(UserError, match=f"unknown device '{name}'"):
            resolve_device(name)
    assert resolve_device("cpu").type == "cpu"
