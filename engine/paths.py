"""Where the app may write: everything goes under one cache directory."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$SEQUOIA_CACHE, else ~/.cache/sequoia-live."""
    return Path(os.environ.get("SEQUOIA_CACHE") or Path.home() / ".cache" / "sequoia-live").expanduser()
