#!/usr/bin/env bash
# Big-target benchmark (issue 8): profile t(n) and the hardware-aware plan for the embedded
# target in memory, then with its weights offloaded to disk by accelerate, on this machine.
# Usage: bash bench/offload.sh [OUT_DIR]   (needs ~10 GB RAM; takes several minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-bench/offload}
OFFLOAD=$(mktemp -d)
trap 'rm -rf "$OFFLOAD"' EXIT
mkdir -p "$OUT"
common=(--max-budget 64)
placements=("in-memory::"
            "disk-offload:--target-device-map auto --max-memory cpu=256MiB --offload-folder $OFFLOAD:")
for entry in "${placements[@]}"; do
  name=${entry%%:*}; flags=${entry#*:}; flags=${flags%:}
  echo "== $name $flags" >&2
  # shellcheck disable=SC2086
  $PY -m engine profile "${common[@]}" --repeats 3 $flags --json > "$OUT/profile-$name.json"
  # shellcheck disable=SC2086
  $PY -m engine plan --auto --temperature 0 "${common[@]}" $flags --json > "$OUT/plan-$name.json"
done
$PY - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = []
for name in ("in-memory", "disk-offload"):
    prof = json.loads((out / f"profile-{name}.json").read_text())
    plan = json.loads((out / f"plan-{name}.json").read_text())
    t = {int(k): v for k, v in prof["target_seconds"].items()}
    rows.append((name, t[1], t[max(t)] / t[1], max(t), plan["budget"], plan["depth"],
                 plan["predicted_tokens_per_step"], plan["predicted_speedup"]))
print("| target placement | t(1) s | t(max)/t(1) | max n | chosen n | levels | predicted tokens/step | predicted speedup |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.2f} (n={r[3]}) | {r[3]} | {r[4]} | {r[5]} | {r[6]:.2f} | {r[7]:.2f}x |")
PY
