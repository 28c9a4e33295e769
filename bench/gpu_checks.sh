#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: synthetic profiles of realistic sizes in bfloat16
# (engine/synthetic.py) with the hardware-aware tree each implies, on an idle machine, then the
# exactness tests on the GPU (tests/test_exactness.py, test_families.py, test_offload.py and
# test_check.py with SEQUOIA_TEST_DEVICE=cuda: greedy equality with generate() for every method and
# model family, the chi-square sampling tests, a target offloaded by accelerate's device map, and
# the `engine check` self-check).
# Usage: bash bench/gpu_checks.sh [OUT_DIR]   (default bench/gpu; exit status: pytest's)
# On one H200 (2026-12-04) the profiles took 1.5 minutes; greedy tests finish in seconds there,
# but some chi-square tests (1000-1500 two-token samples, one decode each) ran past 2 minutes, so
# each test gets 10 and the tests TEST_SECONDS (default 900) in all.
# Output: machine.txt, profiles-cuda.txt, tests-cuda.txt, and a profile JSON + PNG per size pair.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-bench/gpu}
TEST_SECONDS=${TEST_SECONDS:-900}
# the acceptance vector the README's serving recipe plans with (P(rank 1), P(rank 2), ...)
ACCEPTANCE=${ACCEPTANCE:-0.52,0.19,0.08}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'| transformers', transformers.__version__, '| accelerate', accelerate.__version__)"
  nproc; uptime
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

# The profiles first, on an idle machine (nothing else of ours running).
# name | draft size | target size: the paper's 68M -> Llama-2-7B pair, and a tensor-parallel
# stand-in for a 70B target on 8 GPUs (a tenth of its layers per GPU; all-reduces not timed)
pairs=("68m-7b|68m|7b" "1.1b-70b-tp8|1.1b|70b:num_hidden_layers=10")
for entry in "${pairs[@]}"; do
  IFS='|' read -r name draft target <<< "$entry"
  echo "== $name: profile --synthetic --draft-config $draft --target-config $target"
  timeout 240 $PY -m engine profile --synthetic --draft-config "$draft" --target-config "$target" --device cuda \
    --max-budget 256 --repeats 10 --acceptance "$ACCEPTANCE" --out "$OUT/profile-synthetic-$name-cuda.json"
  echo "exit status $?"
done 2>&1 | tee "$OUT/profiles-cuda.txt"

{
  echo "== SEQUOIA_TEST_DEVICE=cuda pytest (slow cases included)"
  # SIGINT: pytest still prints what failed so far (-k: killed if it does not stop); the deselected
  # test is about the app's UI (gradio), not the GPU
  SEQUOIA_TEST_DEVICE=cuda timeout -k 60 -s INT "$TEST_SECONDS" $PY -m pytest -p no:cacheprovider -v --tb=short \
    -rfEs -m "slow or not slow" --timeout 600 -n "${TEST_WORKERS:-8}" \
    tests/test_exactness.py tests/test_families.py tests/test_offload.py tests/test_check.py \
    --deselect tests/test_families.py::test_generation_defaults_as_generate_resolves_them
  status=$?
  echo "pytest exit status $status"
  exit $status
} 2>&1 | tee "$OUT/tests-cuda.txt"
exit "${PIPESTATUS[0]}"

