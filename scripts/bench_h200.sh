#!/usr/bin/env bash
# Runs the BENCHMARKS.md measurements on the device machine (see ../shared/DEVICE.md).
# Expects release binaries in .bench/ (coco, shape_model) and writes JSON lines to $OUT.
set -uo pipefail
B=.bench
M=/tmp/models
OUT=${OUT:-/tmp/out}
mkdir -p "$M" "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# Random-weight GGUFs in real shapes, generated here (too big to carry).
# QUICK=1: only the Gemma and Llama-1B Q4_0 shapes (when device time is short).
QUICK=${QUICK:-0}
"$B/shape_model" gemma-270m q5_0 "$M/gemma-270m-shape-q5_0.gguf" &
"$B/shape_model" llama-1b q4_0 "$M/llama1b-q4_0.gguf" &
models="gemma-270m-shape-q5_0 llama1b-q4_0"
if [ "$QUICK" = 0 ]; then
  "$B/shape_model" llama-1b q8_0 "$M/llama1b-q8_0.gguf" &
  "$B/shape_model" qwen-0.5b q8_0 "$M/qwen0.5b-q8_0.gguf" &
  "$B/shape_model" llama-8b q4_0 "$M/llama8b-q4_0.gguf" &
  models="$models llama1b-q8_0 qwen0.5b-q8_0 llama8b-q4_0"
fi
wait
# The adapter line and what wgpu offers for cooperative matrices (COCO_LOG=debug also lists
# the configurations the driver reports and the ones wgpu skips).
COCO_LOG=debug "$B/coco" -v info -m "$M/llama1b-q4_0.gguf" 2>&1 \
  | grep -iE "^adapter|cooperative|coop matrix|Skipped" | tee -a "$OUT/gpu.txt"
for m in $models; do
  echo "== $m"
  "$B/coco" bench -m "$M/$m.gguf" -p 512 -n 128 --reps 3 --probe --profile --json | tee -a "$OUT/bench.jsonl"
done
for m in gemma-270m-shape-q5_0 llama1b-q4_0; do
  echo "== $m unfused"
  "$B/coco" bench -m "$M/$m.gguf" -p 512 -n 128 --reps 3 --unfused --json | tee -a "$OUT/bench.jsonl"
done
# The portable tiles instead of the f16 tensor-core GEMM (the default where offered), for the A/B.
echo "== llama1b-q4_0 COCO_COOPMAT=0"
COCO_COOPMAT=0 "$B/coco" bench -m "$M/llama1b-q4_0.gguf" -p 512 -n 128 --reps 3 --json | tee -a "$OUT/bench.jsonl"
# Soak: 50 generations of 500 tokens in one session; no GPU resource
# may be created once warm; first vs last decode speed is printed.
if [ -x "$B/gpu_faults" ]; then
  echo "== soak"
  COCO_SOAK_TOKENS=${SOAK_TOKENS:-500} "$B/gpu_faults" --exact soak_creates_no_resources_once_warm --nocapture 2>&1 | tee "$OUT/soak.txt" | grep -E "soak:|test result"
fi
