#!/usr/bin/env bash
# Big-target benchmark (issue 8): profile t(n) and the hardware-aware plan for the embedded
# target in memory, then with its weights offloaded to disk by accelerate, on this machine:
# once with the OS page cache warm (the offloaded files fit in RAM, so each forward copies them
# from memory) and once dropping the page cache before every timed target forward (root only),
# which reads them from disk as a target larger than RAM would be.
# Usage: REPEATS=5 bash bench/offload.sh [OUT_DIR]   (needs ~10 GB RAM and a quiet machine; ~30 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-bench/offload}
REPEATS=${REPEATS:-5}
OFFLOAD=$(mktemp -d)
trap 'rm -rf "$OFFLOAD"' EXIT
mkdir -p "$OUT"
common=(--max-budget 64)
offload="--target-device-map auto --max-memory cpu=256MiB --offload-folder $OFFLOAD"
# name | placement flags | profile-only flags
placements=("in-memory||"
            "disk-offload|$offload|"
            "disk-offload-cold|$offload|--drop-page-cache")
for entry in "${placements[@]}"; do
  IFS='|' read -r name flags extra <<< "$entry"
  echo "== $name $flags $extra" >&2
  # shellcheck disable=SC2086
  $PY -m engine profile "${common[@]}" --repeats "$REPEATS" $flags $extra --json > "$OUT/profile-$name.json"
  # shellcheck disable=SC2086
  $PY -m engine plan --auto --temperature 0 "${common[@]}" $flags --json > "$OUT/plan-$name.json"
done
$PY - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
names = ("in-memory", "disk-offload", "disk-offload-cold")
grid = None
lines = ["| target placement | t(1) s | t(n)/t(1) at n = GRID | draft/target cost c | chosen n | levels "
         "| predicted tokens/step | predicted speedup |", "|---|---|---|---|---|---|---|---|"]
for name in names:
    prof = json.loads((out / f"profile-{name}.json").read_text())
    plan = json.loads((out / f"plan-{name}.json").read_text())
    t = {int(k): v for k, v in prof["target_seconds"].items()}
    grid = sorted(n for n in t if n > 1)
    c = prof["draft_seconds"]["1"] / t[1]
    ratios = ", ".join(f"{t[n] / t[1]:.2f}" for n in grid)
    lines.append(f"| {name} | {t[1]:.3f} | {ratios} | {c:.3f} | {plan['budget']} | {plan['depth']} "
                 f"| {plan['predicted_tokens_per_step']:.2f} | {plan['predicted_speedup']:.2f}x |")
print("\n".join(lines).replace("GRID", ", ".join(map(str, grid))))
PY
