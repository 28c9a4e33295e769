import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Tests never write into the user's cache, and never reach for a model hub.
os.environ.setdefault("SEQUOIA_CACHE", tempfile.mkdtemp(prefix="sequoia-test-cache-"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
