"""Where the app may write: everything goes under one cache directory."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
