"""Where the app may write: everything goes under one cache directory."""
from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from pathlib import Path

try:
    import fcntl
except ImportError:   # Windows: the lock holds between threads only
    fcntl = None

log = logging.getLogger(__name__)
_threads = threading.Lock()   # stands in for the file lock where fcntl is missing


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
def locked(path: Path):
    """Hold `path` for a read-modify-write (a store that adds one run to what earlier runs kept):
    an exclusive flock on a lock file beside it (.<name>.lock), which other processes (the app and a
    CLI run on one cache) and other threads wait for. A folder the lock file cannot be made in is
    not locked (a read-only cache then fails at the write, as before)."""
    if fcntl is None:
        with _threads:
            yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.parent / f".{path.name}.lock", "a")
    except OSError as exc:
        log.debug("not locking %s: %s", path, exc)
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)   # released when the file closes
        yield
