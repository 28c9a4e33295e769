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
    procs = [ctx.Process(target=_add_runs, args=(str(tmp_path), start, 15), daemon=True) for _ in range(4)]
    try:
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
        assert all(p.exitcode == 0 for p in procs)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    assert prompt_memory.recall("k", "p").runs == 60
    assert learning.load("k").runs == 60 and learning.load("k").nodes == 60


def test_a_lock_that_cannot_be_had_does_not_stop_the_write(tmp_path, monkeypatch, caplog):
    """No lock file (a read-only folder), a file system without flock, or a writer holding it too
    long: the write goes ahead unlocked, said in the log (a run's evidence may be lost, never the run)."""
    import errno
    import fcntl
    store = tmp_path / "store.json"
    real_open = os.open

    def no_lock_files(path, *a, **k):
        if str(path).endswith(".lock"):
            raise PermissionError("read-only")
        return real_open(path, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(paths.os, "open", no_lock_files)
        with paths.locked(store):
            paths.write_atomic(store, "x")
    with monkeypatch.context() as m:
        def no_flock(*a):
            raise OSError(errno.ENOLCK, "no locks available")
        m.setattr(paths.fcntl, "flock", no_flock)
        with paths.locked(store):
            paths.write_atomic(store, "y")
    holder = os.open(tmp_path / ".store.json.lock", os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)   # another writer that does not let go
    try:
        with paths.locked(store, timeout=0.05):
            paths.write_atomic(store, "z")
    finally:
        os.close(holder)
    assert store.read_text() == "z"
    said = [r.getMessage() for r in caplog.records if "without a lock" in r.getMessage()]
    assert len(said) == 3 and "read-only" in said[0] and "no locks" in said[1] and "held by another" in said[2]
