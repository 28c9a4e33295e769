"""Build the token-frequency table that prunes the draft's output head (FR-Spec, Zhao et al. 2025).

    .venv/bin/python bench/make_frequent_tokens.py --tokenizer ~/.cache/sequoia-live/default/draft-qwen2.5-coder-0.5b-instruct \
        --corpus /root/.pyenv/versions/3.11.7/lib/python3.11 --corpus /usr/share/doc --keep 65536

Counts how often each token id occurs when the tokenizer encodes every text file found under the
--corpus folders (*.py, *.txt, *.md, *.rst, copyright and README files; .gz files are read too),
then writes assets/measured/frequent-tokens/<vocabulary hash>.json: the ids most frequent first,
their counts, the corpus description and the date. The draft's head then scores only the first
K of them (engine/cpu_kernels.py): q is zero elsewhere, which keeps decoding exact (ALGORITHM.md
§7) and only lowers acceptance where the target wants a token outside them. Special tokens are
always kept by the loader, whatever their count here.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import AutoTokenizer  # noqa: E402

from engine.cpu_kernels import FREQUENT_TOKENS, vocabulary_hash  # noqa: E402

SUFFIXES = {".py", ".txt", ".md", ".rst"}
NAMES = {"copyright", "README", "NEWS", "changelog"}
MAX_FILE_BYTES = 2_000_000


def texts(root: Path):
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "site-packages" in path.parts:
            continue
        name = path.name[:-3] if path.name.endswith(".gz") else path.name
        if Path(name).suffix not in SUFFIXES and name not in NAMES:
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if len(raw) <= MAX_FILE_BYTES:
            yield raw.decode("utf-8", errors="ignore")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--corpus", action="append", required=True, help="a folder of text files (repeatable)")
    p.add_argument("--keep", type=int, default=65536, help="how many of the most frequent ids to write")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    counts: collections.Counter = collections.Counter()
    files = chars = 0
    t0 = time.time()
    for root in args.corpus:
        batch = []
        for text in texts(Path(root)):
            batch.append(text)
            files += 1
            chars += len(text)
            if len(batch) == 256:
                for ids in tok(batch, add_special_tokens=False)["input_ids"]:
                    counts.update(ids)
                batch = []
        if batch:
            for ids in tok(batch, add_special_tokens=False)["input_ids"]:
                counts.update(ids)
    top = counts.most_common(args.keep)
    out = Path(args.out) if args.out else FREQUENT_TOKENS / f"{vocabulary_hash(tok)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "vocabulary_hash": vocabulary_hash(tok), "vocabulary_size": len(tok),
        "made_by": "bench/make_frequent_tokens.py", "corpus": [str(c) for c in args.corpus],
        "files": files, "characters": chars, "tokens": sum(counts.values()), "distinct_tokens": len(counts),
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "ids": [i for i, _ in top], "counts": [c for _, c in top]}) + "\n", encoding="utf-8")
    print(f"{files} files, {chars / 1e6:.1f} M characters, {sum(counts.values()) / 1e6:.1f} M tokens, "
          f"{len(counts)} distinct ids; wrote the {len(top)} most frequent to {out} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
