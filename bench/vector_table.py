"""The README's tables of shipped acceptance vectors, printed from the files themselves.

    python bench/vector_table.py --kernels fast+nf4      # the NF4 draft's vectors
    python bench/vector_table.py --kernels fast          # the int8 draft's
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "measured" / "acceptance"
ORDER = {"code": 0, "prose": 1, "": 2}


def rows(kernels: str, folder: Path = SHIPPED) -> list[str]:
    vectors = [(path, json.loads(path.read_text())) for path in sorted(folder.glob("*.json"))]
    vectors = [(p, v) for p, v in vectors if v.get("draft_kernels") == kernels]
    vectors.sort(key=lambda pv: (pv[1]["temperature"], -pv[1]["top_p"], ORDER.get(pv[1].get("domain", ""), 3)))
    out = ["| T | top-p | prompts | positions | P(rank 1) | P(rank 2) | P(none) | ± over | file |",
           "|---|---|---|---|---|---|---|---|---|"]
    for path, v in vectors:
        p, ci = v["probabilities"], v["ci95"]
        over = (f"{len(v['prompt_counts'])} prompts" if v.get("interval") == "prompts" else "positions")
        out.append(f"| {v['temperature']:g} | {v['top_p']:g} | {v.get('domain') or 'pooled'} | {v['positions']:,} | "
                   f"{p[0]:.3f} ± {ci[0]:.3f} | {p[1]:.3f} ± {ci[1]:.3f} | {v['none']:.3f} | {over} | `{path.name}` |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="fast+nf4", help="the files' draft_kernels (fast+nf4, fast, default)")
    ap.add_argument("--folder", default=str(SHIPPED))
    args = ap.parse_args(argv)
    print("\n".join(rows(args.kernels, Path(args.folder))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
