"""Compare re-measured acceptance vectors with the shipped ones, rank by rank (with 95 % intervals).

Written for the fix of draw_without_replacement (a confident draft's later children had been drawn
from the wrong distribution): were the shipped T > 0 vectors, measured with the old drawer, off?

    SEQUOIA_CACHE=<dir> python -m engine measure --draft default --target default --replay \
        --prompt-set assets/measurement-prompts.json --by-domain --temperature 0.3 --tokens-per-prompt 128
    python bench/shipped_vectors_recheck.py <dir>/acceptance/*.json
"""
import json
import sys
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "measured" / "acceptance"

for path in map(Path, sys.argv[1:]):
    new = json.loads(path.read_text())
    old = json.loads((SHIPPED / path.name).read_text())
    print(f"{path.name}: T={new['temperature']} top-p={new['top_p']} {new.get('domain') or 'pooled'} "
          f"{new.get('draft_kernels')}, {new['positions']} positions (shipped: {old['positions']})")
    for k in range(5):
        o, n = old["probabilities"][k], new["probabilities"][k]
        inside = abs(n - o) <= old["ci95"][k]
        print(f"  rank {k + 1}: shipped {o:.4f} ± {old['ci95'][k]:.4f}   re-measured {n:.4f} ± {new['ci95'][k]:.4f}"
              f"   difference {n - o:+.4f}{'' if inside else '  OUTSIDE the shipped interval'}")
    print(f"  none: shipped {old.get('none', 0):.4f}   re-measured {new.get('none', 0):.4f}")
