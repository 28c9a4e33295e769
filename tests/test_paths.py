"""paths.write_atomic: a file is written whole or not at all, and no temporary file is left."""
import os

import pytest

from engine import paths


def test_a_write_is_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "store.json"
    paths.write_atomic(path, "first")
    assert path.read_text() == "first"

    def fail(*a):
        raise OSError("disk full")
    monkeypatch.setattr(paths.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        paths.write_atomic(path, "second")
    assert path.read_text() == "first" and os.listdir(path.parent) == ["store.json"]


def _add_runs(cache: str, start, n: int) -> None:
    """One process adding n runs to one prompt's memory and to one key's pooled store."""
    os.environ["SEQUOIA_CACHE"] = cache
    from engine import learning, prompt_memory
    start.wait()
    for _ in range(n):
        prompt_memory.remember("k", "p", learning.Evidence([1], [1], 1), learning.Evidence())
        learning.record("k", learning.Evidence([1], [1], 1))


def test_processes_adding_to_one_store_lose_no_run(tmp_path, monkeypatch):
    """The app and a CLI run may finish at once: each read-modify-write holds paths.locked, so
    every run is counted (without the lock, runs read the same old file and one update is lost)."""
    import multiprocessing
    from engine import learning, prompt_memory
    monkeypatch.setenv("SEQUOIA_CACHE", str(tmp_path))
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_add_runs, args=(str(tmp_path), start, 15)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert prompt_memory.recall("k", "p").runs == 60
    assert learning.load("k").runs == 60 and learning.load("k").nodes == 60


def test_a_lock_that_cannot_be_made_does_not_stop_the_write(tmp_path, monkeypatch):
    real_open = open

    def no_lock_files(path, *a, **k):
        if str(path).endswith(".lock"):
            raise PermissionError("read-only")
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", no_lock_files)
    with paths.locked(tmp_path / "store.json"):
        paths.write_atomic(tmp_path / "store.json", "x")
    assert (tmp_path / "store.json").read_text() == "x"
