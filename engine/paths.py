"""Where the app may write: everything goes under one cache directory."""
from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:   # Windows: the lock holds between threads only
    fcntl = None

log = logging.getLogger(__name__)
_threads = threading.Lock()   # stands in for the file lock where fcntl is missing
LOCK_TIMEOUT = 30.0           # seconds to wait for another writer (each holds it for one small file's write)


def cache_dir() -> Path:
    """$SEQUOIA_CACHE, else ~/.cache/sequoia-live."""
    return Path(os.environ.get("SEQUOIA_CACHE") or Path.home() / ".cache" / "sequoia-live").expanduser()


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file of its own in the same folder
    (two writers never share one), then a rename; the temporary file is removed if that fails.
    Raises OSError as writing does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextlib.contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT):
    """Hold `path` for a read-modify-write (a store that adds one run to what earlier runs kept):
    an exclusive flock on a lock file beside it (.<name>.lock), which other processes (the app and a
    CLI run on one cache) and other threads wait for. Not re-entrant: do not nest it on one path.
    Where no lock can be had (no fcntl: threads only; a folder the lock file cannot be made in; a
    file system without flock; a holder past `timeout` seconds) the write goes ahead unlocked, with
    a warning: a run's evidence may then be lost, never the run."""
    if fcntl is None:
        with _threads:
            yield
        return
    fd = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"held by another writer for over {timeout:g} s") from None
                time.sleep(0.01)
    except OSError as exc:   # TimeoutError included
        log.warning("writing %s without a lock: %s", path, exc)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)   # releases the lock
