#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: the exactness tests on the GPU (greedy equality with
# generate() for every method and model family, the chi-square sampling tests, a target split
# over GPU, CPU and disk by accelerate), then synthetic profiles of realistic sizes in bfloat16
# (engine/synthetic.py) with the hardware-aware tree each implies.
# Usage: bash bench/gpu_checks.sh [OUT_DIR]   (default bench/gpu)
# On one H200 the profiles took 1.5 minutes; the greedy tests pass in seconds each, but the
# chi-square tests draw 1000-1500 two-token samples one decode at a time and took over 2 minutes
# each on the GPU (launch-bound tiny models), so give the tests TEST_SECONDS=900 to finish.
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
  # SIGINT: pytest still prints what failed so far; each test has its own limit too
  SEQUOIA_TEST_DEVICE=cuda timeout -s INT "$TEST_SECONDS" $PY -m pytest -p no:cacheprovider -v --tb=short -rfEs \
    -m "slow or not slow" --timeout 600 -n "${TEST_WORKERS:-16}" --maxprocesses 16 \
    tests/test_exactness.py tests/test_families.py tests/test_offload.py \
    --deselect tests/test_families.py::test_generation_defaults_as_generate_resolves_them  # the app's (gradio), not the GPU's
  echo "pytest exit status $?"
  pkill -f "pytest" || true
} 2>&1 | tee "$OUT/tests-cuda.txt"

