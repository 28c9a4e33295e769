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
