import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Tests never write into the user's cache, and never reach for a model hub.
os.environ.setdefault("SEQUOIA_CACHE", tempfile.mkdtemp(prefix="sequoia-test-cache-"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist workers inherit the controller's cache: each gets its own, so that a measurement one worker
    # writes never shows up in another's check of what its test wrote (a stop-while-measuring test
    # saw a new acceptance file appear now and then); a SEQUOIA_CACHE set by hand gets a gwN folder per worker
    os.environ["SEQUOIA_CACHE"] = os.path.join(os.environ["SEQUOIA_CACHE"], os.environ["PYTEST_XDIST_WORKER"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

# The tiny test models are faster on one thread, and far faster when other work shares the
# 2 cores (a 17-token forward went from 370 ms to 24 ms on a busy machine).
torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _default_dtype_unchanged():
    """A test (or the code it runs) must not leave torch's process-wide default dtype changed:
    later tests would then build float16 tensors from Python floats (a top-p test failed now and
    then this way, after parallel model loads had left float16 behind)."""
    yield
    leaked = torch.get_default_dtype()
    if leaked != torch.float32:
        torch.set_default_dtype(torch.float32)
        pytest.fail(f"torch's default dtype was left as {leaked}")


@pytest.fixture(autouse=True)
def _no_background_units(monkeypatch):
    """Workers measure interpolated settings after a long idle (engine/refine.py): tests that are
    not about it must not find a background unit running on their worker (tests/test_refine.py
    shortens the wait)."""
    from engine import refine
    monkeypatch.setattr(refine, "IDLE_SECONDS", 1e6)


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pytest.ini): one process per physical core for the default suite, whose tests
    each use one thread; the slow tests (`-m slow`) run in one process: each process would load
    the real 4 GB pair (and the first load assembles and converts it)."""
    marks = (config.option.markexpr or "").replace("not slow", "")
    if "slow" in marks:
        return 0
    import psutil
    return psutil.cpu_count(logical=False) or 1
